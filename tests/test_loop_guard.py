"""The loop's own guards (issue 39 item 8): an exception in a tick part, a dispatched event or a reload is
logged, recorded and alerted once; supervision goes on and the caller of a command gets an answer.

An in-process daemon on a fake clock against a Docker socket nobody listens on (as test_daemon_inprocess);
the faults are injected by replacing one collaborator's method with one that raises.
"""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path
from typing import Any

from supervisor.adapters.control.client import ControlClient
from supervisor.adapters.docker.adapter import DockerAdapter
from supervisor.config import DaemonConfig, Profile, load_config
from supervisor.core.clock import FakeClock
from supervisor.core.errors import ControlError
from supervisor.core.fleet.guard import GuardState, on_error
from supervisor.core.machine import Policy
from supervisor.daemon import build_daemon
from tests.harness import wait_for
from tests.test_daemon_inprocess import _config


def test_the_guard_alerts_once_and_logs_at_powers_of_two() -> None:
    state, logged, alerts = GuardState(), [], 0
    for _ in range(9):
        state, verdict = on_error(state, "tick.heartbeat", "RuntimeError", "boom")
        logged.append(verdict.log)
        alerts += verdict.alert is not None
    assert alerts == 1
    assert [i + 1 for i, x in enumerate(logged) if x] == [1, 2, 4, 8]
    state, verdict = on_error(state, "reload", "RuntimeError", "boom")
    assert verdict.alert is not None  # another place: its own alert
    assert verdict.alert.kind == "daemon.internal_error"


def _raise(*_args: Any, **_kw: Any) -> None:
    raise RuntimeError("injected fault")


def _no_policy(_profile: Profile, _config: DaemonConfig) -> Policy:
    raise RuntimeError("injected fault")


def test_a_raising_tick_part_and_reload_leave_the_daemon_supervising(tmp_path: Path) -> None:
    config = load_config(_config(tmp_path))
    clock = FakeClock()
    docker = DockerAdapter(base_url=f"unix://{tmp_path}/no-docker.sock", timeout=2)
    daemon = build_daemon(config, clock, docker=docker)
    daemon.parts.sources.upkeep = _raise  # type: ignore[method-assign]  # every tick, its last part
    codes: list[int] = []
    thread = threading.Thread(target=lambda: codes.append(daemon.run()), daemon=True)
    thread.start()
    try:
        client = ControlClient(config.socket_path, timeout=5)

        def events() -> list[dict[str, Any]]:
            try:
                return list(client.call("events", n=200)["data"]["events"])
            except ControlError:
                return []

        def guarded(where: str) -> list[dict[str, Any]]:
            return [
                e for e in events() if e["name"] == "daemon.internal_error" and e["fields"]["where"] == where
            ]

        wait_for(lambda: guarded("tick"), 15, message="the tick's fault guarded")
        clock.advance(5)
        ticks = [daemon.status()["daemon"].get("uptime_s")]
        wait_for(lambda: daemon.status()["daemon"].get("uptime_s") != ticks[0], 15, message="later parts run")
        # a reload that adds a profile meets a policy builder that raises
        daemon.parts.policies = dataclasses.replace(daemon.parts.policies, profile=_no_policy)
        (tmp_path / "q.yaml").write_text(
            "container:\n  name: never-created-q\n  image: img:1\n", encoding="utf-8"
        )
        text = config.path.read_text(encoding="utf-8").replace(
            "profiles: [p.yaml]", "profiles: [p.yaml, q.yaml]"
        )
        config.path.write_text(text, encoding="utf-8")
        reply = client.call("reload")
        assert reply["ok"] is False
        assert "internal error in the daemon (RuntimeError)" in reply["error"]
        wait_for(lambda: guarded("dispatch"), 15, message="the reload's fault guarded")
        assert client.call("status")["ok"] is True  # still answering, still supervising
        raised = [
            e
            for e in events()
            if e["name"] == "alert.raised" and e["fields"]["kind"] == "daemon.internal_error"
        ]
        assert len(raised) == 2  # one per place, not one per tick
        assert len(guarded("tick")) == 1
    finally:
        daemon.request_stop()
        thread.join(20)
    assert codes == [0]
