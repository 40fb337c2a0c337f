"""The KV-pool lottery in the machine: a start's identity, its baseline, the verdict and redraws.

Every start this daemon makes carries a config fingerprint (from the create job); its baseline (the
best pool of the EARLIER starts of that fingerprint, with that draw's memory breakdown) arrives as
:class:`KvBaseline`, its pool and vLLM's "Actual usage" breakdown as :class:`LogKvPool`, in any order.
Once the pool and the baseline are known, and the breakdown too (or the start is past vLLM's ready line:
a CPU worker never prints one), the pool is judged once: a warning when it is under
``kv_pool.warn_below_tokens`` or more than ``kv_pool.warn_drop_pct`` % under the baseline, naming the part
of the memory that grew against the best draw; with ``kv_pool.pin`` the warning names a
``--kv-cache-memory-bytes`` from the best draw ("advise"), and "apply" adds it to the next starts' command.
With ``kv_pool.min_tokens`` a too-small pool is stopped and started again (not a breaker failure), at most
``kv_pool.max_redraws`` times in a row. Adopted containers were judged by the daemon that started them.
The judgement and the baseline are :mod:`supervisor.core.vllm.kv_pool`'s; see docs/kv-pool.md.
"""

from __future__ import annotations

from dataclasses import replace

from supervisor.core.actions import CreateAndStart, ReadKvBaseline
from supervisor.core.events import ContainerStarted, KvBaseline, LogKvPool
from supervisor.core.machine.builder import Step
from supervisor.core.states import CONTAINER_UP_STATES, State
from supervisor.core.vllm import kv_pin, kv_pool
from supervisor.core.vocab import Pending


def on_container_started(c: Step, ev: ContainerStarted) -> None:
    """STARTING: our container is up; remember what it runs and ask for the baseline of its config."""
    c.set_kv(fingerprint=ev.fingerprint, image_id=ev.image_id, gmu=ev.gmu)
    if ev.fingerprint is not None:
        c.do(ReadKvBaseline(ev.fingerprint))


def on_kv_baseline(c: Step, ev: KvBaseline) -> None:
    """The baseline of a config: kept (status ``baseline_tokens``) if it is the current start's config."""
    if ev.fingerprint != c.s.kv.fingerprint:
        return  # an answer for another start's config: late, ignored
    c.set_kv(
        baseline_tokens=ev.tokens,
        baseline_for=ev.fingerprint,
        recent=tuple(ev.recent),
        best_usage=tuple(ev.best_usage),
        best_gib=ev.best_kv_gib,
    )
    report(c)


