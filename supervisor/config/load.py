"""Entry points: load a daemon config or a profile, check a file and print every problem."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TextIO, TypeVar

from supervisor.config.daemon import parse_daemon
from supervisor.config.model import DaemonConfig, Profile
from supervisor.config.pitfalls import profile_pitfalls
from supervisor.config.profile import parse_profile
from supervisor.config.reader import Ctx
from supervisor.config.source import load_yaml
from supervisor.core.errors import ConfigError, ConfigProblem

T = TypeVar("T")


def _ctx(path: Path) -> Ctx:
    return Ctx(file=str(path), base_dir=path.resolve().parent)


def _load(path: Path | str, parse: Callable[[Ctx, object, Path], T | None], what: str) -> T:
    """Read `path` and `parse` it; raises ConfigError listing every problem (or "invalid <what>")."""
    p = Path(path)
    ctx = _ctx(p)
    data = load_yaml(p, ctx)
    result = parse(ctx, data, p.resolve()) if not ctx.problems else None
    if result is None or ctx.problems:
        raise ConfigError(ctx.problems or [ConfigProblem(str(p), "", f"invalid {what}")])
    return result


def load_profile(path: Path | str) -> Profile:
    """Parse one profile file; raises ConfigError listing every problem."""
    return _load(path, parse_profile, "profile")


def load_config(path: Path | str) -> DaemonConfig:
    """Parse the daemon config and every profile it lists; raises ConfigError listing every problem."""
    return _load(path, parse_daemon, "config")


def file_kind(data: object) -> str:
    """'profile' when the top level has a `container:` key, else 'daemon config'."""
    return "profile" if isinstance(data, dict) and "container" in data else "daemon config"


def check_config(path: Path | str) -> list[ConfigProblem]:
    """Every problem in a daemon config or a profile (detected by content); empty when valid."""
    p = Path(path)
    ctx = _ctx(p)
    data = load_yaml(p, ctx)
    if ctx.problems:
        return ctx.problems
    if file_kind(data) == "profile":
        parse_profile(ctx, data, p.resolve())
    else:
        parse_daemon(ctx, data, p.resolve())
    return ctx.problems


def cli_check_config(path: Path | str, out: TextIO | None = None) -> int:
    """`supervisorctl check-config PATH`: one problem per line; 1 if any, else `OK: <kind> <name>` and 0."""
    stream = out if out is not None else sys.stdout
    problems = check_config(path)
    for problem in problems:
        print(problem, file=stream)
    if problems:
        return 1
    p = Path(path)
    ctx = _ctx(p)
    data = load_yaml(p, ctx)
    kind = file_kind(data)
    name = str(data.get("name") or p.stem) if isinstance(data, dict) and kind == "profile" else str(p)
    profiles: list[Profile] = [load_profile(p)] if kind == "profile" else []
    if kind == "daemon config" and isinstance(data, dict):
        profiles = list(load_config(p).profiles)
        n = len(profiles)
        name = f"{p} ({n} profile{'s' if n != 1 else ''})"
    print(f"OK: {kind} {name}", file=stream)
    for prof in profiles:
        for key, warning in profile_pitfalls(prof):
            print(f"warning: {prof.source}: {key}: {warning}", file=stream)
    return 0
