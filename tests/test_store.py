"""Tests of the persistence adapter against real files (and a real tiny tmpfs for the full-disk case)."""

from __future__ import annotations

import contextlib
import json
import os
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from supervisor.adapters.store.state import Store
from supervisor.core.clock import FakeClock
from supervisor.core.errors import StateError
from supervisor.core.vocab import Intent
from tests.harness import interned_names


@pytest.fixture
def store(tmp_path: Path, fake_clock: FakeClock) -> Store:
    """A store in a fresh state directory."""
    return Store(tmp_path / "state", clock=fake_clock)


def test_state_dir_created_0700_and_files_0600(store: Store) -> None:
    """The state directory is private and so is every file written in it."""
    store.save_profile_state("m1", {"state": "RUNNING"})
    store.save_intent("m1", Intent.STOP)
    store.append_event({"name": "container.exited", "profile": "m1"})
    assert stat.S_IMODE(store.state_dir.stat().st_mode) == 0o700
    for path in store.state_dir.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path


def test_profile_state_round_trip_and_missing(store: Store) -> None:
    """A saved state loads back equal; a never-saved profile loads as None."""
    assert store.load_profile_state("m1") is None
    data = {"state": "FATAL", "breaker": {"emergencies": [1.0, 2.0]}, "boot_id": "abc"}
    store.save_profile_state("m1", data)
    assert store.load_profile_state("m1") == data
    store.save_profile_state("m1", {"state": "STOPPED"})
    assert store.load_profile_state("m1") == {"state": "STOPPED"}
    assert not [p for p in store.state_dir.iterdir() if ".tmp-" in p.name]


def test_corrupt_state_raises_names_file_and_keeps_copy_intent_survives(
    store: Store, fake_clock: FakeClock
) -> None:
    """A corrupt state file raises StateError naming it, is kept aside, and the intent is still readable."""
    store.save_intent("m1", Intent.STOP)
    store.save_profile_state("m1", {"state": "STOPPED"})
    path = store.state_path("m1")
    path.write_text('{"state": "STOPP')
    with pytest.raises(StateError) as info:
        store.load_profile_state("m1")
    assert str(path) in str(info.value)
    assert "not valid JSON" in str(info.value)
    kept = path.with_name(f"{path.name}.corrupt-{int(fake_clock.now())}")
    assert kept.read_text() == '{"state": "STOPP'
    assert store.load_intent("m1") == "stop"
    assert store.load_profile_state("m1") is None


def test_state_that_is_not_an_object_is_corrupt(store: Store) -> None:
    """A JSON list where an object belongs is reported as corrupt."""
    store.state_path("m1").write_text("[1, 2]")
    with pytest.raises(StateError, match="expected a JSON object"):
        store.load_profile_state("m1")


def test_intent_validation(store: Store) -> None:
    """Only run/stop are accepted and a garbage intent file raises StateError."""
    assert store.load_intent("m1") is None
    store.save_intent("m1", Intent.RUN)
    assert store.load_intent("m1") == "run"
    with pytest.raises(ValueError, match="intent"):
        store.save_intent("m1", "pause")  # type: ignore[arg-type]
    store.intent_path("m1").write_text("maybe")
    with pytest.raises(StateError, match="expected 'run' or 'stop'"):
        store.load_intent("m1")


def test_a_profiles_file_names_are_interned_once_not_per_write(
    store: Store,
) -> None:
    """Python 3.11's pathlib interns every name it parses; a state file name built again per write churned
    CPython's interned-strings table in a soak's daemon (adapters/host/cputime.py). Seen through
    ``sys.intern``,
    which that pathlib calls for each part."""
    with interned_names() as names:
        for n in range(5):
            store.save_profile_state("m1", {"n": n})
            store.save_intent("m1", Intent.RUN)
    assert store.load_profile_state("m1") == {"n": 4}
    assert names.count("m1.state.json") <= 1, names
    assert names.count("m1.intent") <= 1, names


def test_profile_name_cannot_escape_state_dir(store: Store) -> None:
    """A name with a path separator is refused."""
    with pytest.raises(ValueError, match="invalid profile name"):
        store.save_profile_state("../etc", {})


def test_events_append_filter_and_order(store: Store, fake_clock: FakeClock) -> None:
    """Events come back oldest first, filtered by profile and limited to the last n."""
    for i in range(10):
        fake_clock.advance(1)
        store.append_event({"name": "probe.failed", "profile": "a" if i % 2 else "b", "fields": {"i": i}})
    last3 = store.read_events(None, 3)
    assert [e["fields"]["i"] for e in last3] == [7, 8, 9]
    only_a = store.read_events("a", 100)
    assert [e["fields"]["i"] for e in only_a] == [1, 3, 5, 7, 9]
    assert only_a[-1]["ts"] == fake_clock.now()
    assert store.read_events("nobody", 5) == []


