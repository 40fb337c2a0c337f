"""Detection benchmark: how fast the daemon acts on a dead or frozen engine, with the SHIPPED probe defaults.

Run: ``.venv/bin/python -m bench.bench_detection [--trials N] [--real] [--json]
[--only stuck,die,exit0,kill,saturation,real,prefill] [--real-trials N] [--saturation-seconds S]``.

The real daemon (a subprocess) supervises simulator containers (and with ``--real`` the real vLLM CPU
server) with the shipped probe defaults (interval 5 s, threshold 4, timeout 30 s, freeze 15 s, canary
10 s: docs/state-machine.md "Liveness"); a frozen engine is acted on within 30 s. ``real`` runs the three
freeze shapes of the real vLLM (EngineCore stopped while generating, stopped while idle then a request,
the API server stopped); ``prefill`` sends a 15,000-token prompt (over a minute to prefill here) to the
bigger random model, chunked and monolithic: every emergency there is false. Per fault and trial:
seconds from the fault to the daemon's ``emergency.stop`` or ``container.exited`` event, and to RUNNING
again. A saturation trial loads a healthy simulator (every batch slot busy, tokens moving): every
emergency there is false. Exits 1 when a trial misses its bound or an emergency was false. Containers
are named ``vsup-bench-*`` and removed at the end, also on error, Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from typing import Any

from bench.daemon_world import BenchWorld, bench_world
from bench.detect_real import api_server_stop, engine_stop_busy, engine_stop_idle, prefill_trial
from bench.detect_saturation import run_saturation, saturation_env
from bench.detect_trials import (
    Injector,
    Trial,
    container_kill,
    run_trials,
    sim_fault,
    sim_stuck,
    wait_running,
)
from bench.soak import SHIPPED_PROBES
from bench.stats import Row, summarize, table
from supervisor.sim.launch import IMAGE_ENV
from tests.daemon_harness import DaemonProc, ProfileSpec
from tools.images import ensure_base_image, ensure_sim_image

SIM_FAULTS = ("kill", "exit0", "die", "stuck")
REAL_SHAPES = ("real_busy", "real_idle", "real_api")
PARTS = (*SIM_FAULTS, "saturation", "real", *REAL_SHAPES, "prefill")
#: The target for a frozen engine with the shipped defaults (each shape, p95: docs/state-machine.md).
FROZEN_BOUND_S = 30.0
#: The long prompt of the prefill rows (the bigger model's --max-model-len is 16384).
PREFILL_TOKENS = 15000
#: A dead process is noticed through Docker events (or the engine-death log lines) within this.
DEATH_BOUND_S = 1.0
BOUNDS = {"kill": DEATH_BOUND_S, "exit0": DEATH_BOUND_S, "die": DEATH_BOUND_S}
LABELS = {
    "kill": "container kill (SIGKILL)",
    "exit0": "sim silent exit, code 0",
    "die": "sim engine death, exit 0",
    "stuck": "sim frozen engine (stuck)",
    "real_busy": "real vLLM, EngineCore SIGSTOP while generating",
    "real_idle": "real vLLM, EngineCore SIGSTOP idle + a request",
    "real_api": "real vLLM, API server SIGSTOP",
}
#: Daemon config beside the shipped probe defaults: no breaker trip over repeated trials, short backoff.
DAEMON_CFG: dict[str, Any] = {"breaker_limit": 100, "backoff_initial_s": 0.5, "backoff_max_s": 1.0}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def bound(fault: str) -> float:
    return BOUNDS.get(fault, FROZEN_BOUND_S)


def sim_injector(world: BenchWorld, fault: str, base: str) -> Injector:
    if fault == "kill":
        return container_kill(world.client)
    if fault == "exit0":
        return sim_fault(base, {"kind": "exit", "code": 0})
    if fault == "die":
        return sim_fault(base, {"kind": "die"})
    return sim_stuck(base)


def run_sim(world: BenchWorld, faults: list[str], n: int) -> dict[str, list[Trial]]:
    """One daemon, one simulator profile with the shipped probe defaults; ``n`` trials of each fault."""
    spec = world.profile("detect", **SHIPPED_PROBES)
    d = world.daemon("detect", [spec], **DAEMON_CFG)
    base = f"http://127.0.0.1:{spec.port}"
    out: dict[str, list[Trial]] = {}
    for fault in faults:
        log(f"{fault}: {n} trials ({LABELS[fault]})")
        phase = SHIPPED_PROBES["interval_s"] if fault == "stuck" else 0.0
        out[fault] = run_trials(
            d,
            spec.name,
            fault,
            sim_injector(world, fault, base),
            n,
            phase_max_s=phase,
            running_timeout_s=120,
            log=log,
        )
    return out


def _real_spec(world: BenchWorld, name: str, big: bool, extra_args: tuple[str, ...] = ()) -> ProfileSpec:
    from tools.realvllm import MODEL_MOUNT, SERVED_MODEL_NAME, ensure, ensure_cached, server_argv

    p = ensure()
    model = ensure_cached() if big else p.model
    return world.profile(
        name,
        image=ensure_base_image(),
        args=[*server_argv(p.venv, max_model_len=16384 if big else 512), *extra_args],
        env={"VLLM_CPU_KVCACHE_SPACE": "2" if big else "1"},
        served=SERVED_MODEL_NAME,
        deadline_s=400.0,
        silence_timeout_s=240.0,
        stop_timeout=10,
        extra_container={
            "shm_size": "1g",
            "mounts": [f"{p.venv}:{p.venv}:ro", f"{model}:{MODEL_MOUNT}:ro"],
        },
        **SHIPPED_PROBES,
    )


def run_real(world: BenchWorld, n: int, shapes: tuple[str, ...] = REAL_SHAPES) -> dict[str, list[Trial]]:
    """The real vLLM CPU server (tiny model) in the offline base image; the freeze shapes asked for."""
    spec = _real_spec(world, "real", big=False)
    d = world.daemon("real", [spec], **DAEMON_CFG)
    base = f"http://127.0.0.1:{spec.port}"
    key = world.tmp / "real" / "real.key"
    injectors = {
        "real_busy": engine_stop_busy(world.client, base, key),
        "real_idle": engine_stop_idle(world.client, base, key),
        "real_api": api_server_stop(world.client),
    }
    out: dict[str, list[Trial]] = {}
    for shape, inject in [(k, v) for k, v in injectors.items() if k in shapes]:
        log(f"{shape}: {n} trials ({LABELS[shape]})")
        out[shape] = run_trials(
            d,
            spec.name,
            shape,
            inject,
            n,
            phase_max_s=SHIPPED_PROBES["interval_s"],
            running_timeout_s=450,
            log=log,
        )
    return out


def run_prefill(world: BenchWorld) -> list[dict[str, Any]]:
    """A 15,000-token prompt to the bigger random model, chunked and monolithic, shipped defaults."""
    out = []
    for mode, extra in (("chunked", ()), ("monolithic", ("--no-enable-chunked-prefill",))):
        spec = _real_spec(world, f"pf-{mode}", big=True, extra_args=extra)
        d = world.daemon(f"pf-{mode}", [spec], **DAEMON_CFG)
        try:
            wait_running(d, spec.name, None, 450)
            base = f"http://127.0.0.1:{spec.port}"
            key = world.tmp / f"pf-{mode}" / f"{spec.name}.key"
            log(f"prefill {mode}: {PREFILL_TOKENS} tokens")
            t = prefill_trial(d, spec.name, base, key, mode, PREFILL_TOKENS)
            log(f"  prefill {mode}: {t.outcome}, false emergencies {t.emergencies}, {set(t.verdicts)}")
            out.append(t.as_dict())
        finally:
            d.close()
            with contextlib.suppress(Exception):  # the big model's container: gone before the next loads
                world.client.containers.get(spec.container).remove(force=True)
    return out


def _starter(world: BenchWorld, subdir: str) -> Callable[[list[ProfileSpec]], DaemonProc]:
    def start(specs: list[ProfileSpec]) -> DaemonProc:
        return world.daemon(subdir, specs, **DAEMON_CFG)

    return start


def fault_doc(fault: str, trials: list[Trial]) -> dict[str, Any]:
    valid = [t for t in trials if not t.interfered]
    detect = [t.detect_s for t in valid if t.detect_s is not None]
    recover = [t.recover_s for t in valid if t.recover_s is not None]
    return {
        "label": LABELS[fault],
        "bound_s": bound(fault),
        "all_met": bool(valid) and len(detect) == len(valid) and all(v <= bound(fault) for v in detect),
        "void_trials": len(trials) - len(valid),
        "detect": summarize(detect, "s", 2).as_dict(),
        "recover": summarize(recover, "s", 2).as_dict(),
        "detect_events": sorted({str(t.detect_event) for t in trials}),
        "trials": [t.as_dict() for t in trials],
    }


def machine() -> dict[str, Any]:
    mem_kib = 0
    with open("/proc/meminfo", encoding="utf-8") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem_kib = int(line.split()[1])
    return {
        "host": platform.node(),
        "kernel": platform.release(),
        "cpus": os.cpu_count(),
        "mem_gib": round(mem_kib / 1024 / 1024, 1),
        "python": platform.python_version(),
    }


def run(parts: set[str], trials: int, real_trials: int, sat_seconds: float) -> dict[str, Any]:
    os.environ[IMAGE_ENV] = ensure_sim_image()  # the simulator built from this checkout's sources
    out: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": machine(),
        "load_start": [round(x, 2) for x in os.getloadavg()],
        "probe_defaults": SHIPPED_PROBES,
        "daemon_config": DAEMON_CFG,
        "faults": {},
    }
    faults: dict[str, Any] = out["faults"]
    with bench_world() as world:
        sim = [f for f in SIM_FAULTS if f in parts]
        if sim:
            for fault, ts in run_sim(world, sim, trials).items():
                faults[fault] = fault_doc(fault, ts)
        if "saturation" in parts:
            log(f"saturation: {sat_seconds:.0f} s under load, shipped probe defaults")
            spec = world.profile("sat", env=saturation_env(), **SHIPPED_PROBES)
            res = run_saturation(_starter(world, "sat"), spec, world.tmp / "sat", sat_seconds, log)
            out["saturation"] = res.as_dict()
        shapes = REAL_SHAPES if "real" in parts else tuple(x for x in REAL_SHAPES if x in parts)
        if shapes:
            for shape, ts in run_real(world, real_trials, shapes).items():
                faults[shape] = fault_doc(shape, ts)
        if "prefill" in parts:
            out["prefill"] = run_prefill(world)
    out["load_end"] = [round(x, 2) for x in os.getloadavg()]
    return out


def rows(out: dict[str, Any]) -> list[Row]:
    result: list[Row] = []
    for doc in out["faults"].values():
        b = doc["bound_s"]
        det = summarize([t["detect_s"] for t in doc["trials"] if t["detect_s"] is not None], "s", 2)
        rec = summarize([t["recover_s"] for t in doc["trials"] if t["recover_s"] is not None], "s", 2)
        void = f" ({doc['void_trials']} void)" if doc["void_trials"] else ""
        result.append(Row(f"{doc['label']}: fault -> act{void}", det, f"<= {b:g} s each", doc["all_met"]))
        result.append(Row(f"{doc['label']}: fault -> RUNNING", rec, "-", None))
    return result


def report(out: dict[str, Any]) -> str:
    lines = [table(rows(out))]
    sat = out.get("saturation")
    if sat:
        ev = sat["events"]
        lines.append(
            f"saturation {sat['seconds']:.0f} s ({sat['clients']} clients, 1 slot, {sat['gen_seconds']:g} s"
            f" per generation): false emergencies {sat['false_emergencies']} (must be 0);"
            f" probe.saturated {ev['probe.saturated']}, probe.inconclusive {ev['probe.inconclusive']},"
            f" probe.failed {ev['probe.failed']}, completions {sat['completions_ok']},"
            f" end state {sat['end_state']}, restarts {sat['restarts']}"
        )
    for pf in out.get("prefill") or []:
        o = pf["outcome"]
        done = f"HTTP {o.get('status')} after {o.get('s')} s" if "status" in o else f"no answer: {o}"
        lines.append(
            f"long prefill {pf['mode']} ({pf['prompt_tokens']} tokens, bigger model): {done};"
            f" false emergencies {pf['false_emergencies']} (must be 0), probe.failed {pf['probe_failed']},"
            f" verdicts {', '.join(pf['verdicts'])}"
        )
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench.bench_detection", description=(__doc__ or "").splitlines()[0])
    p.add_argument("--trials", type=int, default=5, help="trials per simulator fault (default 5)")
    p.add_argument("--real", action="store_true", help="also freeze the real vLLM CPU server's engine core")
    p.add_argument("--real-trials", type=int, default=5, help="real vLLM trials per shape (default 5)")
    p.add_argument("--saturation-seconds", type=float, default=180.0, help="saturation trial (default 180)")
    p.add_argument("--only", default="", help=f"comma list of {','.join(PARTS)} (default: all but real)")
    p.add_argument("--json", action="store_true", help="print the JSON document instead of the table")
    ns = p.parse_args(argv)
    parts = {x.strip() for x in ns.only.split(",") if x.strip()} or set(PARTS) - {"real", "prefill"}
    if ns.real:
        parts |= {"real", "prefill"}
    if parts - set(PARTS):
        p.error(f"--only takes a comma list of {','.join(PARTS)}")
    if ns.trials < 1 or ns.real_trials < 1 or ns.saturation_seconds < 30:
        p.error("--trials and --real-trials must be >= 1, --saturation-seconds >= 30")
    ns.parts = parts
    return ns


def failed(out: dict[str, Any]) -> bool:
    missed = any(not doc["all_met"] for doc in out["faults"].values())
    sat = out.get("saturation")
    false_prefill = any(
        pf["false_emergencies"] or pf["outcome"].get("status") != 200 for pf in out.get("prefill") or []
    )
    return missed or bool(sat and sat["false_emergencies"]) or false_prefill


def main(argv: list[str] | None = None) -> int:
    ns = parse_args(argv)
    try:
        out = run(ns.parts, ns.trials, ns.real_trials, ns.saturation_seconds)
    except KeyboardInterrupt:
        log("interrupted; containers removed")
        return 130
    print(json.dumps(out, default=str) if ns.json else report(out))
    for fault, doc in out["faults"].items():
        for t in doc["trials"]:
            if t.get("interfered") or t["detect_s"] is None or t["detect_s"] > doc["bound_s"]:
                what = "VOID (stopped outside the daemon)" if t.get("interfered") else "MISSED BOUND"
                log(f"{what}: {fault} trial, events from the fault on:")
                for e in t["history"]:
                    log(f"  +{e['t']:8.3f}s {e['name']} {e['fields']}")
    return 1 if failed(out) else 0


if __name__ == "__main__":
    sys.exit(main())
