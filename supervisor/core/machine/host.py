"""The host around a profile: kernel-log events, the /dev/shm sweep, the memory reserve after a load,
and what a stopped container left behind (orphan processes, memory that did not come back)."""

from __future__ import annotations

from dataclasses import replace

from supervisor.core.actions import CheckHostAfterStop
from supervisor.core.host.attribution import OURS
from supervisor.core.host.kernel_log import ALERT_KINDS
from supervisor.core.host.kernel_quiet import KernelQuiet, held_note
from supervisor.core.host.kernel_rule import IGNORE, KILL, TOLERATE, KernelLine, KernelRule, judge, phase_of
from supervisor.core.host.reserve import GIB, reserve_verdict
from supervisor.core.host_events import HostAfterStop, KernelReport, ReserveMeasured, ShmSwept
from supervisor.core.machine import kill as kill
from supervisor.core.machine.builder import Step
from supervisor.core.machine.policy import Policy
from supervisor.core.profile_state import ProfileState
from supervisor.core.states import CONTAINER_STATES, DRAIN_STATES, SERVING_STATES, State
from supervisor.core.vocab import Outcome

#: At most this many distinct kernel events are remembered for the failure that may follow.
MAX_REMEMBERED = 5


def kernel_rule(policy: Policy) -> KernelRule:
    """The kernel-line kill rule of this policy (core/host/kernel_rule.py)."""
    return KernelRule(
        policy=policy.host.kernel_memory_error, near_floor_gib=policy.host.memory_guard.mem_available_min_gib
    )


def judge_line(s: ProfileState, ev: KernelReport, policy: Policy) -> tuple[str, tuple[float, ...], str]:
    """The rule's verdict on one kernel line for this profile's container (kill | tolerate | remember |
    ignore), the updated rate of lines naming nobody, and why."""
    st = s.state
    phase = phase_of(st in SERVING_STATES | DRAIN_STATES, st == State.STARTING, s.kv.tokens is not None)
    since = s.container_started_at if s.container_started_at is not None else s.container_created_at
    line = KernelLine(ev.kind, ev.whose, ev.ts, ev.backlog, ev.mem_available_gib)
    return judge(kernel_rule(policy), phase, line, since, s.kernel.load_lines)


def on_kernel(c: Step, ev: KernelReport) -> None:
    """A kernel event: judged by the kill rule (docs/wedge.md "Which kernel lines kill"); remembered while
    a container of ours exists (a failure names it); a warning while serving."""
    st = c.s.state
    if st not in CONTAINER_STATES:
        return  # nothing of ours runs: the daemon's history has it (kernel.<kind>), no profile does
    verdict, rate, why = judge_line(c.s, ev, c.policy)
    if verdict == IGNORE:
        return  # printed before this container started: never its own
    recent = c.kernel_seen()
    new = ev.summary not in recent
    kept = ((*recent, ev.summary) if new else recent)[-MAX_REMEMBERED:]
    c.set(kernel=replace(c.s.kernel, recent=kept, recent_at=c.now, load_lines=rate))
    if verdict == KILL:
        kill.kill_now(
            c,
            f"kernel: {ev.line[:300]}",
            "kernel",
            Outcome.FAILED_KERNEL_MEMORY,
            summary=ev.summary,
            rule=why,
        )
        return
    if verdict == TOLERATE:
        if len(rate) == 1:  # the first of a run of the profiler's lines: once in the history
            c.emit("kernel.tolerated", kind=ev.kind, summary=ev.summary, why=why, mem=ev.mem_available_gib)
        return
    if ev.backlog:
        return  # recorded in the history by the daemon; a warning for an old line would mislead
    if ev.kind not in ALERT_KINDS or st not in SERVING_STATES | DRAIN_STATES:
        return
    held = 0
    if ev.whose != OURS:  # another process's line (or nobody's): at most one warning per kind per window
        s = c.s
        quiet, admitted = KernelQuiet(s.kernel.quiet_kinds, s.kernel.quiet_at, s.kernel.quiet_held).admit(
            ev.kind, c.now
        )
        c.set(kernel=replace(c.s.kernel, quiet_kinds=quiet.kinds, quiet_at=quiet.at, quiet_held=quiet.held))
        if admitted is None:
            return
        held = admitted
    elif not new:
        return
    reason = ev.line[:300] + held_note(held)
    c.emit("kernel.while_serving", kind=ev.kind, summary=ev.summary, line=ev.line[:300], held_back=held)
    c.alert_kind("warning", "kernel.while_serving", st, st, reason, summary=ev.summary)


