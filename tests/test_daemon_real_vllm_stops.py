"""End to end on the REAL vLLM server (CPU build, tiny model): the memory guard during a load ends it within
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
from tests.real_faults import worker_overlay

pytestmark = [pytest.mark.docker, pytest.mark.real_vllm, pytest.mark.slow]

#: The worker overlay that holds the load in its engine's initialisation (tests/real_faults.worker_overlay).
INIT = "    def determine_available_memory(self) -> int:\n"
HELD = "[vsup-overlay] load held in determine_available_memory"
HOLD = f"        import time as _t\n        print({HELD!r}, flush=True)\n        _t.sleep(600)\n"
#: The shipped profiles' planned grace (container.stop_timeout 120) and the emergency grace (10 s).
PLANNED_GRACE_S = 120
EMERGENCY_GRACE_S = 10


def test_real_vllm_memory_guard_during_the_load_ends_it_after_the_emergency_grace(
    tmp_path: Path, resources: Resources, base_image: str, real_vllm_paths: tuple[Path, Path]
) -> None:
    """The load runs until its engine initialises, and is held there by a worker overlay (the field's way
    of patching vLLM: ``determine_available_memory`` sleeps first, a long load as a big model's on the
    field's boxes; the tiny model's own load ended before the guard could trip once its children started
    by fork). The daemon is restarted with a memory guard whose minimum is above this box's MemAvailable:
    it adopts the loading container, the guard trips within 3 samples, and the container is SIGKILLed
    (exit 137) long before the 120 s planned grace a planned stop would have waited: the stop has the
    10 s emergency grace, and the guard's next low samples escalate it to a kill at once (3 s after the
    trip here). With both taken away (the planned grace, no escalation) the test fails (2026-12-05); with
    either one left it passes, as it should."""
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
    mounts = [*spec.extra_container["mounts"], worker_overlay(tmp_path, venv, INIT, HOLD)]
    spec.extra_container = {**spec.extra_container, "mounts": mounts}
    profile = write_profile(tmp_path, spec, resources.test_id)
    config = write_daemon_config(tmp_path, [profile], breaker_limit=1)
    d = DaemonProc(config, tmp_path)
    try:
        d.start()
        d.wait_state("real", "STARTING", 60)
        container = wait_for(lambda: _container(resources, spec.container), 60, message="the container")
        wait_for(
            lambda: HELD.encode() in container.logs(), 300, interval=0.2, message="the load held in init"
        )
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
        # gone while a planned stop would still wait (its SIGKILL comes 120 s after the SIGTERM): the
        # emergency grace (10 s) or the guard's escalation ended it
        wait_for(
            lambda: _exited(container),
            PLANNED_GRACE_S - 30,
            interval=0.2,
            message="the load gone within 90 s",
        )
        gone_s = time.time() - tripped
        code = container.attrs["State"]["ExitCode"]
        print(
            f"real vLLM: memory guard -> container gone {gone_s:.1f} s, exit {code},"
            f" ready before the trip: {ready_before}"
        )
        assert not ready_before  # the overlay holds the load: it cannot have ended
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
