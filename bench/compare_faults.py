"""The faults of issue 24 in ``bench.compare``, and the ones not measured by a recovery clock.

Measured like the older faults (fault -> first generation served again after the outage):

* ``api_server_frozen``: SIGSTOP of the container's main process (the API server; the simulator is one
  process, so all of it): ``/health`` does not answer.
* ``engine_frozen_idle``: the engine frozen while idle, the first request 3 s later (real vLLM: SIGSTOP of
  ``VLLM::EngineCore``; simulator: its ``stuck`` hook, the simulator's model of that SIGSTOP).

Measured otherwise (:data:`UNITS`):

* ``long_prefill``: one long prompt per tool while nothing else is sent; the figure is **false restarts**
  (deaths of the tool's container, Docker's ``die`` events, until the answer or the limit; a
  ``docker restart`` is a death too); ours must be 0. Simulator: ``VSIM_PREFILL_TOKENS_PER_S`` =
  :data:`SIM_PREFILL_RATE`, a :data:`SIM_PREFILL_TOKENS`-token prompt, one chunk (longer than 3 liveness
  periods of 10 s).
* ``nv_err_no_memory``: one labelled ``NV_ERR_NO_MEMORY`` line written to the real ``/dev/kmsg`` (root)
  while every tool serves; the figure is seconds to the kill (the container's ``die`` event). The line
  names no process: every daemon on the box whose ``host.kernel_memory_error`` is ``kill`` (the shipped
  default) acts on it, so this row runs under ``flock /tmp/vsup-heavy.lock`` (bench/README.md).
* ``memory_guard_load``: memory running out during a load. Made reproducibly without starving a shared
  box: the daemon's ``host.memory_guard.mem_available_min_gib`` is set above this box's memory
  (:data:`GUARD_HOST`), so every sample is low from the start; the load is :data:`GUARD_LOAD_S` s. The
  figure is seconds from the guard's trip (the daemon's ``memory.pressure`` event) to the container's
  ``die`` event. The other tools have no memory guard: nothing stops their load (``never``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
import uuid
from typing import Any

import requests

from tests.kmsg_probe import NOMEM, kmsg_writable, write_kmsg

NEW_FAULTS = (
    "long_prefill",
    "engine_frozen_idle",
    "api_server_frozen",
    "nv_err_no_memory",
    "memory_guard_load",
)
LIMIT_S = {
    "long_prefill": 180.0,
    "engine_frozen_idle": 240.0,
    "api_server_frozen": 240.0,
    "nv_err_no_memory": 30.0,
    "memory_guard_load": 90.0,
}
#: What a row's figure counts (absent: seconds to served again).
UNITS = {
    "long_prefill": "false restarts",
    "nv_err_no_memory": "s to the kill",
    "memory_guard_load": "s to gone",
}
#: The first request after an idle engine froze comes this late (the fault is "frozen while idle").
IDLE_REQUEST_AFTER_S = 3.0
SIM_PREFILL_RATE = 100.0
SIM_PREFILL_TOKENS = 4_000  # 40 s of prefill at SIM_PREFILL_RATE: > 3 liveness periods of 10 s
GUARD_LOAD_S = 60.0
GUARD_HOST = (("memory_guard", {"enabled": True, "mem_available_min_gib": 4000}),)
#: Main processes this run froze (SIGCONT at the end should a container outlive its trial).
frozen: set[int] = set()


def freeze(pid: int) -> float:
    """SIGSTOP ``pid`` now (remembered for :func:`thaw`); the wall time just before."""
    frozen.add(pid)
    t0 = time.time()
    os.kill(pid, signal.SIGSTOP)
    return t0


def thaw() -> None:
    while frozen:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(frozen.pop(), signal.SIGCONT)


def first_death_after(exits: Any, container: str, t0: float, limit_s: float) -> float | None:
    """Seconds from ``t0`` to the container's first ``die`` event after it (``exits``: an ExitWatch)."""
    for s, _code in exits.deaths.get(container, []):
        at = exits.t0 + s
        if t0 - 0.001 <= at <= t0 + limit_s:
            return round(float(at - t0), 2)
    return None


