"""Sweep of the real /dev/shm: free segments go, segments held by a live process (fd or mmap) stay."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest

from supervisor.adapters.host.shm import sweep_shm
from supervisor.core.host.paths import SHM_DIR
from tests.harness import python_as_nobody

MIB = 1024 * 1024

HOLDER = """
import mmap, os, sys
path, how = sys.argv[1], sys.argv[2]
fd = os.open(path, os.O_RDWR)
m = mmap.mmap(fd, 0) if how == "mmap" else None
if how == "mmap":
    os.close(fd)  # only the mapping holds it now
print("ready", flush=True)
sys.stdin.read()  # until the test closes our stdin
"""


@contextmanager
def segments(dirpath: Path, *names: str, size: int = MIB) -> Iterator[list[Path]]:
    """Real files of ``size`` written bytes (so tmpfs allocates them); removed afterwards."""
    paths = [dirpath / n for n in names]
    try:
        for p in paths:
            p.write_bytes(b"\x01" * size)
        yield paths
    finally:
        for p in paths:
            with suppress(FileNotFoundError):
                p.unlink()


@contextmanager
def holder(path: Path, how: str) -> Iterator[subprocess.Popen[str]]:
    """A live child process that keeps ``path`` open (how='fd') or only mapped (how='mmap')."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path), how],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        yield proc
    finally:
        proc.kill()
        proc.wait(timeout=10)


def _tag() -> str:
    return f"vsuptest{uuid.uuid4().hex[:10]}"


def test_sweep_real_dev_shm_keeps_held_removes_free() -> None:
    """On the real /dev/shm: an unheld psm_ and sem.mp- segment are removed, fd- and mmap-held ones kept."""
    tag = _tag()
    names = (f"psm_{tag}_free", f"sem.mp-{tag}", f"psm_{tag}_fd", f"psm_{tag}_map", f"other_{tag}")
    patterns = (f"psm_{tag}_*", f"sem.mp-{tag}")  # only this test's files, never anybody else's
    with (
        segments(SHM_DIR, *names) as paths,
        holder(paths[2], "fd") as p_fd,
        holder(paths[3], "mmap") as p_map,
    ):
        result = sweep_shm(SHM_DIR, patterns)
        assert sorted(r.name for r in result.removed) == sorted(names[:2])
        assert all(r.size == MIB and r.allocated >= MIB for r in result.removed)
        assert result.freed_bytes >= 2 * MIB
        kept = {k.name: k for k in result.kept}
        assert set(kept) == {names[2], names[3]}
        assert kept[names[2]].pids == (p_fd.pid,)
        assert kept[names[3]].pids == (p_map.pid,)
        assert {k.reason for k in kept.values()} == {"held"}
        assert all("swept anyway" in w for w in result.warnings)  # only ptrace-protected processes
        assert [p.exists() for p in paths] == [False, False, True, True, True]


def test_dry_run_removes_nothing(tmp_path: Path) -> None:
    """dry_run reports what would go and leaves every file in place (dirpath is a parameter)."""
    with segments(tmp_path, "psm_a", "sem.mp-b", "keepme") as paths:
        result = sweep_shm(tmp_path, dry_run=True)
        assert result.dry_run
        assert sorted(r.name for r in result.removed) == ["psm_a", "sem.mp-b"]
        assert all(p.exists() for p in paths)
        assert sweep_shm(tmp_path).freed_bytes >= 2 * MIB
        assert [p.exists() for p in paths] == [False, False, True]


def test_holder_dies_then_segment_goes() -> None:
    """Once the holding process exits, the next sweep removes the segment."""
    tag = _tag()
    with segments(SHM_DIR, f"psm_{tag}") as (path,):
        with holder(path, "mmap"):
            assert [k.name for k in sweep_shm(SHM_DIR, (f"psm_{tag}",)).kept] == [path.name]
        assert [r.name for r in sweep_shm(SHM_DIR, (f"psm_{tag}",)).removed] == [path.name]
        assert not path.exists()


def test_problems_are_warnings_not_exceptions(tmp_path: Path) -> None:
    """A missing dir, a matching directory and an undeletable file are warnings; the rest is still swept."""
    assert sweep_shm(tmp_path / "absent").warnings[0].startswith("cannot list")
    (tmp_path / "psm_dir").mkdir()
    locked = tmp_path / "locked"
    locked.mkdir()
    with segments(tmp_path, "psm_free"), segments(locked, "psm_stuck"):
        result = sweep_shm(tmp_path)
        assert [r.name for r in result.removed] == ["psm_free"]
        assert "psm_dir: not a regular file, left alone" in result.warnings
        chattr = subprocess.run(["chattr", "+i", str(locked)], capture_output=True, text=True, check=False)
        if chattr.returncode != 0:
            pytest.skip(f"cannot make a directory immutable here: {chattr.stderr.strip()}")
        try:
            stuck = sweep_shm(locked)
        finally:
            subprocess.run(["chattr", "-i", str(locked)], check=True)
        assert stuck.removed == ()
        assert "psm_stuck: cannot remove: Operation not permitted" in stuck.warnings


def test_strict_keeps_everything_when_a_process_is_hidden(tmp_path: Path) -> None:
    """strict=True: if any process cannot be inspected, every segment is kept as 'unverified'."""
    with segments(tmp_path, "psm_x") as (path,):
        result = sweep_shm(tmp_path, strict=True)
        if not any("could not be inspected" in w for w in result.warnings):
            pytest.skip("every process is inspectable here; strict changes nothing")
        assert [(k.name, k.reason) for k in result.kept] == [("psm_x", "unverified")]
        assert result.removed == ()
        assert path.exists()


def test_not_root_removes_nothing() -> None:
    """As user nobody other processes cannot be inspected: every segment is kept as 'unverified'."""
    if os.geteuid() != 0:
        pytest.skip("needs root to switch to nobody")
    tag = _tag()
    with segments(SHM_DIR, f"psm_{tag}") as (path,):
        path.chmod(0o666)
        proc = python_as_nobody(
            "from supervisor.adapters.host.shm import sweep_shm\n"
            f"r = sweep_shm(patterns=('psm_{tag}',))\n"
            "print(r.kept[0].reason, len(r.removed)); print(r.warnings[0])\n"
        )
        assert proc.returncode == 0, proc.stderr
        first, warning = proc.stdout.strip().splitlines()
        assert first == "unverified 0"
        assert "could not be inspected" in warning
        assert path.exists()
