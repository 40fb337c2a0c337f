"""``supervisorctl init``'s values: its options, the install, the planned files, what it read on disk."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from supervisor.core.host.paths import ETC, UNIT_DIR

UNIT: Final = "vllm-supervisor.service"
FAILURE_UNIT: Final = "vllm-supervisor-failure@.service"
UNITS: Final = (UNIT, FAILURE_UNIT)
#: Where the shipped unit files expect the install (the README's venv) and the config.
SHIPPED_DAEMON: Final = "/opt/vllm-supervisor/venv/bin/vllm-supervisor"
SHIPPED_CTL: Final = "/opt/vllm-supervisor/venv/bin/supervisorctl"
CHANNEL_KINDS: Final = ("feishu", "dingtalk", "wecom", "slack", "generic")
#: The bash suite's weekly restart (per-request driver memory growth): Sunday 04:00 local, 10 min drain.
MAINTENANCE: Final[dict[str, Any]] = {"enabled": True, "cron": "0 4 * * 0", "drain_timeout_s": 600}


@dataclass(frozen=True)
class Channel:
    """One alert channel (``--feishu FILE`` ...: the URL read from a file or standard input)."""

    kind: str  # one of CHANNEL_KINDS
    url: str
    secret: str | None = None  # DingTalk's / Feishu's signing secret


@dataclass(frozen=True)
class InitOptions:
    """What the operator asked for."""

    channels: tuple[Channel, ...] = ()
    language: str | None = None  # en, zh, zh-TW (the CLI defaults it from the locale)
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
    """One file ``init`` writes: its text, its mode, and whether the text is a secret (never printed).
    ``replaces``: the text on the disk the plan was made from (a second ``init`` adding its profile to the
    daemon config): that content is no clash. ``shown``: the text to print instead (secrets masked)."""

    path: Path
    text: str
    mode: int
    secret: bool = False
    replaces: str | None = None
    shown: str | None = None


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


@dataclass(frozen=True)
class TmpFile:
    """One file of a bind source under /tmp, as read: its path relative to the source, bytes, mode."""

    relative: str  # "" for a file bound itself
    data: bytes
    mode: int


@dataclass(frozen=True)
class Disk:
    """What ``init`` read from the disk before planning (the plan stays pure)."""

    daemon_config: str | None = None  # the existing daemon config's text
    tmp: Mapping[str, tuple[TmpFile, ...]] = dataclasses.field(default_factory=dict)  # source -> files
