"""``supervisorctl init CONTAINER`` / ``uninit``: from a running container to a supervised service and back.

The plan is pure (supervisor/offline/init_plan.py); this module gathers the facts (``docker inspect``,
the device tree, ``nvidia-smi``, MemTotal, the installed package), compares the plan with the disk, and
applies it: files (0600 for secrets, from the first byte), ``docker update --restart no``, check-config,
``systemctl enable --now``, then waits until the daemon adopted the *same* container. A file that exists
with other content is never replaced without ``--force`` (then the old one is kept as ``NAME.bak.STAMP``);
a file with the planned content is left alone, so a second run changes nothing. Secrets are never printed.
"""

from __future__ import annotations

import importlib.resources
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import supervisor
from supervisor.adapters.docker.adapter import DockerAdapter
from supervisor.adapters.host.system import MEMINFO, read_meminfo
from supervisor.core.errors import SupervisorError
from supervisor.offline.box import BoxFacts, detect_box
from supervisor.offline.init_plan import (
    UNIT,
    UNITS,
    InitOptions,
    Install,
    Plan,
    PlannedFile,
    build_plan,
)
from supervisor.offline.snapshot import read_spec, write_private

DEVICE_TREE_MODELS = (Path("/proc/device-tree/model"), Path("/sys/firmware/devicetree/base/model"))
STATE_DIR = Path("/var/lib/vllm-supervisor")
GIB = 1024**3
Say = Callable[[str], None]


class InitError(SupervisorError):
    """init/uninit cannot go on (the message says why and what to do)."""


# ---- facts ---------------------------------------------------------------------------------------------
def box_facts() -> BoxFacts:
    """The device-tree model, the GPU names ``nvidia-smi`` lists and MemTotal (each may be unknown)."""
    model = None
    for path in DEVICE_TREE_MODELS:
        try:
            model = path.read_bytes().decode("utf-8", "replace").replace("\x00", "").strip() or None
            break
        except OSError:
            continue
    gpus: tuple[str, ...] = ()
    try:
        proc = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        if proc.returncode == 0:
            gpus = tuple(line.strip() for line in proc.stdout.splitlines() if line.strip())
    except (OSError, subprocess.TimeoutExpired):
        pass
    try:
        total = read_meminfo(MEMINFO).get("MemTotal")
    except SupervisorError:
        total = None
    return BoxFacts(model, gpus, round(total / GIB, 2) if total else None)


def current_install() -> Install:
    """The package's own commands: its venv's scripts, else ``python -m`` with the checkout on PYTHONPATH."""
    pkg = Path(supervisor.__file__).resolve().parent
    bindir = Path(sys.executable).parent
    installed = pkg.is_relative_to(Path(sys.prefix).resolve())
    daemon, ctl = bindir / "vllm-supervisor", bindir / "supervisorctl"
    if installed and daemon.exists() and ctl.exists():
        return Install(str(daemon), str(ctl))
    return Install(
        f"{sys.executable} -m supervisor",
        f"{sys.executable} -m supervisor.cli.main",
        None if installed else str(pkg.parent),
    )


def shipped_units() -> dict[str, str]:
    """The unit files shipped inside the package (supervisor/data/systemd/)."""
    base = importlib.resources.files("supervisor") / "data" / "systemd"
    return {u: (base / u).read_text(encoding="utf-8") for u in UNITS}


# ---- files ---------------------------------------------------------------------------------------------
def file_state(f: PlannedFile) -> str:
    """``new``, ``same`` (content and mode), or ``differs``."""
    try:
        text = f.path.read_text(encoding="utf-8")
        mode = f.path.stat().st_mode & 0o777
    except FileNotFoundError:
        return "new"
    except (OSError, UnicodeDecodeError):
        return "differs"
    return "same" if text == f.text and mode == f.mode else "differs"


def write_file(f: PlannedFile, force: bool, stamp: str) -> str:
    """Write one planned file; the old one is kept as ``NAME.bak.STAMP`` when it differed (``force``)."""
    state = file_state(f)
    if state == "same":
        return state
    if state == "differs":
        if not force:
            raise InitError(f"{f.path} exists with other content: run again with --force (a backup is kept)")
        backup = f.path.with_name(f"{f.path.name}.bak.{stamp}")
        os.replace(f.path, backup)
    f.path.parent.mkdir(mode=0o700 if f.secret else 0o755, parents=True, exist_ok=True)
    write_private(f.path, f.text.encode("utf-8"))  # 0600 from the first byte ...
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


def gather(docker: DockerAdapter, container: str, opts: InitOptions) -> Facts:
    status = docker.status(container)
    if status is None or not status.running:
        raise InitError(f"container {container} is not running: init supervises a running container")
    spec, _, _ = read_spec(docker, container)
    plan = build_plan(
        spec, detect_box(box_facts()), opts, shipped_units(), current_install(), status.restart_policy
    )
    return Facts(status.id, status.restart_policy, plan)


def print_plan(facts: Facts, say: Say) -> None:
    for note in facts.plan.notes:
        say(note)
    for f in facts.plan.files:
        state = file_state(f)
        say(f"{state:8} {f.path} (mode {f.mode:04o})")
        if state != "same":
            say(f"         <{len(f.text)} bytes of secret>" if f.secret else _indent(f.text))


def _indent(text: str) -> str:
    return "".join(f"         | {line}\n" for line in text.splitlines()).rstrip("\n")


def init(
    container: str,
    opts: InitOptions,
    *,
    dry_run: bool,
    force: bool,
    wait_s: float,
    socket: Path,
    say: Say,
) -> int:
    """Plan, then (unless ``dry_run``) apply; 0 when the daemon runs the same container."""
    docker = DockerAdapter()
    try:
        facts = gather(docker, container, opts)
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


# ---- uninit --------------------------------------------------------------------------------------------
def uninit(opts: InitOptions, *, remove_config: bool, remove_state: bool, say: Say) -> int:
    """Disable and remove the unit (the model container keeps running); remove config/state if asked."""
    try:
        active, enabled = systemctl_state(UNIT)
        if active == "active" or enabled == "enabled":
            run(["systemctl", "disable", "--now", UNIT], say)  # the daemon stops; the model does not
        for u in UNITS:
            path = opts.unit_dir / u
            if path.exists():
                say(f"removing {path}")
                path.unlink()
        run(["systemctl", "daemon-reload"], say, check=False)
        for flag, path in ((remove_config, opts.etc), (remove_state, STATE_DIR)):
            if flag and path.exists():
                say(f"removing {path}")
                shutil.rmtree(path)
            elif path.exists():
                say(f"kept {path} (--remove-{'config' if path == opts.etc else 'state'} removes it)")
    except (SupervisorError, OSError) as exc:
        say(f"uninit: {exc}")
        return 1
    say("the model container keeps running, unsupervised, with Docker restart policy 'no'")
    return 0
