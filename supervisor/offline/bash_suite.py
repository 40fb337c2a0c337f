"""The bash supervisor suite ``init`` replaces (MiaAI-Lab's ``supervise.sh``, docs/field-notes.md "The bash
suite"): find it, disable it, and give it back on ``uninit``.

Two restarters on one model fight (and the suite's launcher begins with ``docker rm -f``, which removes
the container the daemon adopted), so ``init`` disables what it finds:

* a **systemd unit** (system, or a user's under ``~/.config/systemd/user/``) whose ``ExecStart=`` runs
  ``supervise.sh``: a system unit by ``systemctl disable --now``; a user unit by moving its file aside
  (``NAME.disabled-by-vllm-supervisor``) and stopping it with ``systemctl --user -M USER@``;
* a **cron line** running ``supervise.sh`` (``/etc/crontab``, ``/etc/cron.d/*``,
  ``/var/spool/cron/crontabs/*``): commented out with the marker :data:`MARK`.

What was done is recorded in ``CONFIG_DIR/bash-suite.json``; ``uninit`` (the whole service) undoes it.
The finding is pure (:func:`find`), the rest small I/O.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Final

#: What names the suite (its script; the seeds call it supervise.sh).
SCRIPT: Final = re.compile(r"(^|[\s/'\"=])supervise\.sh\b")
MARK: Final = "#disabled-by-vllm-supervisor-init# "
RECORD: Final = "bash-suite.json"
DISABLED_SUFFIX: Final = ".disabled-by-vllm-supervisor"
Say = Callable[[str], None]


@dataclass(frozen=True)
class Finding:
    """One way the suite runs: a unit file or a cron line."""

    kind: str  # "unit" | "user-unit" | "cron"
    path: str
    line: str  # the ExecStart= or cron line that runs the script
    user: str | None = None  # the owner of a user unit


def find(units: Mapping[str, str], crontabs: Mapping[str, str]) -> list[Finding]:
    """The units whose ExecStart runs the script and the active cron lines that do (pure)."""
    out = []
    for path, text in sorted(units.items()):
        for line in text.splitlines():
            if line.strip().startswith("ExecStart=") and SCRIPT.search(line):
                parts = Path(path).parts
                if ".config" in parts:  # ~USER/.config/systemd/user/NAME.service
                    user = parts[parts.index("home") + 1] if "home" in parts else "root"
                    out.append(Finding("user-unit", path, line.strip(), user))
                else:
                    out.append(Finding("unit", path, line.strip()))
                break
    for path, text in sorted(crontabs.items()):
        for line in text.splitlines():
            if not line.lstrip().startswith("#") and SCRIPT.search(line):
                out.append(Finding("cron", path, line))
    return out


def _read_all(paths: Iterable[Path]) -> dict[str, str]:
    out = {}
    for p in paths:
        try:
            if p.is_file():
                out[str(p)] = p.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
    return out


def scan(root: Path = Path("/")) -> list[Finding]:
    """Look for the suite on this host (``root``: a test's stand-in for /)."""
    units = [*root.glob("etc/systemd/system/*.service"), *root.glob("home/*/.config/systemd/user/*.service")]
    units += root.glob("root/.config/systemd/user/*.service")
    crons = [root / "etc/crontab", *root.glob("etc/cron.d/*"), *root.glob("var/spool/cron/crontabs/*")]
    return find(_read_all(units), _read_all(crons))


def _systemctl(argv: list[str], say: Say) -> None:
    say("$ " + " ".join(argv))
    try:
        subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        say(f"  ({exc})")


def _edit_cron(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    path.write_text(text.replace(old + "\n", new + "\n", 1), encoding="utf-8")


def disable(findings: list[Finding], etc: Path, say: Say) -> None:
    """Disable each finding (module docstring) and record it for :func:`restore`."""
    if not findings:
        return
    say(
        "found the bash supervisor suite (supervise.sh): disabling it, two restarters would fight over one "
        "model and its launcher's `docker rm -f` removes the container vllm-supervisor adopted; "
        "`supervisorctl uninit` gives it back"
    )
    for f in findings:
        if f.kind == "unit":
            _systemctl(["systemctl", "disable", "--now", Path(f.path).name], say)
        elif f.kind == "user-unit":
            Path(f.path).rename(f.path + DISABLED_SUFFIX)
            say(f"moved {f.path} -> {f.path}{DISABLED_SUFFIX}")
            if f.user:
                _systemctl(["systemctl", "--user", "-M", f"{f.user}@", "stop", Path(f.path).name], say)
        else:
            _edit_cron(Path(f.path), f.line, MARK + f.line)
            say(f"commented out in {f.path}: {f.line}")
    etc.mkdir(parents=True, exist_ok=True)
    (etc / RECORD).write_text(json.dumps([asdict(f) for f in findings], indent=2) + "\n", encoding="utf-8")


def restore(etc: Path, say: Say) -> None:
    """Undo what :func:`disable` recorded (uninit of the whole service)."""
    record = etc / RECORD
    try:
        findings = [Finding(**d) for d in json.loads(record.read_text(encoding="utf-8"))]
    except (OSError, ValueError, TypeError):
        return
    say("giving the bash supervisor suite back (it was disabled by init)")
    for f in findings:
        if f.kind == "unit":
            _systemctl(["systemctl", "enable", "--now", Path(f.path).name], say)
        elif f.kind == "user-unit":
            moved = Path(f.path + DISABLED_SUFFIX)
            if moved.exists():
                moved.rename(f.path)
                say(f"moved {moved} -> {f.path} (start it again as {f.user}: systemctl --user start)")
        else:
            _edit_cron(Path(f.path), MARK + f.line, f.line)
            say(f"restored in {f.path}: {f.line}")
    record.unlink()
