"""Patch custody opens the operator's bind-mounted files as root: a file swapped for a FIFO or a symlink
between the walk and the read never hangs the job or is read through, and a rollback never writes through
a directory swapped for a symlink (issue 39 item 7)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from supervisor.adapters.store import patchset
from supervisor.core.errors import StateError
from supervisor.core.spec.model import Mount
from supervisor.core.spec.patchset import DIR, SKIPPED, PatchEntry


def _swap_after_walk(target: Path, swap: Callable[[Path], object]) -> Callable[[], float]:
    """A clock for hash_mount that swaps ``target`` the moment the walk has listed it (the walk reads the
    clock after each directory): the race an owner of the file could win, made certain."""
    calls = [0]

    def now() -> float:
        calls[0] += 1
        if calls[0] == 2:  # 1: hash_mount sets the deadline; 2: the walk finished the top directory
            held = os.open(target, os.O_RDONLY)  # the old inode stays in use: the new file gets another
            target.unlink()
            swap(target)
            os.close(held)
        return 0.0

    return now


def _hash_in_thread(m: Mount, now: Callable[[], float]) -> PatchEntry:
    """hash_mount in a thread joined with a deadline: a FIFO opened for reading would block it for ever."""
    out: list[PatchEntry] = []
    worker = threading.Thread(target=lambda: out.append(patchset.hash_mount(m, now)), daemon=True)
    worker.start()
    worker.join(timeout=20)
    if worker.is_alive():
        # let the blocked open finish so the thread ends, then fail
        with open(m.source + "/f", "wb"):  # the FIFO's other end
            pass
        pytest.fail("hash_mount blocked on a FIFO swapped in after the walk")
    return out[0]


def _mount_dir(tmp_path: Path) -> tuple[Mount, Path]:
    src = tmp_path / "patches"
    src.mkdir()
    (src / "f").write_bytes(b"print('patched')\n")
    return Mount(source=str(src), target="/patches", read_only=True), src / "f"


def test_a_file_swapped_for_a_fifo_after_the_walk_does_not_hang_the_hash(tmp_path: Path) -> None:
    m, f = _mount_dir(tmp_path)
    entry = _hash_in_thread(m, _swap_after_walk(f, os.mkfifo))
    assert entry.kind == SKIPPED
    assert "not a regular file" in entry.note


def test_a_file_swapped_for_a_symlink_after_the_walk_is_not_read_through(tmp_path: Path) -> None:
    m, f = _mount_dir(tmp_path)
    private = tmp_path / "private"
    private.write_bytes(b"root's secret\n")
    entry = _hash_in_thread(m, _swap_after_walk(f, lambda p: p.symlink_to(private)))
    assert entry.kind == SKIPPED
    assert "symbolic links" in entry.note or "Too many levels" in entry.note or "loop" in entry.note.lower()


def test_a_file_replaced_by_another_after_the_walk_is_not_hashed_as_it(tmp_path: Path) -> None:
    m, f = _mount_dir(tmp_path)
    entry = _hash_in_thread(m, _swap_after_walk(f, lambda p: p.write_bytes(b"other\n")))
    assert entry.kind == SKIPPED
    assert "replaced by another file" in entry.note


def test_a_rollback_never_writes_through_a_directory_swapped_for_a_symlink(tmp_path: Path) -> None:
    src = tmp_path / "patches"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "f").write_bytes(b"good\n")
    m = Mount(source=str(src), target="/patches", read_only=True)
    state = tmp_path / "state"
    state.mkdir()
    entries = patchset.hash_mounts([m])
    assert entries[0].kind == DIR
    assert patchset.keep(state, entries) == []
    elsewhere = tmp_path / "etc"
    elsewhere.mkdir()
    (src / "sub" / "f").unlink()
    (src / "sub").rmdir()
    (src / "sub").symlink_to(elsewhere)  # the owner of the mount swaps a directory for a link
    with pytest.raises(StateError, match="is a symlink now"):
        patchset.restore(state, entries)
    assert list(elsewhere.iterdir()) == []  # nothing written through it
