"""The real vLLM section of ``bench.compare``: the same restarters keeping the REAL vLLM CPU server up.

The server is the real vLLM 0.32 CPU build with the tiny local model (tools/realvllm.py, docs/real-parts.md):
the base image, the cached venv and model bind-mounted read-only, ``--shm-size 1g``, memlock 8 MiB, exactly
as profiles/real-vllm-cpu.yaml runs it. A real load is CPU-bound (about 30 s on 2 cores), so the tools run
ONE AT A TIME: each (fault, trial, tool) gets a fresh tool and server, waits until it serves a generation and
is steady, takes the fault, and is timed until its first successful generation after the outage or the limit.

Faults the real server can show:

* ``container_killed``: ``docker kill``; ``process_killed``: SIGKILL of the container's main process (the API
  server) from the host;
* ``engine_died_exit_0``: SIGKILL of the ``VLLM::EngineCore`` process (the API server notices, logs the
  engine's death and exits by itself: its exit code is recorded from Docker's ``die`` events);
* ``engine_stuck``: SIGSTOP of the ``VLLM::EngineCore`` process: /health stays 200, generations hang;
* ``engine_spinning``: the field's hung GPU engine seen from the host (a CUDA spin-wait): the server runs with
  the test overlay ``tools/overlays/spin`` on its Python path (the field patches vLLM by laying files over
  it, so can a bench), and the fault arms its trigger in the container's ``/dev/shm``: the next engine step
  with a request scheduled burns a core and never ends. /health stays 200, no counter moves, generations
  hang. A restart of the same container clears it too (Docker mounts a new ``/dev/shm`` at every start),
  so any tool that restarts the server in any way ends the outage.

Not on the real server: ``oom_killed`` (the real server has no hook that makes its own main process allocate;
squeezing its cgroup makes the kernel pick whichever vLLM process is largest, not a repeatable fault) and
``host_reboot_like`` (a dockerd restart: the same path for a real or simulated server, measured in the
simulator section; with one tool at a time it would restart the shared dockerd 5 times per trial).
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import statistics
import subprocess
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench import compare_faults as cf
from bench.compare_server import Server
from bench.compare_tools import Tool
from bench.compare_trial import (
    Section,
    kill_container,
    kill_main_process,
    log,
    median_or_none,
    run_trial,
    sweep,
)
from bench.dockerd import docker_answers, dockerd_pid
from tests.harness import wait_for
from tools import spin_trigger
from tools.images import ensure_base_image
from tools.realvllm import (
    MODEL_MOUNT,
    SERVED_MODEL_NAME,
    RealVllmPaths,
    ensure,
    ensure_cached as realvllm_cache,
    server_argv,
)

REAL_FAULTS = (
    "container_killed",
    "process_killed",
    "engine_died_exit_0",
    "engine_stuck",
    "engine_frozen_idle",
    "api_server_frozen",
    "long_prefill",
    "engine_spinning",
)
#: The engine_spinning row: the spin overlay (tools/overlays/spin) mounted read-only at SPIN_MOUNT and put
#: on the server's PYTHONPATH; its trigger file lives in the container's own /dev/shm (a fresh tmpfs at
#: every container start), written by ``docker exec`` at the fault. "1": the first step with a request
#: scheduled spins (the tools' and the bench's own requests come after the fault).
SPIN_OVERLAY = Path(__file__).resolve().parent.parent / "tools" / "overlays" / "spin"
SPIN_MOUNT = "/vsup-overlay"
SPIN_TRIGGER = "/dev/shm/vsup-spin"
#: The long_prefill row: the bigger model (tools/big_model.py), chunked prefill off, so the prompt is one
#: engine step that moves no token counter until it ends (longer than 3 liveness periods of 10 s here), as
#: bench.bench_detection's prefill part sends it: random token ids below the tokenizer's 480.
PREFILL_TOKENS = 15_000
PREFILL_MAX_MODEL_LEN = 16_384
#: Seconds after the fault before a tool counts as "never served again" (a real load is ~30 s).
REAL_LIMIT_S = {
    "container_killed": 180.0,
    "process_killed": 180.0,
    "engine_died_exit_0": 180.0,
    "engine_stuck": 240.0,
    "engine_frozen_idle": 240.0,
    "api_server_frozen": 240.0,
    "long_prefill": 400.0,  # the answer's timeout: ~70 s alone, slower beside another run
    "engine_spinning": 240.0,
}
SKIPPED = {
    "oom_killed": "not on the real server: no hook makes its main process allocate, and a squeezed cgroup "
    "lets the kernel pick whichever vLLM process is largest (not repeatable); measured on the simulator",
    "host_reboot_like": "not on the real server: a dockerd restart is the same path for a real or simulated "
    "server (measured on the simulator) and one tool at a time would restart the shared dockerd per tool",
    "nv_err_no_memory": "a host fault: the kernel line is the same for a real or simulated server (measured "
    "on the simulator)",
    "memory_guard_load": "a host fault: the guard reads the host's memory, not the server (measured on the "
    "simulator; tests/test_daemon_real_vllm_stops.py covers the real load)",
    "healthy_boot_nv_err": "a host fault: the kernel lines are the same for a real or simulated load "
    "(measured on the simulator)",
    "forged_kernel_line": "a host fault: the kernel line is the same for a real or simulated server "
    "(measured on the simulator)",
    "daemon_killed_mid_load": "measured on the simulator (the supervising process is killed, not the "
    "server); tests/test_daemon_adopt_load.py",
    "init_failure_same_line": "measured on the simulator (a real load that dies the same way every time is "
    "issue 37's overlay)",
    "low_contiguity_before_start": "a host fault: the daemon reads /proc/buddyinfo, not the server (measured "
    "on the simulator)",
}
#: Tools up -> first generation: a real load on a busy 2-core box.
SERVE_TIMEOUT_S = 420.0
MEMLOCK = 8388608
ENGINE_CORE = "VLLM::EngineCore"
#: Attempts of one (fault, trial, tool) when dockerd restarts in the middle (another run on the shared box).
ATTEMPTS = 3
#: How long to wait for the shared dockerd to answer again before a trial (another run may restart it).
DOCKER_WAIT_S = 600.0
#: The label value prefix of the real section's containers: PREFIX-<run>-<trial>; a run sweeps its own
#: PREFIX-<run>- after a failure and at the end (never another run's: they may be going on).
RUN_PREFIX = "bench-cmp-real"
#: Engine cores this process froze; thawed at the end should their container outlive the trial.
_frozen: set[int] = set()


def real_server(image: str, p: RealVllmPaths) -> Server:
    """The real vLLM CPU server as profiles/real-vllm-cpu.yaml runs it (venv and model mounted read-only)."""
    return Server(
        profile="real",
        image=image,
        command=tuple(server_argv(p.venv)),
        env=(("VLLM_CPU_KVCACHE_SPACE", "1"),),
        served=SERVED_MODEL_NAME,
        shm_size="1g",
        binds=((str(p.venv), str(p.venv)), (str(p.model), MODEL_MOUNT)),
        memlock=MEMLOCK,
    )


def big_prefill_server(image: str, p: RealVllmPaths, big: Path) -> Server:
    """The long_prefill row's server: the bigger model, ``--no-enable-chunked-prefill``, 2 GiB of KV cache."""
    return Server(
        profile="real",
        image=image,
        command=(*server_argv(p.venv, max_model_len=PREFILL_MAX_MODEL_LEN), "--no-enable-chunked-prefill"),
        env=(("VLLM_CPU_KVCACHE_SPACE", "2"),),
        served=SERVED_MODEL_NAME,
        shm_size="1g",
        binds=((str(p.venv), str(p.venv)), (str(big), MODEL_MOUNT)),
        memlock=MEMLOCK,
    )


