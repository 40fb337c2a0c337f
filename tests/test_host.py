"""Tests of the host adapter on the real /proc, real files, real flock across processes and /dev/shm."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from supervisor.adapters.host import system as host
from supervisor.core.clock import FakeClock
from supervisor.core.errors import HostError
from tests.harness import REPO, python_as_nobody


def test_read_meminfo_real_proc_in_bytes() -> None:
    """The real /proc/meminfo parses to bytes, consistent with itself."""
    info = host.read_meminfo()
    assert info["MemTotal"] > 256 * 1024 * 1024
    assert 0 < info["MemAvailable"] <= info["MemTotal"]
    assert info["MemTotal"] % 1024 == 0
    gib = host.mem_available_gib()
    assert 0 < gib <= info["MemTotal"] / host.GIB


def test_read_meminfo_units_and_garbage(tmp_path: Path) -> None:
    """kB values become bytes, unit-less counts stay, malformed lines are skipped; missing file raises."""
    f = tmp_path / "meminfo"
    f.write_text("MemTotal:  2048 kB\nHugePages_Total:       3\nbroken line\nMemAvailable: 1048576 kB\n")
    assert host.read_meminfo(f) == {"MemTotal": 2048 * 1024, "HugePages_Total": 3, "MemAvailable": 1024**3}
    assert host.mem_available_gib(f) == 1.0
    with pytest.raises(HostError, match="cannot read"):
        host.read_meminfo(tmp_path / "absent")


def test_wait_for_memory_reaches_threshold(fake_clock: FakeClock) -> None:
    """Memory coming back after a few polls ends the wait early with ok=True."""
    values = iter([3.0, 5.0, 9.0, 20.0])
    ok, last = host.wait_for_memory(
        8.0, 60, fake_clock, 1.0, read=lambda: next(values), sleep=fake_clock.advance
    )
    assert (ok, last) == (True, 9.0)
    assert fake_clock.monotonic() == 1002.0


def test_wait_for_memory_times_out_bounded(fake_clock: FakeClock) -> None:
    """Memory that never comes back ends the wait at the deadline with ok=False and the last value."""
    reads: list[float] = []

    def read() -> float:
        reads.append(1.5)
        return 1.5

    ok, last = host.wait_for_memory(8.0, 10, fake_clock, 3.0, read=read, sleep=fake_clock.advance)
    assert (ok, last) == (False, 1.5)
    assert fake_clock.monotonic() == 1010.0
    assert len(reads) == 5  # t=0, 3, 6, 9, 10


def test_drop_caches_writes_level_to_given_file(tmp_path: Path) -> None:
    """With a writable target the level is written and True returned."""
    target = tmp_path / "drop_caches"
    target.write_text("")
    assert host.drop_caches(3, path=target) is True
    assert target.read_text() == "3\n"
    with pytest.raises(ValueError, match="level"):
        host.drop_caches(4, path=target)


def test_drop_caches_unwritable_returns_false_with_reason(tmp_path: Path) -> None:
    """An unwritable target yields False and a logged reason, never an exception."""
    with capture_logs() as logs:
        assert host.drop_caches(1, path=tmp_path / "no" / "such") is False
    skipped = [e for e in logs if e["event"] == "host.drop_caches.skipped"]
    assert skipped
    assert "No such file" in skipped[0]["reason"]


def test_drop_caches_real_proc_as_root_and_as_nobody() -> None:
    """On the real /proc, root succeeds (if /proc/sys is writable) and nobody gets False, not an error."""
    if os.geteuid() != 0:
        pytest.skip("needs root to switch to nobody")
    if os.access(host.DROP_CACHES, os.W_OK):
        assert host.drop_caches(1) is True
    code = "from supervisor.adapters.host.system import drop_caches; print(drop_caches(1))"
    proc = python_as_nobody(code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "False"
    assert "not root" in proc.stdout + proc.stderr


def test_boot_id_real_and_missing(tmp_path: Path) -> None:
    """The real boot id is a UUID; a missing file raises HostError."""
    assert uuid.UUID(host.boot_id())
    with pytest.raises(HostError, match="boot id"):
        host.boot_id(tmp_path / "nope")


def test_load_lock_excludes_second_holder_and_releases(tmp_path: Path) -> None:
    """Two lock objects on one file exclude each other; release is idempotent and hands the lock over."""
    path = tmp_path / "load.lock"
    a, b = host.LoadLock(path, owner="a"), host.LoadLock(path, owner="b")
    assert a.try_acquire() is True
    assert a.try_acquire() is True
    assert b.try_acquire() is False
    holder = a.holder()
    assert holder is not None
    assert (holder["owner"], holder["pid"]) == ("a", os.getpid())
    a.release()
    a.release()
    assert not a.held
    assert b.try_acquire() is True
    b.release()


def test_load_lock_across_processes_and_freed_on_death(tmp_path: Path) -> None:
    """A lock held by another process blocks us; when that process dies the lock is free again."""
    path = tmp_path / "load.lock"
    code = (
        "import sys; from pathlib import Path; from supervisor.adapters.host.system import LoadLock;"
        f"l = LoadLock(Path({str(path)!r}), 'child'); print(l.try_acquire(), flush=True); sys.stdin.read()"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "True"
        mine = host.LoadLock(path, owner="parent")
        assert mine.try_acquire() is False
        assert (mine.holder() or {}).get("owner") == "child"
    finally:
        child.kill()
        child.wait(timeout=10)
    assert mine.try_acquire() is True
    mine.release()
