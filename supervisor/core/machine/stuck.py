"""An engine judged stuck: where it hung, read before its emergency stop (docs/state-machine.md "Where it
hung").

The stuck verdict (liveness.py) does not stop the engine at once: the machine asks for the engine core's
Python stack (ReadEngineStack: py-spy from outside the container, off the loop) and waits for the answer
(StackRead) at most ``stack_wait_s``, never longer than the emergency grace, then stops it with the top
frames in the emergency's reason (the alert), the history (``engine.stack``) and the flight recorder. A
read that fails (no py-spy, no CAP_SYS_PTRACE, no engine-core process) answers at once with why; one that
does not answer in time is given up: the stop is never held longer. probe.py finishes the stop.
"""

from __future__ import annotations

from supervisor.core.actions import ReadEngineStack
from supervisor.core.machine.builder import Step
from supervisor.core.probe_events import StackRead


def wait_s(c: Step) -> float:
    """How long the stop waits for the stack at most: ``stack_wait_s``, capped by the emergency grace."""
    return max(0.0, min(c.policy.probes.stack_wait_s, c.policy.urgent_grace_s()))


def begin(c: Step, reason: str) -> bool:
    """Ask for the stack of the engine judged stuck for ``reason``; False when none is read (off, no
    container, or a read already asked for): then the caller stops it now."""
    cid = c.s.container_id
    wait = wait_s(c)
    if wait <= 0 or cid is None or c.s.stuck_reason is not None:
        return False
    c.set(stuck_reason=reason, stuck_until=c.now + wait)
    c.do(ReadEngineStack(container_id=cid, budget_s=wait))
    return True


def answered(c: Step, read: StackRead) -> bool:
    """The answer is the one the pending stop waits for."""
    return c.s.stuck_reason is not None and read.purpose == "stuck" and read.container_id == c.s.container_id


def overdue(c: Step) -> bool:
    """The pending stop waited its longest for the stack."""
    return c.s.stuck_reason is not None and c.s.stuck_until is not None and c.now >= c.s.stuck_until


def take(c: Step, read: StackRead | None) -> tuple[str, StackRead]:
    """End the wait: the stuck reason and the stack (or why there is none); records ``engine.stack``."""
    reason = c.s.stuck_reason or "stuck"
    cid = c.s.container_id or ""
    if read is None:
        read = StackRead(cid, error=f"not read within {wait_s(c):.1f} s (the stop does not wait longer)")
    c.set(stuck_reason=None, stuck_until=None)
    c.emit("engine.stack", detail=read.summary(), **read.as_fields())
    return reason, read