def test_torn_last_line_is_skipped_and_not_glued(store: Store) -> None:
    """A half-written last line is ignored and the next append starts on a new line."""
    store.append_event({"name": "a.one", "profile": "m"})
    with (store.state_dir / "events.jsonl").open("a") as f:
        f.write('{"ts": 1, "name": "a.tw')
    assert [e["name"] for e in store.read_events("m", 10)] == ["a.one"]
    store.append_event({"name": "a.two", "profile": "m"})
    assert [e["name"] for e in store.read_events("m", 10)] == ["a.one", "a.two"]


def test_events_rotate_keeping_one_old_file(tmp_path: Path, fake_clock: FakeClock) -> None:
    """Past the size limit the file rotates to .1; reads span both files; older generations are dropped."""
    store = Store(tmp_path, clock=fake_clock, rotate_bytes=2000)
    for i in range(200):
        store.append_event({"name": "tick.tock", "profile": "m", "fields": {"i": i, "pad": "x" * 40}})
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["events.jsonl", "events.jsonl.1"]
    assert (tmp_path / "events.jsonl").stat().st_size < 2000 + 200
    recent = store.read_events("m", 30)
    assert [e["fields"]["i"] for e in recent] == list(range(170, 200))
    every = store.read_events("m", 10_000)
    assert every[-1]["fields"]["i"] == 199
    assert len(every) < 200  # generation .2 is gone


def test_reverse_reader_crosses_chunk_boundaries(store: Store) -> None:
    """Reading the tail works for files larger than one read chunk."""
    for i in range(3000):
        store.append_event({"name": "x.y", "profile": "m", "fields": {"i": i, "pad": "p" * 30}})
    assert (store.state_dir / "events.jsonl").stat().st_size > 64 * 1024
    got = store.read_events("m", 2500)
    assert [e["fields"]["i"] for e in got] == list(range(500, 3000))


def test_start_ledger(store: Store) -> None:
    """Start records are kept per profile, oldest first, each with its time (the KV baseline is
    computed from them by core/vllm/kv_pool.py)."""
    pools = [1_013_816, 557_599, 557_599]
    for tokens in pools:
        store.append_start({"profile": "m", "outcome": "ready", "kv_tokens": tokens, "load_s": 600.0})
    store.append_start({"profile": "m", "outcome": "failed_oom", "kv_tokens": None})
    store.append_start({"profile": "other", "outcome": "ready", "kv_tokens": 5})
    store.append_start({"profile": "m", "outcome": "ready", "kv_tokens": 2_000_000})
    starts = store.read_starts("m", 10)
    assert [s["outcome"] for s in starts] == ["ready", "ready", "ready", "failed_oom", "ready"]
    assert all("ts" in s for s in starts)


def test_unwritable_dir_raises_state_error(tmp_path: Path) -> None:
    """A state directory that cannot be created is a StateError naming it."""
    bad = tmp_path / "not-a-dir"
    bad.write_text("")
    with pytest.raises(StateError, match="cannot create state directory"):
        Store(bad / "state")


@contextlib.contextmanager
def _tiny_tmpfs() -> Iterator[Path]:
    mnt = Path(tempfile.mkdtemp(prefix="vsup-tmpfs-"))
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k,mode=0700", "tmpfs", str(mnt)],
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    if proc.returncode != 0:
        mnt.rmdir()
        pytest.skip(f"cannot mount a tmpfs here (needs root/CAP_SYS_ADMIN): {proc.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], timeout=20, check=False)
        mnt.rmdir()


def _fill(directory: Path) -> None:
    """Fill the file system that holds ``directory`` until ENOSPC."""
    fd = os.open(directory / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        block = b"\0" * 4096
        for _ in range(10_000):
            try:
                os.write(fd, block)
            except OSError:
                break
    finally:
        os.close(fd)


def test_full_disk_keeps_previous_state(fake_clock: FakeClock) -> None:
    """On a full (real, 64 KiB tmpfs) disk saving raises a clear StateError and the old state is intact."""
    with _tiny_tmpfs() as mnt:
        store = Store(mnt / "state", clock=fake_clock)
        store.save_profile_state("m1", {"state": "RUNNING", "n": 1})
        store.save_intent("m1", Intent.RUN)
        store.append_event({"name": "a.b", "profile": "m1"})
        _fill(mnt)
        big = {"state": "FATAL", "blob": "z" * 20_000}
        with pytest.raises(StateError, match="no space left on device") as info:
            store.save_profile_state("m1", big)
        assert str(store.state_path("m1")) in str(info.value)
        assert store.load_profile_state("m1") == {"state": "RUNNING", "n": 1}
        assert store.load_intent("m1") == "run"
        with pytest.raises(StateError, match="no space left on device"):
            store.append_event({"name": "a.c", "profile": "m1", "fields": {"blob": "y" * 20_000}})
        assert [e["name"] for e in store.read_events("m1", 10)] == ["a.b"]
        assert not [p for p in store.state_dir.iterdir() if ".tmp-" in p.name]
        assert json.loads(store.state_path("m1").read_text())["n"] == 1
