"""``init --hardware-watchdog SECONDS`` and ``uninit``: systemd's manager drop-in that arms the hardware
watchdog (docs/wedge.md "Wedge insurance"), and the one line ``check-config`` and ``init`` print about it.

Idempotent: the same content again changes nothing; a file of ours with another value is replaced; a file by
that name that is not ours is refused. The manager reads it on ``systemctl daemon-reexec`` (PID 1 re-executes
itself; services keep running).
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

from supervisor.adapters.host.watchdog import SYSTEMD_CONF_D, facts
from supervisor.core.host.watchdog import DROPIN_NAME, MARKER, dropin, verdict

Say = Callable[[str], None]
REEXEC: tuple[str, ...] = ("systemctl", "daemon-reexec")


def watchdog_line() -> str:
    """Whether a hardware watchdog will reset this host if it wedges (one line)."""
    return verdict(facts())[1]


def _reexec(say: Say, argv: tuple[str, ...]) -> None:
    say("$ " + " ".join(argv))
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        say(f"note: {argv[0]} did not run ({exc}): the drop-in applies at the next boot")
        return
    if done.returncode != 0:
        why = (done.stderr or done.stdout).strip()[:200]
        say(f"note: {' '.join(argv)} exited {done.returncode} ({why}): the drop-in applies at the next boot")


def install(seconds: int, say: Say, conf_dir: Path = SYSTEMD_CONF_D, reexec: tuple[str, ...] = REEXEC) -> int:
    """Write the drop-in arming the watchdog at ``seconds`` and have systemd read it; 0 on success."""
    try:
        text = dropin(seconds)
    except ValueError as exc:
        say(str(exc))
        return 2
    path = conf_dir / DROPIN_NAME
    try:
        old = path.read_text(encoding="utf-8") if path.exists() else None
    except OSError as exc:
        say(f"cannot read {path}: {exc}")
        return 1
    if old == text:
        say(f"{path}: unchanged (RuntimeWatchdogSec={seconds}s)")
        return 0
    if old is not None and not old.startswith(MARKER):
        say(f"refusing: {path} exists and was not written by vllm-supervisor")
        return 1
    try:
        conf_dir.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.chmod(0o644)
        tmp.replace(path)
    except OSError as exc:
        say(f"cannot write {path}: {exc}")
        return 1
    say(f"wrote {path}: RuntimeWatchdogSec={seconds}s (a wedged host is reset within {seconds} s)")
    _reexec(say, reexec)
    return 0


def remove(say: Say, conf_dir: Path = SYSTEMD_CONF_D, reexec: tuple[str, ...] = REEXEC) -> int:
    """Remove the drop-in when it is ours (``uninit``); 0 also when there is none."""
    path = conf_dir / DROPIN_NAME
    try:
        if not path.exists():
            return 0
        if not path.read_text(encoding="utf-8").startswith(MARKER):
            say(f"kept {path}: not written by vllm-supervisor")
            return 0
        say(f"removing {path}")
        path.unlink()
    except OSError as exc:
        say(f"cannot remove {path}: {exc}")
        return 1
    _reexec(say, reexec)
    return 0
