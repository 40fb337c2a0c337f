"""``supervisorctl init``'s plan, pure: from a snapshot of the running container to the files of a service.

:func:`build_plan` takes the container's spec (``supervisorctl snapshot``'s parser), the detected box and
the options and returns every file with its text and mode; supervisor/offline/init.py compares them with
the disk and applies them. Secrets never land in the profile or the daemon config: the API key (``env
VLLM_API_KEY`` or ``--api-key`` on the command line) goes to ``profiles/secrets/NAME.key``, other
environment variables named like a secret to ``profiles/NAME.env``, alert URLs and signing secrets to
``alerts/CHANNEL.url`` / ``.secret``: all 0600. The profile recreates the same container: a key taken
from the command line goes back in its place (``api_key.inject_arg``), one taken from the environment
goes back under its name (``inject_env``). The text is deterministic: a second run plans the same bytes.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml

from supervisor.core.host.reserve import memory_floor_gib
from supervisor.core.paths import ETC, UNIT_DIR
from supervisor.core.spec.model import ContainerSpec, EnvVar
from supervisor.core.spec.patchset import PATCH_LABEL
from supervisor.core.spec.secrets import is_secret_env as is_secret
from supervisor.core.spec.shape import container_spec_to_yaml_dict
from supervisor.core.vllm.cmdline import (
    API_KEY_ENV,
    API_KEY_FLAG,
    DEFAULT_GMU,
    argv_of,
    gpu_memory_utilization,
)
from supervisor.offline.box import OTHER, RESERVE_GIB, Box, host_section, startup_section

UNIT: Final = "vllm-supervisor.service"
FAILURE_UNIT: Final = "vllm-supervisor-failure@.service"
UNITS: Final = (UNIT, FAILURE_UNIT)
#: Labels the daemon puts on containers it creates (MANAGED_LABEL, PATCH_LABEL): not the user's.
DAEMON_LABELS: Final = frozenset({"vllm-supervisor.profile", PATCH_LABEL})
#: Where the shipped unit files expect the install (the README's venv) and the config.
SHIPPED_DAEMON: Final = "/opt/vllm-supervisor/venv/bin/vllm-supervisor"
SHIPPED_CTL: Final = "/opt/vllm-supervisor/venv/bin/supervisorctl"
CHANNEL_KINDS: Final = ("feishu", "dingtalk", "slack", "generic")
PLACEHOLDER: Final = "<api_key.file>"
_NAME_RE = re.compile(r"[^a-zA-Z0-9_.-]+")


@dataclass(frozen=True)
class Channel:
    """One alert channel given on the command line (``--feishu URL`` ...)."""

    kind: str  # one of CHANNEL_KINDS
    url: str
    secret: str | None = None  # DingTalk's signing secret


@dataclass(frozen=True)
class InitOptions:
    """What the operator asked for."""

    channels: tuple[Channel, ...] = ()
    language: str | None = None  # "zh" for Chinese alerts
    heartbeat_url: str | None = None
    etc: Path = ETC
    unit_dir: Path = UNIT_DIR


@dataclass(frozen=True)
class Install:
    """How the unit runs the installed package: its two commands, and PYTHONPATH for a checkout."""

    daemon: str = SHIPPED_DAEMON
    ctl: str = SHIPPED_CTL
    pythonpath: str | None = None


@dataclass(frozen=True)
class PlannedFile:
    """One file ``init`` writes: its text, its mode, and whether the text is a secret (never printed)."""

    path: Path
    text: str
    mode: int
    secret: bool = False


@dataclass(frozen=True)
class Plan:
    """Everything ``init`` does for one container."""

    profile: str
    container: str
    files: tuple[PlannedFile, ...]
    notes: tuple[str, ...]
    config: Path  # the daemon config

    def file(self, path: Path) -> PlannedFile:
        return next(f for f in self.files if f.path == path)


def profile_name(container: str) -> str:
    """A valid profile name from a container name (``[a-zA-Z0-9][a-zA-Z0-9_.-]*``)."""
    name = _NAME_RE.sub("-", container).strip("-._")
    return name or "model"


@dataclass(frozen=True)
class Secrets:
    """The spec with its secrets taken out, and where they went."""

    spec: ContainerSpec  # no key, no secret env values (the command keeps the flag, with a placeholder)
    key: str | None
    key_in: str | None  # "arg" | "env" | None
    secret_env: tuple[EnvVar, ...]


def split_secrets(spec: ContainerSpec) -> Secrets:
    """Take the API key (``--api-key K`` / ``--api-key=K`` first, else env VLLM_API_KEY) and the env
    values named like a secret out of ``spec``; drop the labels the daemon adds itself."""
    command = list(spec.command)
    key: str | None = None
    key_in: str | None = None
    for i, arg in enumerate(command):
        if arg == API_KEY_FLAG and i + 1 < len(command) and key is None:
            key, key_in, command[i + 1] = command[i + 1], "arg", PLACEHOLDER
        elif arg.startswith(API_KEY_FLAG + "=") and key is None:
            key, key_in, command[i] = arg.split("=", 1)[1], "arg", f"{API_KEY_FLAG}={PLACEHOLDER}"
    env = spec.env_dict()
    if key is None and env.get(API_KEY_ENV):
        key, key_in = env[API_KEY_ENV], "env"
    public = tuple(e for e in spec.env if not is_secret(e.name))
    hidden = tuple(
        e for e in spec.env if is_secret(e.name) and not (key_in == "env" and e.name == API_KEY_ENV)
    )
    labels = tuple((k, v) for k, v in spec.labels if k not in DAEMON_LABELS)
    clean = dataclasses.replace(spec, command=tuple(command), env=public, labels=labels)
    return Secrets(clean, key, key_in, hidden)


def _yaml(doc: Mapping[str, Any]) -> str:
    return yaml.safe_dump(dict(doc), sort_keys=False, allow_unicode=True, width=1000)


def _env_file(env: tuple[EnvVar, ...]) -> str:
    from supervisor.offline.snapshot import format_env_file  # refuses a newline in a value

    return format_env_file(env)


def _channels(opts: InitOptions) -> tuple[list[dict[str, Any]], list[PlannedFile]]:
    entries: list[dict[str, Any]] = []
    files: list[PlannedFile] = []
    counts: dict[str, int] = {}
    for ch in opts.channels:
        counts[ch.kind] = counts.get(ch.kind, 0) + 1
        name = ch.kind if counts[ch.kind] == 1 else f"{ch.kind}-{counts[ch.kind]}"
        url_path = opts.etc / "alerts" / f"{name}.url"
        entry: dict[str, Any] = {"kind": ch.kind, "name": name, "url_file": str(url_path)}
        files.append(PlannedFile(url_path, ch.url.strip() + "\n", 0o600, secret=True))
        if ch.secret is not None:
            secret_path = opts.etc / "alerts" / f"{name}.secret"
            entry["secret_file"] = str(secret_path)
            files.append(PlannedFile(secret_path, ch.secret.strip() + "\n", 0o600, secret=True))
        entries.append(entry)
    return entries, files


def daemon_doc(profile: str, box: Box, gmu: float | None, opts: InitOptions) -> tuple[str, list[PlannedFile]]:
    """The daemon config's text and the secret files it names."""
    channels, files = _channels(opts)
    doc: dict[str, Any] = {
        "state_dir": "/var/lib/vllm-supervisor",
        "socket_path": "/run/vllm-supervisor/control.sock",
        "restore_dir": "/var/lib/vllm-supervisor/restore",
        "log_level": "info",
        "profiles": [f"profiles/{profile}.yaml"],
        "host": host_section(box),
        "maintenance": {"enabled": False},
    }
    if channels or opts.language:
        alerts: dict[str, Any] = {"channels": channels}
        if opts.language:
            alerts["language"] = opts.language
        doc["alerts"] = alerts
    if opts.heartbeat_url:
        hb = opts.etc / "heartbeat.url"
        doc["heartbeat"] = {"url_file": str(hb)}
        files.append(PlannedFile(hb, opts.heartbeat_url.strip() + "\n", 0o600, secret=True))
    header = (
        f"# Written by `supervisorctl init` for profile {profile} on a {box.kind} box ({box.evidence}).\n"
        "# Every key is documented in docs/configuration.md; secrets live in the 0600 files it names.\n"
        "# maintenance (a weekly restart) is off: turn it on with a cron (docs/maintenance.md).\n"
    )
    if box.kind != OTHER and box.facts.mem_total_gib is not None:
        floor = memory_floor_gib(gmu, box.facts.mem_total_gib, RESERVE_GIB)
        header += (
            "# Memory floor before each start (host.min_mem_available_gib: auto): "
            f"gmu {gmu or DEFAULT_GMU:g} x MemTotal {box.facts.mem_total_gib:.2f} GiB + reserve "
            f"{RESERVE_GIB:g} GiB = {floor:.1f} GiB today.\n"
        )
    return header + _yaml(doc), files


