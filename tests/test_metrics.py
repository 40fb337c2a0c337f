"""The Prometheus endpoint: real HTTP on 127.0.0.1, promtool on its output and on the rules, config errors."""

from __future__ import annotations

import socket
import subprocess
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from supervisor.adapters.metrics.endpoint import MetricsError, MetricsServer
from supervisor.config import check_config, load_config
from supervisor.core.actions import Emit
from supervisor.core.events import ContainerExited, LogEngineDead, LogStartupFailure, RestartRequested
from supervisor.core.fleet.metrics_tally import EARLIER
from supervisor.core.states import State
from tests.harness import REPO
from tests.metrics_fixtures import promtool, status_doc
from tests.test_machine import _round
from tests.test_machine_driver import Driver, fresh_boot, policy

PROFILE = "container:\n  image: img:1\n"


@contextmanager
def serving(doc: dict[str, Any] | None = None) -> Iterator[MetricsServer]:
    """A started MetricsServer on a free 127.0.0.1 port, stopped afterwards."""
    current = doc if doc is not None else status_doc()
    server = MetricsServer("127.0.0.1:0", lambda: current)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def scrape(server: MetricsServer) -> str:
    """The endpoint's text as Prometheus gets it."""
    with urllib.request.urlopen(server.url, timeout=10) as resp:
        assert resp.status == 200
        return str(resp.read().decode("utf-8"))


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """{(sample name, sorted labels): value} of an exposition text."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_endpoint_output_passes_promtool_check_metrics() -> None:
    """The live endpoint's text, with every series family present, passes `promtool check metrics`."""
    with serving() as server:
        server.observe_event("qwen", "start.ready", {"load_s": 312.5, "adopted": False})
        server.observe_event("qwen", "kernel.xid", {"xid": 31})
        server.observe_alert("slack", True)
        server.observe_alert("slack", False)
        server.observe_probe("qwen", "health", 0.004)
        server.observe_probe("qwen", "generation", 1.7)
        text = scrape(server)
    result = promtool("check", "metrics", stdin=text)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "", result.stdout  # no lint remarks either
    families = {f.name for f in text_string_to_metric_families(text)}
    for name in (
        "up", "build_info", "profile_state", "restarts", "emergencies", "breaker_open", "kv_pool_tokens",
        "kv_pool_baseline_tokens", "load_seconds", "probe_latency_seconds", "host_mem_available_bytes",
        "kernel_events", "alerts", "maintenance_next_timestamp_seconds",
    ):  # fmt: skip
        assert f"vllm_supervisor_{name}" in families, name


def test_gauges_follow_the_published_status() -> None:
    """State (one of 11 at 1), breaker, KV pool and baseline, maintenance time come from snapshot()."""
    doc = status_doc(State.BACKOFF, breaker_open=True)
    with serving(doc) as server:
        got = samples(scrape(server))
    states = {dict(k[1])["state"]: v for k, v in got.items() if k[0] == "vllm_supervisor_profile_state"}
    assert len(states) == 11
    assert {s for s, v in states.items() if v == 1.0} == {"BACKOFF"}
    q = (("profile", "qwen"),)
    assert got[("vllm_supervisor_breaker_open", q)] == 1.0
    assert got[("vllm_supervisor_kv_pool_tokens", q)] == 557_599
    assert got[("vllm_supervisor_kv_pool_baseline_tokens", q)] == 1_013_816
    assert got[("vllm_supervisor_maintenance_next_timestamp_seconds", q)] == 1790215200.0
    assert got[("vllm_supervisor_host_mem_available_bytes", ())] > 0


def test_counts_before_this_process_are_kept_as_earlier() -> None:
    """After a daemon restart, the persisted restart/emergency counts appear (cause earlier), then grow."""
    with serving(status_doc(restarts=4, emergencies=2)) as server:
        server.observe_event("qwen", "state.changed", {"old": "RUNNING", "new": "DEGRADED", "reason": "x"})
        server.observe_event("qwen", "emergency.stop", {"reason": "5 consecutive probe failures (health)"})
        server.observe_event("qwen", "backoff.scheduled", {"attempt": 1})
        got = samples(scrape(server))
    r = "vllm_supervisor_restarts_total"
    e = "vllm_supervisor_emergencies_total"
    assert got[(r, (("cause", EARLIER), ("profile", "qwen")))] == 4
    assert got[(r, (("cause", "probe_failed"), ("profile", "qwen")))] == 1
    assert got[(e, (("cause", EARLIER), ("profile", "qwen")))] == 2
    assert got[(e, (("cause", "probe_failed"), ("profile", "qwen")))] == 1


