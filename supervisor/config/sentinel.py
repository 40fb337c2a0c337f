"""The profile's ``sentinel:`` section: the performance canary and what a decay does (docs/sentinel.md).

``sentinel: {enabled, warmup_s, interval_s, decay_pct, on_decay, min_restart_interval_s, baseline_s,
max_tokens, prompt, timeout_s, busy_retry_s}``. Problems name the file, the key path and the value.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from supervisor.config.reader import Section
from supervisor.core.sentinel.judge import OnDecay, SentinelPolicy

#: The canary's fixed prompt: the same every time, so the figures compare.
DEFAULT_PROMPT = "Count from one to one hundred in words, separated by commas."
ON_DECAY = ("alert", "restart")
#: The judgement's defaults (one copy: core/sentinel/judge.py).
_P = SentinelPolicy()


@dataclass(frozen=True)
class SentinelConfig:
    """The performance sentinel of one profile (defaults: docs/sentinel.md "Configuration")."""

    enabled: bool = True
    warmup_s: float = _P.warmup_s  # after the server became healthy, before the first canary
    interval_s: float = _P.interval_s  # between canaries (only when the server is idle)
    decay_pct: float = _P.decay_pct  # a sample this many % below the baseline is slow
    on_decay: OnDecay = _P.on_decay
    min_restart_interval_s: float = _P.min_restart_interval_s  # at most one sentinel restart per 6 h
    baseline_s: float = _P.baseline_s  # this run's first hour joins the baseline
    max_tokens: int = 64
    prompt: str = DEFAULT_PROMPT
    timeout_s: float = 120.0
    busy_retry_s: float = 30.0  # the server had requests: look again this much later

    def policy(self) -> SentinelPolicy:
        """What the pure judgement needs."""
        return SentinelPolicy(**{f.name: getattr(self, f.name) for f in fields(SentinelPolicy)})


def parse_sentinel(sec: Section) -> SentinelConfig:
    """``sentinel:`` (problems go to the section's context)."""
    d = SentinelConfig()
    if not sec.ok:
        return d
    on_decay = sec.str_("on_decay", d.on_decay, choices=ON_DECAY)
    cfg = SentinelConfig(
        enabled=sec.bool_("enabled", d.enabled),
        warmup_s=sec.float_("warmup_s", d.warmup_s),
        interval_s=sec.float_("interval_s", d.interval_s, positive=True),
        decay_pct=sec.float_("decay_pct", d.decay_pct, positive=True, hi=99.0),
        on_decay="restart" if on_decay == "restart" else "alert",
        min_restart_interval_s=sec.float_("min_restart_interval_s", d.min_restart_interval_s),
        baseline_s=sec.float_("baseline_s", d.baseline_s),
        max_tokens=sec.int_("max_tokens", d.max_tokens, lo=2, hi=4096),
        prompt=sec.str_("prompt", d.prompt),
        timeout_s=sec.float_("timeout_s", d.timeout_s, positive=True),
        busy_retry_s=sec.float_("busy_retry_s", d.busy_retry_s, positive=True),
    )
    sec.done()
    return cfg