def profile_doc(name: str, sec: Secrets, box: Box, opts: InitOptions) -> tuple[str, list[PlannedFile]]:
    """The profile's text and its secret files (the key, the secret env values)."""
    files: list[PlannedFile] = []
    container = container_spec_to_yaml_dict(sec.spec, None)
    if sec.secret_env:
        env_path = opts.etc / "profiles" / f"{name}.env"
        files.append(PlannedFile(env_path, _env_file(sec.secret_env), 0o600, secret=True))
        container = {**container, "env_file": env_path.name}
    doc: dict[str, Any] = {"name": name, "container": container}
    if sec.key is not None:
        key_path = opts.etc / "profiles" / "secrets" / f"{name}.key"
        files.append(PlannedFile(key_path, sec.key + "\n", 0o600, secret=True))
        api: dict[str, Any] = {"file": f"secrets/{name}.key"}
        if sec.key_in == "arg":
            api.update(inject_arg=API_KEY_FLAG)
        else:
            api.update(inject_env=API_KEY_ENV)
        doc["api_key"] = api
    if startup := startup_section(box):
        doc["startup"] = startup
    header = (
        f"# Written by `supervisorctl init {sec.spec.name}`: recreates the container as it was found.\n"
        "# Secrets are not here: the API key and secret env values are in the 0600 files this names.\n"
    )
    return header + _yaml(doc), files


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


