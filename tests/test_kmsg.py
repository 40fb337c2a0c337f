"""The kernel-log follower on the real /dev/kmsg and real dmesg: classification, resume, fallback, stop."""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from supervisor.adapters.host import system as host
from supervisor.adapters.kernel_log.follower import (
    KernelLogEvent,
    KernelLogFollower,
    KmsgPosition,
    lost_between,
    parse_dmesg_raw,
    parse_record,
    wait_started,
    wall_clock_of,
)
from tests.harness import python_as_nobody, wait_for

NOMEM = (
    "<3>NVRM: nvCheckOkFailedNoLog: Check failed: Out of memory [NV_ERR_NO_MEMORY] (0x00000051) "
    "returned from _memdescAllocInternal({token}) @ mem_desc.c:1353\n"
)
XID = (
    "<4>NVRM: Xid (PCI:0000:0a:00): 31, pid=4242, name=VLLM::EngineCor, channel 0x00000002. "
    "MMU Fault: ENGINE GRAPHICS GPC0 faulted @ {token}\n"
)
NOISE = "<6>vsup test noise {token}\n"


def _write_kmsg(text: str) -> None:
    try:
        fd = os.open("/dev/kmsg", os.O_WRONLY)
    except OSError as exc:
        pytest.skip(f"/dev/kmsg is not writable here ({exc.strerror}); these tests need root")
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


class Collector:
    """Thread-safe list of the events carrying one test's token."""

    def __init__(self, token: str) -> None:
        self.token = token
        self._lock = threading.Lock()
        self._events: list[KernelLogEvent] = []

    def __call__(self, ev: KernelLogEvent) -> None:
        if self.token in ev.line:
            with self._lock:
                self._events.append(ev)

    def events(self) -> list[KernelLogEvent]:
        with self._lock:
            return list(self._events)

    def wait(self, n: int, timeout: float = 30.0) -> list[KernelLogEvent]:
        return wait_for(
            lambda: self.events() if len(self.events()) >= n else None, timeout, message=f"{n} events"
        )


@contextmanager
def following(follower: KernelLogFollower) -> Iterator[KernelLogFollower]:
    follower.start()
    try:
        assert wait_started(follower, timeout=30.0), follower.error
        yield follower
    finally:
        follower.stop()


def _token() -> str:
    return f"vsup_kmsg_{uuid.uuid4().hex}"


@pytest.mark.kmsg  # a memory-error line in the shared kernel log: every daemon's diagnosis reads it
def test_follower_classifies_nv_err_and_xid_from_real_kmsg() -> None:
    """NV_ERR_NO_MEMORY and Xid 31 lines written to /dev/kmsg arrive classified with seq, pid, wall time."""
    token = _token()
    _write_kmsg(NOMEM.format(token=token))  # before start: a first run begins at the end
    got = Collector(token)
    with following(KernelLogFollower(got)) as f:
        assert f.mode == "kmsg"
        _write_kmsg(NOISE.format(token=token))
        _write_kmsg(NOMEM.format(token=token))
        _write_kmsg(XID.format(token=token))
        nomem, xid = got.wait(2)
    assert nomem.kind == "nv_err_no_memory"
    assert nomem.line.startswith("NVRM: nvCheckOkFailedNoLog")
    assert (xid.kind, xid.xid, xid.pci, xid.pid, xid.proc_name) == (
        "xid",
        31,
        "0000:0a:00",
        4242,
        "VLLM::EngineCor",
    )
    assert nomem.seq is not None
    assert xid.seq is not None
    assert xid.seq > nomem.seq
    assert abs(xid.ts - time.time()) < 60, (
        xid.ts - time.time()
    )  # wall clock of the record (a wrong boot-time base is hours off)
    assert xid.raw.split(";", 1)[1].startswith("NVRM: Xid")
    assert len(got.events()) == 2


