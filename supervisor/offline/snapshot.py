"""Snapshot a container: ``docker inspect`` -> a ContainerSpec that recreates it, written as three files.

``<name>.inspect.json`` (the full inspect), ``<name>.env`` (every env var the image did not set, one
``KEY=value`` per line, value literal to end of line) and ``<name>.profile.yaml`` (a profile whose
``container:`` section references the env file). All three are written 0600 from the first byte (temp
file opened with mode 0600 in the same directory, fsync, rename): the env and the command may hold
secrets. The rules deciding what counts as a user setting are in docs/snapshot.md.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import structlog
import yaml

from supervisor.core.errors import ImageMissing, SnapshotError
from supervisor.core.spec.inspect import DEFAULT_SHM_SIZE, spec_from_inspect, unreproducible
from supervisor.core.spec.model import ContainerSpec, EnvVar
from supervisor.core.spec.shape import container_spec_to_yaml_dict
from supervisor.core.vllm.cmdline import API_KEY_ENV, api_keys, argv_of

log = structlog.get_logger(__name__)

__all__ = ["DEFAULT_SHM_SIZE", "format_env_file", "snapshot", "spec_from_inspect", "unreproducible"]


class SnapshotSource(Protocol):
    """What :func:`snapshot` needs from the Docker adapter."""

    def inspect(self, ref: str) -> dict[str, Any]: ...

    def image_config(self, image: str) -> dict[str, Any]: ...


@dataclass(frozen=True)
class SnapshotPaths:
    """The files one snapshot wrote, and what it could not reproduce."""

    inspect_json: Path
    env: Path
    profile: Path
    env_count: int
    warnings: tuple[str, ...] = ()


# -- files -------------------------------------------------------------------------------------------
def format_env_file(env: Iterable[EnvVar]) -> str:
    """One ``KEY=value`` line per variable; refuses what one line cannot hold (naming the variable only)."""
    lines = []
    for e in env:
        bad_name = not e.name or "=" in e.name or e.name != e.name.strip() or e.name.startswith("#")
        if bad_name or any(c in e.name for c in "\r\n"):
            raise SnapshotError(f"environment variable name {e.name!r} cannot be written as KEY=value")
        if "\n" in e.value or "\r" in e.value:
            raise SnapshotError(
                f"environment variable {e.name} holds a newline: an env file (one KEY=value per line) "
                "cannot carry it; remove the newline from the container's value and snapshot again"
            )
        lines.append(f"{e.name}={e.value}\n")
    return "".join(lines)


def write_private(path: Path, data: bytes) -> None:
    """Atomically write ``data`` to ``path`` with mode 0600 from the first byte."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def profile_dict(spec: ContainerSpec, env_file: str) -> dict[str, Any]:
    """The profile a snapshot writes: the container section, and the API key source if the env has one."""
    container = container_spec_to_yaml_dict(spec, env_file if spec.env else None)
    out: dict[str, Any] = {"name": spec.name, "container": container}
    if spec.env_dict().get(API_KEY_ENV):
        out["api_key"] = {"env": API_KEY_ENV}
    return out


def _key_note(spec: ContainerSpec) -> str:
    """A header line saying where the server's API key is (never the key)."""
    if api_keys(argv_of(spec)):
        return (
            "# The API key is on the command line (--api-key; this file is 0600): kept as it is so the\n"
            "# container is recreated exactly; the daemon's probes send the key the container has.\n"
        )
    return ""


def read_spec(
    adapter: SnapshotSource, container: str
) -> tuple[ContainerSpec, dict[str, Any], dict[str, Any]]:
    """The spec that recreates ``container``, its inspect and its image's config."""
    info = adapter.inspect(container)
    image_ref = str((info.get("Config") or {}).get("Image") or info.get("Image"))
    try:
        image_cfg = adapter.image_config(image_ref)
    except ImageMissing:  # the tag may have moved or gone; the image id still names the image
        image_cfg = adapter.image_config(str(info.get("Image")))
    return spec_from_inspect(info, list(image_cfg.get("Env") or []), image_cfg), info, image_cfg


def snapshot(adapter: SnapshotSource, container: str, out_dir: Path | str) -> SnapshotPaths:
    """Write ``<name>.inspect.json``, ``.env`` and ``.profile.yaml`` (all 0600) into ``out_dir``."""
    spec, info, image_cfg = read_spec(adapter, container)
    env_text = format_env_file(spec.env)  # refuses newlines before anything is written
    out = Path(out_dir)
    out.mkdir(mode=0o700, parents=True, exist_ok=True)
    paths = SnapshotPaths(
        inspect_json=out / f"{spec.name}.inspect.json",
        env=out / f"{spec.name}.env",
        profile=out / f"{spec.name}.profile.yaml",
        env_count=len(spec.env),
        warnings=tuple(unreproducible(info, image_cfg)),
    )
    write_private(paths.inspect_json, json.dumps(info, indent=2, ensure_ascii=False).encode("utf-8"))
    write_private(paths.env, env_text.encode("utf-8"))
    header = (
        f"# Written by `supervisorctl snapshot {spec.name}`: recreates the container exactly.\n"
        f"# The environment is in {paths.env.name} (mode 0600); this file may hold secrets too.\n"
        f"{_key_note(spec)}"
    )
    body = yaml.safe_dump(profile_dict(spec, paths.env.name), sort_keys=False, allow_unicode=True, width=1000)
    write_private(paths.profile, (header + body).encode("utf-8"))
    log.info(
        "snapshot.written",
        container=spec.name,
        dir=str(out),
        env_vars=len(spec.env),
        mounts=len(spec.mounts),
        warnings=len(paths.warnings),
    )
    return paths