def test_counters_match_the_state_machine_counts() -> None:
    """Fed the real machine's history events, the counters sum to its persisted restarts/emergencies."""
    d = Driver(policy=policy(breaker={"limit": 10}))
    fresh_boot(d)
    d.to_starting()  # a failed start (OOM), then the backoff retry
    d.send(LogStartupFailure(outcome="failed_oom", detail="CUDA out of memory"))
    d.send(ContainerExited(exit_code=1, signal=None, oom_killed=False))
    d.advance(60)
    d.to_running(cid="c2")
    for _ in range(d.policy.probes.failure_threshold):  # probe failures -> emergency stop -> backoff
        d.advance(d.policy.probes.interval_s)
        d.send(_round(health=False, gen=False))
    d.send(ContainerExited(exit_code=143, signal=None, oom_killed=False))
    d.advance(120)
    d.to_running(cid="c3")
    d.send(ContainerExited(exit_code=0, signal=None, oom_killed=False, container_id="c3"))
    d.advance(240)
    d.to_running(cid="c4")
    d.send(LogEngineDead(detail="EngineCore encountered a fatal error"))
    d.send(ContainerExited(exit_code=1, signal=None, oom_killed=False))
    d.advance(480)
    d.to_running(cid="c5")
    d.send(RestartRequested())  # an operator restart: drain (nothing running), stop, start
    d.advance(30)
    d.send(ContainerExited(exit_code=0, signal=None, oom_killed=False))
    assert d.st() == State.PREFLIGHT
    server = MetricsServer("127.0.0.1:0", status_doc)  # fed only; never started
    for a in d.log:
        if isinstance(a, Emit):
            server.observe_event("qwen", a.name, a.fields)
    tallies, _ = server.tallies([])
    t = tallies["qwen"]
    assert sum(t.restarts.values()) == d.s.restarts == 5
    assert sum(t.emergencies.values()) == d.s.emergencies == 3
    assert dict(t.restarts) == {
        "failed_oom": 1, "probe_failed": 1, "container_exited": 1, "engine_dead": 1, "restart": 1
    }  # fmt: skip
    assert dict(t.emergencies) == {"probe_failed": 1, "container_exited": 1, "engine_dead": 1}


def test_snapshot_failure_still_answers() -> None:
    """A snapshot that raises leaves up and build_info in the scrape (the endpoint never errors)."""

    def broken() -> dict[str, Any]:
        raise RuntimeError("not published yet")

    server = MetricsServer("127.0.0.1:0", broken)
    server.start()
    try:
        got = samples(scrape(server))
    finally:
        server.stop()
    assert got[("vllm_supervisor_up", ())] == 1.0
    assert not [k for k in got if k[0] == "vllm_supervisor_profile_state"]


def test_port_in_use_is_a_clear_error() -> None:
    """Binding a port another socket holds raises MetricsError naming the address."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        server = MetricsServer(f"127.0.0.1:{port}", status_doc)
        with pytest.raises(MetricsError, match=f"127.0.0.1:{port}"):
            server.start()


def test_rules_pass_their_promtool_unit_tests() -> None:
    """`promtool test rules monitoring/tests.yml` passes (every alert fires when, and only when, meant)."""
    result = promtool("test", "rules", str(REPO / "monitoring" / "tests.yml"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_example_configs_are_valid() -> None:
    """The example Prometheus config (with its rules) and Alertmanager config pass their checkers."""
    prom = promtool("check", "config", str(REPO / "monitoring" / "prometheus.yml"))
    assert prom.returncode == 0, prom.stdout + prom.stderr
    am = subprocess.run(
        ["amtool", "check-config", str(REPO / "monitoring" / "alertmanager.yml")],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert am.returncode == 0, am.stdout + am.stderr


def _config(tmp_path: Path, metrics: str) -> Path:
    (tmp_path / "p.yaml").write_text(PROFILE, encoding="utf-8")
    path = tmp_path / "daemon.yaml"
    path.write_text(f"state_dir: {tmp_path}/state\nprofiles: [p.yaml]\n{metrics}", encoding="utf-8")
    return path


def test_config_metrics_absent_is_off_and_loopback_is_accepted(tmp_path: Path) -> None:
    """No metrics key: no endpoint; a loopback listen address parses to host and port."""
    assert load_config(_config(tmp_path, "")).metrics is None
    cfg = load_config(_config(tmp_path, "metrics: {listen: '127.0.0.1:9400'}\n")).metrics
    assert cfg is not None
    assert (cfg.host, cfg.port, cfg.listen) == ("127.0.0.1", 9400, "127.0.0.1:9400")
    v6 = load_config(_config(tmp_path, "metrics: {listen: '[::1]:9401'}\n")).metrics
    assert v6 is not None
    assert (v6.host, v6.listen) == ("::1", "[::1]:9401")
    remote = load_config(_config(tmp_path, "metrics: {listen: '0.0.0.0:9400', allow_remote: true}\n"))
    assert remote.metrics is not None
    assert remote.metrics.allow_remote


@pytest.mark.parametrize(
    ("body", "key", "words"),
    [
        ("metrics: {listen: '0.0.0.0:9400'}", "metrics.listen", "allow_remote"),
        ("metrics: {listen: '192.168.1.5:9400'}", "metrics.listen", "not a loopback"),
        ("metrics: {listen: '127.0.0.1:99999'}", "metrics.listen", "1 to 65535"),
        ("metrics: {listen: '127.0.0.1:0'}", "metrics.listen", "1 to 65535"),
        ("metrics: {listen: '127.0.0.1'}", "metrics.listen", "HOST:PORT"),
        ("metrics: {listen: '::1:9400'}", "metrics.listen", "brackets"),
        ("metrics: {allow_remote: true}", "metrics.listen", "required"),
        ("metrics: {listen: '127.0.0.1:9400', alow_remote: true}", "metrics.alow_remote", "allow_remote"),
    ],
)
def test_config_metrics_errors_name_file_key_value(tmp_path: Path, body: str, key: str, words: str) -> None:
    """A bad metrics section is reported with the file, the key path and the value."""
    path = _config(tmp_path, body + "\n")
    problems = check_config(path)
    hits = [p for p in problems if p.key_path == key]
    assert len(hits) == 1, [str(p) for p in problems]
    text = str(hits[0])
    assert str(path) in text
    assert words in text
    if key == "metrics.listen" and "listen: '" in body:
        assert repr(body.split("'")[1]) in text  # the value as written
