"""Forward progress of a vLLM engine, judged from what one probe round reads (pure).

What moves when, on real vLLM 0.32 (docs/vllm-facts.md "Forward progress"): ``generation_tokens_total``
and the ``iteration_tokens_total`` histogram move only on steps that output a token; a prefill adds its
prompt to ``prompt_tokens_total`` only when it ends; ``kv_cache_usage_perc`` changes when a (chunked) step
allocates blocks; the engine's CPU time moves on every step (a stopped process uses none) but also while a
step never ends (a hung CUDA kernel spins the waiting host thread: docs/vllm-facts.md "A hang that burns a
core"). So "busy" is a counter moving (a step ended), the CPU time alone only within the longest legitimate
step (:func:`longest_step_s`); "stuck" is work present and no counter moving for longer than that step
whatever the CPU does, or the CPU flat too for longer than a short freeze bound (machine/liveness.py).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from supervisor.core.vllm.activity import cpu_signal

#: Counters (and gauges whose change is a step) a round compares with the previous round.
COUNTERS = ("prompt_tokens", "generation_tokens", "iterations", "kv_usage", "preemptions")
#: vLLM 0.32's default ``--max-num-batched-tokens`` for the OpenAI server when the profile sets none.
DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192
#: A prompt this long (tokens) when the profile sets no ``--max-model-len`` (the model's own may be more).
DEFAULT_MAX_MODEL_LEN = 131072
#: A prefill rate (tokens/s) assumed until one is learned: slow on purpose (a CPU box, a big model).
DEFAULT_PREFILL_RATE = 100.0
#: A prompt-token delta smaller than this is not a prefill-rate sample (decode noise, tiny prompts).
MIN_RATE_SAMPLE_TOKENS = 256
#: Rate samples kept per config (the median of these is the learned rate).
MAX_RATE_SAMPLES = 15


@dataclass(frozen=True)
class Reading:
    """What one probe round read: the progress signals (None: not available this round) and the queue."""

    prompt_tokens: float | None = None
    generation_tokens: float | None = None
    iterations: float | None = None  # vllm:iteration_tokens_total_count
    kv_usage: float | None = None  # 0..1
    preemptions: float | None = None  # vllm:num_preemptions_total
    cpu_s: float | None = None  # the container's CPU time (cgroup), seconds
    thread_demand: float | None = None  # the busiest thread's runnable share since the last round
    running: float | None = None
    waiting: float | None = None

    @property
    def work(self) -> bool:
        """The engine says it has requests (running or waiting)."""
        return (self.running or 0.0) + (self.waiting or 0.0) > 0


@dataclass(frozen=True)
class EngineShape:
    """What bounds one engine step, from the profile's vLLM arguments."""

    chunked_prefill: bool = True
    max_num_batched_tokens: int | None = None
    max_model_len: int | None = None

    def longest_step_tokens(self) -> int:
        """The most prompt tokens one step may prefill: the batch budget with chunked prefill, else a
        whole prompt of ``--max-model-len`` tokens (a monolithic prefill is one step)."""
        mml = self.max_model_len or DEFAULT_MAX_MODEL_LEN
        if not self.chunked_prefill:
            return max(mml, self.max_num_batched_tokens or 0)
        return min(self.max_num_batched_tokens or DEFAULT_MAX_NUM_BATCHED_TOKENS, mml)


def longest_step_s(shape: EngineShape, rate: float, factor: float, floor_s: float) -> float:
    """How long one legitimate step may take at ``rate`` prompt tokens/s, with a safety ``factor`` (the
    attention part grows faster than linearly), never under ``floor_s``."""
    return max(floor_s, factor * shape.longest_step_tokens() / max(rate, 1e-6))


#: The longest-step bound is a budget of work, not of wall time alone: past it, the engine's container must
#: also have burned this share of one core on average since its last step (a hung CUDA kernel's spin-wait
#: burns a whole one, so it is judged at the bound as before) ...
STEP_CPU_SHARE = 0.5
#: ... unless its counters stayed flat this many times the bound (an engine starved of CPU for ever). 2: a
#: step of the bound's full size may then take 4x its time at the assumed rate (the bound is 2x it), and a
#: spin on a CPU shared 8 ways (bench.compare's engine_spinning row: every tool's engine spins at once) is
#: still judged at 2x the bound; with 4 it was not within the row's 60 s.
STEP_STRETCH_MAX = 2.0


def step_spent(flat_s: float, burned_cpu_s: float | None, limit_s: float) -> bool:
    """Whether a step flat for ``flat_s`` s (already at least ``limit_s``) spent its budget: the container
    burned :data:`STEP_CPU_SHARE` of a core over ``limit_s`` since the step began (``burned_cpu_s``; None:
    the CPU time is not known, the wall bound alone decides), or it is flat :data:`STEP_STRETCH_MAX` x
    ``limit_s``. A prefill on a CPU that others share runs as long as it gets CPU: on 2 cores with 8 busy
    containers the simulator's 40 s prefill took 165-180 s of wall time (bench.compare's long_prefill row,
    every tool prefilling at once beside a soak, 2026-12-05), past the unlearned 164 s bound."""
    if burned_cpu_s is None:
        return True
    return burned_cpu_s >= STEP_CPU_SHARE * limit_s or flat_s >= STEP_STRETCH_MAX * limit_s


def moved(prev: Reading, cur: Reading, dt_s: float, cpu_busy_cores: float) -> tuple[str, ...]:
    """The signals that moved between two rounds ``dt_s`` apart: counters that changed, and ``cpu`` or
    ``cpu_starved`` when the container worked (core/vllm/activity.py: a stopped engine does neither)."""
    out = []
    for name in COUNTERS:
        a, b = getattr(prev, name), getattr(cur, name)
        if a is not None and b is not None and b != a:
            out.append(name)
    cpu = cpu_signal(prev.cpu_s, cur.cpu_s, dt_s, cpu_busy_cores, cur.thread_demand)
    if cpu is not None:
        out.append(cpu)
    return tuple(out)


def rate_sample(prompt_delta: float, busy_for_s: float) -> float | None:
    """A prefill-rate sample (tokens/s): prompt tokens counted since the engine became busy (or since
    the counter last moved), over that time. Conservative: decode time in that span lowers it."""
    if prompt_delta < MIN_RATE_SAMPLE_TOKENS or busy_for_s <= 0:
        return None
    return prompt_delta / busy_for_s


def learned_rate(samples: tuple[float, ...], default: float = DEFAULT_PREFILL_RATE) -> float:
    """The median of the samples, or ``default`` before any."""
    return statistics.median(samples) if samples else default


def add_sample(samples: tuple[float, ...], sample: float) -> tuple[float, ...]:
    """Keep the newest MAX_RATE_SAMPLES."""
    return (*samples, round(sample, 1))[-MAX_RATE_SAMPLES:]
