"""End to end on the REAL vLLM server (CPU build, tiny model): the memory guard during a load ends it after
the emergency grace, not the planned stop grace (real vLLM 0.32 loses a SIGTERM while its engine initialises:
docs/vllm-facts.md "SIGTERM")."""

from __future__ import annotations

import time
from pathlib import Path

import docker
import pytest
from docker.models.containers import Container

from tests.conftest import Resources
from tests.daemon_harness import DaemonProc, real_vllm_spec, write_daemon_config, write_profile
from tests.harness import wait_for

pytestmark = [pytest.mark.docker, pytest.mark.real_vllm, pytest.mark.slow]

#: The shipped profiles' planned grace (container.stop_timeout 120) and the emergency grace (10 s).
PLANNED_GRACE_S = 120
EMERGENCY_GRACE_S = 10


def test_real_vllm_memory_guard_during_the_load_ends_it_after_the_emergency_grace(
    tmp_path: Path, resources: Resources, base_image: str, real_vllm_paths: tuple[Path, Path]
) -> None:
    """The load runs until its engine core initialises (guard off); the daemon is restarted with a memory
    guard whose minimum is above this box's MemAvailable: it adopts the loading container, the guard trips
    within 3 samples, and the container is gone after the 10 s emergency grace (SIGKILL, exit 137), long
    before the 120 s planned grace a planned stop would have waited."""
    venv, model = real_vllm_paths
    spec = real_vllm_spec(
        "real",
        resources.name("real"),
        base_image,
        venv,
        model,
        adopt_grace_s=400.0,
        stop_timeout=PLANNED_GRACE_S,
        extra={
            "stop": {
                "drain_timeout_s": 60,
                "grace_s": PLANNED_GRACE_S,
                "emergency_grace_s": EMERGENCY_GRACE_S,
            }
        },
    )
    profile = write_profile(tmp_path, spec, resources.test_id)
    config = write_daemon_config(tmp_path, [profile], breaker_limit=1)
    d = DaemonProc(config, tmp_path)
    try:
        d.start()
        d.wait_state("real", "STARTING", 60)
        container = wait_for(lambda: _container(resources, spec.container), 60, message="the container")
        wait_for(lambda: b"EngineCore" in container.logs(), 300, interval=0.2, message="engine init begun")
        assert b"Application startup complete." not in container.logs()
        d.terminate()  # leaves the model loading (a daemon restart never bounces it)
        guard = {"enabled": True, "mem_available_min_gib": 4000, "samples": 3}
        host = {"drop_caches": False, "load_lock_path": str(tmp_path / "load.lock"), "memory_guard": guard}
        config = write_daemon_config(tmp_path, [profile], breaker_limit=1, extra={"host": host})
        d = DaemonProc(config, tmp_path)
        d.start()
        pressure = wait_for(
            lambda: next((e for e in d.events("real") if e["name"] == "memory.pressure"), None),
            60,
            interval=0.2,
            message="memory.pressure during the load",
        )
        tripped = float(pressure["ts"])  # the daemon's wall clock, as time.time() here
        container.reload()
        ready_before = b"Application startup complete." in container.logs()
        wait_for(lambda: _exited(container), PLANNED_GRACE_S + 30, interval=0.2, message="the load gone")
        gone_s = time.time() - tripped
        code = container.attrs["State"]["ExitCode"]
        print(
            f"real vLLM: memory guard -> container gone {gone_s:.1f} s, exit {code},"
            f" ready before the trip: {ready_before}"
        )
        assert not ready_before, "the guard tripped after the load; rerun on a quieter box"
        assert code == 137  # the SIGKILL after the emergency grace ended it: the SIGTERM was lost
        # the failed start's ledger row follows once the start is diagnosed (the kernel ring is read first)
        starts = wait_for(lambda: d.call("history", name="real", n=5)["data"]["starts"], 30, message="row")
        assert starts[-1]["outcome"] == "failed_memory_guard"
    finally:
        d.close()


def _container(resources: Resources, name: str) -> Container | None:
    try:
        return resources.client.containers.get(name)
    except docker.errors.NotFound:
        return None


def _exited(container: Container) -> bool:
    container.reload()
    return container.status in ("exited", "dead")