@pytest.mark.kmsg  # a memory-error line in the shared kernel log: every daemon's diagnosis reads it
def test_the_ring_holds_a_line_written_just_before_the_question() -> None:
    """What the failed-start diagnosis relies on: a line written to the real /dev/kmsg right before
    ``ring.since`` is in its answer (it waits for the follower to read it), noise is not kept."""
    token = _token()
    got = Collector(token)
    with following(KernelLogFollower(got)) as f:
        t0 = time.time() - 1.0
        _write_kmsg(NOISE.format(token=token))
        _write_kmsg(NOMEM.format(token=token))
        _write_kmsg(XID.format(token=token))
        ours = [e for e in f.ring.since(t0) if token in e.line]
        assert [e.kind for e in ours] == ["nv_err_no_memory", "xid"]
        assert ours[0].raw.split(";", 1)[1].startswith("NVRM: nvCheckOkFailedNoLog")
        assert [e for e in f.ring.since(time.time() + 60) if token in e.line] == []


@pytest.mark.kmsg  # a memory-error line in the shared kernel log: every daemon's diagnosis reads it
def test_restart_with_position_skips_old_and_reports_missed_lines() -> None:
    """A follower restarted with the saved position reports lines written while stopped, never old ones."""
    token = _token()
    first = Collector(token)
    with following(KernelLogFollower(first)) as f:
        _write_kmsg(NOMEM.format(token=token + "_old"))
        (old,) = first.wait(1)
        # at or past the old line: other lines of the host (a container's veth, beside a busy phase) may
        # follow it before the position is read (`== old.seq` timed out once in a from-zero run, 2026-12-06)
        old_seq = old.seq
        assert old_seq is not None
        wait_for(lambda: f.position is not None and (f.position.seq or 0) >= old_seq, 30, message="position")
    saved = json.loads(json.dumps(f.position.to_dict() if f.position else {}))
    assert not f.alive
    _write_kmsg(XID.format(token=token + "_missed"))
    second = Collector(token)
    with following(KernelLogFollower(second, KmsgPosition.from_dict(saved))):
        _write_kmsg(NOMEM.format(token=token + "_new"))
        events = second.wait(2)
    assert [e.line.split(token)[1].split(")")[0] for e in events] == ["_missed", "_new"]
    assert events[0].kind == "xid"
    assert events[0].seq is not None
    assert old.seq is not None
    assert events[0].seq > old.seq


@pytest.mark.kmsg  # a memory-error line in the shared kernel log: every daemon's diagnosis reads it
def test_position_from_another_boot_reads_whole_buffer() -> None:
    """A saved position of another boot means the whole current buffer is new (boot-time errors kept)."""
    token = _token()
    _write_kmsg(NOMEM.format(token=token))
    got = Collector(token)
    stale = KmsgPosition(boot_id="not-this-boot", seq=10**12, usec=10**15)
    with following(KernelLogFollower(got, stale)) as f:
        (ev,) = got.wait(1)
        assert f.position is not None
        assert f.position.boot_id == host.boot_id()
    assert ev.kind == "nv_err_no_memory"


@pytest.mark.kmsg  # follows the real /dev/kmsg (the parallel phase may not read it: docs/testing.md)
def test_stop_ends_the_thread() -> None:
    """stop() on an idle follower (blocked in a read of /dev/kmsg) returns and the thread is gone."""
    f = KernelLogFollower(lambda ev: None)
    with following(f):
        assert f.alive
    assert not f.alive


@pytest.mark.kmsg  # a memory-error line in the shared kernel log: every daemon's diagnosis reads it
def test_faulty_callback_does_not_end_the_follower() -> None:
    """A callback that raises is logged; the next event is still delivered."""
    token = _token()
    got = Collector(token)
    calls = 0

    def flaky(ev: KernelLogEvent) -> None:
        nonlocal calls
        if token not in ev.line:  # another test's line (the ring is shared): neither counted nor failed
            return
        calls += 1
        if calls == 1:
            raise RuntimeError("boom")
        got(ev)

    with capture_logs() as logs, following(KernelLogFollower(flaky)) as f:
        _write_kmsg(NOMEM.format(token=token + "_1"))
        wait_for(lambda: any(e["event"] == "host.kmsg.callback_failed" for e in logs), 10, message="log")
        _write_kmsg(NOMEM.format(token=token + "_2"))
        (ev,) = got.wait(1)
        assert f.alive
    assert token + "_2" in ev.line


