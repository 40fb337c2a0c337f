"""Patch-set custody, the I/O: hash a spec's bind mounts, keep content-addressed copies, restore them.

The rule of what is hashed how is the core's (:mod:`supervisor.core.spec.patchset`); every walk here is
bounded (file count, bytes, a deadline) and runs in pool jobs (create, drift check), never on the loop.
The copies live in ``<state_dir>/patches/<sha256>`` (directory 0700, files 0600), at most
:data:`~supervisor.core.spec.patchset.MAX_KEPT_BYTES` together; :func:`collect` removes the ones no last
known good references. A rollback keeps what it overwrites in ``patches/replaced/<sha256>``.

The sources are the operator's files, opened here as root: every one is opened without following a link
and without blocking (``O_NOFOLLOW|O_NONBLOCK``: a FIFO swapped in cannot hang the job), checked to be a
regular file and, when it was walked, the very file the walk saw (device and inode); a rollback writes
nothing reached through a symlink in the mount's directories.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path

from supervisor.adapters.store.files import describe, write_atomic
from supervisor.core.errors import StateError
from supervisor.core.spec.model import Mount
from supervisor.core.spec.patchset import (
    CONTENT_KINDS,
    DIR,
    FILE,
    HASH_DEADLINE_S,
    MANIFEST,
    MAX_CONTENT_BYTES,
    MAX_DIR_FILES,
    MAX_KEPT_BYTES,
    MAX_MANIFEST_FILES,
    MISSING,
    SKIPPED,
    PatchEntry,
)

PATCHES_DIR = "patches"
REPLACED_DIR = "replaced"
REPLACED_KEPT = 32
_CHUNK = 1024 * 1024


def _open_source(path: str | Path, walked: os.stat_result | None = None) -> int:
    """A read descriptor of the regular file at ``path``, never through a link at its last component and
    never blocking on a FIFO; OSError when it is not a regular file or not the file ``walked`` saw."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file (replaced since it was listed?)")
        if walked is not None and (st.st_dev, st.st_ino) != (walked.st_dev, walked.st_ino):
            raise OSError(errno.ESTALE, "replaced by another file since it was listed")
    except BaseException:
        os.close(fd)
        raise
    return fd


def _read_source(path: str | Path, limit: int, walked: os.stat_result | None = None) -> bytes:
    """At most ``limit`` + 1 bytes of the file at ``path``, opened by :func:`_open_source`."""
    with os.fdopen(_open_source(path, walked), "rb") as f:
        return f.read(limit + 1)


