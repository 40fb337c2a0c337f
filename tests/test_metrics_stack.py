"""A real Prometheus scrapes a MetricsServer; a real rule fires through a real Alertmanager to a webhook.

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
from pathlib import Path
from typing import Any

import pytest
import yaml

from supervisor.adapters.metrics import MetricsServer
from supervisor.core.states import State
from tests.harness import REPO, free_port, wait_for, webhook_receiver
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


def test_prometheus_scrapes_and_an_alert_reaches_the_webhook(tmp_path: Path) -> None:
    """Prometheus shows the profile's state; an open breaker fires VllmBreakerOpen via Alertmanager."""
    prometheus, alertmanager = _binary("prometheus"), _binary("prometheus-alertmanager")
    doc = {"current": status_doc(State.RUNNING)}
    server = MetricsServer("127.0.0.1:0", lambda: doc["current"])
    server.start()
    prom_port, am_port = free_port(), free_port()
    prom, am = f"http://127.0.0.1:{prom_port}", f"http://127.0.0.1:{am_port}"
    try:
        with webhook_receiver() as hook:
            am_cfg = tmp_path / "alertmanager.yml"
            am_cfg.write_text(
                yaml.safe_dump(
                    {
                        "route": {
                            "receiver": "hook",
                            "group_by": ["alertname", "profile"],
                            "group_wait": "1s",
                            "group_interval": "1s",
                            "repeat_interval": "1h",
                        },
                        "receivers": [{"name": "hook", "webhook_configs": [{"url": f"{hook.url}/alerts"}]}],
                    }
                ),
                encoding="utf-8",
            )
            prom_cfg = tmp_path / "prometheus.yml"
            prom_cfg.write_text(
                yaml.safe_dump(
                    {
                        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                        "rule_files": [str(_fast_rules(tmp_path / "rules.yml"))],
                        "alerting": {
                            "alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{am_port}"]}]}]
                        },
                        "scrape_configs": [
                            {
                                "job_name": "vllm-supervisor",
                                "static_configs": [{"targets": [f"127.0.0.1:{server.port}"]}],
                            }
                        ],
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
                running = wait_for(
                    lambda: _query(
                        prom, 'vllm_supervisor_profile_state{profile="qwen",state="RUNNING"} == 1'
                    ),
                    START_TIMEOUT_S,
                    interval=0.5,
                    message="the RUNNING state in Prometheus",
                )
                assert running[0]["metric"]["job"] == "vllm-supervisor"
                codes = _query(prom, _state_timeline_expr())
                assert [c["value"][1] for c in codes] == ["4"]  # RUNNING's code on the dashboard
                assert _query(prom, "vllm_supervisor_breaker_open == 1") == []

                doc["current"] = status_doc(State.FATAL, breaker_open=True)
                got = wait_for(
                    lambda: [
                        a
                        for r in hook.received()
                        for a in r.json().get("alerts", [])
                        if a["labels"].get("alertname") == "VllmBreakerOpen"
                    ],
                    ALERT_TIMEOUT_S,
                    interval=0.5,
                    message="VllmBreakerOpen at the webhook",
                )
                alert = got[0]
                assert alert["status"] == "firing"
                assert alert["labels"]["profile"] == "qwen"
                assert alert["labels"]["severity"] == "critical"
                assert "circuit breaker open" in alert["annotations"]["summary"]
                fatal = _query(prom, 'vllm_supervisor_profile_state{state="FATAL"} == 1')
                assert fatal[0]["metric"]["profile"] == "qwen"
    finally:
        server.stop()