def spin_server(image: str, p: RealVllmPaths) -> Server:
    """The engine_spinning row's server: :func:`real_server` with the spin overlay on its Python path."""
    base = real_server(image, p)
    return replace(
        base,
        env=(*base.env, ("PYTHONPATH", SPIN_MOUNT), ("VSUP_SPIN_TRIGGER", SPIN_TRIGGER)),
        binds=(*base.binds, (str(SPIN_OVERLAY), SPIN_MOUNT)),
    )


def arm_spin(client: Any, container: str) -> float:
    """Write the spin trigger inside ``container`` (``docker exec``); the wall time it exists from."""
    spin_trigger.arm(client.containers.get(container), SPIN_TRIGGER)
    return time.time()


def prefill_prompt(tokens: int = PREFILL_TOKENS) -> tuple[int, ...]:
    """The long prompt as token ids (seeded: the same prompt in every trial)."""
    rng = random.Random(tokens)
    return tuple(rng.randrange(10, 480) for _ in range(tokens))


def engine_core_pid(client: Any, name: str) -> int:
    """Host pid of the container's ``VLLM::EngineCore`` process (``docker top NAME -eo pid,args``)."""
    top = client.api.top(name, ps_args="-eo pid,args")
    titles = top.get("Titles") or []
    col = titles.index("PID") if "PID" in titles else 0
    for row in top.get("Processes") or []:
        if any(ENGINE_CORE in str(cell) for cell in row):
            return int(row[col])
    raise RuntimeError(f"no {ENGINE_CORE} process in {name}: {top.get('Processes')}")


