"""The host's contiguity gauges (docs/metrics.md), from the status document's ``daemon.host.contiguity``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from prometheus_client.core import GaugeMetricFamily, Metric

PREFIX = "vllm_supervisor"


def contiguity_gauges(daemon: Mapping[str, object]) -> Iterable[Metric]:
    """Free memory in blocks of 4 MiB or more (in 4 MiB blocks, host-wide), the threshold, 1 while below it,
    and free blocks by node, zone and order."""
    host = daemon.get("host")
    c = host.get("contiguity") if isinstance(host, Mapping) else None
    if not isinstance(c, Mapping) or not isinstance(c.get("free_4mib_blocks"), int):
        return
    yield GaugeMetricFamily(
        f"{PREFIX}_host_free_4mib_blocks",
        "Free memory in blocks of 4 MiB or more, in 4 MiB blocks (/proc/buddyinfo, all nodes and zones)",
        value=c["free_4mib_blocks"],
    )
    threshold = c.get("threshold")
    if isinstance(threshold, int):
        yield GaugeMetricFamily(
            f"{PREFIX}_host_free_4mib_blocks_threshold",
            "The contiguity sentinel's threshold",
            value=threshold,
        )
    yield GaugeMetricFamily(
        f"{PREFIX}_host_contiguity_low",
        "1 while free contiguous memory is under the threshold",
        value=int(bool(c.get("low"))),
    )
    by_order = GaugeMetricFamily(
        f"{PREFIX}_host_buddy_free_blocks",
        "Free blocks of 2^order pages (/proc/buddyinfo)",
        labels=["node", "zone", "order"],
    )
    zones = c.get("zones")
    for z in zones if isinstance(zones, list) else ():
        if isinstance(z, Mapping) and isinstance(z.get("free"), list):
            for order, n in enumerate(z["free"]):
                by_order.add_metric([str(z.get("node")), str(z.get("zone")), str(order)], n)
    yield by_order
