"""The sentinel's judgement, pure: when the canary is due, the baseline, the decay streak, the verdict.

One :class:`SentinelRun` per profile, held in the fleet state (``supervisor/core/fleet/sentinel.py``) and
changed only by these functions. The baseline of a start is the median decode speed of the earlier starts of
the same config fingerprint (the perf ledger) together with the samples of this run's first
``baseline_s`` that were not slow; a sample below ``decay_pct`` % under the baseline is slow; ``STREAK``
slow samples in a row make the profile SLOW (a warning alert, liveness untouched); a sample at or above
the threshold ends it. With ``on_decay: restart`` a SLOW profile gets one drained maintenance restart,
never more than once per ``min_restart_interval_s``.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

#: Slow samples in a row before the profile is SLOW.
STREAK = 3
#: At most this many samples of the first hour are kept for the baseline (every loop bounded).
MAX_RUN_SAMPLES = 64

OnDecay = Literal["alert", "restart"]
Flip = Literal["slow", "recovered"]


@dataclass(frozen=True)
class SentinelPolicy:
    """What the judgement needs of the profile's ``sentinel:`` section."""

    warmup_s: float = 300.0
    interval_s: float = 900.0
    decay_pct: float = 30.0
    on_decay: OnDecay = "alert"
    min_restart_interval_s: float = 21600.0
    baseline_s: float = 3600.0


@dataclass(frozen=True)
class Sample:
    """One canary: time to first token, decode speed and vLLM's own counters at that moment."""

    at: float
    ttft_ms: float
    decode_tps: float
    tokens: int
    mtp_acceptance: tuple[float, ...] = ()  # per draft position, accepted / drafts (empty: no MTP)
    prefix_hit_rate: float | None = None


@dataclass(frozen=True)
class SentinelRun:
    """The sentinel's view of one profile's current run (a new container starts a new one)."""

    container_id: str | None = None
    fingerprint: str | None = None
    ready_at: float | None = None  # the run became healthy (the warm-up counts from here)
    next_at: float | None = None  # the next canary is due (None: not scheduled yet)
    history: tuple[float, ...] = ()  # per-start decode medians of earlier starts of this fingerprint
    history_loaded: bool = False
    run: tuple[float, ...] = ()  # this run's first-hour decode samples that were not slow
    streak: int = 0  # slow samples in a row
    slow_since: float | None = None  # first slow sample of the current streak
    slow: bool = False  # STREAK reached (status shows SLOW)
    last: Sample | None = None
    samples: int = 0
    restart_due: bool = False  # on_decay restart: the restart waits for its window
    last_restart_at: float | None = None  # kept across runs (the restart's own rate limit)
    backends: tuple[str, ...] = field(default=())

    def baseline(self) -> float | None:
        """The median of the earlier starts' figures and this run's first hour (None: nothing yet)."""
        values = [*self.history, *self.run]
        return statistics.median(values) if values else None


def last_restart(rows: Sequence[Mapping[str, Any]]) -> float | None:
    """When the sentinel last restarted the profile, from its perf ledger rows (``restart`` true: the row of
    the sample that decided it): the restart rate limit survives a daemon restart."""
    stamps = [r["ts"] for r in rows if r.get("restart") is True and isinstance(r.get("ts"), int | float)]
    return float(max(stamps)) if stamps else None


def fresh(current: SentinelRun, container_id: str, fingerprint: str | None, ready_at: float) -> SentinelRun:
    """A new run of the profile: everything but the restart rate limit starts over."""
    return SentinelRun(
        container_id=container_id,
        fingerprint=fingerprint,
        ready_at=ready_at,
        last_restart_at=current.last_restart_at,
    )


def due(current: SentinelRun, now: float, policy: SentinelPolicy) -> bool:
    """Whether a canary may be sent now (warm-up over, interval elapsed); idleness is checked by the job."""
    if current.ready_at is None or current.container_id is None:
        return False
    first = current.ready_at + policy.warmup_s
    return now >= (current.next_at if current.next_at is not None else first)


def scheduled(current: SentinelRun, now: float, policy: SentinelPolicy) -> SentinelRun:
    """A canary was sent (or skipped because the server was busy): the next one an interval later."""
    return replace(current, next_at=now + policy.interval_s)


def busy(current: SentinelRun, now: float, retry_s: float) -> SentinelRun:
    """The server had requests: no canary; try again soon (never competes with users)."""
    return replace(current, next_at=now + retry_s)


def threshold(baseline: float, policy: SentinelPolicy) -> float:
    """The decode speed below which a sample is slow."""
    return baseline * (1.0 - policy.decay_pct / 100.0)


@dataclass(frozen=True)
class Verdict:
    """What one sample means: slow or not, the flip it made, and whether to restart now."""

    baseline: float | None
    slow_sample: bool
    flip: Flip | None = None
    restart: bool = False

    def message(self, sample: Sample, since: float | None) -> str:
        """``decode 12.1 tok/s, baseline 33.2 (-64 %) for 45 min``."""
        if self.baseline is None or self.baseline <= 0:
            return f"decode {sample.decode_tps:.1f} tok/s, no baseline yet"
        pct = round((sample.decode_tps - self.baseline) / self.baseline * 100.0)
        text = f"decode {sample.decode_tps:.1f} tok/s, baseline {self.baseline:.1f} ({pct:+d} %)"
        if since is not None:
            text += f" for {max(0, round((sample.at - since) / 60.0))} min"
        return text


def observe(
    current: SentinelRun, sample: Sample, now: float, policy: SentinelPolicy
) -> tuple[SentinelRun, Verdict]:
    """Judge one canary against the baseline; the new run state and the verdict."""
    base = current.baseline()
    slow_sample = base is not None and sample.decode_tps < threshold(base, policy)
    w = replace(current, last=sample, samples=current.samples + 1)
    in_first = current.ready_at is not None and sample.at - current.ready_at <= policy.baseline_s
    if not slow_sample and in_first and len(w.run) < MAX_RUN_SAMPLES:
        w = replace(w, run=(*w.run, sample.decode_tps))
    if not slow_sample:
        flip: Flip | None = "recovered" if w.slow else None
        w = replace(w, streak=0, slow_since=None, slow=False, restart_due=False)
        return w, Verdict(base, False, flip)
    streak = w.streak + 1
    since = w.slow_since if w.slow_since is not None else sample.at
    w = replace(w, streak=streak, slow_since=since)
    flip = None
    if streak >= STREAK and not w.slow:
        w = replace(w, slow=True, restart_due=policy.on_decay == "restart")
        flip = "slow"
    restart = w.restart_due and may_restart(w, now, policy)
    if restart:
        w = replace(w, restart_due=False, last_restart_at=now)
    return w, Verdict(base, True, flip, restart)


def may_restart(current: SentinelRun, now: float, policy: SentinelPolicy) -> bool:
    """A sentinel restart is allowed: none within ``min_restart_interval_s``."""
    last = current.last_restart_at
    return last is None or now - last >= policy.min_restart_interval_s


def backend_change(earlier: Sequence[Sequence[str]], current: Sequence[str]) -> tuple[str, ...]:
    """Backend lines of this start that no earlier start of the same fingerprint logged, and earlier
    ones it no longer logs (``+ line`` / ``- line``); empty when nothing changed or nothing is known."""
    known = [tuple(b) for b in earlier if b]
    if not known or not current:
        return ()
    before, now = set(known[0]), set(current)
    added = sorted(now - before)
    gone = sorted(before - now)
    return (*(f"+ {b}" for b in added), *(f"- {b}" for b in gone))
