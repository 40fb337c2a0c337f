"""``supervisorctl init CONTAINER`` / ``uninit``: from a running container to a supervised service and back.

The plan is pure (supervisor/offline/init_plan.py); this module gathers the facts (``docker inspect``,
the device tree, ``nvidia-smi``, MemTotal, the installed package), compares the plan with the disk, and
applies it: files (0600 for secrets, from the first byte), ``docker update --restart no``, check-config,
``systemctl enable --now``, then waits until the daemon adopted the *same* container. A file that exists
with other content is never replaced without ``--force`` (then the old one is kept as ``NAME.bak.STAMP``);
a file with the planned content is left alone, so a second run changes nothing. Secrets are never printed.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from supervisor.adapters.docker.adapter import DockerAdapter
from supervisor.core.errors import SupervisorError
from supervisor.offline import bash_suite
from supervisor.offline.box import detect_box
from supervisor.offline.init_derive import tmp_binds
from supervisor.offline.init_facts import (
    InitError,
    box_facts,
    current_install,
    read_disk,
    read_text,
    shipped_units,
)
from supervisor.offline.init_install import install_problems
from supervisor.offline.init_plan import UNIT, InitOptions, Plan, PlannedFile, build_plan
from supervisor.offline.init_types import Disk
from supervisor.offline.snapshot import read_spec, write_private

Say = Callable[[str], None]
__all__ = ["InitError", "file_state", "init", "write_file"]


# ---- files ---------------------------------------------------------------------------------------------
def file_state(f: PlannedFile) -> str:
    """``new``, ``same`` (content and mode), ``update`` (the content the plan was made from: a second
    ``init`` adding its profile to the daemon config), or ``differs``."""
    try:
        text = read_text(f.path)
        mode = f.path.stat().st_mode & 0o777
    except FileNotFoundError:
        return "new"
    except OSError:
        return "differs"
    if text == f.text and mode == f.mode:
        return "same"
    return "update" if f.replaces is not None and text == f.replaces else "differs"


def write_file(f: PlannedFile, force: bool, stamp: str) -> str:
    """Write one planned file; the old one is kept as ``NAME.bak.STAMP`` when it differed (``force``)
    or is updated."""
    state = file_state(f)
    if state == "same":
        return state
    if state == "differs" and not force:
        raise InitError(f"{f.path} exists with other content: run again with --force (a backup is kept)")
    if state in ("differs", "update"):
        backup = f.path.with_name(f"{f.path.name}.bak.{stamp}")
        os.replace(f.path, backup)
    f.path.parent.mkdir(mode=0o700 if f.secret else 0o755, parents=True, exist_ok=True)
    write_private(f.path, f.text.encode("utf-8", "surrogateescape"))  # 0600 from the first byte ...
    os.chmod(f.path, f.mode)  # ... then the planned mode (0644 for what holds no secret)
    return state


# ---- commands ------------------------------------------------------------------------------------------
def run(argv: list[str], say: Say, check: bool = True) -> None:
    """Run one command (printed first); InitError when it cannot run, or fails and ``check``."""
    say("$ " + " ".join(argv))
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:  # no systemctl on this host, or it hung
        raise InitError(f"{' '.join(argv[:2])}: {exc}") from exc
    if check and proc.returncode != 0:
        why = (proc.stderr or proc.stdout).strip()
        raise InitError(f"{' '.join(argv[:2])} exited {proc.returncode}: {why}")


def systemctl_state(unit: str) -> tuple[str, str]:
    """(``is-active``, ``is-enabled``) of ``unit`` (``unknown`` when systemctl does not answer)."""
    out = []
    for verb in ("is-active", "is-enabled"):
        try:
            proc = subprocess.run(
                ["systemctl", verb, unit], capture_output=True, text=True, timeout=30, check=False
            )
            out.append(proc.stdout.strip() or "unknown")
        except (OSError, subprocess.TimeoutExpired):
            out.append("unknown")
    return out[0], out[1]


def wait_adopted(socket: Path, profile: str, container_id: str, timeout_s: float, say: Say) -> None:
    """Poll ``status`` until the profile is RUNNING in ``container_id``; InitError on a bounce, a timeout."""
    from supervisor.adapters.control.client import ControlClient
    from supervisor.core.errors import ControlError

    client = ControlClient(socket, timeout=10.0)
    deadline = time.monotonic() + timeout_s
    last = "the daemon did not answer"
    while time.monotonic() < deadline:
        try:
            reply = client.call("status", name=profile)
        except ControlError as exc:
            last = str(exc)
        else:
            data = reply.get("data") if isinstance(reply.get("data"), dict) else {}
            assert isinstance(data, dict)
            p = next((p for p in data.get("profiles") or [] if p.get("name") == profile), None)
            if p is not None:
                cid, state = p.get("container_id"), p.get("state")
                if cid and cid != container_id:
                    raise InitError(f"the daemon replaced container {container_id[:12]} by {str(cid)[:12]}")
                if cid == container_id and state == "RUNNING":
                    say(f"adopted: {profile} RUNNING in the same container {container_id[:12]}")
                    return
                last = f"{profile} is {state} ({str(cid or '-')[:12]})"
        time.sleep(1.0)
    raise InitError(f"not adopted within {timeout_s:g} s: {last}")


# ---- init ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Facts:
    """What init read before planning."""

    container_id: str
    restart_policy: str
    plan: Plan


def gather(docker: DockerAdapter, container: str, opts: InitOptions, fresh: bool = False) -> Facts:
    """``fresh``: plan a new daemon config even when one exists (--force replaces it)."""
    status = docker.status(container)
    if status is None or not status.running:
        raise InitError(f"container {container} is not running: init supervises a running container")
    spec, _, _ = read_spec(docker, container)
    disk = read_disk([m.source for m in tmp_binds(spec)], opts)
    if fresh:
        disk = Disk(None, disk.tmp)
    plan = build_plan(
        spec, detect_box(box_facts()), opts, shipped_units(), current_install(), status.restart_policy, disk
    )
    return Facts(status.id, status.restart_policy, plan)


def print_plan(facts: Facts, say: Say) -> None:
    for note in facts.plan.notes:
        say(note)
    for f in facts.plan.files:
        state = file_state(f)
        say(f"{state:8} {f.path} (mode {f.mode:04o})")
        if state == "same":
            continue
        if f.shown is not None:
            say(_indent(f.shown))
        elif f.secret:
            say(f"         <{len(f.text)} bytes of secret>")
        else:
            say(_indent(f.text))


def _indent(text: str) -> str:
    return "".join(f"         | {line}\n" for line in text.splitlines()).rstrip("\n")


def check_install(allow_user_install: bool, say: Say) -> bool:
    """False (after saying why) when the daemon would run from a path a non-root user can change."""
    problems = install_problems()
    if not problems:
        return True
    for why in problems:
        say(f"{'WARNING' if allow_user_install else 'refusing'}: {why}")
    if allow_user_install:
        say(
            "WARNING: the unit runs this daemon AS ROOT from a path another user can write: that user can "
            "make root run anything. Install it into a root-owned venv (docs/install.md) for a real box."
        )
        return True
    say(
        "refusing: the unit would run this daemon as root from a path a non-root user can write. Install it "
        "into a root-owned venv (docs/install.md: /opt/vllm-supervisor), or pass --allow-user-install"
    )
    return False


def _gather(docker: DockerAdapter, container: str, opts: InitOptions, force: bool) -> Facts:
    try:
        return gather(docker, container, opts)
    except SupervisorError as exc:
        if not force or "daemon config" not in str(exc):
            raise
        return gather(docker, container, opts, fresh=True)  # --force: a new config (the old one backed up)


def init(
    container: str,
    opts: InitOptions,
    *,
    dry_run: bool,
    force: bool,
    wait_s: float,
    socket: Path,
    say: Say,
    allow_user_install: bool = False,
) -> int:
    """Plan, then (unless ``dry_run``) apply; 0 when the daemon runs the same container."""
    if not check_install(allow_user_install or dry_run, say) and not dry_run:
        return 1
    docker = DockerAdapter()
    try:
        facts = _gather(docker, container, opts, force)
        plan = facts.plan
        print_plan(facts, say)
        changed = [f for f in plan.files if file_state(f) != "same"]
        clash = [f for f in changed if file_state(f) == "differs"]
        if clash and not force:
            for f in clash:
                say(f"refusing: {f.path} exists with other content (--force replaces it, keeping a backup)")
            return 1
        policy = facts.restart_policy not in ("no", "")
        active, enabled = ("unknown", "unknown") if dry_run else systemctl_state(UNIT)
        if dry_run:
            say("would run:")
            say(f"  supervisorctl check-config {plan.config}")
            if policy:
                say(f"  docker update --restart no {container}")
            say("  systemctl daemon-reload")
            say(f"  systemctl enable --now {UNIT}  (restart instead when it runs and a file changed)")
            for found in bash_suite.scan():
                say(f"  disable the bash supervisor suite: {found.kind} {found.path} ({found.line})")
            say(f"  wait until {plan.profile} is RUNNING in container {facts.container_id[:12]}")
            say("  supervisorctl status; supervisorctl test-alert")
            return 0
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        for f in changed:
            write_file(f, force, stamp)
        from supervisor.config import cli_check_config

        say(f"$ supervisorctl check-config {plan.config}")
        if cli_check_config(plan.config) != 0:
            raise InitError(f"{plan.config} does not pass check-config (the problems are above)")
        if policy:
            say(f"$ docker update --restart no {container}")
            docker.clear_restart_policy(facts.container_id)
            say(f"note: Docker restart policy {facts.restart_policy!r} -> 'no' (the supervisor restarts it)")
        bash_suite.disable(bash_suite.scan(), opts.etc, say)  # before our daemon starts: one restarter
        if any(f.path.parent == opts.unit_dir for f in changed):
            run(["systemctl", "daemon-reload"], say)
        if enabled != "enabled":
            run(["systemctl", "enable", UNIT], say)
        if active != "active":
            run(["systemctl", "start", UNIT], say)
        elif changed:
            run(["systemctl", "restart", UNIT], say)  # never bounces the model (it adopts it again)
        if not changed and active == "active":
            say("nothing changed")
        wait_adopted(socket, plan.profile, facts.container_id, wait_s, say)
    except (SupervisorError, OSError) as exc:  # OSError: a file the plan names cannot be written
        say(f"init {container}: {exc}")
        return 1
    finally:
        docker.close()
    return 0
