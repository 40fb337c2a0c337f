"""Companion checks: config errors, the pure flip rule, the checker against a real HTTP server."""

from __future__ import annotations

import queue
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

from supervisor.adapters.store.state import Store
from supervisor.config import check_config, load_profile
from supervisor.config.fleet import fleet_policy_for
from supervisor.config.policy import default_config
from supervisor.core import actions as A
from supervisor.core.clock import FakeClock
from supervisor.core.fleet import companion_step
from supervisor.core.fleet.actions import CheckCompanion, Raise, Record
from supervisor.core.fleet.companions import CompanionHealth
from supervisor.core.fleet.events import CompanionChecked, Tick
from supervisor.core.fleet.state import FleetState
from supervisor.core.fleet.step import step
from supervisor.daemon.executor.fleet_jobs import FleetJobs
from supervisor.daemon.executor.records import Records
from tests.harness import WebhookReceiver, wait_for
from tests.test_config import find, profile

BASE = """\
container:
  image: img:1
"""


def test_companions_parse_with_defaults(tmp_path: Path) -> None:
    """A companion needs name and url; expect_status, timeout_s and interval_s have defaults."""
    prof = load_profile(
        profile(
            tmp_path,
            BASE
            + """\
companions:
  - {name: gateway, url: "http://127.0.0.1:9/health"}
  - {name: lb, url: "https://lb.local/", expect_status: 204, timeout_s: 2, interval_s: 10}
""",
        )
    )
    gw, lb = prof.companions
    assert (gw.name, gw.expect_status, gw.timeout_s, gw.interval_s) == ("gateway", 200, 5.0, 30.0)
    assert (lb.expect_status, lb.timeout_s, lb.interval_s) == (204, 2.0, 10.0)


def test_companion_config_errors_name_key_path_and_value(tmp_path: Path) -> None:
    """Missing url, bad scheme, duplicate name, status out of range, unknown key: each reported."""
    problems = check_config(
        profile(
            tmp_path,
            BASE
            + """\
companions:
  - {name: gw}
  - {name: gw2, url: "ftp://x"}
  - {name: gw2, url: "http://x"}
  - {name: gw3, url: "http://x", expect_status: 700, interval: 5}
  - just-a-string
""",
        )
    )
    assert "required" in find(problems, "companions[0].url").message
    assert "http://" in find(problems, "companions[1].url").message
    assert "another companion" in find(problems, "companions[2].name").message
    assert find(problems, "companions[3].expect_status").value == "700"
    assert "did you mean 'interval_s'" in find(problems, "companions[3].interval").message
    assert "mapping" in find(problems, "companions[4]").message


def test_flips_alert_once_per_change() -> None:
    """First failure and every later change flip; a first success and repeats do not."""
    h = CompanionHealth("gw")
    h, flip = h.observe(True, 200, None, 10.0)
    assert flip is None
    assert h.ok
    assert h.since == 10.0
    h, flip = h.observe(False, 503, "HTTP 503", 20.0)
    assert flip == "bad"
    assert h.status == 503
    assert h.since == 20.0
    h, flip = h.observe(False, None, "timeout", 30.0)
    assert flip is None
    assert h.since == 20.0
    assert h.error == "timeout"
    h, flip = h.observe(True, 200, None, 40.0)
    assert flip == "back"
    assert h.error is None
    first_bad = CompanionHealth("gw").observe(False, None, "connection refused", 1.0)[1]
    assert first_bad == "bad"
    assert not h.scheduled(40.0, 30.0).due(69.9)
    assert h.scheduled(40.0, 30.0).due(70.0)


def test_checker_against_a_real_server_switching_200_503(tmp_path: Path, webhook: WebhookReceiver) -> None:
    """The fleet step's companion jobs GET a real server; 503 -> companion.failing + warning, 200 -> recovered
    + info. The answers come back through a queue and the test, acting as the loop, steps them."""
    prof = load_profile(
        profile(
            tmp_path,
            BASE
            + f"""\
name: p
companions:
  - {{name: gw, url: "{webhook.url}/health", timeout_s: 2, interval_s: 1}}
""",
        )
    )
    clock = FakeClock()
    store = Store(tmp_path / "state", clock)
    alerts: list[A.Alert] = []

    def sink(profile: str, alert: A.Alert, diagnosis: str | None, details: Any) -> bool:
        alerts.append(alert)
        return True

    records = Records(store, clock, sink)
    answers: queue.Queue[CompanionChecked] = queue.Queue()
    threads: list[threading.Thread] = []

    def background(kind: str, fn: Any, *args: object) -> None:
        t = threading.Thread(target=fn, args=args, daemon=True)
        threads.append(t)
        t.start()

    jobs = FleetJobs(records, background, answers.put)  # type: ignore[arg-type]
    policy = fleet_policy_for(replace(default_config()[1], profiles=(prof,)))
    fleet = FleetState()

    def run(event: Tick | CompanionChecked) -> None:
        nonlocal fleet
        fleet, actions = step(fleet, event, clock.now(), {}, policy)
        for action in actions:
            if isinstance(action, CheckCompanion | Record | Raise):  # (the rest: not this test's)
                jobs.run(action)

    def one_round() -> CompanionChecked:
        clock.advance(1.0)
        run(Tick())
        answer = answers.get(timeout=10)
        run(answer)
        return answer

    def status() -> dict[str, list[dict[str, object]]]:
        return companion_step.status(fleet, policy)

    assert one_round().ok
    assert status()["p"][0]["ok"] is True
    webhook.status = 503
    bad = one_round()
    assert (bad.ok, bad.status) == (False, 503)
    entry = status()["p"][0]
    assert (entry["ok"], entry["status"]) == (False, 503)
    one_round()  # still failing: no second alert
    webhook.status = 200
    assert one_round().ok
    names = [e["name"] for e in store.read_events("p", 50)]
    assert names.count("companion.failing") == 1
    assert names.count("companion.recovered") == 1
    assert [(a.severity, a.new_state) for a in alerts] == [("warning", "failing"), ("info", "ok")]
    assert "expected HTTP 200" in alerts[0].reason
    assert [r.path for r in webhook.received()] == ["/health"] * 4
    for t in threads:
        t.join(5)
    wait_for(lambda: not any(t.is_alive() for t in threads), 5, message="check threads done")