def build_plan(
    spec: ContainerSpec,
    box: Box,
    opts: InitOptions,
    units: Mapping[str, str],
    install: Install,
    restart_policy: str = "no",
) -> Plan:
    """Every file of the service for the container ``spec`` (as ``supervisorctl snapshot`` reads it)."""
    name = profile_name(spec.name)
    sec = split_secrets(spec)
    profile_text, profile_files = profile_doc(name, sec, box, opts)
    daemon_text, daemon_files = daemon_doc(name, box, gpu_memory_utilization(argv_of(spec)), opts)
    config = opts.etc / "daemon.yaml"
    files = [
        PlannedFile(config, daemon_text, 0o644),
        PlannedFile(opts.etc / "profiles" / f"{name}.yaml", profile_text, 0o644),
        *profile_files,
        *daemon_files,
        *(PlannedFile(opts.unit_dir / u, render_unit(units[u], install, opts.etc), 0o644) for u in UNITS),
    ]
    notes = [f"box: {box.kind} ({box.evidence})"]
    if sec.key_in == "arg":
        notes.append(f"API key: taken from {API_KEY_FLAG} on the command line into a 0600 file")
    elif sec.key_in == "env":
        notes.append(f"API key: taken from env {API_KEY_ENV} into a 0600 file")
    else:
        notes.append("API key: none (the server accepts every request)")
    if sec.secret_env:
        names = ", ".join(e.name for e in sec.secret_env)
        notes.append(f"secret env ({names}): moved to a 0600 env file")
    if restart_policy not in ("no", ""):
        notes.append(
            f"Docker restart policy {restart_policy!r} -> 'no': only the supervisor restarts the model "
            "(two restarters would fight over one model)"
        )
    return Plan(name, spec.name, tuple(files), tuple(notes), config)
