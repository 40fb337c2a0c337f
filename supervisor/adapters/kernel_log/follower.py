"""Kernel-log follower: /dev/kmsg (or ``dmesg --follow``) in a daemon thread, classified by
:mod:`supervisor.core.host.kernel_log`; every classified event is also kept in a bounded
:class:`~supervisor.adapters.kernel_log.ring.KernelRing` (what the failed-start diagnosis reads).

``/dev/kmsg`` yields one record per ``read()``: ``prio,seq,usec,flags[,...];message\\n`` followed by
optional continuation lines (`` KEY=value``). ``seq`` is a 64-bit counter of this boot, ``usec`` the
kernel timestamp in microseconds since boot. A reader whose next record was overwritten in the ring
buffer gets ``EPIPE`` once; the next read returns the oldest record still there (a jump in ``seq``).

Position: the caller persists :attr:`KernelLogFollower.position` (boot id + last seq + usec) and passes
it back on restart: records up to it are not reported again, records written meanwhile are. Without a
position (first run) the follower starts at the end (only new lines). A position from another boot
means everything in this boot's buffer is new (driver-load errors at boot are kept).

Fallback: when /dev/kmsg cannot be opened (EPERM/EACCES/ENOENT), ``dmesg --follow --raw`` is run and
its ``<prio>[ uptime] message`` lines are used (no seq: the position is the kernel timestamp). When
neither works, one warning is logged, :attr:`KernelLogFollower.error` says why and the thread ends.
"""

from __future__ import annotations

import errno
import os
import select
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import structlog

from supervisor.adapters.host.orphans import lookup_pid
from supervisor.adapters.host.system import boot_id
from supervisor.adapters.kernel_log.record import (
    KernelLogEvent,
    KmsgPosition,
    lost_between,
    parse_dmesg_raw,
    parse_record,
    wall_clock_of,
)
from supervisor.adapters.kernel_log.ring import KernelRing
from supervisor.adapters.threads import Supervised, checkpoint, supervised
from supervisor.core.host.attribution import other_for_all
from supervisor.core.host.kernel_log import KernelKind, classify_kernel_line, is_vllm_process, oom_context
from supervisor.core.host.kernel_quota import KernelQuota

log = structlog.get_logger(__name__)

KMSG = Path("/dev/kmsg")
DMESG_CMD: tuple[str, ...] = ("dmesg", "--follow", "--raw")
RECORD_MAX = 16384  # a /dev/kmsg record is at most ~8 KiB (message + dictionary); one read = one record
LINE_MAX = 16384  # dmesg lines longer than this are cut (bounded memory)
DMESG_GRACE_S = 0.5  # dmesg still running after this long (or printing) = it works
POLL_S = 0.5  # stop() is noticed within this (plus one callback); idle: 2 wake-ups a second
DRAIN_MAX = 1000  # records handled per wake-up before looking at the stop flag again
OOM_CONTEXTS_KEPT = 64  # oom-kill: lines waiting for their "Killed process" line (bounded memory)


