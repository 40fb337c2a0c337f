"""``supervisorctl uninit [NAME]``: take one profile out of supervision, or the whole service.

``uninit NAME`` with other profiles left: the daemon config loses NAME (the old one kept as
``daemon.yaml.bak.STAMP``), NAME's files move to ``removed/NAME.STAMP/`` (0700: its key is there), then
``systemctl reload`` (the daemon re-reads its profiles and leaves the removed one's container running,
unsupervised) and a wait until ``status`` no longer lists it. ``uninit`` (or NAME being the last profile):
``systemctl disable --now`` (the daemon stops; the model containers keep running: they are dockerd's),
both unit files removed, ``daemon-reload``; the config and state are kept unless ``--remove-config`` /
``--remove-state``.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from supervisor.core.errors import SupervisorError
from supervisor.offline import bash_suite
from supervisor.offline.init import run, systemctl_state, write_file
from supervisor.offline.init_config import listed, without_profile
from supervisor.offline.init_facts import InitError, read_text
from supervisor.offline.init_types import UNIT, UNITS, InitOptions, PlannedFile

STATE_DIR = Path("/var/lib/vllm-supervisor")
Say = Callable[[str], None]


def _profile_files(etc: Path, name: str) -> list[Path]:
    profiles = etc / "profiles"
    out = [profiles / f"{name}.yaml", profiles / f"{name}.env", profiles / "secrets" / f"{name}.key"]
    return [p for p in (*out, profiles / f"{name}.files") if p.exists()]


def _wait_gone(socket: Path, name: str, timeout_s: float) -> list[str]:
    """Poll ``status`` until NAME is not listed; the profiles still listed."""
    from supervisor.adapters.control.client import ControlClient
    from supervisor.core.errors import ControlError

    client = ControlClient(socket, timeout=10.0)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            data = client.call("status").get("data")
            names = [str(p.get("name")) for p in (data or {}).get("profiles") or []]
            if name not in names:
                return names
        except ControlError:
            pass
        if time.monotonic() > deadline:
            raise InitError(f"the daemon still lists {name} after {timeout_s:g} s")
        time.sleep(0.5)


def uninit_profile(opts: InitOptions, name: str, socket: Path, say: Say) -> int | None:
    """Remove one profile; None when it is the last one (the caller removes the whole service)."""
    config = opts.etc / "daemon.yaml"
    try:
        text = read_text(config)
    except FileNotFoundError:
        raise InitError(f"{config} does not exist: nothing to uninit") from None
    new, was = without_profile(text, name)
    if not was:
        raise InitError(f"profile {name} is not in {config} (it lists: {', '.join(listed(text)) or 'none'})")
    if not listed(new):
        return None
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    say(f"removing profile {name} from {config} (the old one kept as daemon.yaml.bak.{stamp})")
    write_file(PlannedFile(config, new, config.stat().st_mode & 0o777, replaces=text), False, stamp)
    aside = opts.etc / "removed" / f"{name}.{stamp}"
    for path in _profile_files(opts.etc, name):
        aside.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(aside.parent, 0o700)
        say(f"moving {path} -> {aside}/")
        shutil.move(str(path), str(aside / path.name))
    from supervisor.config import cli_check_config

    if cli_check_config(config) != 0:
        raise InitError(f"{config} does not pass check-config (the problems are above)")
    if systemctl_state(UNIT)[0] == "active":
        run(["systemctl", "reload", UNIT], say)  # re-reads the profiles; the removed one's container runs on
        left = _wait_gone(socket, name, 60.0)
        say(f"still supervised: {', '.join(left)}")
    say(f"the container of {name} keeps running, unsupervised (Docker restart policy 'no')")
    return 0


def uninit(
    opts: InitOptions,
    *,
    remove_config: bool,
    remove_state: bool,
    say: Say,
    name: str | None = None,
    socket: Path | None = None,
) -> int:
    """Remove profile ``name`` (module docstring), else disable and remove the unit."""
    try:
        if name is not None:
            code = uninit_profile(opts, name, socket or Path("/run/vllm-supervisor/control.sock"), say)
            if code is not None:
                return code
            say(f"{name} is the last profile: removing the service")
        active, enabled = systemctl_state(UNIT)
        if active == "active" or enabled == "enabled":
            run(["systemctl", "disable", "--now", UNIT], say)  # the daemon stops; the model does not
        for u in UNITS:
            path = opts.unit_dir / u
            if path.exists():
                say(f"removing {path}")
                path.unlink()
        run(["systemctl", "daemon-reload"], say, check=False)
        bash_suite.restore(opts.etc, say)  # what init disabled
        for flag, path in ((remove_config, opts.etc), (remove_state, STATE_DIR)):
            if flag and path.exists():
                say(f"removing {path}")
                shutil.rmtree(path)
            elif path.exists():
                say(f"kept {path} (--remove-{'config' if path == opts.etc else 'state'} removes it)")
    except (SupervisorError, OSError) as exc:
        say(f"uninit: {exc}")
        return 1
    say("the model containers keep running, unsupervised, with Docker restart policy 'no'")
    return 0
