"""The performance sentinel on the REAL vLLM server (CPU build, tiny local model) in a container.

After the baseline is taken, ``docker update --cpus 0.2`` throttles the container: the sentinel reports
the decay within three intervals, and ``on_decay: restart`` gives a drained maintenance restart whose
new container (created from the profile, unthrottled) is fast again. Run under
``flock /tmp/vsup-heavy.lock``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Resources
from tests.daemon_harness import DaemonProc, real_vllm_spec, write_daemon_config, write_profile
from tests.harness import wait_for

pytestmark = [pytest.mark.docker, pytest.mark.real_vllm, pytest.mark.slow]

#: Between canaries: each is 64 tokens, ~0.3 s on the idle tiny server and ~4 s throttled to 0.2 CPU (the
#: next one is counted from the send, so a throttled canary still ends well before the next is due).
INTERVAL_S = 8.0


def _samples(d: DaemonProc) -> list[dict[str, Any]]:
    return [e["fields"] for e in d.events("real") if e["name"] == "sentinel.sample"]


def test_real_vllm_throttled_cpu_is_reported_and_restart_restores_speed(
    tmp_path: Path, resources: Resources, base_image: str, real_vllm_paths: tuple[Path, Path]
) -> None:
    venv, model = real_vllm_paths
    spec = real_vllm_spec(
        "real",
        resources.name("real"),
        base_image,
        venv,
        model,
        drain_timeout_s=30.0,
        extra={
            "sentinel": {
                "warmup_s": 0,
                "interval_s": INTERVAL_S,
                "busy_retry_s": 2,
                "decay_pct": 40,
                "on_decay": "restart",
                "min_restart_interval_s": 3600,
                "timeout_s": 120,
            }
        },
    )
    config = write_daemon_config(tmp_path, [write_profile(tmp_path, spec, resources.test_id)])
    d = DaemonProc(config, tmp_path)
    try:
        d.start()
        first = d.wait_state("real", "RUNNING", 420)["container_id"]
        wait_for(lambda: len(_samples(d)) >= 3, 300, message="three canaries for the baseline")
        base = _samples(d)[-1]["baseline_tps"]
        assert base is not None
        assert base > 0
        # `docker update --cpus 0.2`: a CFS quota of 20 ms per 100 ms
        resources.client.containers.get(first).update(cpu_period=100_000, cpu_quota=20_000)
        throttled = len(_samples(d))
        # three slow canaries in a row: within three intervals (plus the throttled canaries' own time)
        wait_for(lambda: "sentinel.slow" in d.event_names("real"), 3 * INTERVAL_S + 360, message="slow")
        # the streak: three slow canaries in a row (on a loaded box one just before the throttle may be
        # among them); every one after the throttle is slow
        assert sum(1 for s in _samples(d) if s["slow"] and s["container_id"] == first) >= 3
        after_throttle = [s for s in _samples(d)[throttled:] if s["container_id"] == first]
        assert after_throttle
        assert all(s["slow"] for s in after_throttle)
        assert "sentinel.restart" in d.event_names("real")
        st = d.wait_recovered("real", first, 600)
        second = st["container_id"]
        assert second != first

        def fast() -> dict[str, Any] | None:
            # speed restored: a canary of the restarted container at its old speed. The first one alone
            # may be slow when other tests load the box (seen in the parallel suite: 2 real servers at once)
            rows = [s for s in _samples(d) if s["container_id"] == second and not s["slow"]]
            return rows[-1] if rows else None

        after = wait_for(fast, 300 + 3 * INTERVAL_S, message="a canary at the old speed after the restart")
        # the new container is not throttled, and its speed is far above the throttled one's: compared with
        # the throttled canaries, not with the baseline, which a busier box (other real servers loading
        # beside) can undercut by more than the 40 % decay (seen: 106 tok/s against a baseline of 179)
        assert resources.client.api.inspect_container(second)["HostConfig"]["CpuQuota"] == 0
        throttled_tps = max(s["decode_tps"] for s in after_throttle)
        print(f"decode tok/s: baseline {base}, throttled <= {throttled_tps}, after the restart {after}")
        assert after["decode_tps"] >= 2 * throttled_tps, (after, throttled_tps)
        starts = d.call("history", name="real", n=10)["data"]["starts"]
        assert any(s.get("decode_tps") for s in starts)  # history shows decode speed per start
    finally:
        d.close()
