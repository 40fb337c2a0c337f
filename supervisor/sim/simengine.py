"""The simulated engine: a bounded batch of requests, its health states, and its Prometheus exposition.

While STUCK the engine behaves like a real vLLM 0.32 engine core frozen with SIGSTOP (docs/simulator.md,
"Frozen engine"): the API server still answers, but every ``vllm:*`` value in ``/metrics`` keeps what the
engine last reported before it froze. Requests that arrive while frozen hang and are NOT counted as running
or waiting; on resume they all complete.

Prefill is timed as real vLLM 0.32 does it (docs/vllm-facts.md "Forward progress"): a request is counted
nowhere until its first step ends (the first chunk with chunked prefill, the whole prompt without); the KV
usage grows per chunk; ``prompt_tokens_total`` is added only when the prefill ends, and no token is
generated before. A prefill burns CPU while it runs (a busy loop counting its own CPU time: a stopped engine
uses none, a starved one takes longer), one at a time (one engine).

Stdlib only (copied into the simulator image). Request handler threads call :meth:`Engine.admit` /
:meth:`Engine.step` / :meth:`Engine.finish`; the lifecycle thread flips :attr:`Engine.state`. Every wait is
a condition wait with a timeout, so nothing spins and nothing blocks forever.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

OK = "ok"
STUCK = "stuck"
DEAD = "dead"
DRAINING = "draining"

#: A stuck request is held at most this long (the client's timeout normally ends it much earlier).
STUCK_HOLD_MAX_S = 3600.0


@dataclass(frozen=True)
class CacheInfo:
    """Labels of vllm:cache_config_info."""

    num_gpu_blocks: int
    kv_tokens: int
    max_model_len: int
    with_capacity_labels: bool


class Engine:
    """Counts running/waiting requests and tokens; blocks generation while stuck; fails it when dead."""

    def __init__(
        self,
        max_running: int,
        kv_tokens: int,
        stick_after: int = 0,
        prefill_rate: float = 50_000.0,
        chunk_tokens: int | None = 8192,
    ) -> None:
        self.max_running = max(1, max_running)
        #: Prompt tokens prefilled per second, and per step (None: chunked prefill off, one step).
        self.prefill_rate = max(1.0, prefill_rate)
        self.chunk_tokens = chunk_tokens
        self.prefill_lock = threading.Lock()
        self.hidden = 0  # admitted requests whose first step has not ended (counted nowhere)
        self.iterations = 0
        #: > 0: the engine freezes as the request completing this count finishes (VSIM_DIE_AFTER_REQUESTS).
        self.stick_after = stick_after
        self.kv_tokens = max(1, kv_tokens)
        self.cond = threading.Condition()
        self.state = OK
        self.running = 0
        self.waiting = 0
        self.prompt_total = 0
        self.gen_total = 0
        self.tokens_in_use = 0
        self.success = {"abort": 0, "length": 0, "stop": 0}
        #: Generation requests answered in full (200), for the "after N requests" faults.
        self.completed = 0
        #: What /metrics shows while STUCK: the last values the engine reported before it froze.
        self.frozen: dict[str, float] | None = None
        #: When the counters were created: prometheus_client exposes a ``<name>_created`` sample per counter.
        self.created = time.time()
        #: Added to every decode step (the ``slow`` fault: a server that got slower, docs/simulator.md).
        self.step_delay_s = 0.0

    def set_state(self, state: str) -> None:
        with self.cond:
            if state == STUCK and self.state != STUCK:
                self.frozen = self._values()
            elif state != STUCK:
                self.frozen = None
            self.state = state
            self.cond.notify_all()

    def stick(self) -> bool:
        """Freeze now (only from OK), keeping the current values for /metrics; True if it froze."""
        with self.cond:
            if self.state != OK:
                return False
            self.set_state(STUCK)
            return True

    def resume(self) -> bool:
        """Thaw (only from STUCK), as ``kill -CONT``: the held requests go on; True if it was stuck."""
        with self.cond:
            if self.state != STUCK:
                return False
            self.set_state(OK)
            return True

    def stick_running(self, at_least: int) -> bool:
        """Freeze now if at least ``at_least`` requests are counted running (from OK); True if it froze."""
        with self.cond:
            if self.state != OK or self.running - self.hidden < at_least:
                return False
            self.set_state(STUCK)
            return True

    def current_state(self) -> str:
        with self.cond:
            return self.state

    def inflight(self) -> int:
        with self.cond:
            return self.running + self.waiting

    def admit(self, prompt_tokens: int, timeout: float = STUCK_HOLD_MAX_S) -> bool:
        """Queue until a batch slot is free; False if the engine died (or never freed a slot) meanwhile."""
        deadline = time.monotonic() + timeout
        with self.cond:
            self.waiting += 1
            try:
                while self.running >= self.max_running and self.state != DEAD:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return False
                    self.cond.wait(min(left, 1.0))
                if self.state == DEAD:
                    return False
                self.running += 1
                self.hidden += 1
                return True
            finally:
                self.waiting -= 1

    def prefill(self, prompt_tokens: int) -> bool:
        """Prefill an admitted request, chunk by chunk (one at a time); False if the engine died."""
        chunk = self.chunk_tokens or prompt_tokens
        done = 0
        with self.prefill_lock:
            while done < prompt_tokens:
                take = min(chunk, prompt_tokens - done)
                if not self._burn(take / self.prefill_rate):
                    with self.cond:
                        self.hidden -= 1 if done == 0 else 0
                    return False
                done += take
                with self.cond:
                    self.tokens_in_use += take
                    if done == take:
                        self.hidden -= 1  # the first step ended: the request is counted from now
                    if done >= prompt_tokens:
                        self.prompt_total += prompt_tokens
                        self.iterations += 1
                    self.cond.notify_all()
        return True

    def _burn(self, seconds: float) -> bool:
        """Spin until this thread used ``seconds`` of CPU (a fixed amount of work, as a real step is: on a
        box whose CPUs others take it lasts longer, its thread runnable throughout, docs/vllm-facts.md
        "Forward progress under CPU starvation"); False if the engine died meanwhile."""
        left = seconds
        while left > 0:
            with self.cond:
                hold = time.monotonic() + STUCK_HOLD_MAX_S
                while self.state == STUCK and time.monotonic() < hold:
                    self.cond.wait(1.0)
                if self.state in (DEAD, STUCK):
                    return False
            start = time.thread_time()
            end = time.monotonic() + min(left, 0.005)
            while time.monotonic() < end:
                pass
            left -= time.thread_time() - start
        return True

    def step(self, seconds: float) -> bool:
        """Generate one token taking ``seconds``; blocks while stuck; False if the engine is dead."""
        deadline = time.monotonic() + STUCK_HOLD_MAX_S
        seconds += self.step_delay_s
        with self.cond:
            if seconds > 0:
                self.cond.wait_for(lambda: self.state == DEAD, timeout=seconds)
            while self.state == STUCK and time.monotonic() < deadline:
                self.cond.wait(1.0)
            if self.state in (DEAD, STUCK):
                return False
            self.gen_total += 1
            self.iterations += 1
            self.tokens_in_use += 1
            return True

    def finish(self, reason: str, tokens: int) -> None:
        """Leave the batch with a finish reason (stop, length, abort)."""
        with self.cond:
            self.running -= 1
            self.tokens_in_use = max(0, self.tokens_in_use - tokens)
            self.success[reason] = self.success.get(reason, 0) + 1
            if reason != "abort":
                self.completed += 1
                if self.stick_after and self.completed >= self.stick_after and self.state == OK:
                    self.frozen, self.state, self.stick_after = self._values(), STUCK, 0  # once
            self.cond.notify_all()

    def completed_requests(self) -> int:
        with self.cond:
            return self.completed

    def wait_idle(self, timeout: float) -> bool:
        """Wait until nothing runs or waits (drain); True if it got there in time."""
        with self.cond:
            return self.cond.wait_for(lambda: self.running + self.waiting == 0, timeout=timeout)

    def snapshot(self) -> dict[str, float]:
        """The values /metrics shows: live, or frozen at the last values reported before the engine stuck."""
        with self.cond:
            return dict(self.frozen) if self.frozen is not None else self._values()

    def _values(self) -> dict[str, float]:
        """The live values (call with ``cond`` held)."""
        return {
            "running": self.running - self.hidden,
            "iters": self.iterations,
            "waiting": self.waiting,
            "prompt": self.prompt_total,
            "gen": self.gen_total,
            "kv": min(1.0, self.tokens_in_use / self.kv_tokens),
            "abort": self.success["abort"],
            "length": self.success["length"],
            "stop": self.success["stop"],
            "error": 0,
            "repetition": 0,
        }


def go_float(value: float) -> str:
    """Format like prometheus_client's floatToGoString (1.0, 0.25, 1.069759e+06)."""
    d = float(value)
    s = repr(d)
    dot = s.find(".")
    if d > 0 and dot > 6:
        mantissa = f"{s[0]}.{s[1:dot]}{s[dot + 1 :]}".rstrip("0.")
        return f"{mantissa}e+0{dot - 1}"
    return s


