"""What ``supervisorctl init`` derives from the running container beyond its spec (pure).

* **smoke gates** (docs/configuration.md ``smoke:``): ``stream_usage`` and ``degeneration`` for every
  server, ``tool_call`` when the command sets ``--enable-auto-tool-choice`` and ``--tool-call-parser``,
  ``think_leak`` when it sets ``--reasoning-parser``. All ``policy: warn``: a gate the operator has not
  seen pass never takes a serving model down (make them ``fail`` once they pass);
* **expected log markers** (``markers.expected``): vLLM's ``non-default args: {...}`` line proves which
  flags the server really took: the served model name, the tool-call parser, the reasoning parser;
* **overlay files**: the read-only file binds over the image (a patched vLLM); they are under patch custody
  by themselves (hashed into the fingerprint, drift, the last known good), so init only names them;
* **bind sources under /tmp**: emptied at every reboot and hidden by a unit's ``PrivateTmp=``: copied to
  the configuration directory (``profiles/NAME.files/``) and the profile mounts the copy;
* the **alert language** from the locale (``LC_ALL``, ``LC_MESSAGES``, ``LANG``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import PurePosixPath
from typing import Any, Final

from supervisor.core.spec.model import ContainerSpec, Mount

TMP: Final = PurePosixPath("/tmp")  # noqa: S108 (a path to recognise, never written)
#: The gates every server gets (stream usage, no loop), then by flag.
TOOL_FLAGS: Final = ("--enable-auto-tool-choice", "--tool-call-parser")
REASONING_FLAG: Final = "--reasoning-parser"
SERVED_FLAG: Final = "--served-model-name"
#: Overlay targets: a file bound over the image's Python packages.
OVERLAY_PARTS: Final = ("site-packages", "dist-packages", "vllm")


def flag_value(command: Sequence[str], flag: str) -> str | None:
    """The value of ``flag`` (``--flag V`` or ``--flag=V``; the last one wins), or None."""
    value = None
    for i, arg in enumerate(command):
        if arg == flag and i + 1 < len(command) and not command[i + 1].startswith("--"):
            value = command[i + 1]
        elif arg.startswith(flag + "="):
            value = arg.split("=", 1)[1]
    return value


def has_flag(command: Sequence[str], flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in command)


def derive_gates(command: Sequence[str]) -> list[dict[str, Any]]:
    """The smoke gates this server's flags allow (module docstring), all ``policy: warn``."""
    gates: list[dict[str, Any]] = [
        {"kind": "stream_usage", "policy": "warn"},
        {"kind": "degeneration", "policy": "warn"},
    ]
    if all(has_flag(command, f) for f in TOOL_FLAGS):
        gates.append({"kind": "tool_call", "policy": "warn"})
    if has_flag(command, REASONING_FLAG):
        gates.append({"kind": "think_leak", "policy": "warn"})
    return gates


def _arg_marker(key: str, value: str) -> str:
    """A regex for ``'key': 'value'`` or ``'key': ['value']`` in the ``non-default args`` line."""
    return f"non-default args: .*'{key}': \\[?'{re.escape(value)}'"


def derive_markers(command: Sequence[str]) -> list[str]:
    """Expected markers: the ``non-default args`` line shows the served name and the parsers."""
    out = []
    for flag, key in (
        (SERVED_FLAG, "served_model_name"),
        ("--tool-call-parser", "tool_call_parser"),
        (REASONING_FLAG, "reasoning_parser"),
    ):
        value = flag_value(command, flag)
        if value:
            out.append(_arg_marker(key, value))
    return out


def overlays(spec: ContainerSpec) -> list[Mount]:
    """Read-only file binds over the image's Python packages (a patched vLLM)."""
    return [
        m
        for m in spec.mounts
        if m.type == "bind"
        and m.read_only
        and PurePosixPath(m.target).suffix == ".py"
        and any(p in PurePosixPath(m.target).parts for p in OVERLAY_PARTS)
    ]


def under_tmp(source: str) -> bool:
    return PurePosixPath(source).is_relative_to(TMP)


def tmp_binds(spec: ContainerSpec) -> list[Mount]:
    """The bind mounts whose source is under /tmp."""
    return [m for m in spec.mounts if m.type == "bind" and under_tmp(m.source)]


def language_from_locale(env: Mapping[str, str]) -> str:
    """``zh-TW`` for a Traditional Chinese locale (zh_TW, zh_HK, zh_MO, zh_Hant), ``zh`` for another
    Chinese one, else ``en``; POSIX order: LC_ALL, then LC_MESSAGES, then LANG (the first set wins)."""
    for name in ("LC_ALL", "LC_MESSAGES", "LANG"):
        value = (env.get(name) or "").strip()
        if not value:
            continue
        tag = value.split(".")[0].split("@")[0].replace("-", "_").lower()
        if not tag.startswith("zh"):
            return "en"
        if any(t in tag for t in ("tw", "hk", "mo", "hant")):
            return "zh-TW"
        return "zh"
    return "en"