def on_kv_pool(c: Step, ev: LogKvPool) -> None:
    """The pool line(s) of this start: remember them; the first pool of our own start may be redrawn."""
    s = c.s
    first = s.kv.tokens is None and ev.tokens is not None
    if ev.usage:  # the "Actual usage" line (after the pool line, before ready)
        c.set_kv(usage=tuple(ev.usage))
        c.emit("kvpool.usage", **dict(ev.usage))
        if ev.tokens is None and ev.max_concurrency is None:
            report(c)
            return
    c.set_kv(
        tokens=ev.tokens if ev.tokens is not None else s.kv.tokens,
        max_concurrency=ev.max_concurrency if ev.max_concurrency is not None else s.kv.max_concurrency,
        gib=ev.kv_gib if ev.kv_gib is not None else s.kv.gib,
        model_gib=ev.model_gib if ev.model_gib is not None else s.kv.model_gib,
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
    report(c)


def report(c: Step) -> None:
    """Once the pool and its baseline are known (and the "Actual usage" line, or the start is past ready):
    kv_pool.judge decides, once per start; a bad pool is an event and a warning alert."""
    s = c.s
    kv = s.kv
    if kv.judged or s.adopted or s.state not in CONTAINER_UP_STATES or kv.tokens is None:
        return
    if kv.fingerprint is None or kv.baseline_for != kv.fingerprint:
        return  # the baseline of this start's config has not arrived yet
    if s.state == State.STARTING and not kv.usage and not s.load.ready_seen:
        return  # the "Actual usage" line comes after the pool line (a CPU worker prints none)
    c.set_kv(judged=True)
    p = c.policy
    found = kv_pool.judge(
        kv,
        warn_below_tokens=p.kv_pool.warn_below_tokens or None,  # 0: no floor
        warn_drop_pct=p.kv_pool.warn_drop_pct,
        pin_mode=p.kv_pool.pin,
        mem_available_gib=s.load.mem_available_gib,
        reserve_gib=p.host.reserve_gib,
    )
    if found is None:
        return
    v, advice = found.verdict, found.pin
    if advice is not None and p.kv_pool.pin == "apply":
        c.set_kv(pin_bytes=advice.bytes)
    c.emit(
        v.event,
        tokens=v.tokens,
        baseline=v.baseline,
        floor=v.floor,
        change_pct=None if v.change_pct is None else round(v.change_pct, 1),
        fingerprint=kv.fingerprint,
        bad_in_a_row=found.bad_before + 1,
        grew=found.grew,
        pin_bytes=advice.bytes if advice else None,
        pin=p.kv_pool.pin,
        message=found.message,
    )
    st = s.state
    c.alert_kind("warning", v.event, st, st, found.message)  # kv_pool.lottery | kv_pool.below_floor


def pin_next_start(c: Step) -> None:
    """kv_pool.pin apply: a create of the profile's spec carries the pin (status ``kv_pool.pin``); with the
    mode changed away from apply the pin is dropped at the next create."""
    s, p = c.s, c.policy
    if not any(isinstance(a, CreateAndStart) for a in c.actions):
        return
    if p.kv_pool.pin != "apply" and s.kv.pin_bytes is not None:
        c.set_kv(pin_bytes=None)
    pin = c.s.kv.pin_bytes
    running = False
    for i, a in enumerate(c.actions):
        if isinstance(a, CreateAndStart) and pin is not None and not a.last_good:
            c.actions[i] = replace(a, kv_cache_memory_bytes=pin)
            running = True
    c.set_kv(pin_running=running)
    if running:
        c.emit("kv_pool.pin_applied", bytes=pin, flag=f"{kv_pin.PIN_FLAG} {pin}")


def _redrawn(c: Step) -> bool:
    """``kv_pool.min_tokens``: stop a too-small pool to draw again (True), or keep it (False; warn on
    give-up)."""
    p, s = c.policy, c.s
    decision = kv_pool.redraw_decision(s.kv.tokens, p.kv_pool.min_tokens, s.kv.redraws, p.kv_pool.max_redraws)
    if decision == "accept":
        if s.kv.redraws:
            c.set_kv(redraws=0)
        return False
    if s.kv.tokens is None or p.kv_pool.min_tokens is None:
        return False  # not reached: redraw_decision accepts an unknown pool or no minimum
    message = kv_pool.redraw_message(decision, s.kv.tokens, p.kv_pool.min_tokens, s.kv.redraws)
    fields = {"tokens": s.kv.tokens, "min_tokens": p.kv_pool.min_tokens, "max_redraws": p.kv_pool.max_redraws}
    if decision == "give_up":
        c.emit("kv_pool.redraw_gave_up", redraws=s.kv.redraws, message=message, **fields)
        c.set_kv(redraws=0)
        st = s.state
        c.alert_kind("warning", "kv_pool.below_min", st, st, message)
        return False
    # STARTING -> STOPPING (pending redraw): a healthy start, stopped to draw another pool
    c.emit("kv_pool.redraw", attempt=s.kv.redraws + 1, message=message, **fields)
    c.set_kv(redraws=s.kv.redraws + 1, judged=True)
    c.stop("kv pool redraw", Pending.REDRAW)
    return True
