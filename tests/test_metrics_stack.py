"""A real Prometheus scrapes a MetricsServer; a real rule fires through a real Alertmanager to a webhook.

Twice: once a MetricsServer over a hand-built status document (no Docker), once a real daemon subprocess
supervising a simulator container (the breaker opened by a real ``docker kill``).

Everything listens on 127.0.0.1 (free ports, temp config and storage dirs). The test configs use short
intervals so it finishes in seconds: scrape and rule evaluation every 1 s, the rules' ``for:`` cut to 1 s,
Alertmanager's group_wait/group_interval 1 s. Every process is stopped in a ``finally``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from supervisor.adapters.metrics.endpoint import MetricsServer
from supervisor.core.states import State
from tests.conftest import Resources
from tests.daemon_harness import ProfileSpec, running_daemon, write_daemon_config, write_profile
from tests.harness import REPO, WebhookReceiver, free_port, wait_for, webhook_receiver
from tests.metrics_fixtures import status_doc

pytestmark = pytest.mark.slow

START_TIMEOUT_S = 60.0
ALERT_TIMEOUT_S = 90.0


def _binary(name: str) -> str:
    path = shutil.which(name)
    assert path is not None, f"{name} is not installed: run scripts/setup"
    return path


@contextmanager
def _process(argv: list[str], log: Path, ready_url: str) -> Iterator[subprocess.Popen[bytes]]:
    """Start ``argv`` (output to ``log``), wait until ``ready_url`` answers 200; stop it afterwards."""
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:

        def ready() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"{argv[0]} exited {proc.returncode}: {log.read_text()[-2000:]}")
            with urllib.request.urlopen(ready_url, timeout=2) as resp:
                return bool(resp.status == 200)

        wait_for(ready, START_TIMEOUT_S, interval=0.2, message=f"{Path(argv[0]).name} ready")
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)


def _query(prom: str, expr: str) -> list[dict[str, Any]]:
    url = f"{prom}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
    with urllib.request.urlopen(url, timeout=5) as resp:
        body = json.loads(resp.read())
    assert body["status"] == "success", body
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def _fast_rules(dest: Path) -> Path:
    """monitoring/prometheus-rules.yml with every ``for:`` cut to 1 s (the expressions unchanged)."""
    rules = yaml.safe_load((REPO / "monitoring" / "prometheus-rules.yml").read_text(encoding="utf-8"))
    for group in rules["groups"]:
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = "1s"
    dest.write_text(yaml.safe_dump(rules), encoding="utf-8")
    return dest


def _state_timeline_expr() -> str:
    """The Grafana dashboard's state-timeline query, for all instances."""
    dash = json.loads((REPO / "monitoring" / "grafana-dashboard.json").read_text(encoding="utf-8"))
    panel = next(p for p in dash["panels"] if p["type"] == "state-timeline")
    return str(panel["targets"][0]["expr"]).replace("$instance", ".*")


@dataclass
class Stack:
    """A running Prometheus (its URL) scraping one target, and the webhook its Alertmanager calls."""

    prom: str
    hook: WebhookReceiver

    def query(self, expr: str) -> list[dict[str, Any]]:
        return _query(self.prom, expr)

    def wait_alert(self, name: str) -> dict[str, Any]:
        """The first ``name`` alert the webhook received (waits for it)."""
        got = wait_for(
            lambda: [
                a
                for r in self.hook.received()
                for a in r.json().get("alerts", [])
                if a["labels"].get("alertname") == name
            ],
            ALERT_TIMEOUT_S,
            interval=0.5,
            message=f"{name} at the webhook",
        )
        return dict(got[0])


