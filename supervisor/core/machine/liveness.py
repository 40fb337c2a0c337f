"""RUNNING / DEGRADED: forward progress over probe rounds (docs/state-machine.md "Liveness").

Busy = a step ended since the last round: a /metrics counter moved (prompt, generation or iteration
counters, the KV usage, the preemptions). The container's CPU time alone only says the process runs (a hung
CUDA kernel spins the waiting host thread, docs/vllm-facts.md "A hang that burns a core"): it keeps a step
alive up to the longest step this config can legitimately take, never longer. Stuck = work present
(requests running or waiting, or our canary pending) and, for longer than a bound, nothing moved:

- ``freeze_after_s`` with the CPU time known and flat (a stopped engine uses no CPU);
- the longest legitimate step (``step_limit_s``: ``step_factor x`` the step's tokens over the learned
  prefill rate, at least ``freeze_after_s``; ``stall_after_s`` until this container's first counted step,
  which may compile) with the counters flat whatever the CPU does (an engine spinning without steps), once
  the step also burned half a core over that bound, or 2x the bound passed (``progress.step_spent``: a
  prefill on a CPU others share takes longer; a spin-wait burns a whole core);
- ``canary_deadline_s`` for our canary, sent only when idle, while the engine counts no request at all
  (an engine frozen while idle never sees it: running 0, waiting 0).
"""

from __future__ import annotations

from supervisor.core.events import ProbeRound
from supervisor.core.machine.builder import Step
from supervisor.core.profile_state import Stall
from supervisor.core.vllm.activity import CPU_SIGNALS
from supervisor.core.vllm.progress import (
    EngineShape,
    Reading,
    add_sample,
    learned_rate,
    longest_step_s,
    moved,
    rate_sample,
    step_spent,
)

#: Rounds come every probe interval give or take how long each took: a bound that is a whole number of
#: intervals is met by the round that comes that many intervals later even if it is this much early.
ROUND_JITTER_S = 1.0


def reading(ev: ProbeRound) -> Reading:
    """What the round read, as progress signals."""
    return Reading(
        prompt_tokens=ev.prompt_tokens_total,
        generation_tokens=ev.generation_tokens_total,
        iterations=ev.iterations_total,
        kv_usage=ev.kv_usage,
        preemptions=ev.preemptions_total,
        cpu_s=ev.cpu_s,
        thread_demand=ev.thread_demand,
        running=ev.requests_running,
        waiting=ev.requests_waiting,
    )


def previous(st: Stall) -> Reading:
    """What the previous round read."""
    return Reading(
        prompt_tokens=st.last_prompt,
        generation_tokens=st.last_tokens,
        iterations=st.last_iterations,
        kv_usage=st.last_kv,
        preemptions=st.last_preemptions,
        cpu_s=st.last_cpu,
        running=st.last_running,
        waiting=st.last_waiting,
    )


def step_limit_s(c: Step, stepped: bool = True) -> float:
    """The longest legitimate step of this engine at its learned (or default) prefill rate: at least
    ``freeze_after_s`` (a bound shorter than the freeze bound is below a few rounds' precision), at least
    ``stall_after_s`` before this container's first counted step (``stepped`` False: it may compile)."""
    p = c.policy
    shape = EngineShape(p.engine.chunked_prefill, p.engine.max_num_batched_tokens, p.engine.max_model_len)
    rate = learned_rate(c.s.prefill_rates, p.probes.prefill_tokens_per_s)
    floor = p.probes.freeze_after_s if stepped else max(p.probes.freeze_after_s, p.probes.stall_after_s)
    return longest_step_s(shape, rate, p.probes.step_factor, floor)


def gpu_note(st: Stall, watts: float | None) -> str:
    """What the GPU drew, for a stuck verdict ("" where the box reports no power): work-level or
    idle-level against this engine's own last idle and working rounds. Recorded, never decided on: a hung
    kernel at ~idle power is what an H200 and a GB10 showed (docs/vllm-facts.md "A hang that burns a
    core")."""
    if watts is None:
        return ""
    idle, busy = st.gpu_idle_w, st.gpu_busy_w
    if idle is None or busy is None or busy <= idle:
        return f"; GPU power {watts:.0f} W"
    level = "idle-level" if watts - idle < busy - watts else "work-level"
    return f"; GPU power {watts:.0f} W, {level} (idle {idle:.0f} W, working {busy:.0f} W)"


def _cpu_note(burned: float | None) -> str:
    """The CPU time a stuck step burned, for its verdict ("" when not known)."""
    return "" if burned is None else f" ({burned:.0f} s of CPU)"


def looks_idle(st: Stall) -> bool:
    """The last round saw no request (or no metrics): a canary may be sent."""
    return not ((st.last_running or 0.0) + (st.last_waiting or 0.0) > 0)


def _learn_rate(c: Step, st: Stall, cur: Reading) -> None:
    """A lone prefill ended (vLLM counts a prompt at once, when its prefill ends): one rate sample."""
    base, since = st.prompt_at_work, st.rate_since
    if cur.prompt_tokens is None or base is None or since is None or not st.lone:
        return
    span = c.now - since
    if span < 2 * c.policy.probes.interval_s:
        return  # too short to time within a round's precision
    sample = rate_sample(cur.prompt_tokens - base, span)
    if sample is None:
        return
    fp = c.s.kv.fingerprint
    rates = c.s.prefill_rates if c.s.prefill_rates_for == fp else ()
    c.set(prefill_rates=add_sample(rates, sample), prefill_rates_for=fp)
    c.emit("probe.prefill_rate", tokens_per_s=round(sample, 1), prompt_tokens=cur.prompt_tokens - base)