def inject_real(fault: str, tool: Tool, client: Any) -> float:
    """Inflict ``fault`` on the tool's real vLLM server now; the wall time it was inflicted."""
    if fault == "container_killed":
        return kill_container(tool, client)
    if fault == "process_killed":
        return kill_main_process(tool, client)
    if fault in ("engine_died_exit_0", "engine_stuck"):
        pid = engine_core_pid(client, tool.target.container)
        sig = signal.SIGKILL if fault == "engine_died_exit_0" else signal.SIGSTOP
        if sig == signal.SIGSTOP:
            _frozen.add(pid)
        t0 = time.time()
        os.kill(pid, sig)
        return t0
    if fault == "engine_frozen_idle":  # idle; the first request 3 s later (compare_faults)
        return cf.freeze(engine_core_pid(client, tool.target.container))
    if fault == "api_server_frozen":  # the container's main process is vLLM's API server
        return cf.freeze(int(client.containers.get(tool.target.container).attrs["State"]["Pid"]))
    if fault == "engine_spinning":
        return arm_spin(client, tool.target.container)
    raise ValueError(f"no real injector for {fault!r}")


def thaw() -> None:
    """SIGCONT every engine core this process froze (normally gone with its container already)."""
    while _frozen:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(_frozen.pop(), signal.SIGCONT)


def limits(limit_s: float | None = None) -> dict[str, float]:
    """Each fault's "never served again" limit: REAL_LIMIT_S, or ``limit_s`` for every fault."""
    return {f: REAL_LIMIT_S[f] if limit_s is None else limit_s for f in REAL_LIMIT_S}


def section(
    server: Server,
    limit_s: float | None = None,
    prefill_server: Server | None = None,
    spinning_server: Server | None = None,
) -> Section:
    """The real section's trial settings (the long_prefill and engine_spinning rows' own servers when
    given); its containers' label values are unique to this run."""
    prefix = f"{RUN_PREFIX}-{uuid.uuid4().hex[:8]}"
    own = (("long_prefill", prefill_server), ("engine_spinning", spinning_server))
    servers = tuple((fault, s) for fault, s in own if s is not None)
    return Section(
        server,
        inject_real,
        limits(limit_s),
        SERVE_TIMEOUT_S,
        120.0,
        run_prefix=prefix,
        servers=servers,
        prompt=prefill_prompt() if prefill_server is not None else "",
    )


def engine_death_exit_codes(details: list[dict[str, Any]]) -> list[int]:
    """The exit code of the first container death after each engine-core SIGKILL (one per tool trial)."""
    codes = []
    for d in details:
        for deaths in d.get("exits", {}).values():
            if deaths:
                codes.append(int(deaths[0][1]))
    return codes


def describe(server: Server) -> dict[str, Any]:
    """The server's container as the JSON result shows it."""
    return {
        "image": server.image,
        "command": list(server.command),
        "env": dict(server.env),
        "shm_size": server.shm_size,
        "mounts": [f"{a}:{b}:ro" for a, b in server.binds],
        "memlock": server.memlock,
    }


def _dockerd() -> int | None:
    try:
        return dockerd_pid()
    except (OSError, ValueError):
        return None


def _answers() -> bool:
    try:
        return docker_answers()
    except subprocess.SubprocessError:
        return False


def wait_docker() -> None:
    """Until the (shared) Docker engine answers; raises after DOCKER_WAIT_S."""
    if not _answers():
        log("waiting for dockerd to answer again (another run restarts it?)")
        wait_for(_answers, DOCKER_WAIT_S, interval=2.0, message="dockerd to answer")


