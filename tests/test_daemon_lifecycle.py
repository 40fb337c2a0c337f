"""The daemon's lifecycle messages, its heartbeat verdict and its digest, end to end with real receivers
on 127.0.0.1: an in-process daemon on a fake clock (no Docker: the profile is never looked at), and a
real ``vllm-supervisor`` process that is SIGKILLed, restarted and stopped (Docker answers the look at a
container that does not exist; nothing is created)."""

from __future__ import annotations

import dataclasses
import json
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from supervisor.adapters.docker.adapter import DockerAdapter
from supervisor.adapters.store.state import Store
from supervisor.config import load_config
from supervisor.core.breaker import Breaker
from supervisor.core.clock import FakeClock
from supervisor.core.profile_state import ProfileState
from supervisor.core.states import State
from supervisor.core.vocab import Intent
from supervisor.daemon import build_daemon
from tests.daemon_harness import DaemonProc, write_daemon_config
from tests.harness import WebhookReceiver, unique_name, wait_for

TOKEN = "lifecycle-TOKEN-4c1d"


def _alerts(webhook: WebhookReceiver) -> list[dict[str, Any]]:
    return [r.json() for r in webhook.received() if r.path.startswith("/alert/")]


def _supervisor_alerts(webhook: WebhookReceiver, kind_title: str) -> list[dict[str, Any]]:
    """Daemon-wide messages (profile "supervisor") whose title starts with ``kind_title``."""
    return [a for a in _alerts(webhook) if a["profile"] == "supervisor" and a["title"].startswith(kind_title)]


def _beats(webhook: WebhookReceiver) -> list[tuple[str, str]]:
    return [(r.path, r.body.decode()) for r in webhook.received() if r.path.startswith("/hb/")]


def _profile(tmp: Path, name: str, extra: str = "") -> Path:
    path = tmp / f"{name}.yaml"
    path.write_text(
        f"name: {name}\ncontainer:\n  name: {unique_name('life-' + name)}\n  image: img:never\n{extra}",
        encoding="utf-8",
    )
    return path


# ---- in-process, fake clock, no Docker ----------------------------------------------------------------


def test_settle_timeout_heartbeat_fail_digest_and_stop_in_process(
    tmp_path: Path, webhook: WebhookReceiver
) -> None:
    """Docker never answers: daemon.started goes out after the settle timeout saying the profile was not
    looked at; after fail_after_s the heartbeat pings /fail saying why; the digest goes out at its minute;
    request_stop sends daemon.stopped and records a clean stop."""
    clock = FakeClock()
    digest_at = datetime.fromtimestamp(clock.now() + 180, UTC).strftime("%H:%M")
    profile = _profile(tmp_path, "p", "probes:\n  interval_s: 15\n")
    config_path = write_daemon_config(
        tmp_path,
        [profile],
        extra={
            "maintenance": {"enabled": False, "timezone": "UTC"},
            "alerts": {
                "digest_at": digest_at,
                "channels": [{"kind": "generic", "name": "ops", "url": f"{webhook.url}/alert/{TOKEN}"}],
            },
            "heartbeat": {"url": f"{webhook.url}/hb/{TOKEN}", "interval_s": 300, "fail_after_s": 120},
        },
    )
    config = load_config(config_path)
    docker = DockerAdapter(base_url=f"unix://{tmp_path}/no-docker.sock", timeout=2)
    daemon = build_daemon(config, clock, docker=docker)
    codes: list[int] = []
    thread = threading.Thread(target=lambda: codes.append(daemon.run()), daemon=True)
    thread.start()
    try:
        first = wait_for(lambda: _beats(webhook), 15, message="the first heartbeat")[0]
        assert first[0] == f"/hb/{TOKEN}"
        assert ": OK\np: STOPPED" in first[1]

        clock.advance(31)  # past the settle timeout: Docker never answered
        (started,) = wait_for(
            lambda: _supervisor_alerts(webhook, "supervisor started"), 15, message="started"
        )
        assert started["severity"] == "info"
        assert "1 unknown" in started["reason"]
        assert "first start with this state directory" in started["reason"]
        assert started["details"]["p"].startswith("not looked at yet (Docker did not answer)")

        clock.advance(100)  # 131 s without serving > fail_after_s 120: the verdict flips, a ping goes at once
        fails = wait_for(lambda: [b for b in _beats(webhook) if b[0].endswith("/fail")], 15, message="/fail")
        assert fails[0][0] == f"/hb/{TOKEN}/fail"
        assert "FAIL: p not serving for 2 min (not looked at yet, wants to run)" in fails[0][1]

        clock.advance(60)  # past digest_at
        (digest,) = wait_for(lambda: _supervisor_alerts(webhook, "daily digest"), 15, message="digest")
        assert digest["title"] == "daily digest: 0 of 1 serving"
        assert "restarts (24 h): 0" in digest["details"]["p"]
        assert digest["details"]["next maintenance"] == "none scheduled"
    finally:
        daemon.request_stop()
        thread.join(30)
    assert codes == [0]
    (stopped,) = _supervisor_alerts(webhook, "supervisor stopping")  # delivered before run() returned
    assert "nothing supervises the model servers" in stopped["reason"]
    alive = json.loads((tmp_path / "state" / "alive.json").read_text(encoding="utf-8"))
    assert alive["clean_stop"] is True
    assert TOKEN not in json.dumps([r.body.decode() for r in webhook.received()])


