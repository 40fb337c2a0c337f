"""Files a local user could plant: a load lock made first by someone else, a symlink in its place, a
state directory others may write. Each is refused with a clear error (real files, run as root)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from supervisor.adapters.host.system import LoadLock
from supervisor.adapters.store.state import Store
from supervisor.core.errors import HostError, StateError

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the ownership rules apply to a daemon run as root")


def test_a_load_lock_planted_by_another_user_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "load.lock"
    path.write_text("")
    os.chown(path, 65534, 65534)
    with pytest.raises(HostError, match="owned by uid 65534"):
        LoadLock(path).try_acquire()


def test_a_symlink_in_place_of_the_load_lock_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "victim"
    target.write_text("precious\n")
    (tmp_path / "load.lock").symlink_to(target)
    with pytest.raises(HostError, match="symlink"):
        LoadLock(tmp_path / "load.lock").try_acquire()
    assert target.read_text() == "precious\n"  # never opened, never truncated


def test_a_root_owned_lock_is_taken(tmp_path: Path) -> None:
    lock = LoadLock(tmp_path / "run" / "load.lock")
    assert lock.try_acquire()
    lock.release()


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o757])
def test_a_state_dir_others_may_write_is_refused(tmp_path: Path, mode: int) -> None:
    state = tmp_path / "state"
    state.mkdir()
    state.chmod(mode)
    with pytest.raises(StateError, match="writable by group or others"):
        Store(state)


def test_a_state_dir_of_another_user_is_refused(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    os.chown(state, 65534, 65534)
    with pytest.raises(StateError, match="owned by uid 65534"):
        Store(state)


def test_a_symlinked_state_dir_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (tmp_path / "state").symlink_to(real)
    with pytest.raises(StateError, match="not a directory"):
        Store(tmp_path / "state")
