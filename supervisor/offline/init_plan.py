"""``supervisorctl init``'s plan, pure: from a snapshot of the running container to the files of a service.

:func:`build_plan` takes the container's spec (``supervisorctl snapshot``'s parser), the detected box, the
options and what is already on the disk (the daemon config, the files of bind sources under /tmp) and
returns every file with its text and mode; supervisor/offline/init.py compares them with the disk and
applies them. Secrets (supervisor/offline/init_secrets.py): the API key goes to
``profiles/secrets/NAME.key`` and back into the container through ``VLLM_API_KEY``; secret environment
values (by name or by value) to ``profiles/NAME.env``; alert URLs and signing secrets to
``alerts/CHANNEL.url`` / ``.secret``: all 0600. A secret the split cannot move (a second key, ``--hf-token``,
a key inside ``bash -c``) makes the profile itself 0600. The daemon config keeps the weekly maintenance
restart on (Sunday 04:00 local, as the bash suite), and a second ``init`` on the same box adds its
profile to the existing config. The text is deterministic: a second run plans the same bytes.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from supervisor.core.host.paths import ETC
from supervisor.core.spec.model import ContainerSpec, EnvVar
from supervisor.core.spec.secrets import Redactor
from supervisor.core.spec.shape import container_spec_to_yaml_dict
from supervisor.core.vllm.cmdline import API_KEY_ENV, API_KEY_FLAG, argv_of, gpu_memory_utilization
from supervisor.offline.box import Box, startup_section
from supervisor.offline.init_config import new_daemon_doc, to_yaml as _yaml, with_profile
from supervisor.offline.init_derive import derive_gates, derive_markers, overlays, tmp_binds
from supervisor.offline.init_secrets import (
    KEY_ARG,
    PLACEHOLDER,
    Secrets,
    split_secrets,
)
from supervisor.offline.init_types import (
    SHIPPED_CTL,
    SHIPPED_DAEMON,
    UNIT,
    UNITS,
    Channel,
    Disk,
    InitOptions,
    Install,
    Plan,
    PlannedFile,
)

_NAME_RE = re.compile(r"[^a-zA-Z0-9_.-]+")

__all__ = [
    "PLACEHOLDER",
    "UNIT",
    "UNITS",
    "Channel",
    "InitOptions",
    "Install",
    "Plan",
    "PlannedFile",
    "Secrets",
    "split_secrets",
]


def profile_name(container: str) -> str:
    """A valid profile name from a container name (``[a-zA-Z0-9][a-zA-Z0-9_.-]*``)."""
    name = _NAME_RE.sub("-", container).strip("-._")
    return name or "model"


def _env_file(env: tuple[EnvVar, ...]) -> str:
    from supervisor.offline.snapshot import format_env_file  # refuses a newline in a value

    return format_env_file(env)


def _tmp_copies(
    name: str, spec: ContainerSpec, disk: Disk, opts: InitOptions
) -> tuple[ContainerSpec, list[PlannedFile], list[str]]:
    """Bind sources under /tmp copied to ``profiles/NAME.files/`` and the spec pointing there."""
    files: list[PlannedFile] = []
    notes: list[str] = []
    moved: dict[str, str] = {}
    base = opts.etc / "profiles" / f"{name}.files"
    for i, m in enumerate(tmp_binds(spec)):
        got = disk.tmp.get(m.source)
        if not got:
            notes.append(
                f"bind source {m.source}: missing or unreadable, left as it is (the next start fails)"
            )
            continue
        dest = base / f"{i}-{Path(m.source).name or 'tmp'}"
        for f in got:
            path = dest / f.relative if f.relative else dest
            # the bytes round-trip through surrogateescape; a file no other user may read stays so
            text = f.data.decode("utf-8", "surrogateescape")
            files.append(
                PlannedFile(path, text, 0o644 if f.mode & 0o004 else 0o600, secret=not f.mode & 0o004)
            )
        moved[m.source] = str(dest)
        notes.append(
            f"bind source {m.source} (under /tmp: wiped at boot, hidden by PrivateTmp=) -> copied to {dest}"
        )
    mounts = tuple(
        dataclasses.replace(m, source=moved[m.source]) if m.type == "bind" and m.source in moved else m
        for m in spec.mounts
    )
    return dataclasses.replace(spec, mounts=mounts), files, notes


def profile_doc(
    name: str, sec: Secrets, box: Box, opts: InitOptions, disk: Disk
) -> tuple[str, list[PlannedFile], list[str]]:
    """The profile's text, its files (key, env, /tmp copies) and notes. The profile is 0600 (the
    caller's job) when ``sec.residual`` is not empty."""
    spec, files, notes = _tmp_copies(name, sec.spec, disk, opts)
    container = container_spec_to_yaml_dict(spec, None)
    if sec.secret_env:
        env_path = opts.etc / "profiles" / f"{name}.env"
        files.append(PlannedFile(env_path, _env_file(sec.secret_env), 0o600, secret=True))
        container = {**container, "env_file": env_path.name}
    doc: dict[str, Any] = {"name": name, "container": container}
    if sec.key is not None:
        key_path = opts.etc / "profiles" / "secrets" / f"{name}.key"
        files.append(PlannedFile(key_path, sec.key + "\n", 0o600, secret=True))
        api: dict[str, Any] = {"file": f"secrets/{name}.key"}
        api.update(inject_arg=API_KEY_FLAG) if sec.key_in == KEY_ARG else api.update(inject_env=API_KEY_ENV)
        doc["api_key"] = api
    if startup := startup_section(box):
        doc["startup"] = startup
    if markers := derive_markers(spec.command):
        doc["markers"] = {"expected": markers}
    doc["smoke"] = {"gates": derive_gates(spec.command)}
    where = (
        "# This profile HOLDS SECRETS the split could not move (a second key, a secret flag, a key inside a\n"
        "# shell command): it is 0600. They are still on vLLM's command line: move them to the env file.\n"
        if sec.residual
        else "# Secrets are not here: the API key and secret env values are in the 0600 files this names.\n"
    )
    header = (
        f"# Written by `supervisorctl init {sec.spec.name}`: recreates the container as it was found\n"
        "# (the key through VLLM_API_KEY, not the command line; bind sources under /tmp copied here).\n"
        + where
        + "# smoke gates and markers: derived from its flags, all `warn`: make them `fail` once they pass.\n"
    )
    return header + _yaml(doc), files, notes