def _sha_file(path: str, walked: os.stat_result | None = None) -> str:
    h = hashlib.sha256()
    with os.fdopen(_open_source(path, walked), "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _sha_text(lines: Sequence[str]) -> str:
    return hashlib.sha256("\n".join(lines).encode("utf-8", "surrogateescape")).hexdigest()


class _TooBig(Exception):
    pass


def _walk(root: str, deadline: float, now: Callable[[], float]) -> list[tuple[str, os.stat_result]]:
    """Every file and symlink under ``root`` (not following links), relative paths sorted; _TooBig past
    MAX_MANIFEST_FILES or the deadline."""
    out: list[tuple[str, os.stat_result]] = []
    for top, dirs, names in os.walk(root, followlinks=False):
        dirs.sort()
        for name in names + [d for d in dirs if os.path.islink(os.path.join(top, d))]:
            full = os.path.join(top, name)
            out.append((os.path.relpath(full, root), os.lstat(full)))
            if len(out) > MAX_MANIFEST_FILES:
                raise _TooBig(f"more than {MAX_MANIFEST_FILES} files")
        if now() > deadline:
            raise _TooBig(f"walk took over {HASH_DEADLINE_S:g} s")
    return sorted(out, key=lambda item: item[0])


def _hash_dir(m: Mount, deadline: float, now: Callable[[], float]) -> PatchEntry:
    try:
        found = _walk(m.source, deadline, now)
    except _TooBig as exc:
        return PatchEntry(m.target, m.source, SKIPPED, note=str(exc))
    total = sum(st.st_size for _, st in found if stat.S_ISREG(st.st_mode))
    if len(found) > MAX_DIR_FILES or total > MAX_CONTENT_BYTES:
        lines = [f"{rel}\0{st.st_size}\0{st.st_mtime_ns}" for rel, st in found]
        note = f"{len(found)} files, {total} bytes: by (path, size, mtime)"
        return PatchEntry(m.target, m.source, MANIFEST, _sha_text(lines), size=total, note=note)
    files = []
    for rel, st in found:
        full = os.path.join(m.source, rel)
        if stat.S_ISLNK(st.st_mode):
            files.append((rel, "link:" + os.readlink(full)))
        elif stat.S_ISREG(st.st_mode):
            files.append((rel, _sha_file(full, st)))
    digest = _sha_text([f"{rel}\0{sha}" for rel, sha in files])
    regular = [(rel, sha) for rel, sha in files if not sha.startswith("link:")]  # what can be kept
    return PatchEntry(m.target, m.source, DIR, digest, tuple(regular), total, f"{len(files)} files")


def hash_mount(m: Mount, now: Callable[[], float] = time.monotonic) -> PatchEntry:
    """One bind mount's entry by the core's rule (never reads more than MAX_CONTENT_BYTES)."""
    try:
        st = os.stat(m.source)
    except FileNotFoundError:
        return PatchEntry(m.target, m.source, MISSING)
    except OSError as exc:
        return PatchEntry(m.target, m.source, SKIPPED, note=describe(exc))
    try:
        if stat.S_ISDIR(st.st_mode):
            if not m.read_only:
                return PatchEntry(m.target, m.source, SKIPPED, note="writable directory")
            return _hash_dir(m, now() + HASH_DEADLINE_S, now)
        if not stat.S_ISREG(st.st_mode):
            return PatchEntry(m.target, m.source, SKIPPED, note="not a regular file")
        if st.st_size > MAX_CONTENT_BYTES:
            digest = _sha_text([str(st.st_size), str(st.st_mtime_ns)])
            return PatchEntry(m.target, m.source, MANIFEST, digest, size=st.st_size, note="by (size, mtime)")
        # a source that is itself a link is followed, as Docker does; the file it names is opened by itself
        sha = _sha_file(os.path.realpath(m.source), st)
        return PatchEntry(m.target, m.source, FILE, sha, (("", sha),), st.st_size)
    except OSError as exc:
        return PatchEntry(m.target, m.source, SKIPPED, note=describe(exc))


def hash_mounts(mounts: Sequence[Mount], now: Callable[[], float] = time.monotonic) -> tuple[PatchEntry, ...]:
    """The entries of every bind mount (volumes and tmpfs have no host source), in mount order."""
    return tuple(hash_mount(m, now) for m in mounts if m.type == "bind")


def _source_path(e: PatchEntry, rel: str) -> Path:
    """Where a kept file lives: under the mount source with its own links resolved (Docker follows them),
    ``rel`` then walked without following any (:func:`_open_source`, :func:`_no_link_inside`)."""
    base = Path(os.path.realpath(e.source))
    return base / rel if rel else base


def keep(state_dir: Path, entries: Sequence[PatchEntry]) -> list[str]:
    """Copy each content-hashed file into ``<state_dir>/patches/<sha256>`` (once; only what still has
    that hash is kept). Returns the problems (a file changed since it was hashed, the size bound);
    raises StateError when the directory cannot be made."""
    root = state_dir / PATCHES_DIR
    try:
        root.mkdir(mode=0o700, exist_ok=True)
        os.chmod(root, 0o700)
    except OSError as exc:
        raise StateError(f"{root}: {describe(exc)}") from exc
    used = sum(p.stat().st_size for p in root.iterdir() if p.is_file())
    problems = []
    for e in entries:
        if e.kind not in CONTENT_KINDS:
            continue
        for rel, sha in e.files:
            dest = root / sha
            if dest.exists():
                continue
            src = _source_path(e, rel)
            try:
                data = _read_source(src, MAX_CONTENT_BYTES)
            except OSError as exc:
                problems.append(f"{src}: {describe(exc)}")
                continue
            if hashlib.sha256(data).hexdigest() != sha:
                problems.append(f"{src}: changed since it was hashed (not kept)")
                continue
            if used + len(data) > MAX_KEPT_BYTES:
                problems.append(f"{src}: not kept (the copies would exceed {MAX_KEPT_BYTES} bytes)")
                continue
            write_atomic(dest, data, 0o600)
            used += len(data)
    return problems


def collect(state_dir: Path, referenced: Collection[str]) -> list[str]:
    """Remove every copy no last known good references; returns the removed digests."""
    root = state_dir / PATCHES_DIR
    if not root.is_dir():
        return []
    removed = []
    for p in sorted(root.iterdir()):
        if p.is_file() and p.name not in referenced and not p.name.startswith("."):
            p.unlink(missing_ok=True)
            removed.append(p.name)
    return removed


def restore(state_dir: Path, entries: Sequence[PatchEntry]) -> list[str]:
    """Write each kept file back to its source (atomically) where it differs; returns the paths
    written. Every copy is checked first: one missing or not matching its hash raises StateError and
    nothing is written."""
    root = state_dir / PATCHES_DIR
    plan: list[tuple[Path, bytes]] = []
    for e in entries:
        if e.kind in CONTENT_KINDS:
            _no_link_inside(e)
        if e.kind not in CONTENT_KINDS:
            continue
        for rel, sha in e.files:
            copy = root / sha
            try:
                data = copy.read_bytes()
            except OSError as exc:
                raise StateError(f"patch copy of {_source_path(e, rel)} missing: {describe(exc)}") from exc
            if hashlib.sha256(data).hexdigest() != sha:
                raise StateError(f"patch copy {copy} does not match its hash (of {_source_path(e, rel)})")
            plan.append((_source_path(e, rel), data))
    written = []
    for path, data in plan:
        try:
            fd = _open_source(path)
            with os.fdopen(fd, "rb") as f:
                mode = stat.S_IMODE(os.fstat(f.fileno()).st_mode)
                current = f.read(MAX_CONTENT_BYTES + 1)
            if current == data:
                continue
            _keep_replaced(root, current)
        except FileNotFoundError:
            mode = 0o644
        except OSError as exc:
            raise StateError(f"{path}: {describe(exc)}: not overwritten") from exc
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, data, mode)
        written.append(str(path))
    return written


