"""The KV-pool lottery in the machine: a start's identity, its baseline, the verdict and redraws.

Every start this daemon makes carries a config fingerprint (from the create job); its baseline (the
best pool of the EARLIER starts of that fingerprint, with that draw's memory breakdown) arrives as
:class:`KvBaseline`, its pool and vLLM's "Actual usage" breakdown as :class:`LogKvPool`, in any order.
Once the pool and the baseline are known, and the breakdown too (or the start is past vLLM's ready line:
a CPU worker never prints one), the pool is judged once: a warning when it is under
``kv_warn_below_tokens`` or more than ``kv_warn_drop_pct`` % under the baseline, naming the part of the
memory that grew against the best draw; with ``kv_pin`` the warning names a ``--kv-cache-memory-bytes``
from the best draw ("advise"), and "apply" adds it to the next starts' command. With
``kv_min_tokens`` a too-small pool is stopped and started again (not a breaker failure), at most
``kv_max_redraws`` times in a row. Adopted containers were judged by the daemon that started them.
The arithmetic is :mod:`supervisor.core.vllm.kv_pool`; see docs/kv-pool.md.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from supervisor.core.actions import CreateAndStart, ReadKvBaseline
from supervisor.core.events import ContainerStarted, KvBaseline, LogKvPool
from supervisor.core.machine.builder import Step
from supervisor.core.states import CONTAINER_UP_STATES, State
from supervisor.core.vllm import kv_pin, kv_pool, memory
from supervisor.core.vocab import Pending


def fresh_start_fields() -> dict[str, Any]:
    """The per-start KV fields of a new start attempt (WAITING -> STARTING)."""
    return {
        "kv_tokens": None,
        "kv_max_concurrency": None,
        "kv_gib": None,
        "kv_model_gib": None,
        "kv_fingerprint": None,
        "kv_image_id": None,
        "kv_gmu": None,
        "kv_baseline_tokens": None,
        "kv_baseline_for": None,
        "kv_judged": False,
        "kv_usage": (),
        "kv_best_usage": (),
        "kv_best_gib": None,
    }


def on_container_started(c: Step, ev: ContainerStarted) -> None:
    """STARTING: our container is up; remember what it runs and ask for the baseline of its config."""
    c.set(kv_fingerprint=ev.fingerprint, kv_image_id=ev.image_id, kv_gmu=ev.gmu)
    if ev.fingerprint is not None:
        c.do(ReadKvBaseline(ev.fingerprint))


def on_kv_baseline(c: Step, ev: KvBaseline) -> None:
    """The baseline of a config: kept (status ``baseline_tokens``) if it is the current start's config."""
    if ev.fingerprint != c.s.kv_fingerprint:
        return  # an answer for another start's config: late, ignored
    c.set(
        kv_baseline_tokens=ev.tokens,
        kv_baseline_for=ev.fingerprint,
        kv_recent=tuple(ev.recent),
        kv_best_usage=tuple(ev.best_usage),
        kv_best_gib=ev.best_kv_gib,
    )
    judge(c)


def on_kv_pool(c: Step, ev: LogKvPool) -> None:
    """The pool line(s) of this start: remember them; the first pool of our own start may be redrawn."""
    s = c.s
    first = s.kv_tokens is None and ev.tokens is not None
    if ev.usage:  # the "Actual usage" line (after the pool line, before ready)
        c.set(kv_usage=tuple(ev.usage))
        c.emit("kvpool.usage", **dict(ev.usage))
        if ev.tokens is None and ev.max_concurrency is None:
            judge(c)
            return
    c.set(
        kv_tokens=ev.tokens if ev.tokens is not None else s.kv_tokens,
        kv_max_concurrency=ev.max_concurrency if ev.max_concurrency is not None else s.kv_max_concurrency,
        kv_gib=ev.kv_gib if ev.kv_gib is not None else s.kv_gib,
        kv_model_gib=ev.model_gib if ev.model_gib is not None else s.kv_model_gib,
    )
    c.emit(
        "kvpool.recorded",
        tokens=ev.tokens,
        max_concurrency=ev.max_concurrency,
        kv_gib=ev.kv_gib,
        model_gib=ev.model_gib,
    )
    if c.s.state != State.STARTING:
        return
    c.set_load(last_progress_at=c.now)
    if first and not c.s.adopted and _redrawn(c):
        return
    judge(c)


