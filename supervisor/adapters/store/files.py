"""The file primitives of everything the daemon writes in its state directory: an atomic replace that a
planted file cannot redirect, durable renames, and the rule for the state directory itself."""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from supervisor.core.errors import StateError
from supervisor.core.log_events import LINE_MAX, cap_line


def describe(exc: OSError) -> str:
    """A short reason for a failed file operation (the errno an operator can act on)."""
    if exc.errno == errno.ENOSPC:
        return "no space left on device"
    if exc.errno == errno.EROFS:
        return "read-only file system"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    return exc.strerror or str(exc)


def fsync_dir(directory: Path) -> None:
    """Make a rename in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def check_state_dir(path: Path, st: os.stat_result) -> None:
    """The state directory holds intents, keys' fingerprints and last-known-good specs: run as root it
    must be a real directory of root's that nobody else may write (else StateError naming the fix)."""
    if not stat.S_ISDIR(st.st_mode):
        raise StateError(f"{path}: the state directory is not a directory (a symlink?)")
    if os.geteuid() != 0:
        return
    if st.st_uid != 0:
        raise StateError(
            f"{path}: the state directory is owned by uid {st.st_uid}, not root (chown root {path})"
        )
    if st.st_mode & 0o022:
        raise StateError(
            f"{path}: the state directory is writable by group or others (mode "
            f"{stat.S_IMODE(st.st_mode):04o}; chmod 700 {path})"
        )


def write_atomic(path: Path, payload: bytes, mode: int = 0o600) -> None:
    """Replace ``path`` with ``payload`` (temp file + fsync + rename + fsync of the directory): a reader sees
    the old content or the new, never a torn file. The temp file has an unpredictable name and is opened
    ``O_EXCL|O_NOFOLLOW``, so a file or symlink planted beside it is never written through. StateError
    (naming the reason) when it cannot be written; the previous content is kept."""
    # a str, not ``path.with_name``: Python 3.11's pathlib interns every name it parses, and a random one
    # per write only churned CPython's interned-strings table (adapters/host/cputime.py says more)
    tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.tmp-{secrets.token_hex(8)}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
        try:
            view = memoryview(payload)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except OSError as exc:
        with contextlib.suppress(OSError):  # a leftover temp file is harmless; report the real error
            os.unlink(tmp)
        raise StateError(f"{path}: cannot write: {describe(exc)}; the previous content is kept") from exc


def capped_lines(fh: TextIO) -> Iterator[str]:
    """The lines of a text file, each cut to :data:`LINE_MAX` characters (``cap_line``): never more than
    that is read at once, so a 1 GB line costs its reading time, not its size in memory or in a regex."""
    while line := fh.readline(LINE_MAX + 1):
        if line.endswith("\n"):
            yield cap_line(line[:-1])
            continue
        if len(line) <= LINE_MAX:  # the last line, without its newline
            yield line
            continue
        dropped = 0
        while more := fh.readline(LINE_MAX + 1):
            if more.endswith("\n"):
                dropped += len(more) - 1
                break
            dropped += len(more)
        yield cap_line(line, LINE_MAX, dropped)