def render_unit(text: str, install: Install, etc: Path) -> str:
    """A shipped unit file for this install: its commands, its config directory, PYTHONPATH if any."""
    out = text.replace(SHIPPED_DAEMON, install.daemon).replace(SHIPPED_CTL, install.ctl)
    out = out.replace(str(ETC), str(etc))
    if install.pythonpath is not None:
        out = out.replace(
            "Environment=PYTHONUNBUFFERED=1\n",
            f"Environment=PYTHONUNBUFFERED=1\nEnvironment=PYTHONPATH={install.pythonpath}\n",
            1,
        )
    return out


def _key_notes(sec: Secrets) -> list[str]:
    if sec.key_in == KEY_ARG:
        return [
            f"API key: {API_KEY_FLAG} has several values (the environment holds one): the first from a 0600 "
            "file, the others stay on vLLM's command line (visible in ps) in the 0600 profile"
        ]
    if sec.key_from == "arg":
        return [
            f"API key: taken from {API_KEY_FLAG} on the command line (every local user reads it in "
            f"/proc/PID/cmdline) into a 0600 file; new containers get it through {API_KEY_ENV}. The running "
            "container keeps it on its command line until its next restart (status shows DRIFT until then)"
        ]
    if sec.key_from == "env":
        return [f"API key: taken from env {API_KEY_ENV} into a 0600 file"]
    return ["API key: none (the server accepts every request)"]


def build_plan(
    spec: ContainerSpec,
    box: Box,
    opts: InitOptions,
    units: Mapping[str, str],
    install: Install,
    restart_policy: str = "no",
    disk: Disk | None = None,
) -> Plan:
    """Every file of the service for the container ``spec`` (as ``supervisorctl snapshot`` reads it)."""
    disk = disk or Disk()
    name = profile_name(spec.name)
    sec = split_secrets(spec)
    profile_text, profile_files, profile_notes = profile_doc(name, sec, box, opts, disk)
    config = opts.etc / "daemon.yaml"
    notes = [f"box: {box.kind} ({box.evidence})", *_key_notes(sec)]
    if disk.daemon_config is None:
        daemon_text, daemon_files = new_daemon_doc(name, box, gpu_memory_utilization(argv_of(spec)), opts)
        daemon = PlannedFile(config, daemon_text, 0o644)
        notes.append(
            "maintenance: the weekly restart on, Sunday 04:00 local (maintenance.cron in daemon.yaml)"
        )
    else:
        daemon_files = []
        daemon = PlannedFile(
            config, with_profile(disk.daemon_config, name), 0o644, replaces=disk.daemon_config
        )
        if daemon.text != disk.daemon_config:
            notes.append(f"{config} exists: profile {name} is added to its profiles; the rest is kept")
        if opts.channels or opts.heartbeat_url:
            notes.append(f"alerts and heartbeat: kept as {config} has them (edit it to change them)")
    shown = None
    if sec.residual:
        shown = Redactor(sec.residual).text(profile_text)
        notes.append(
            "the profile holds secrets the split cannot move (their values are not shown): it is 0600"
        )
    files = [
        daemon,
        PlannedFile(
            opts.etc / "profiles" / f"{name}.yaml",
            profile_text,
            0o600 if sec.residual else 0o644,
            secret=bool(sec.residual),
            shown=shown,
        ),
        *profile_files,
        *daemon_files,
        *(PlannedFile(opts.unit_dir / u, render_unit(units[u], install, opts.etc), 0o644) for u in UNITS),
    ]
    notes += profile_notes
    if sec.secret_env:
        names = ", ".join(e.name for e in sec.secret_env)
        notes.append(f"secret env ({names}): moved to a 0600 env file")
    if found := overlays(spec):
        notes.append(
            f"overlay files ({len(found)}, e.g. {found[0].target}): under patch custody (fingerprint, drift, "
            "last known good)"
        )
    if restart_policy not in ("no", ""):
        notes.append(
            f"Docker restart policy {restart_policy!r} -> 'no': only the supervisor restarts the model "
            "(two restarters would fight over one model)"
        )
    return Plan(name, spec.name, tuple(files), tuple(notes), config)