# ---- a real daemon process -----------------------------------------------------------------------------


def _daemon_config(tmp: Path, webhook: WebhookReceiver, profile_extra: str) -> Path:
    return write_daemon_config(
        tmp,
        [_profile(tmp, "p", profile_extra)],
        extra={
            "alerts": {
                "channels": [{"kind": "generic", "name": "ops", "url": f"{webhook.url}/alert/{TOKEN}"}]
            },
            "heartbeat": {"url": f"{webhook.url}/hb/{TOKEN}", "interval_s": 300},
        },
    )


def test_crash_is_reported_on_the_next_start_and_a_clean_stop_is_not(
    tmp_path: Path, webhook: WebhookReceiver
) -> None:
    """Start (daemon.started), SIGKILL, start again (daemon.crashed: down from .. to ..), SIGTERM
    (daemon.stopped delivered before exit), start again (no crash claim: stopped cleanly)."""
    d = DaemonProc(_daemon_config(tmp_path, webhook, "autostart: false\n"), tmp_path)
    try:
        d.start()
        (first,) = wait_for(lambda: _supervisor_alerts(webhook, "supervisor started"), 60, message="started")
        assert "1 stopped" in first["reason"]
        assert "first start" in first["reason"]
        assert first["details"]["p"] == "stopped (manual stop persisted)"

        d.kill9()
        d.start()
        (crashed,) = wait_for(
            lambda: _supervisor_alerts(webhook, "the supervisor was down"), 30, message="crashed"
        )
        assert crashed["severity"] == "warning"
        assert crashed["reason"].startswith("the supervisor was down from ")
        assert " to " in crashed["reason"]
        assert "it did not stop cleanly" in crashed["reason"]
        second = wait_for(
            lambda: _supervisor_alerts(webhook, "supervisor started")[1:], 60, message="second started"
        )[0]
        assert "after a crash" in second["reason"]

        assert d.terminate() == 0
        (stopped,) = _supervisor_alerts(webhook, "supervisor stopping")
        assert stopped["title"] == "supervisor stopping; the model servers keep running"
        assert stopped["details"]["p"] == "STOPPED"

        d.start()
        third = wait_for(lambda: _supervisor_alerts(webhook, "supervisor started")[2:], 60, message="third")[
            0
        ]
        assert "stopped cleanly at" in third["reason"]
        assert len(_supervisor_alerts(webhook, "the supervisor was down")) == 1  # no new crash claim
        assert d.terminate() == 0
    finally:
        d.close()
    assert TOKEN not in d.log_tail(100_000)


def test_heartbeat_pings_fail_while_a_profile_is_fatal(tmp_path: Path, webhook: WebhookReceiver) -> None:
    """A breaker left open by an earlier run: the daemon finds the profile FATAL; the heartbeat goes to
    /fail saying so, and daemon.started lists it."""
    store = Store(tmp_path / "state")
    now = datetime.now(UTC).timestamp()
    breaker = Breaker(limit=3, window_s=3600, failures=(now - 30, now - 20, now - 10), tripped_at=now - 10)
    state = dataclasses.replace(ProfileState.initial("p", now - 10), state=State.FATAL, breaker=breaker)
    store.save_profile_state("p", state.to_dict())
    store.save_intent("p", Intent.RUN)
    d = DaemonProc(_daemon_config(tmp_path, webhook, ""), tmp_path)
    try:
        d.start()
        fail = wait_for(
            lambda: [b for b in _beats(webhook) if b[0] == f"/hb/{TOKEN}/fail"], 30, message="/fail"
        )
        assert "FAIL: p FATAL for " in fail[0][1]
        assert "(circuit breaker open, 3/3)" in fail[0][1]
        (started,) = wait_for(
            lambda: _supervisor_alerts(webhook, "supervisor started"), 60, message="started"
        )
        assert (
            started["details"]["p"] == "FATAL: circuit breaker open (3/3); supervisorctl reset p once fixed"
        )
        assert d.terminate() == 0
    finally:
        d.close()