def on_shm_swept(c: Step, ev: ShmSwept) -> None:
    """The /dev/shm sweep before a start: recorded when it found anything."""
    if not (ev.removed or ev.kept or ev.warnings):
        return
    c.emit(
        "shm.swept",
        removed=list(ev.removed),
        freed_bytes=ev.freed_bytes,
        kept=list(ev.kept),
        warnings=list(ev.warnings),
        mem_gain_gib=ev.mem_gain_gib,
    )


def on_reserve(c: Step, ev: ReserveMeasured) -> None:
    """Serving: MemAvailable after the load against the host reserve (a warning with the numbers)."""
    reserve = c.policy.host.reserve_gib
    if ev.mem_available_gib is None or reserve <= 0:
        return
    verdict = reserve_verdict(int(ev.mem_available_gib * GIB), reserve)
    fields = {"mem_available_gib": round(ev.mem_available_gib, 2), "reserve_gib": reserve}
    st = c.s.state
    if verdict is None:
        c.emit("host.reserve_ok", **fields)
        ok = f"MemAvailable {ev.mem_available_gib:.1f} GiB after the load, reserve {reserve:g} GiB"
        c.alert("info", "host memory reserve ok again", st, st, ok, kind="reserve.ok")  # resolves reserve.low
        return
    c.emit("host.reserve_low", **fields, detail=verdict)
    c.alert_kind("warning", "reserve.low", st, st, verdict)


def _orphan_text(ev: HostAfterStop) -> str:
    parts = [
        f"{o.name} pid {o.pid} {o.rss_bytes / GIB:.1f} GiB ({o.reason}, {o.outcome})" for o in ev.orphans
    ]
    return f"{len(ev.orphans)} process(es) outlived the container: " + "; ".join(parts[:5])


def on_host_after_stop(c: Step, ev: HostAfterStop) -> None:
    """After a container of ours went away: orphan processes and memory that did not come back."""
    problems: list[str] = []
    before, after = ev.mem_before_gib, ev.mem_after_gib
    if ev.orphans:
        c.emit(
            "host.orphans",
            container_id=ev.container_id,
            orphans=[
                {"pid": o.pid, "name": o.name, "rss_bytes": o.rss_bytes, "reason": o.reason}
                | {"outcome": o.outcome}
                for o in ev.orphans
            ],
            rss_bytes=sum(o.rss_bytes for o in ev.orphans),
        )
        problems.append(_orphan_text(ev))
    if before is not None and after is not None and after < before - c.policy.memory_return_tolerance_gib:
        c.emit(
            "host.memory_not_returned",
            container_id=ev.container_id,
            mem_before_gib=round(before, 2),
            mem_after_gib=round(after, 2),
        )
        problems.append(f"MemAvailable {after:.1f} GiB after the stop < {before:.1f} GiB before the start")
    c.emit(
        "host.after_stop",
        container_id=ev.container_id,
        orphans=len(ev.orphans),
        mem_before_gib=before,
        mem_after_gib=after,
    )
    if problems:
        st = c.s.state
        c.alert_kind("warning", "host.not_clean", st, st, "; ".join(problems))


def after_stop(old: ProfileState, new: ProfileState, policy: Policy) -> CheckHostAfterStop | None:
    """A container of ours went away in this step: look at what it left behind (None: it did not)."""
    gone = old.container_id
    if gone is None or new.container_id == gone:
        return None
    before = old.mem_before_start_gib
    back = before - policy.memory_return_tolerance_gib if before is not None else None
    return CheckHostAfterStop(gone, before, back)
