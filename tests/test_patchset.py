"""Patch-set custody without Docker: the hashing rule on real files, the fingerprint, the label, drift,
the content-addressed copies (keep, restore, refuse, collect) and the machine's periodic drift check."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import pytest

from supervisor.adapters.store import patchset
from supervisor.core.actions import CheckDrift
from supervisor.core.errors import StateError
from supervisor.core.machine.reload import DRIFT_RECHECK_S
from supervisor.core.spec.last_good import LastGood, change_diff
from supervisor.core.spec.model import ContainerSpec, Mount
from supervisor.core.spec.patchset import (
    DIR,
    FILE,
    MANIFEST,
    MAX_CONTENT_BYTES,
    MAX_DIR_FILES,
    MISSING,
    SKIPPED,
    from_label,
    labelled,
    patch_drift,
    patched_fingerprint,
    to_label,
)
from tests.test_machine_driver import Driver, fresh_boot, policy

TARGET = "/usr/local/lib/python3.12/dist-packages/vllm/fused_moe.py"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _file(tmp: Path, data: bytes = b"x = 1\n") -> Mount:
    path = tmp / "fused_moe.py"
    path.write_bytes(data)
    return Mount(str(path), TARGET, read_only=True)


def test_a_file_is_hashed_by_content_and_an_edit_changes_it(tmp_path: Path) -> None:
    m = _file(tmp_path)
    before = patchset.hash_mount(m)
    assert (before.kind, before.digest, before.files) == (FILE, _sha(b"x = 1\n"), (("", _sha(b"x = 1\n")),))
    Path(m.source).write_bytes(b"x = 2\n")
    after = patchset.hash_mount(m)
    assert after.digest == _sha(b"x = 2\n")
    assert patched_fingerprint("abcdef012345", [before]) != patched_fingerprint("abcdef012345", [after])
    assert len(patched_fingerprint("abcdef012345", [after])) == 12


def test_no_bind_mount_keeps_the_fingerprint() -> None:
    assert patched_fingerprint("abcdef012345", []) == "abcdef012345"
    assert (
        patchset.hash_mounts([Mount("", "/dev/shm", type="tmpfs"), Mount("v", "/data", type="volume")]) == ()
    )


def test_directories_by_the_rule(tmp_path: Path) -> None:
    small = tmp_path / "patches"
    (small / "sub").mkdir(parents=True)
    (small / "a.py").write_bytes(b"a")
    (small / "sub" / "b.py").write_bytes(b"b")
    e = patchset.hash_mount(Mount(str(small), "/opt/patches", read_only=True))
    assert e.kind == DIR
    assert e.files == (("a.py", _sha(b"a")), ("sub/b.py", _sha(b"b")))
    (small / "sub" / "b.py").write_bytes(b"B")
    assert patchset.hash_mount(Mount(str(small), "/opt/patches", read_only=True)).digest != e.digest
    (small / "alias.py").symlink_to("a.py")  # hashed as its target text, not kept as a file
    linked = patchset.hash_mount(Mount(str(small), "/opt/patches", read_only=True))
    assert [rel for rel, _ in linked.files] == ["a.py", "sub/b.py"]
    (small / "alias.py").unlink()
    (small / "alias.py").symlink_to("sub/b.py")
    assert patchset.hash_mount(Mount(str(small), "/opt/patches", read_only=True)).digest != linked.digest
    writable = patchset.hash_mount(Mount(str(small), "/root/.cache"))
    assert (writable.kind, writable.note) == (SKIPPED, "writable directory")

    many = tmp_path / "weights"
    many.mkdir()
    for i in range(MAX_DIR_FILES + 1):
        (many / f"shard-{i:04d}.json").write_bytes(b"{}")
    weights = patchset.hash_mount(Mount(str(many), "/models/m", read_only=True))
    assert weights.kind == MANIFEST
    assert weights.files == ()
    assert f"{MAX_DIR_FILES + 1} files" in weights.shown()
    os.utime(many / "shard-0000.json", ns=(1, 1))  # a manifest sees a touched file
    assert patchset.hash_mount(Mount(str(many), "/models/m", read_only=True)).digest != weights.digest


def test_a_big_file_is_never_read(tmp_path: Path) -> None:
    big = tmp_path / "model.gguf"
    with big.open("wb") as f:  # sparse: the size of a weights file, no data
        f.truncate(MAX_CONTENT_BYTES + 1)
    big.chmod(0)  # unreadable (not for root): opening it would fail
    e = patchset.hash_mount(Mount(str(big), "/models/model.gguf", read_only=True))
    assert (e.kind, e.size, e.files) == (MANIFEST, MAX_CONTENT_BYTES + 1, ())
    assert patchset.hash_mount(Mount(str(tmp_path / "nope"), "/x")).kind == MISSING


def test_label_round_trip_and_drift(tmp_path: Path) -> None:
    m = _file(tmp_path)
    created = patchset.hash_mounts([m])
    back = from_label(to_label(created))
    assert labelled([("vllm-supervisor.patches", to_label(created))]) == back
    assert labelled([("other", "x")]) is None
    assert patch_drift(patchset.hash_mounts([m]), back) == ()
    Path(m.source).write_bytes(b"x = 3\n")
    items = patch_drift(patchset.hash_mounts([m]), back)
    assert [(i.field, i.key) for i in items] == [("patches", TARGET)]
    assert items[0].want == f"file {_sha(b'x = 3' + bytes([10]))[:16]}"
    assert items[0].have == f"file {_sha(b'x = 1' + bytes([10]))[:16]}"
    with pytest.raises(StateError):
        from_label("[1]")


def test_last_good_keeps_patches_and_change_diff_names_them(tmp_path: Path) -> None:
    m = _file(tmp_path)
    spec = ContainerSpec(name="c", image="img", mounts=(m,))
    good = LastGood(spec, "abcdef012345", patches=patchset.hash_mounts([m]))
    assert LastGood.from_dict(good.to_dict()) == good
    Path(m.source).write_bytes(b"y\n")
    items = change_diff(
        spec, good.spec, new_patches=patchset.hash_mounts([m]), last_good_patches=good.patches
    )
    assert [(i.field, i.key) for i in items] == [("patches", TARGET)]


def test_keep_restore_and_collect(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    m = _file(tmp_path, b"good\n")
    entries = patchset.hash_mounts([m])
    assert patchset.keep(state, entries) == []
    root = state / patchset.PATCHES_DIR
    copy = root / _sha(b"good\n")
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    assert stat.S_IMODE(copy.stat().st_mode) == 0o600
    assert copy.read_bytes() == b"good\n"

    Path(m.source).write_bytes(b"bad\n")
    assert patchset.restore(state, entries) == [m.source]
    assert Path(m.source).read_bytes() == b"good\n"
    replaced = root / patchset.REPLACED_DIR / _sha(b"bad\n")
    assert replaced.read_bytes() == b"bad\n"  # the operator's edit is not lost
    assert stat.S_IMODE(replaced.stat().st_mode) == 0o600
    assert patchset.restore(state, entries) == []  # already as kept: nothing written

    Path(m.source).write_bytes(b"bad\n")
    copy.write_bytes(b"tampered\n")
    with pytest.raises(StateError, match="does not match its hash"):
        patchset.restore(state, entries)
    assert Path(m.source).read_bytes() == b"bad\n"  # refused: nothing changed
    copy.unlink()
    with pytest.raises(StateError, match="missing"):
        patchset.restore(state, entries)
    assert Path(m.source).read_bytes() == b"bad\n"

    assert patchset.keep(state, patchset.hash_mounts([m])) == []
    assert patchset.collect(state, {_sha(b"bad\n")}) == []
    (root / _sha(b"old\n")).write_bytes(b"old\n")
    assert patchset.collect(state, {_sha(b"bad\n")}) == [_sha(b"old\n")]
    assert sorted(p.name for p in root.iterdir()) == sorted([_sha(b"bad\n"), patchset.REPLACED_DIR])


def test_keep_refuses_a_file_edited_since_it_was_hashed(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    m = _file(tmp_path, b"one\n")
    entries = patchset.hash_mounts([m])
    Path(m.source).write_bytes(b"two\n")
    problems = patchset.keep(state, entries)
    assert len(problems) == 1
    assert "changed since it was hashed" in problems[0]
    assert list((state / patchset.PATCHES_DIR).iterdir()) == []


def test_serving_rechecks_drift_periodically() -> None:
    """RUNNING: a CheckDrift every DRIFT_RECHECK_S (an edited patch file needs no reload to show)."""
    d = Driver(policy=policy(probes={"interval_s": 600.0}))
    fresh_boot(d)
    d.to_running("c1")
    checks = [a for a in d.advance(DRIFT_RECHECK_S * 3) if isinstance(a, CheckDrift)]
    assert checks[:2] == [CheckDrift("c1"), CheckDrift("c1")]
    assert 2 <= len(checks) <= 3
