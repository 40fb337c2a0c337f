"""Free space on the state directory, end to end on a real file system: an in-process daemon whose
``host.state_dir_min_free_gib`` is above the real free space of the test's state directory warns once
(``state_dir.low``, a warning at a real local webhook, ``daemon.host.state_dir_free_gib`` in status); the
next daemon on the same state directory with the threshold below the real free space resolves it
(``state_dir.ok``): the raised flag was kept in ``fleet.json``. Daemon-wide keys apply on restart, so the
threshold is lowered by a restart, not a reload. No Docker: the profile is never looked at."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path
from typing import Any

from supervisor.adapters.docker.adapter import DockerAdapter
from supervisor.adapters.store.state import Store
from supervisor.config import load_config
from supervisor.core.clock import SystemClock
from supervisor.daemon import build_daemon
from tests.daemon_harness import write_daemon_config
from tests.harness import WebhookReceiver, unique_name, wait_for

GIB = 1024.0**3


def _config(tmp: Path, webhook: WebhookReceiver, min_free_gib: float) -> Path:
    profile = tmp / "p.yaml"
    profile.write_text(
        f"name: p\ncontainer:\n  name: {unique_name('disk')}\n  image: img:never\n", encoding="utf-8"
    )
    host = {
        "drop_caches": False,
        "load_lock_path": str(tmp / "load.lock"),
        "memory_guard": {"enabled": False, "sample_interval_s": 0.2},
        "state_dir_min_free_gib": min_free_gib,
    }
    channels = [{"kind": "generic", "name": "ops", "url": f"{webhook.url}/alert"}]
    return write_daemon_config(tmp, [profile], extra={"host": host, "alerts": {"channels": channels}})


def _run_until(tmp: Path, config: Path, event: str) -> dict[str, Any]:
    """Run a daemon until ``event`` is in the history; its status document then."""
    docker = DockerAdapter(base_url=f"unix://{tmp}/no-docker.sock", timeout=2)
    daemon = build_daemon(load_config(config), SystemClock(), docker=docker)
    thread = threading.Thread(target=daemon.run, daemon=True)
    thread.start()
    store = Store(tmp / "state")
    try:
        wait_for(lambda: event in [e["name"] for e in store.read_events("supervisor", 50)], 20, message=event)
        return wait_for(
            lambda: daemon.status() if "state_dir_free_gib" in daemon.status()["daemon"]["host"] else None, 10
        )
    finally:
        daemon.request_stop()
        thread.join(30)


def _alerts(webhook: WebhookReceiver) -> list[tuple[str, str]]:
    return [(a["severity"], a["title"]) for a in (r.json() for r in webhook.received())]


def test_low_free_space_warns_and_the_next_daemon_resolves_it(
    tmp_path: Path, webhook: WebhookReceiver
) -> None:
    (tmp_path / "state").mkdir()
    free = shutil.disk_usage(tmp_path / "state").free / GIB
    status = _run_until(tmp_path, _config(tmp_path, webhook, free + 1000.0), "state_dir.low")
    assert abs(status["daemon"]["host"]["state_dir_free_gib"] - free) < 5.0  # the real file system's figure
    wait_for(lambda: ("warning", "little free space on the state directory") in _alerts(webhook), 10)
    low = [e for e in Store(tmp_path / "state").read_events("supervisor", 50) if e["name"] == "state_dir.low"]
    assert len(low) == 1

    _run_until(tmp_path, _config(tmp_path, webhook, 0.001), "state_dir.ok")
    wait_for(lambda: ("info", "state directory has free space again") in _alerts(webhook), 10)
    names = [e["name"] for e in Store(tmp_path / "state").read_events("supervisor", 100)]
    assert names.count("state_dir.low") == 1
    assert names.count("state_dir.ok") == 1