def progress(c: Step, ev: ProbeRound) -> str | None:
    """Update the forward-progress record from one round; returns why the engine is stuck (None: not)."""
    p = c.policy
    st = c.s.stall
    cur = reading(ev)
    first = st.last_round_at is None or st.last_round_at > c.now
    dt = c.now - (st.last_round_at if st.last_round_at is not None else c.now)
    signals = () if first else moved(previous(st), cur, dt, p.probes.cpu_busy_cores)
    counters = tuple(s for s in signals if s not in CPU_SIGNALS)
    canary = c.s.gen_pending_since is not None
    work = cur.work or canary
    new_work = work and (st.work_since is None or st.work_since > c.now)
    work_since = (c.now if new_work else st.work_since) if work else None
    lone = (True if new_work else st.lone) and (cur.running or 0.0) <= 1 and (cur.waiting or 0.0) == 0
    prompt_moved = "prompt_tokens" in counters
    if prompt_moved:
        _learn_rate(c, st, cur)
    restart_rate = new_work or prompt_moved or not work
    prompt_base = cur.prompt_tokens if restart_rate else st.prompt_at_work
    rate_since = (c.now if restart_rate else st.rate_since) if work else None
    progress_at = c.now if signals else st.progress_at
    counters_at = c.now if counters else st.counters_at
    # this container's engine has ended a step that output (its first, which may compile, is behind it)
    stepped = (
        st.stepped or bool(counters) or (cur.generation_tokens or 0.0) > 0 or (cur.iterations or 0.0) > 0
    )
    limit = step_limit_s(c, stepped)
    flat_counters = 0.0
    if work_since is not None:
        flat_counters = c.now - max(work_since, counters_at if counters_at is not None else work_since)
    # the CPU time when the current step began (work began, or a counter moved): the step's budget
    step_cpu = st.step_cpu
    if not work:
        step_cpu = None
    elif new_work or counters or step_cpu is None or (cur.cpu_s is not None and cur.cpu_s < step_cpu):
        step_cpu = cur.cpu_s
    burned = cur.cpu_s - step_cpu if cur.cpu_s is not None and step_cpu is not None else None
    stuck: str | None = None
    if ev.requests_running is None and cur.cpu_s is None:
        verdict, signal = "unknown", "no metrics"
    elif counters or (signals and (not work or flat_counters < limit)):
        # a step ended (a counter moved); or the CPU works within the longest step (a prefill counts
        # nowhere on /metrics until its first step ends; the CPU time shows it), never past it
        verdict, signal = "busy", "+".join(signals)
    elif not work:
        verdict, signal = "idle", "no requests"
    else:
        assert work_since is not None
        flat = c.now - max(work_since, progress_at if progress_at is not None else work_since)
        since = c.s.gen_pending_since
        pending = c.now - since if since is not None else 0.0
        verdict, signal = (
            "waiting",
            f"no step for {flat_counters:.0f} s (limits {p.probes.freeze_after_s:.0f}/{limit:.0f} s)",
        )
        # nothing moved since the canary was sent (the CPU included when known: a first step that
        # compiles for a while is counted nowhere either, but it burns CPU)
        last_move = progress_at if cur.cpu_s is not None else counters_at
        unseen = since is not None and (last_move is None or last_move < since)
        # without the CPU time a first step (a whole monolithic prefill) is indistinguishable from a
        # freeze until it ends: then only the longest-step bound is safe
        deadline = (
            p.probes.canary_deadline_s if cur.cpu_s is not None else max(p.probes.canary_deadline_s, limit)
        )
        if canary and not cur.work and pending >= deadline and unseen:
            stuck = f"canary unanswered for {pending:.0f} s and counted nowhere (running 0, waiting 0)"
        elif cur.cpu_s is not None and flat >= p.probes.freeze_after_s:
            stuck = f"no progress for {flat:.0f} s with work present (counters and CPU time flat)"
        elif flat_counters >= limit - ROUND_JITTER_S and step_spent(
            flat_counters, burned, limit - ROUND_JITTER_S
        ):
            burning = "" if not signals else f" while the CPU works{_cpu_note(burned)}"
            stuck = (
                f"no engine step for {flat_counters:.0f} s{burning}, longer than the longest step"
                f" ({limit:.0f} s)"
            )
        if stuck is not None:
            stuck += gpu_note(st, ev.gpu_power_w)
            verdict, signal = "stuck", stuck
    c.set(
        stall=Stall(
            last_tokens=cur.generation_tokens,
            last_running=cur.running,
            last_round_at=c.now,
            last_prompt=cur.prompt_tokens,
            last_iterations=cur.iterations,
            last_kv=cur.kv_usage,
            last_preemptions=cur.preemptions,
            last_gpu_w=ev.gpu_power_w,
            gpu_idle_w=ev.gpu_power_w if verdict == "idle" and ev.gpu_power_w is not None else st.gpu_idle_w,
            gpu_busy_w=ev.gpu_power_w if counters and ev.gpu_power_w is not None else st.gpu_busy_w,
            last_cpu=cur.cpu_s,
            last_waiting=cur.waiting,
            work_since=work_since,
            rate_since=rate_since,
            progress_at=progress_at,
            counters_at=counters_at,
            prompt_at_work=prompt_base,
            lone=lone,
            step_cpu=step_cpu,
            stepped=stepped,
            verdict=verdict,
            signal=signal,
        )
    )
    return stuck