class KernelLogFollower:
    """Follows the kernel log in a daemon thread and calls ``on_event`` for classified lines only.

    ``on_event`` and ``on_lost`` run in the follower thread; they must be quick and must not raise
    (an exception is logged and the follower carries on).
    """

    def __init__(
        self,
        on_event: Callable[[KernelLogEvent], None],
        position: KmsgPosition | None = None,
        *,
        on_lost: Callable[[int], None] | None = None,
        on_held: Callable[[tuple[str, int, float]], None] | None = None,
        path: Path = KMSG,
        dmesg_cmd: Sequence[str] = DMESG_CMD,
        ring: KernelRing[KernelLogEvent] | None = None,
    ) -> None:
        self._on_event = on_event
        #: Every classified event is also kept here (the failed-start diagnosis reads it).
        self.ring: KernelRing[KernelLogEvent] = ring if ring is not None else KernelRing()
        self._on_lost = on_lost
        self._on_held = on_held
        self._quota = KernelQuota()  # lines naming another's process: at most PER_WINDOW per kind and window
        self.held_total = 0
        self._path = path
        self._dmesg_cmd = tuple(dmesg_cmd)
        self._start = position
        self._boot_id = boot_id()
        self._last_seq: int | None = None
        self._last_usec = 0
        self._lock = threading.Lock()
        self._oom_cgroups: dict[int, str] = {}  # pid -> task_memcg of its oom-kill: line
        self._stop = threading.Event()
        self._thread: Supervised | None = None
        self._ran = False
        self._proc: subprocess.Popen[bytes] | None = None
        self.mode = "starting"  # then "kmsg", "dmesg" or "none" (neither works)
        self.error: str | None = None
        self.lost_total = 0
        self.events_total = 0
        #: False until the first read found nothing more: what is read before is the backlog
        self.caught_up = False
        if position is not None and position.boot_id == self._boot_id:
            self._last_seq, self._last_usec = position.seq, position.usec

    @property
    def position(self) -> KmsgPosition | None:
        """Where to resume next time (persist this); None until a record was seen or a position given."""
        with self._lock:
            if self._last_seq is None and self._last_usec == 0:
                return None
            return KmsgPosition(self._boot_id, self._last_seq, self._last_usec)

    @property
    def alive(self) -> bool:
        """True while the follower thread runs."""
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Open the kernel log (or start dmesg) and start the thread; never raises for a missing log."""
        if self._thread is not None:
            raise RuntimeError("KernelLogFollower.start() called twice")
        self._thread = supervised("kmsg-follower", self._resume, self._stop)  # a crash: restarted

    def stop(self, timeout: float = 2.0) -> None:
        """Stop the thread (it notices within POLL_S) and any dmesg child."""
        self._stop.set()
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.terminate()
        if self._thread is not None:
            self._thread.join(timeout)

    # --- the thread -------------------------------------------------------------------------------

    def _resume(self) -> None:
        """The thread's body: after a crash it goes on from the last record it handled."""
        if self._ran:
            self._start = self.position
        self._ran = True
        self._run()

    def _run(self) -> None:
        problems: list[str] = []
        try:
            fd = os.open(self._path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            problems.append(f"{self._path}: {exc.strerror or exc}")
        else:
            self.mode = "kmsg"
            try:
                self._follow_kmsg(fd)
            finally:
                os.close(fd)
            return
        if not self._follow_dmesg(problems):
            self.mode = "none"
            self.error = "cannot follow the kernel log (" + "; ".join(problems) + ")"
            log.warning(
                "host.kmsg.unavailable",
                reason=self.error,
                hint="run as root or with CAP_SYSLOG (kernel.dmesg_restrict=1 denies others)",
            )

    def _follow_kmsg(self, fd: int) -> None:
        fresh = self._start is None
        if fresh:
            os.lseek(fd, 0, os.SEEK_END)  # first run: only new records
        elif self._start is not None and self._start.boot_id != self._boot_id:
            log.info("host.kmsg.new_boot", saved_boot=self._start.boot_id, boot=self._boot_id)
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        log.info("host.kmsg.following", source=str(self._path), resume_seq=self._last_seq, fresh=fresh)
        while not self._stop.is_set():
            checkpoint("kmsg-follower")
            polled_at = self.ring.now()
            if not poller.poll(int(POLL_S * 1000)):
                self._drained(polled_at)
                continue
            for _ in range(DRAIN_MAX):
                if self._stop.is_set():
                    return
                read_at = self.ring.now()
                try:
                    data = os.read(fd, RECORD_MAX)
                except BlockingIOError:
                    self._drained(read_at)
                    break
                except InterruptedError:
                    continue
                except OSError as exc:
                    if exc.errno == errno.EPIPE:
                        continue  # overwritten: the next read jumps ahead; the seq gap counts the loss
                    if exc.errno == errno.EINVAL:
                        continue  # a record larger than our buffer: skipped
                    self.error = f"reading {self._path} failed: {exc.strerror or exc}"
                    log.warning("host.kmsg.read_failed", error=self.error)
                    return
                if not data:
                    break
                rec = parse_record(data)
                if rec is not None:
                    self._handle(rec[1], rec[2], rec[3], data.decode("utf-8", "replace").split("\n", 1)[0])

    def _drained(self, at: float) -> None:
        self.caught_up = True
        self.ring.mark_drained(at)
        self._quota, ended = self._quota.due(at)
        for held in ended:
            log.warning("host.kmsg.held_back", kind=held[0], lines=held[1])
            if self._on_held is not None:
                self._call(self._on_held, held)

    def _handle(self, seq: int | None, usec: int, message: str, raw: str) -> None:
        with self._lock:
            if seq is not None and self._last_seq is not None and seq <= self._last_seq:
                return  # reported before the restart
            if seq is None and usec <= self._last_usec:
                return  # dmesg: no seq, the kernel time is the position
            lost = lost_between(self._last_seq, seq) if seq is not None else 0
            self._last_seq, self._last_usec = seq, usec
        if lost:
            self.lost_total += lost
            log.warning("host.kmsg.lost", records=lost, seq=seq)
            if self._on_lost is not None:
                self._call(self._on_lost, lost)
        context = oom_context(message)
        if context is not None:  # the next line is "Out of memory: Killed process PID": keep its cgroup
            self._oom_cgroups[context[0]] = context[1]
            while len(self._oom_cgroups) > OOM_CONTEXTS_KEPT:
                self._oom_cgroups.pop(next(iter(self._oom_cgroups)))
            return
        ev = classify_kernel_line(message)
        if ev is None:
            return
        cgroup = None
        if ev.kind == KernelKind.OOM_KILL and ev.pid is not None:
            cgroup = self._oom_cgroups.pop(ev.pid, None)
        self.events_total += 1
        lookup = lookup_pid(ev.pid, cgroup)
        vllm = is_vllm_process(ev) if ev.proc_name is not None else None
        if other_for_all(ev.pid, vllm, lookup):  # another's process: never judged, held back in a flood
            self._quota, admitted = self._quota.admit(ev.kind, self.ring.now())
            if not admitted:
                self.held_total += 1
                return
        event = KernelLogEvent(
            kind=ev.kind,
            xid=ev.xid,
            pci=ev.pci,
            pid=ev.pid,
            proc_name=ev.proc_name,
            seq=seq,
            usec=usec,
            ts=wall_clock_of(usec),
            line=ev.line,
            raw=raw,
            cgroup=cgroup,
            lookup=lookup,
            backlog=not self.caught_up,
        )
        self.ring.add(event)
        self._call(self._on_event, event)

    def _call(self, fn: Callable[[Any], None], arg: Any) -> None:
        try:
            fn(arg)
        except Exception as exc:  # noqa: BLE001 - a faulty callback must not end the follower
            log.error("host.kmsg.callback_failed", error=repr(exc))

    def _follow_dmesg(self, problems: list[str]) -> bool:
        """Follow through dmesg; False (with the reason appended) when it cannot run at all."""
        cmd = list(self._dmesg_cmd)
        if self._start is None and "--follow" in cmd:
            cmd[cmd.index("--follow")] = "--follow-new"  # first run: only new lines
        else:
            self._last_seq = None  # dmesg has no seq: resume by kernel time
        try:
            proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
            )
        except OSError as exc:
            problems.append(f"{cmd[0]}: {exc.strerror or exc}")
            return False
        self._proc = proc
        assert proc.stdout is not None
        assert proc.stderr is not None
        out_fd = proc.stdout.fileno()
        buf = b""
        alive_since = time.monotonic()
        try:
            while not self._stop.is_set():
                checkpoint("kmsg-follower")
                polled_at = self.ring.now()
                ready, _, _ = select.select([out_fd], [], [], POLL_S)
                chunk = os.read(out_fd, 65536) if ready else None
                if chunk == b"" or (chunk is None and proc.poll() is not None):
                    break  # dmesg ended (at once when not permitted or given an unknown option)
                if self.mode != "dmesg" and (chunk or time.monotonic() - alive_since >= DMESG_GRACE_S):
                    self.mode = "dmesg"
                    log.info("host.kmsg.following", source=" ".join(cmd), resume_usec=self._last_usec)
                if chunk is None:
                    self._drained(polled_at)
                    continue
                buf += chunk
                *lines, buf = buf.split(b"\n")
                buf = buf[-LINE_MAX:]
                for raw_b in lines:
                    raw = raw_b[:LINE_MAX].decode("utf-8", "replace")
                    parsed = parse_dmesg_raw(raw)
                    if parsed is not None:
                        self._handle(None, parsed[1], parsed[2], raw)
        finally:
            if proc.poll() is None:
                proc.terminate()
            try:
                proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=2)
            err = proc.stderr.read(2000).decode("utf-8", "replace").strip()
            proc.stdout.close()
            proc.stderr.close()
        if self._stop.is_set():
            return True
        if self.mode == "dmesg":
            self.error = f"{cmd[0]} exited {proc.returncode}: {err[:200]}"
            log.warning("host.kmsg.dmesg_ended", error=self.error)
            return True
        problems.append(f"{' '.join(cmd)} exited {proc.returncode}: {err[:200]}")
        return False


def wait_started(follower: KernelLogFollower, timeout: float = 5.0) -> bool:
    """True once the follower reads the log (mode kmsg/dmesg); False when it gave up or time ran out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if follower.mode in ("kmsg", "dmesg"):
            return True
        if follower.mode == "none":
            return False
        time.sleep(0.02)
    return False


__all__ = [  # the record half lives in kmsg_record; callers import both from here
    "KMSG",
    "KernelLogEvent",
    "KernelLogFollower",
    "KmsgPosition",
    "lost_between",
    "parse_dmesg_raw",
    "parse_record",
    "wait_started",
    "wall_clock_of",
]