def _no_link_inside(e: PatchEntry) -> None:
    """StateError when a kept file of ``e`` would be reached through a symlink inside the mount's source
    (a directory swapped for a link to /etc would have root write there) or is a link itself."""
    base = Path(os.path.realpath(e.source))
    for rel, _sha in e.files:
        here = base
        for part in Path(rel).parts:
            here = here / part
            try:
                linked = stat.S_ISLNK(os.lstat(here).st_mode)
            except FileNotFoundError:
                break  # made by the rollback, under a directory just checked
            except OSError as exc:
                raise StateError(f"{here}: {describe(exc)}: nothing restored") from exc
            if linked:
                raise StateError(f"{here} is a symlink now: nothing restored through it")


def _keep_replaced(root: Path, data: bytes) -> None:
    """The operator's content a rollback overwrites, kept in ``patches/replaced/<sha256>`` (newest
    :data:`REPLACED_KEPT`; never collected with the last known goods' copies)."""
    if len(data) > MAX_CONTENT_BYTES:
        return
    where = root / REPLACED_DIR
    where.mkdir(mode=0o700, exist_ok=True)
    write_atomic(where / hashlib.sha256(data).hexdigest(), data, 0o600)
    kept = sorted(where.iterdir(), key=lambda p: p.stat().st_mtime_ns, reverse=True)
    for old in kept[REPLACED_KEPT:]:
        old.unlink(missing_ok=True)
