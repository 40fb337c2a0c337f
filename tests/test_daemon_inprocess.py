"""The composition root builds a daemon a test can run in-process, with a fake clock: here against a Docker
engine that is not there (a socket path nobody listens on), so nothing else is needed."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from supervisor.adapters.control.client import ControlClient
from supervisor.adapters.docker.adapter import DockerAdapter
from supervisor.config import load_config
from supervisor.core.clock import FakeClock
from supervisor.core.errors import ControlError
from supervisor.daemon import build_daemon
from tests.harness import wait_for


def _config(tmp: Path, profile_extra: str = "", daemon_extra: str = "") -> Path:
    """A daemon config of one profile ``p`` whose container is never created (``*_extra``: more YAML)."""
    (tmp / "p.yaml").write_text(
        "container:\n  name: never-created-inprocess\n  image: img:1\nprobes:\n  interval_s: 15\n"
        + profile_extra,
        encoding="utf-8",
    )
    cfg = tmp / "daemon.yaml"
    cfg.write_text(
        f"state_dir: {tmp}/state\nsocket_path: {tmp}/c.sock\nprofiles: [p.yaml]\n"
        f"host:\n  load_lock_path: {tmp}/load.lock\n  drop_caches: false\n"
        "  memory_guard: {enabled: false}\n"
        "maintenance: {enabled: false}\n" + daemon_extra,
        encoding="utf-8",
    )
    return cfg


def test_an_in_process_daemon_runs_on_a_fake_clock(tmp_path: Path) -> None:
    """build_daemon + run() on a thread: status answers, Docker shows as not answering, nothing is decided
    about the unseen container, the fake clock paces the once-a-minute report, request_stop ends it."""
    config = load_config(_config(tmp_path))
    clock = FakeClock()
    docker = DockerAdapter(base_url=f"unix://{tmp_path}/no-docker.sock", timeout=2)
    daemon = build_daemon(config, clock, docker=docker)
    codes: list[int] = []
    thread = threading.Thread(target=lambda: codes.append(daemon.run()), daemon=True)
    thread.start()
    try:
        client = ControlClient(config.socket_path, timeout=5)

        def status() -> dict[str, Any] | None:
            try:
                reply = client.call("status")
            except ControlError:
                return None
            return reply if reply["data"]["profiles"] else None

        def not_answering() -> bool:
            doc = status()
            return doc is not None and doc["data"]["daemon"]["docker"]["state"] == "not answering"

        wait_for(not_answering, 15, message="docker: not answering")
        doc = status()
        assert doc is not None
        profile = doc["data"]["profiles"][0]
        assert profile["observed"] is False
        assert profile["state"] == "STOPPED"  # the recorded (initial) state: no start decided blind

        def reports() -> int:
            events = client.call("events", name="p", n=50)["data"]["events"]
            return sum(1 for e in events if e["name"] == "docker.unreachable")

        wait_for(lambda: reports() == 1, 15, message="one docker.unreachable report")
        clock.advance(61)  # the next failed look after a (fake) minute is reported again
        wait_for(lambda: reports() == 2, 15, message="a second report a fake minute later")
    finally:
        daemon.request_stop()
        thread.join(20)
    assert codes == [0]
    assert not config.socket_path.exists()


def test_docker_not_answering_is_raised_once_and_kept_across_a_restart(tmp_path: Path) -> None:
    """The real loop and pinger: docker.down once Docker has failed 2 pings over >= 6 (fake) s, recorded
    daemon-wide and kept in conditions.json for the next daemon to resolve."""
    config = load_config(_config(tmp_path))
    clock = FakeClock()
    docker = DockerAdapter(base_url=f"unix://{tmp_path}/no-docker.sock", timeout=2)
    daemon = build_daemon(config, clock, docker=docker)
    thread = threading.Thread(target=daemon.run, daemon=True)
    thread.start()
    try:
        client = ControlClient(config.socket_path, timeout=5)

        def alerts() -> list[dict[str, Any]]:
            try:
                events = client.call("events", n=200)["data"]["events"]
            except ControlError:
                return []
            return [e for e in events if e["name"] == "alert.raised"]

        def not_answering_event() -> bool:
            try:
                events = client.call("events", n=200)["data"]["events"]
            except ControlError:
                return False
            return any(e["name"] == "docker.not_answering" for e in events)

        wait_for(not_answering_event, 15, message="docker.not_answering")
        assert alerts() == []  # one failed ping is no news
        clock.advance(10)
        [raised] = wait_for(alerts, 20, message="the docker.down alert")
        assert raised["profile"] == ""
        assert raised["fields"]["kind"] == "docker.down"
        assert raised["fields"]["condition"] == "docker"
        clock.advance(10)

        def failed_pings() -> int:
            return int(client.call("status")["data"]["daemon"]["docker"]["failed_pings"])

        pings = failed_pings()
        wait_for(lambda: failed_pings() >= pings + 2, 20, message="two more failed pings")
        assert len(alerts()) == 1  # still one alert for the outage
    finally:
        daemon.request_stop()
        thread.join(20)
    saved = json.loads((tmp_path / "state" / "conditions.json").read_text(encoding="utf-8"))
    assert [(r["profile"], r["condition"], r["kind"]) for r in saved["raised"]] == [
        ("", "docker", "docker.down")
    ]