def wait_deaths(exits: Any, tools: dict[str, Any], t0: float, limit_s: float, who: set[str]) -> None:
    """Until every tool in ``who`` has died after ``t0`` or the limit passed (bounded)."""
    while time.time() < t0 + limit_s:
        if all(first_death_after(exits, tools[n].target.container, t0, limit_s) is not None for n in who):
            return
        time.sleep(0.5)


def nv_err(tools: dict[str, Any], exits: Any) -> tuple[dict[str, float | None], dict[str, Any]]:
    """One NV_ERR_NO_MEMORY line for all tools; per tool seconds to the kill (None: not killed)."""
    if not kmsg_writable():
        raise RuntimeError("/dev/kmsg is not writable (run as root)")
    limit = LIMIT_S["nv_err_no_memory"]
    t0 = write_kmsg(NOMEM.format(token=f"vsup_bench_cmp_{uuid.uuid4().hex}"))
    wait_deaths(exits, tools, t0, limit, {n for n in tools if n.startswith("vllm-supervisor")})
    time.sleep(1.0)  # a slower tool's kill, if any, gets a second more than ours needed
    secs = {n: first_death_after(exits, t.target.container, t0, limit) for n, t in tools.items()}
    return secs, {"t0": t0}


def long_prompt(tokens: int) -> str:
    """About ``tokens`` tokens for the simulator's count (4 characters a token)."""
    return "word " * (tokens * 4 // 5)


def long_prefill(
    tools: dict[str, Any], exits: Any, model: str, prompt: str | list[int], limit: float
) -> tuple[dict[str, float | None], dict[str, Any]]:
    """The long prompt (text to the chat endpoint, or token ids to the completions endpoint) to every tool
    at once; per tool the deaths of its container until the answer (or ``limit`` s)."""
    answers: dict[str, Any] = {}
    ended: dict[str, float] = {}
    body: dict[str, Any]
    if isinstance(prompt, str):
        path, body = "/v1/chat/completions", {"messages": [{"role": "user", "content": prompt}]}
        approx = len(prompt) // 4
    else:
        path, body, approx = "/v1/completions", {"prompt": prompt}, len(prompt)

    def ask(n: str, t: Any) -> None:
        try:
            r = requests.post(
                f"{t.target.url}{path}",
                json={"model": model, **body, "max_tokens": 4},
                headers={"Authorization": f"Bearer {t.target.key}"},
                timeout=limit,
            )
            answers[n] = r.status_code
        except requests.RequestException as exc:
            answers[n] = type(exc).__name__
        ended[n] = time.time()

    t0 = time.time()
    threads = [threading.Thread(target=ask, args=(n, t), daemon=True) for n, t in tools.items()]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=max(0.0, t0 + limit + 5 - time.time()))
    time.sleep(1.0)  # a die event of the last moment on its way
    counts: dict[str, float | None] = {}
    for n, t in tools.items():
        until = ended.get(n, t0 + limit) + 1.0
        at = [exits.t0 + s for s, _code in exits.deaths.get(t.target.container, [])]
        counts[n] = float(sum(1 for a in at if t0 <= a <= until))
    took = {n: round(ended[n] - t0, 2) for n in ended}
    return counts, {"http": answers, "answer_s": took, "prompt_tokens_approx": approx}


def guard_load(tools: dict[str, Any], exits: Any) -> tuple[dict[str, float | None], dict[str, Any]]:
    """During the load: the daemon's guard trip -> its container's death; the others: death after the trip."""
    limit = LIMIT_S["memory_guard_load"]
    daemons = {n: t for n, t in tools.items() if n.startswith("vllm-supervisor")}
    trip = None
    deadline = time.time() + GUARD_LOAD_S
    while daemons and trip is None and time.time() < deadline:
        for t in daemons.values():
            ev = next(
                (e for e in t.proc.events(t.trial.server.profile) if e["name"] == "memory.pressure"), None
            )
            if ev is not None:
                trip = float(ev["ts"])
        time.sleep(0.2)
    if trip is None:
        raise RuntimeError("no memory.pressure event during the load")
    wait_deaths(exits, tools, trip, limit, set(daemons))
    secs = {n: first_death_after(exits, t.target.container, trip, limit) for n, t in tools.items()}
    return secs, {"trip_ts": trip}
