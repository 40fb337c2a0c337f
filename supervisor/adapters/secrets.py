"""Secret files: the API key, webhook URLs and signing secrets the config points at (read at use time).

The config only says *where* a secret is (a file, an env var of the container); this adapter reads and
creates those files. Values are never logged. A generated key file is 0600 from its first byte.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
from pathlib import Path

from supervisor.config.model import ApiKeySource
from supervisor.core.spec.model import ContainerSpec, EnvVar


def read_secret_file(path: Path) -> str:
    """The content of a secret file with surrounding whitespace (the trailing newline) removed."""
    return path.read_text(encoding="utf-8").strip()


def inline_or_file(value: str | None, path: Path | None) -> str | None:
    """``value`` if set, else the content of ``path`` read now (None if neither, or the file is empty)."""
    if value is not None:
        return value
    if path is not None:
        return read_secret_file(path) or None
    return None


def ensure_key_file(src: ApiKeySource) -> bool:
    """With ``generate``, create a missing key file (0600 from the first byte); True if created."""
    if src.file is None or not src.generate:
        return False
    src.file.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(src.file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(secrets.token_urlsafe(32) + "\n")
    return True


def resolve_api_key(src: ApiKeySource, spec: ContainerSpec) -> str | None:
    """The key value (never log it): from the file if set, else from the spec's environment."""
    if src.file is not None:
        try:
            return read_secret_file(src.file) or None
        except OSError:
            return None
    if src.env is not None:
        return spec.env_dict().get(src.env) or None
    return None


def command_with_key(command: tuple[str, ...], flag: str, key: str) -> tuple[str, ...]:
    """``command`` with the value of ``flag`` (``--flag VALUE`` or ``--flag=VALUE``) replaced by ``key``."""
    out = list(command)
    for i, arg in enumerate(out):
        if arg == flag and i + 1 < len(out):
            out[i + 1] = key
        elif arg.startswith(flag + "="):
            out[i] = f"{flag}={key}"
    return tuple(out)


def spec_with_key(src: ApiKeySource | None, spec: ContainerSpec) -> ContainerSpec:
    """``spec`` with the key from ``src.file`` injected as env ``src.inject_env`` and/or as the value of
    the command flag ``src.inject_arg`` (unchanged otherwise)."""
    if src is None or src.file is None or not (src.inject_env or src.inject_arg):
        return spec
    key = resolve_api_key(src, spec)
    if key is None:
        return spec
    if src.inject_arg:
        spec = dataclasses.replace(spec, command=command_with_key(spec.command, src.inject_arg, key))
    if not src.inject_env:
        return spec
    env = (*(e for e in spec.env if e.name != src.inject_env), EnvVar(src.inject_env, key))
    return dataclasses.replace(spec, env=env)