@pytest.mark.kmsg  # a memory-error line in the shared kernel log: every daemon's diagnosis reads it
def test_dmesg_fallback_when_kmsg_cannot_be_opened(tmp_path: Path) -> None:
    """Without a readable kmsg file the real ``dmesg --follow --raw`` is used: same events, no seq."""
    token = _token()
    got = Collector(token)
    with following(KernelLogFollower(got, path=tmp_path / "no-kmsg")) as f:
        assert f.mode == "dmesg"
        _write_kmsg(XID.format(token=token))
        (ev,) = got.wait(1)
    assert (ev.kind, ev.xid, ev.pid, ev.seq) == ("xid", 31, 4242, None)
    assert abs(ev.ts - time.time()) < 60  # wall clock of the record, not seconds since boot
    assert f.position is not None
    assert f.position.usec >= ev.usec  # at our line, or past it: other jobs on the box write lines too
    assert not f.alive


def test_neither_kmsg_nor_dmesg_warns_once(tmp_path: Path) -> None:
    """A missing kmsg and a failing dmesg give one warning, mode 'none' and an error text, no exception."""
    with capture_logs() as logs:
        f = KernelLogFollower(
            lambda ev: None, path=tmp_path / "no-kmsg", dmesg_cmd=("dmesg", "--no-such-opt")
        )
        f.start()
        assert not wait_started(f)
        wait_for(lambda: not f.alive, 5, message="thread end")
    assert f.mode == "none"
    assert f.error is not None
    assert "no-kmsg" in f.error
    assert "dmesg --no-such-opt exited 1" in f.error
    assert [e["event"] for e in logs if e["log_level"] == "warning"] == ["host.kmsg.unavailable"]


def test_unprivileged_user_gets_a_clear_error() -> None:
    """As user nobody with kernel.dmesg_restrict=1 both sources are refused (EPERM): mode 'none', no crash."""
    if os.geteuid() != 0:
        pytest.skip("needs root to switch to nobody")
    if Path("/proc/sys/kernel/dmesg_restrict").read_text().strip() != "1":
        pytest.skip("kernel.dmesg_restrict is 0: nobody may read the kernel log here")
    # one JSON line of its own: the follower's warning goes to stdout too, in whatever order the threads
    # write (a busy box once left a log line among the printed ones)
    proc = python_as_nobody(
        "import json\n"
        "from supervisor.adapters.kernel_log.follower import KernelLogFollower, wait_started\n"
        "f = KernelLogFollower(lambda ev: None); f.start(); started = wait_started(f, timeout=30.0)\n"
        "f.stop(); print('RESULT ' + json.dumps([started, f.mode, f.error]))\n"
    )
    assert proc.returncode == 0, proc.stderr
    [line] = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    started, mode, error = json.loads(line.removeprefix("RESULT "))
    assert (started, mode) == (False, "none")
    assert "Operation not permitted" in error


def test_record_and_line_parsers() -> None:
    """kmsg records (with dictionary lines) and dmesg --raw lines parse; malformed ones give None."""
    rec = b"3,1234,5678901,-,caller=T1;NVRM: hello\n SUBSYSTEM=pci\n"
    assert parse_record(rec) == (3, 1234, 5678901, "NVRM: hello")
    assert parse_record(b"garbage") is None
    assert parse_record(b"x,1,2,-;m\n") is None
    assert parse_dmesg_raw("<3>[  252.682592] NVRM: x\n") == (3, 252682592, "NVRM: x")
    assert parse_dmesg_raw("[  1.5] no prio") is None
    assert lost_between(None, 50) == 0
    assert lost_between(10, 11) == 0
    assert lost_between(10, 16) == 5
    pos = KmsgPosition("b", 7, 99)
    assert KmsgPosition.from_dict(pos.to_dict()) == pos
    assert KmsgPosition.from_dict({"boot_id": 1}) is None
    # monotonic microseconds map onto the wall clock by one offset: differences are kept exactly
    base = int(time.monotonic() * 1e6)
    assert wall_clock_of(base + 5_000_000) - wall_clock_of(base) == pytest.approx(5.0, abs=0.002)
