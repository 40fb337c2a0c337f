"""The real vLLM 0.32 CPU server (tiny model) with the fault overlay tools/overlays/faults, for the
real-vLLM judgements (tests/test_daemon_real_judgements.py, tests/test_daemon_real_vllm_failed_starts.py).

The overlay is laid on the server's ``PYTHONPATH`` (mounted read-only, as the field lays patches over the
image); a trigger directory is mounted read-write at ``/vsup-trigger``. A file there sets a fault off:
``die`` (the next engine-core step SIGKILLs its process) or ``freeze`` (a step with at least as many
requests running as the file says sleeps for ever, and the API server ignores SIGTERM from the moment the
file appears). docs/vllm-facts.md "Engine faults by overlay" says what vLLM 0.32 then does."""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path
from typing import Any

from supervisor.core.settings.profile import ProbeConfig
from tests.daemon_harness import ROOT, ProfileSpec, real_vllm_spec

OVERLAY = ROOT / "tools" / "overlays" / "faults"
#: vLLM's CPU worker, relative to the venv: the file the field-style file overlays patch.
WORKER = "lib/python3.11/site-packages/vllm/v1/worker/cpu_worker.py"
#: Lines the overlay prints (tools/overlays/faults/vsup_faults.py).
SIGTERM_IGNORED = "[vsup-overlay] SIGTERM ignored from now on"
FROZEN = "frozen in a step"


def trigger_dir(parent: Path) -> Path:
    """A world-writable directory for the triggers (the container's user may differ from the test's)."""
    d = Path(tempfile.mkdtemp(prefix="vsup-faults-", dir=parent))
    d.chmod(0o777)
    return d


def arm(triggers: Path, fault: str, text: str = "") -> None:
    """Set ``fault`` ("die" or "freeze") off: the file the overlay polls."""
    (triggers / fault).write_text(text, encoding="utf-8")


def disarm(triggers: Path, fault: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        (triggers / fault).unlink()


def faults_spec(
    name: str, container: str, base_image: str, venv: Path, model: Path, triggers: Path, **kw: Any
) -> ProfileSpec:
    """A profile of the tiny real vLLM with the fault overlay and the shipped probe defaults (5 s rounds,
    timeout 30 s, 4 failures, first-step floor 120 s; freeze 15 s and the emergency grace 10 s are not
    written, so the daemon's own defaults apply). ``kw`` overrides any field."""
    from tools.realvllm import MODEL_MOUNT

    shipped = ProbeConfig()
    mounts = [f"{venv}:{venv}:ro", f"{model}:{MODEL_MOUNT}:ro", f"{OVERLAY}:/vsup-overlay:ro"]
    mounts.append(f"{triggers}:/vsup-trigger:rw")
    fields: dict[str, Any] = {
        "env": {"VLLM_CPU_KVCACHE_SPACE": "1", "PYTHONPATH": "/vsup-overlay"},
        "interval_s": shipped.interval_s,
        "probe_timeout_s": shipped.timeout_s,
        "failure_threshold": shipped.failure_threshold,
        "stall_after_s": shipped.stall_after_s,
        "extra_container": {"shm_size": "1g", "mounts": mounts},
        **kw,
    }
    return real_vllm_spec(name, container, base_image, venv, model, **fields)


def worker_overlay(tmp: Path, venv: Path, anchor: str, body: str) -> str:
    """A copy of the venv's ``cpu_worker.py`` with ``body`` right after the line ``anchor``, as a mount
    over the original (``src:dst:ro``): the way the field patches vLLM, by a file laid over the image's."""
    original = (venv / WORKER).read_text(encoding="utf-8")
    assert anchor in original, "vLLM's cpu_worker.py changed: the overlay needs a new anchor"
    patched = tmp / "cpu_worker.py"
    patched.write_text(original.replace(anchor, anchor + body, 1), encoding="utf-8")
    return f"{patched}:{venv / WORKER}:ro"