def judge(c: Step) -> None:
    """Compare the pool with its baseline once both are known: a warning event and alert if it is bad."""
    s = c.s
    if s.kv_judged or s.adopted or s.state not in CONTAINER_UP_STATES or s.kv_tokens is None:
        return
    if s.kv_fingerprint is None or s.kv_baseline_for != s.kv_fingerprint:
        return  # the baseline of this start's config has not arrived yet
    if s.state == State.STARTING and not s.kv_usage and not s.load.ready_seen:
        return  # the "Actual usage" line comes after the pool line (a CPU worker prints none)
    c.set(kv_judged=True)
    p = c.policy
    bad_before = kv_pool.bad_streak(s.kv_recent, s.kv_baseline_tokens, p.kv_warn_drop_pct)
    verdict = kv_pool.judge(
        s.kv_tokens, s.kv_baseline_tokens, p.kv_warn_below_tokens, p.kv_warn_drop_pct, bad_before
    )
    if verdict is None:
        return
    grew = memory.what_grew(s.kv_usage, s.kv_best_usage)
    advice = _pin(c) if p.kv_pin in ("advise", "apply") else None
    message = (
        verdict.message + (f"; {grew}" if grew else "") + (f"; {advice.text(p.kv_pin)}" if advice else "")
    )
    if advice is not None and p.kv_pin == "apply":
        c.set(kv_pin_bytes=advice.bytes)
    c.emit(
        verdict.event,
        tokens=verdict.tokens,
        baseline=verdict.baseline,
        floor=verdict.floor,
        change_pct=None if verdict.change_pct is None else round(verdict.change_pct, 1),
        fingerprint=s.kv_fingerprint,
        bad_in_a_row=bad_before + 1,
        grew=grew,
        pin_bytes=advice.bytes if advice else None,
        pin=p.kv_pin,
        message=message,
    )
    st = s.state
    c.alert_kind("warning", verdict.event, st, st, message)  # kv_pool.lottery | kv_pool.below_floor


def _pin(c: Step) -> kv_pin.PinAdvice | None:
    """The ``--kv-cache-memory-bytes`` of the best draw for this bad one (KV bytes per token of this start,
    else of the best draw), keeping the host reserve (docs/kv-pool.md "Pin")."""
    s = c.s
    per_token = memory.bytes_per_token(s.kv_gib, s.kv_tokens) or memory.bytes_per_token(
        s.kv_best_gib, s.kv_baseline_tokens
    )
    non_kv = memory.non_kv_gib(s.kv_usage)
    return kv_pin.pin_advice(
        s.kv_baseline_tokens,
        per_token,
        s.kv_gib,
        s.load.mem_available_gib,
        non_kv if non_kv is not None else s.kv_model_gib,
        c.policy.reserve_gib,
    )


def pin_next_start(c: Step) -> None:
    """kv_pool.pin apply: a create of the profile's spec carries the pin (status ``kv_pool.pin``); with the
    mode changed away from apply the pin is dropped at the next create."""
    s, p = c.s, c.policy
    if not any(isinstance(a, CreateAndStart) for a in c.actions):
        return
    if p.kv_pin != "apply" and s.kv_pin_bytes is not None:
        c.set(kv_pin_bytes=None)
    pin = c.s.kv_pin_bytes
    running = False
    for i, a in enumerate(c.actions):
        if isinstance(a, CreateAndStart) and pin is not None and not a.last_good:
            c.actions[i] = replace(a, kv_cache_memory_bytes=pin)
            running = True
    c.set(kv_pin_running=running)
    if running:
        c.emit("kv_pool.pin_applied", bytes=pin, flag=f"{kv_pin.PIN_FLAG} {pin}")


def _redrawn(c: Step) -> bool:
    """``kv_min_tokens``: stop a too-small pool to draw again (True), or keep it (False; warn on give-up)."""
    p, s = c.policy, c.s
    decision = kv_pool.redraw_decision(s.kv_tokens, p.kv_min_tokens, s.kv_redraws, p.kv_max_redraws)
    if decision == "accept":
        if s.kv_redraws:
            c.set(kv_redraws=0)
        return False
    if s.kv_tokens is None or p.kv_min_tokens is None:
        return False  # not reached: redraw_decision accepts an unknown pool or no minimum
    message = kv_pool.redraw_message(decision, s.kv_tokens, p.kv_min_tokens, s.kv_redraws)
    fields = {"tokens": s.kv_tokens, "min_tokens": p.kv_min_tokens, "max_redraws": p.kv_max_redraws}
    if decision == "give_up":
        c.emit("kv_pool.redraw_gave_up", redraws=s.kv_redraws, message=message, **fields)
        c.set(kv_redraws=0)
        st = s.state
        c.alert_kind("warning", "kv_pool.below_min", st, st, message)
        return False
    # STARTING -> STOPPING (pending redraw): a healthy start, stopped to draw another pool
    c.emit("kv_pool.redraw", attempt=s.kv_redraws + 1, message=message, **fields)
    c.set(kv_redraws=s.kv_redraws + 1, kv_judged=True)
    c.stop("kv pool redraw", Pending.REDRAW)
    return True