def _esc(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _labels(pairs: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{_esc(v)}"' for k, v in sorted(pairs.items())) + "}"


def render_metrics(engine: Engine, model_name: str, cache: CacheInfo, legacy_gpu_cache: bool) -> str:
    """The Prometheus text exposition of the vllm:* series the supervisor reads."""
    snap = engine.snapshot()
    # 0.32 (seen running) also lists error and repetition; they never move here.
    reasons = (
        ("stop", "length", "abort", "error", "repetition")
        if cache.with_capacity_labels
        else ("stop", "length", "abort")
    )
    base = {"engine": "0", "model_name": model_name}
    lab = _labels(base)
    out: list[str] = []

    def series(name: str, kind: str, help_: str, samples: list[tuple[str, float]]) -> None:
        out.append(f"# HELP {name} {help_}")
        out.append(f"# TYPE {name} {kind}")
        for suffix_labels, val in samples:
            out.append(f"{suffix_labels} {go_float(val)}")
        if kind == "counter":  # as prometheus_client prints them (seen on the real server): a trap for
            for suffix_labels, _val in samples:  # parsers that match a series name by prefix
                created = suffix_labels.replace("_total{", "_created{", 1)
                out.append(f"{created} {go_float(engine.created)}")

    series(
        "vllm:num_requests_running",
        "gauge",
        "Number of requests in model execution batches.",
        [(f"vllm:num_requests_running{lab}", snap["running"])],
    )
    series(
        "vllm:num_requests_waiting",
        "gauge",
        "Number of requests waiting to be processed.",
        [(f"vllm:num_requests_waiting{lab}", snap["waiting"])],
    )
    if legacy_gpu_cache:
        series(
            "vllm:gpu_cache_usage_perc",
            "gauge",
            "GPU KV-cache usage. 1 means 100 percent usage.",
            [(f"vllm:gpu_cache_usage_perc{lab}", snap["kv"])],
        )
    series(
        "vllm:kv_cache_usage_perc",
        "gauge",
        "KV-cache usage. 1 means 100 percent usage.",
        [(f"vllm:kv_cache_usage_perc{lab}", snap["kv"])],
    )
    series(
        "vllm:prompt_tokens_total",
        "counter",
        "Number of prefill tokens processed.",
        [(f"vllm:prompt_tokens_total{lab}", snap["prompt"])],
    )
    series(
        "vllm:generation_tokens_total",
        "counter",
        "Number of generation tokens processed.",
        [(f"vllm:generation_tokens_total{lab}", snap["gen"])],
    )
    out.append("# HELP vllm:iteration_tokens_total Histogram of number of tokens per engine_step.")
    out.append("# TYPE vllm:iteration_tokens_total histogram")
    out.append(
        f"vllm:iteration_tokens_total_bucket{_labels({**base, 'le': '+Inf'})} {go_float(snap['iters'])}"
    )
    out.append(f"vllm:iteration_tokens_total_count{lab} {go_float(snap['iters'])}")
    out.append(f"vllm:iteration_tokens_total_sum{lab} {go_float(snap['prompt'] + snap['gen'])}")
    series(
        "vllm:request_success_total",
        "counter",
        "Count of successfully processed requests.",
        [(f"vllm:request_success_total{_labels({**base, 'finished_reason': r})}", snap[r]) for r in reasons],
    )
    info = {
        "block_size": "16",
        "cache_dtype": "auto",
        "enable_prefix_caching": "True",
        "engine": "0",
        "gpu_memory_utilization": "0.9",
        "num_cpu_blocks": "None",
        "num_gpu_blocks": str(cache.num_gpu_blocks),
        "num_gpu_blocks_override": "None",
        "swap_space": "4",
    }
    if cache.with_capacity_labels:
        info["kv_cache_size_tokens"] = str(cache.kv_tokens)
        info["kv_cache_max_concurrency"] = str(cache.kv_tokens / cache.max_model_len)  # real: "2048.0"
    series(
        "vllm:cache_config_info",
        "gauge",
        "Information of the LLMEngine CacheConfig",
        [(f"vllm:cache_config_info{_labels(info)}", 1.0)],
    )
    return "\n".join(out) + "\n"