def run_clean(fault: str, sec: Section, name: str, void: list[dict[str, Any]]) -> dict[str, Any]:
    """One tool's trial; repeated when the shared dockerd restarted meanwhile (Docker would then have
    restarted containers itself, which is not the fault being measured). Voided attempts go to ``void``."""
    for attempt in range(1, ATTEMPTS + 1):
        wait_docker()
        before = _dockerd()
        try:
            res = run_trial(fault, sec, (name,))
            failed: Exception | None = None
        except Exception as exc:  # noqa: BLE001 - decided below: a dockerd restart voids it, else re-raised
            res, failed = {"seconds": {}, "error": repr(exc)}, exc
        restarted = not _answers()
        wait_docker()
        sweep(sec.run_prefix + "-", prefix=True)  # what a cleanup during a dockerd restart could not remove
        restarted = restarted or before != _dockerd()
        if not restarted:
            if failed is not None:
                raise failed
            return res
        log(f"real {fault}: {name}: void, dockerd restarted during the trial (attempt {attempt})")
        seconds = res["seconds"].get(name)
        void.append({"fault": fault, "tool": name, "seconds": seconds, "error": res.get("error")})
    raise RuntimeError(f"dockerd restarted during each of {ATTEMPTS} attempts")


def run_real(
    faults: tuple[str, ...], names: tuple[str, ...], trials: int, limit_s: float | None = None
) -> dict[str, Any]:
    """The real section: per fault, ``trials`` trials of every tool, one tool at a time (shuffled order);
    ``limit_s`` replaces every fault's limit (a tool that never acts costs the whole limit per trial).

    The real environment (venv, model, base image) is ensured only when a fault needs it.
    """
    started = time.time()
    sec: Section | None = None
    out: dict[str, Any] = {
        "faults": {},
        "trials": {},
        "skipped": {},
        "errors": [],
        "void": [],
        "server": None,
        "limits_s": {f: v for f, v in limits(limit_s).items() if f in faults},
        "trials_per_tool": trials,
        "order": "one tool at a time, each with a fresh server (a real load is CPU-bound)",
    }
    loads: list[float] = []
    reloads: list[float] = []
    details: dict[str, list[Any]] = {}
    try:
        for fault in faults:
            if fault in SKIPPED:
                out["skipped"][fault] = SKIPPED[fault]
                continue
            if sec is None:
                image, paths = ensure_base_image(), ensure()
                big = realvllm_cache() if "long_prefill" in faults else None
                prefill = big_prefill_server(image, paths, big) if big is not None else None
                spinning = spin_server(image, paths) if "engine_spinning" in faults else None
                sec = section(real_server(image, paths), limit_s, prefill, spinning)
                out["server"] = describe(sec.server)
                if prefill is not None:
                    out["prefill_server"] = {**describe(prefill), "prompt_tokens": PREFILL_TOKENS}
                if spinning is not None:
                    out["spinning_server"] = {**describe(spinning), "trigger": SPIN_TRIGGER}
            per_tool: dict[str, list[float | None]] = {n: [] for n in names}
            for i in range(trials):
                order = list(names)
                random.shuffle(order)
                for n in order:
                    log(f"real {fault}: trial {i + 1}/{trials}, {n}")
                    try:
                        res = run_clean(fault, sec, n, out["void"])
                    except Exception as exc:  # noqa: BLE001 - one broken trial must not lose the hour
                        log(f"real {fault}: {n} trial {i + 1} failed: {exc!r}")
                        out["errors"].append({"fault": fault, "tool": n, "trial": i + 1, "error": repr(exc)})
                        continue
                    per_tool[n].append(res["seconds"].get(n))
                    loads += [v for v in res["load_s"].values() if v is not None]
                    reloads += [v for v in res["reload_s"].values() if v is not None]
                    details.setdefault(fault, []).append({"tool": n, **res["details"]})
                    load, reload = res["load_s"].get(n), res["reload_s"].get(n)
                    log(f"real {fault}: {n}: {res['seconds'].get(n)} (load {load} s, reload {reload} s)")
            out["trials"][fault] = per_tool
            out["faults"][fault] = {n: median_or_none(v) if v else None for n, v in per_tool.items()}
    finally:
        thaw()
        if sec is not None:
            sweep(sec.run_prefix + "-", prefix=True)
    out["load_seconds_measured"] = loads
    out["load_seconds_measured_median"] = round(statistics.median(loads), 2) if loads else None
    out["reload_seconds_measured"] = reloads
    out["reload_seconds_measured_median"] = round(statistics.median(reloads), 2) if reloads else None
    out["engine_died_exit_codes"] = engine_death_exit_codes(details.get("engine_died_exit_0", []))
    out["details"] = details
    out["seconds_taken"] = round(time.time() - started, 1)
    return out
