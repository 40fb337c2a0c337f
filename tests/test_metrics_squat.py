"""A squatter on the metrics port (a process that may serve fake metrics) is a warning alert and a status
field, and the endpoint binds once the port is free (issue 39 item 9). A daemon in-process on a fake clock
(no Docker, as test_daemon_inprocess), with a real socket holding its metrics port."""

from __future__ import annotations

import socket
import threading
from pathlib import Path
from typing import Any

import requests

from supervisor.adapters.control.client import ControlClient
from supervisor.adapters.docker.adapter import DockerAdapter
from supervisor.config import load_config
from supervisor.core.clock import FakeClock
from supervisor.core.errors import ControlError
from supervisor.daemon import build_daemon
from tests.harness import free_port, wait_for
from tests.test_daemon_inprocess import _config


def test_a_squatted_metrics_port_is_alerted_and_shown_until_it_is_free(tmp_path: Path) -> None:
    port = free_port()
    squatter = socket.socket()
    squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    squatter.bind(("127.0.0.1", port))
    squatter.listen(1)
    path = _config(tmp_path)
    path.write_text(path.read_text(encoding="utf-8") + f"metrics: {{listen: '127.0.0.1:{port}'}}\n", "utf-8")
    config = load_config(path)
    daemon = build_daemon(config, FakeClock(), docker=DockerAdapter(base_url=f"unix://{tmp_path}/no.sock"))
    assert daemon.parts.sources.metrics is not None
    daemon.parts.sources.metrics.retry_every_s = 0.2
    thread = threading.Thread(target=daemon.run, daemon=True)
    thread.start()
    try:
        client = ControlClient(config.socket_path, timeout=5)

        def shown() -> dict[str, Any] | None:
            try:
                field = client.call("status")["data"]["daemon"].get("metrics")
            except ControlError:
                return None
            return field if isinstance(field, dict) and field.get("error") else None

        field = wait_for(shown, 15, message="daemon.metrics.error in status")
        assert field["serving"] is False
        assert "Address already in use" in field["error"]

        def taken() -> list[dict[str, Any]]:
            events = client.call("events", n=200)["data"]["events"]
            return [
                e
                for e in events
                if e["name"] == "alert.raised" and e["fields"]["kind"] == "metrics.port_taken"
            ]

        [alert] = wait_for(taken, 15, message="the metrics.port_taken alert")
        assert alert["fields"]["severity"] == "warning"
        squatter.close()
        wait_for(lambda: client.call("status")["data"]["daemon"]["metrics"]["serving"], 30, message="bound")
        assert client.call("status")["data"]["daemon"]["metrics"]["error"] is None
        assert requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).status_code == 200
        assert len(taken()) == 1  # once for the streak, not once per retry
    finally:
        squatter.close()
        daemon.request_stop()
        thread.join(20)
