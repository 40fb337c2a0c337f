"""``supervisorctl init``'s daemon config (pure): a new one, one a second ``init`` adds its profile to, and
one ``uninit NAME`` takes a profile out of.

A new config: state and socket paths, the profile, ``host:`` for the box, the weekly maintenance restart
on (Sunday 04:00 local, the bash suite's), alerts (channels from 0600 files, the language) and the
heartbeat. An existing config keeps everything it has (its channels, host, maintenance, hand edits); only
its ``profiles:`` list changes, and a profile already listed leaves the text as it is (same bytes).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

from supervisor.core.errors import SupervisorError
from supervisor.core.host.reserve import memory_floor_gib
from supervisor.core.vllm.cmdline import DEFAULT_GMU
from supervisor.offline.box import OTHER, RESERVE_GIB, Box, host_section
from supervisor.offline.init_types import MAINTENANCE, InitOptions, PlannedFile


class ConfigEditError(SupervisorError):
    """The existing daemon config cannot be edited (not YAML, no profiles list)."""


def to_yaml(doc: Mapping[str, Any]) -> str:
    return yaml.safe_dump(dict(doc), sort_keys=False, allow_unicode=True, width=1000)


def profile_entry(profile: str) -> str:
    return f"profiles/{profile}.yaml"


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


def new_daemon_doc(
    profile: str, box: Box, gmu: float | None, opts: InitOptions
) -> tuple[str, list[PlannedFile]]:
    """A new daemon config's text and the secret files it names."""
    channels, files = _channels(opts)
    doc: dict[str, Any] = {
        "state_dir": "/var/lib/vllm-supervisor",
        "socket_path": "/run/vllm-supervisor/control.sock",
        "restore_dir": "/var/lib/vllm-supervisor/restore",
        "log_level": "info",
        "profiles": [profile_entry(profile)],
        "host": host_section(box),
        "maintenance": dict(MAINTENANCE),
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
        "# maintenance: the weekly restart against per-request driver memory growth (docs/maintenance.md).\n"
        "# A second `supervisorctl init` adds its profile here; `supervisorctl uninit NAME` removes one.\n"
    )
    if box.kind != OTHER and box.facts.mem_total_gib is not None:
        floor = memory_floor_gib(gmu, box.facts.mem_total_gib, RESERVE_GIB)
        header += (
            "# Memory floor before each start (host.min_mem_available_gib: auto): "
            f"gmu {gmu or DEFAULT_GMU:g} x MemTotal {box.facts.mem_total_gib:.2f} GiB + reserve "
            f"{RESERVE_GIB:g} GiB = {floor:.1f} GiB today.\n"
        )
    return header + to_yaml(doc), files


def _header(text: str) -> str:
    """The leading comment lines of ``text``."""
    lines = []
    for line in text.splitlines(keepends=True):
        if not line.startswith("#"):
            break
        lines.append(line)
    return "".join(lines)


def _load(text: str) -> dict[str, Any]:
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigEditError(f"the daemon config is not YAML ({exc}): fix it or use --force") from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("profiles", []), list):
        raise ConfigEditError("the daemon config has no profiles: list: fix it or use --force")
    return doc


def listed(text: str) -> list[str]:
    """The profile files the daemon config lists."""
    return [str(p) for p in _load(text).get("profiles") or []]


def with_profile(text: str, profile: str) -> str:
    """``text`` with the profile added to its ``profiles:`` (the same text when it is listed already)."""
    entry = profile_entry(profile)
    doc = _load(text)
    names = [str(p) for p in doc.get("profiles") or []]
    if entry in names or any(n.endswith("/" + entry) for n in names):
        return text
    doc["profiles"] = [*names, entry]
    return _header(text) + to_yaml(doc)


def without_profile(text: str, profile: str) -> tuple[str, bool]:
    """``text`` without the profile in ``profiles:``; (new text, whether it was listed)."""
    entry = profile_entry(profile)
    doc = _load(text)
    names = [str(p) for p in doc.get("profiles") or []]
    kept = [n for n in names if n != entry and not n.endswith("/" + entry)]
    if kept == names:
        return text, False
    doc["profiles"] = kept
    return _header(text) + to_yaml(doc), True