@contextmanager
def _stack(tmp_path: Path, target_port: int) -> Iterator[Stack]:
    """Alertmanager and Prometheus (fast intervals, the repo's rules) scraping 127.0.0.1:target_port."""
    prometheus, alertmanager = _binary("prometheus"), _binary("prometheus-alertmanager")
    prom_port, am_port = free_port(), free_port()
    prom, am = f"http://127.0.0.1:{prom_port}", f"http://127.0.0.1:{am_port}"
    with webhook_receiver() as hook:
        am_cfg = tmp_path / "alertmanager.yml"
        route = {"receiver": "hook", "group_by": ["alertname", "profile"], "group_wait": "1s"}
        route.update(group_interval="1s", repeat_interval="1h")
        receiver = {"name": "hook", "webhook_configs": [{"url": f"{hook.url}/alerts"}]}
        am_cfg.write_text(yaml.safe_dump({"route": route, "receivers": [receiver]}), encoding="utf-8")
        prom_cfg = tmp_path / "prometheus.yml"
        target = {
            "job_name": "vllm-supervisor",
            "static_configs": [{"targets": [f"127.0.0.1:{target_port}"]}],
        }
        prom_cfg.write_text(
            yaml.safe_dump(
                {
                    "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                    "rule_files": [str(_fast_rules(tmp_path / "rules.yml"))],
                    "alerting": {
                        "alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{am_port}"]}]}]
                    },
                    "scrape_configs": [target],
                }
            ),
            encoding="utf-8",
        )
        am_argv = [
            alertmanager,
            f"--config.file={am_cfg}",
            f"--storage.path={tmp_path / 'am-data'}",
            f"--web.listen-address=127.0.0.1:{am_port}",
            "--cluster.listen-address=",  # no gossip port (it would listen on every address)
        ]
        prom_argv = [
            prometheus,
            f"--config.file={prom_cfg}",
            f"--storage.tsdb.path={tmp_path / 'prom-data'}",
            f"--web.listen-address=127.0.0.1:{prom_port}",
        ]
        with (
            _process(am_argv, tmp_path / "alertmanager.log", f"{am}/-/ready"),
            _process(prom_argv, tmp_path / "prometheus.log", f"{prom}/-/ready"),
        ):
            # the Prometheus answering is the one started here (not another server that holds its port)
            with urllib.request.urlopen(f"{prom}/api/v1/status/flags", timeout=5) as resp:
                flags = json.load(resp)["data"]
            assert flags["storage.tsdb.path"] == str(tmp_path / "prom-data"), flags
            yield Stack(prom, hook)


def _wait_running(stack: Stack, profile: str) -> None:
    """Prometheus shows ``profile`` RUNNING (and the dashboard's timeline RUNNING's code), breaker closed."""
    running = wait_for(
        lambda: stack.query(f'vllm_supervisor_profile_state{{profile="{profile}",state="RUNNING"}} == 1'),
        START_TIMEOUT_S,
        interval=0.5,
        message="the RUNNING state in Prometheus",
    )
    assert running[0]["metric"]["job"] == "vllm-supervisor"
    codes = stack.query(_state_timeline_expr())
    assert [c["value"][1] for c in codes] == ["4"]  # RUNNING's code on the dashboard
    assert stack.query("vllm_supervisor_breaker_open == 1") == []


def _check_breaker_alert(stack: Stack, profile: str) -> None:
    """VllmBreakerOpen for ``profile`` reached the webhook, and Prometheus has the profile FATAL."""
    alert = stack.wait_alert("VllmBreakerOpen")
    assert alert["status"] == "firing"
    assert alert["labels"]["profile"] == profile
    assert alert["labels"]["severity"] == "critical"
    assert "circuit breaker open" in alert["annotations"]["summary"]
    fatal = wait_for(
        lambda: stack.query('vllm_supervisor_profile_state{state="FATAL"} == 1'),
        START_TIMEOUT_S,
        interval=0.5,
        message="FATAL in Prometheus",
    )
    assert fatal[0]["metric"]["profile"] == profile


def test_prometheus_scrapes_and_an_alert_reaches_the_webhook(tmp_path: Path) -> None:
    """Prometheus shows the profile's state; an open breaker fires VllmBreakerOpen via Alertmanager."""
    doc = {"current": status_doc(State.RUNNING)}
    server = MetricsServer("127.0.0.1:0", lambda: doc["current"])
    server.start()
    try:
        with _stack(tmp_path, server.port) as stack:
            _wait_running(stack, "qwen")
            doc["current"] = status_doc(State.FATAL, breaker_open=True)
            _check_breaker_alert(stack, "qwen")
    finally:
        server.stop()


@pytest.mark.docker
def test_real_daemon_through_prometheus_to_the_webhook(
    tmp_path: Path, resources: Resources, sim_image: str
) -> None:
    """A real daemon: RUNNING in Prometheus; a docker kill at breaker limit 1 fires VllmBreakerOpen."""
    port = free_port()
    spec = ProfileSpec(name="p", container=resources.name("p"))
    profile = write_profile(tmp_path, spec, resources.test_id)
    config = write_daemon_config(
        tmp_path, [profile], breaker_limit=1, extra={"metrics": {"listen": f"127.0.0.1:{port}"}}
    )
    with running_daemon(config, tmp_path) as d, _stack(tmp_path, port) as stack:
        st = d.wait_state("p", "RUNNING", 60)
        _wait_running(stack, "p")
        resources.client.containers.get(st["container_id"]).kill()
        d.wait_state("p", "FATAL", 60)
        _check_breaker_alert(stack, "p")
