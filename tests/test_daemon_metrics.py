"""The real daemon (a subprocess) serving /metrics for a simulator profile on the real Docker engine."""

from __future__ import annotations

import socket
import subprocess
import sys
import urllib.request
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from supervisor import __version__
from supervisor.core.fleet.metrics_tally import EARLIER
from tests.conftest import Resources
from tests.daemon_harness import ProfileSpec, running_daemon, write_daemon_config, write_profile
from tests.harness import WebhookReceiver, free_port, wait_for
from tests.metrics_fixtures import promtool

pytestmark = [pytest.mark.docker, pytest.mark.slow]

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]
KV_TOKENS = 557_599
#: Far from any test run: the next maintenance is known but never fires.
CRON = "0 4 1 1 *"


def scrape(port: int) -> str:
    """The endpoint's text as Prometheus gets it."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        assert resp.status == 200
        return str(resp.read().decode("utf-8"))


def samples(text: str) -> Samples:
    """{(sample name, sorted labels): value} of an exposition text."""
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def by_label(got: Samples, name: str, label: str) -> dict[str, float]:
    """{label value: sample value} of one series of profile ``p``."""
    return {dict(k[1])[label]: v for k, v in got.items() if k[0] == name and dict(k[1]).get("profile") == "p"}


def _setup(tmp: Path, res: Resources, metrics: dict[str, Any], extra: dict[str, Any] | None = None) -> Path:
    spec = ProfileSpec(name="p", container=res.name("p"), env={"VSIM_KV_TOKENS": str(KV_TOKENS)})
    profile = write_profile(tmp, spec, res.test_id)
    cfg = {"metrics": metrics, "maintenance": {"enabled": True, "cron": CRON}, **(extra or {})}
    return write_daemon_config(tmp, [profile], extra=cfg)


def nonzero(got: Samples, name: str) -> dict[str, float]:
    """The causes of ``name`` counted so far (every known cause is present, at 0 until it happens)."""
    return {k: v for k, v in by_label(got, name, "cause").items() if v}


def test_real_daemon_serves_metrics_and_counts_a_kill(
    tmp_path: Path, resources: Resources, sim_image: str, webhook: WebhookReceiver
) -> None:
    """promtool passes on the live endpoint; gauges match the status; a docker kill moves the counters."""
    port = free_port()
    channel = {"kind": "generic", "name": "ops", "url": f"{webhook.url}/alert/x"}
    config = _setup(tmp_path, resources, {"listen": f"127.0.0.1:{port}"}, {"alerts": {"channels": [channel]}})
    with running_daemon(config, tmp_path) as d:
        st = d.wait_state("p", "RUNNING", 60)

        def probed() -> Samples | None:
            got = samples(scrape(port))

            def count(kind: str) -> float:
                key = (("kind", kind), ("profile", "p"))
                return got.get(("vllm_supervisor_probe_latency_seconds_count", key), 0)

            return got if count("health") >= 2 and count("generation") >= 1 else None

        got = wait_for(probed, 30, interval=0.5, message="health and generation probes in the histogram")
        text = scrape(port)
        check = promtool("check", "metrics", stdin=text)
        assert check.returncode == 0, check.stdout + check.stderr
        assert check.stdout.strip() == "", check.stdout  # no lint remarks either
        states = by_label(got, "vllm_supervisor_profile_state", "state")
        assert len(states) == 11
        assert {s for s, v in states.items() if v == 1.0} == {"RUNNING"}
        p = (("profile", "p"),)
        assert got[("vllm_supervisor_up", ())] == 1.0
        assert got[("vllm_supervisor_build_info", (("version", __version__),))] == 1.0
        assert got[("vllm_supervisor_kv_pool_tokens", p)] == KV_TOKENS
        # the baseline is the median of EARLIER starts of the same config: none before the first
        assert ("vllm_supervisor_kv_pool_baseline_tokens", p) not in got
        assert got[("vllm_supervisor_breaker_open", p)] == 0.0
        assert 0 < got[("vllm_supervisor_load_seconds", p)] < 60
        assert got[("vllm_supervisor_host_mem_available_bytes", ())] > 0
        due = datetime.fromisoformat(st["next_maintenance"]).timestamp()
        assert got[("vllm_supervisor_maintenance_next_timestamp_seconds", p)] == due
        assert sum(by_label(got, "vllm_supervisor_restarts_total", "cause").values()) == st["restarts"] == 0

        resources.client.containers.get(st["container_id"]).kill()
        after = d.wait_recovered("p", st["container_id"], 60)

        def counted() -> Samples | None:
            got = samples(scrape(port))
            now = d.status("p")
            restarts = by_label(got, "vllm_supervisor_restarts_total", "cause")
            emergencies = by_label(got, "vllm_supervisor_emergencies_total", "cause")
            alerts = got.get(("vllm_supervisor_alerts_total", (("channel", "ops"), ("result", "ok"))), 0)
            same = (
                sum(restarts.values()) == now["restarts"]
                and sum(emergencies.values()) == (now["emergencies_total"])
            )
            counted = sum(restarts.values()) and sum(emergencies.values())
            return got if same and counted and alerts >= 1 else None

        got = wait_for(counted, 30, interval=0.5, message="restart, emergency and alert counted")
        # one restart and one emergency, of the same cause: the exit, or (a loaded box, seen 2026-12-05 beside
        # the soak) the probe rounds that met the refused port before Docker's die event came through
        cause = nonzero(got, "vllm_supervisor_restarts_total")
        assert cause in ({"container_exited": 1.0}, {"probe_failed": 1.0})
        assert nonzero(got, "vllm_supervisor_emergencies_total") == cause
        assert by_label(got, "vllm_supervisor_restarts_total", "cause")["memory_guard"] == 0  # present at 0
        assert (after["restarts"], after["emergencies_total"]) == (1, 1)
        # the second start of the same config is compared with the first one's pool
        assert got[("vllm_supervisor_kv_pool_baseline_tokens", p)] == KV_TOKENS

        # a new daemon process: the persisted totals come back as the 'earlier' cause
        assert d.terminate() == 0
        d.start()
        d.wait_state("p", "RUNNING", 60)
        got = samples(scrape(port))
        assert nonzero(got, "vllm_supervisor_restarts_total") == {EARLIER: 1.0}
        assert nonzero(got, "vllm_supervisor_emergencies_total") == {EARLIER: 1.0}


def test_busy_metrics_port_is_a_warning_and_a_retry_never_a_crash(
    tmp_path: Path, resources: Resources, sim_image: str
) -> None:
    """Another socket holds the port: the daemon supervises anyway (the profile reaches RUNNING), logs
    metrics.bind_failed naming the address, and serves /metrics once the port is free."""
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen()
    port = held.getsockname()[1]
    try:
        config = _setup(tmp_path, resources, {"listen": f"127.0.0.1:{port}"})
        with running_daemon(config, tmp_path) as d:
            d.wait_state("p", "RUNNING", 60)
            assert d.proc is not None
            assert d.proc.poll() is None
            held.close()
            wait_for(lambda: _scrape_ok(port), 60, message="metrics served once the port is free")
    finally:
        held.close()


def _scrape_ok(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def test_remote_listen_without_allow_remote_is_refused(tmp_path: Path, resources: Resources) -> None:
    """check-config and the daemon both refuse 0.0.0.0 without allow_remote, naming file, key and value."""
    config = _setup(tmp_path, resources, {"listen": "0.0.0.0:9400"})
    check = subprocess.run(
        [sys.executable, "-m", "supervisor.cli", "check-config", str(config)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert check.returncode == 1, check.stdout + check.stderr
    line = f"{config}: metrics.listen: "
    assert line in check.stdout
    assert "allow_remote" in check.stdout
    assert "'0.0.0.0:9400'" in check.stdout
    daemon = subprocess.run(
        [sys.executable, "-m", "supervisor", "--config", str(config)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert daemon.returncode == 2, daemon.stdout + daemon.stderr
    assert line in daemon.stderr
