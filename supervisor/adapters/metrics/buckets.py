"""The endpoint's latency histograms (probes, alert deliveries): cumulative counts per bucket bound."""

from __future__ import annotations

#: Probe latency buckets (seconds): health checks take milliseconds, a generation probe up to seconds.
PROBE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class Buckets:
    """One probe-latency histogram: cumulative counts per bucket bound, total count and sum."""

    __slots__ = ("counts", "sum")

    def __init__(self) -> None:
        self.counts = [0] * (len(PROBE_BUCKETS) + 1)  # the last one is +Inf
        self.sum = 0.0

    def observe(self, seconds: float) -> None:
        for i, bound in enumerate(PROBE_BUCKETS):
            if seconds <= bound:
                self.counts[i] += 1
        self.counts[-1] += 1
        self.sum += seconds

    def copy(self) -> Buckets:
        out = Buckets()
        out.counts, out.sum = list(self.counts), self.sum
        return out

    def buckets(self) -> list[tuple[str, float]]:
        bounds = [*(repr(float(b)) for b in PROBE_BUCKETS), "+Inf"]
        return list(zip(bounds, (float(c) for c in self.counts), strict=True))
