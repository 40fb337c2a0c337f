"""Seconds from a fault until the model server answers a real generation again, per restarter.

Run: ``.venv/bin/python -m bench.compare [--quick] [--json] [--only sim|real[,ROW,...]] [--trials N]
[--real-trials N] [--faults a,b] [--tools a,b] [--save DIR]``.

Simulator section (JSON top level ``faults``): real Docker, the simulator image, every tool side by side
(bench/compare_tools.py), each trial with fresh tools and containers. Per trial every tool's server is
started, the bench waits until each answers a generation (and the daemon says RUNNING, the healthcheck says
healthy), injects the fault into all of them, then a client per tool polls a chat completion every 0.25 s:
the figure is fault -> first success after the first failure. ``None`` (JSON ``null``) = never served again
within the fault's limit. The model's load time (``VSIM_LOAD_SECONDS``; measured: container start -> ready
line) is the same for every tool and reported apart. ``container_killed`` is ``docker kill`` (Docker's API:
Docker itself treats it as a manual stop); ``process_killed`` is SIGKILL to the container's main process from
the host (a crash, as Docker sees it).

Real vLLM section (JSON ``real_vllm``, full runs only): the same procedure on the real vLLM CPU server, one
tool at a time (bench/compare_real.py).

``--quick``: the simulator only, 1 trial and no dockerd restart (host_reboot_like is listed under
"skipped", not as a row of nulls);
full: 5 simulator trials plus the real section (``--real-trials``, default 1: a real trial is slow on
2 cores).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import requests

from bench import compare_faults as cf, compare_field as ff
from bench.compare_real import run_real
from bench.compare_render import commit, save_rows, table
from bench.compare_server import Server, sim_server
from bench.compare_tools import AUTOHEAL_EVERY_S, DAEMON_TEST_BOX_CHANGES, HEALTH, TOOLS, VARIANTS, Tool
from bench.compare_trial import Section, kill_container, kill_main_process, log, median_or_none, run_trial
from tools.images import ensure_sim_image

FAULTS = (
    "container_killed",
    "process_killed",
    "engine_died_exit_0",
    "engine_stuck",
    "oom_killed",
    "host_reboot_like",
    *cf.NEW_FAULTS,
    *ff.FIELD_FAULTS,
)
#: Seconds after the fault before a tool counts as "never served again".
LIMIT_S = {
    "container_killed": 120.0,
    "process_killed": 120.0,
    "engine_died_exit_0": 120.0,
    "engine_stuck": 240.0,
    "oom_killed": 120.0,
    "host_reboot_like": 180.0,
    **cf.LIMIT_S,
    **ff.LIMIT_S,
}
#: What a row's figure counts (absent: seconds to served again).
UNITS = {**cf.UNITS, **ff.UNITS}
OOM_LIMIT = "256m"
OOM_ALLOC_MIB = 512
LOAD_S = 10.0


def bench_image() -> str:
    """The simulator image of this checkout's sources (a content-addressed tag nobody else moves)."""
    return ensure_sim_image()


def _fault_hook(tool: Tool, body: dict[str, Any]) -> None:
    r = requests.post(f"{tool.target.url}/_sim/fault", json=body, timeout=5)
    if r.status_code != 200:
        raise RuntimeError(f"{tool.target.tool}: fault hook refused {body}: {r.status_code} {r.text[:200]}")


def inject(fault: str, tool: Tool, client: Any) -> float:
    """Inflict ``fault`` on the tool's simulator now; the wall time it was inflicted."""
    if fault == "container_killed":
        return kill_container(tool, client)
    if fault == "process_killed":
        return kill_main_process(tool, client)
    if fault in ("engine_died_exit_0", "engine_stuck"):
        t0 = time.time()
        _fault_hook(tool, {"kind": "die" if fault == "engine_died_exit_0" else "stuck"})
        return t0
    if fault == "engine_frozen_idle":  # the simulator's model of a SIGSTOPped engine core
        t0 = time.time()
        _fault_hook(tool, {"kind": "stuck"})
        return t0
    if fault == "engine_spinning":  # stuck, and burning a share of a core (bench/compare_field.py)
        t0 = time.time()
        _fault_hook(tool, {"kind": "spin", "duty": ff.SPIN_DUTY})
        return t0
    if fault == "api_server_frozen":  # the simulator is one process: SIGSTOP of all of it
        return cf.freeze(int(client.containers.get(tool.target.container).attrs["State"]["Pid"]))
    if fault == "oom_killed":
        client.containers.get(tool.target.container).update(mem_limit=OOM_LIMIT, memswap_limit=OOM_LIMIT)
        t0 = time.time()
        _fault_hook(tool, {"kind": "alloc", "mib": OOM_ALLOC_MIB})
        return t0
    raise ValueError(f"no injector for {fault!r}")


def run_sim(
    quick: bool, trials: int, faults: tuple[str, ...], names: tuple[str, ...], load_s: float
) -> dict[str, Any]:
    """The simulator section: every tool side by side in each trial."""
    image = bench_image()
    sec = Section(
        sim_server(image, load_s),
        inject,
        LIMIT_S,
        serve_timeout_s=60 + 3 * load_s,
        servers=(
            (
                "long_prefill",
                _with_env(sim_server(image, load_s), VSIM_PREFILL_TOKENS_PER_S=cf.SIM_PREFILL_RATE),
            ),
            ("memory_guard_load", sim_server(image, cf.GUARD_LOAD_S)),
            ("healthy_boot_nv_err", sim_server(image, ff.FIELD_LOAD_S)),
            ("daemon_killed_mid_load", sim_server(image, ff.FIELD_LOAD_S)),
            ("init_failure_same_line", _with_env(sim_server(image, load_s), VSIM_SCENARIO=ff.INIT_SCENARIO)),
            ("engine_spinning", ff.field_rate(sim_server(image, load_s))),
        ),
        prompt=cf.long_prompt(cf.SIM_PREFILL_TOKENS),
    )
    result: dict[str, Any] = {
        "faults": {},
        "trials": {},
        "skipped": {},  # fault -> why it did not run (absent from "faults": a null there means "never")
        "image": image,
        "load_seconds_configured": load_s,
        "limits_s": {f: LIMIT_S[f] for f in faults},
        "units": {f: UNITS[f] for f in faults if f in UNITS},
    }
    loads: list[float] = []
    details: dict[str, list[Any]] = {}
    for fault in faults:
        if fault == "host_reboot_like" and quick:
            result["skipped"][fault] = (
                "skipped in --quick: restarting the shared dockerd is for full runs only"
            )
            log(f"{fault}: skipped (--quick)")
            continue
        per_tool: dict[str, list[float | None]] = {n: [] for n in names}
        for i in range(trials):
            log(f"{fault}: trial {i + 1}/{trials}")
            out = _trial_or_again(fault, sec, names, result)
            for n in names:
                per_tool[n].append(out["seconds"].get(n))
            loads += [v for v in out["load_s"].values() if v is not None]
            details.setdefault(fault, []).append(out["details"])
            log(f"{fault}: trial {i + 1}: {out['seconds']}")
        result["trials"][fault] = per_tool
        result["faults"][fault] = {n: median_or_none(v) for n, v in per_tool.items()}
    result["load_seconds_measured_median"] = round(statistics.median(loads), 2) if loads else None
    result["details"] = details
    return result


def _with_env(server: Server, **env: float | str) -> Server:
    pairs = ((k, v if isinstance(v, str) else f"{v:g}") for k, v in env.items())
    return replace(server, env=(*server.env, *pairs))


#: Attempts of one simulator trial whose set-up failed (e.g. a port another job took between its pick and the
#: bind: this box is shared) before the run gives up.
TRIAL_ATTEMPTS = 3


def _trial_or_again(
    fault: str, sec: Section, names: tuple[str, ...], result: dict[str, Any]
) -> dict[str, Any]:
    """``run_trial``; one that raised (nothing measured, everything cleaned up) is void and run again."""
    for attempt in range(1, TRIAL_ATTEMPTS + 1):
        try:
            return run_trial(fault, sec, names)
        except Exception as exc:  # recorded and retried; the last one is re-raised
            void = {"fault": fault, "attempt": attempt, "error": repr(exc)[:300]}
            result.setdefault("void", []).append(void)
            log(f"{fault}: void trial (attempt {attempt}): {exc!r}"[:400])
            if attempt == TRIAL_ATTEMPTS:
                raise
    raise AssertionError("unreachable")


def run(ns: argparse.Namespace) -> dict[str, Any]:
    """Both sections as asked: the simulator one at the top level, the real one under ``real_vllm``."""
    result: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": " ".join(["python -m bench.compare", *sys.argv[1:]]),
        "sections": list(ns.sections),
        "daemon_config_changes": DAEMON_TEST_BOX_CHANGES,
        "healthcheck": {**HEALTH, "autoheal_every_s": AUTOHEAL_EVERY_S, "restart_policy": "unless-stopped"},
    }
    started = time.time()
    if "sim" in ns.sections:
        result |= run_sim(ns.quick, ns.trials, ns.fault_list, ns.tool_list, ns.load_seconds)
    else:
        result |= {"faults": {}, "trials": {}, "skipped": {}, "load_seconds_measured_median": None}
    result["sim_seconds_taken"] = round(time.time() - started, 1)
    if "real" in ns.sections:
        result["real_vllm"] = run_real(ns.fault_list, ns.tool_list, ns.real_trials, ns.real_limit)
        result["real_vllm"]["units"] = {f: UNITS[f] for f in ns.fault_list if f in UNITS}
    return result


def render(result: dict[str, Any], names: tuple[str, ...]) -> str:
    """The human report: a table per section, load times, limits and notes."""
    out: list[str] = []
    if "sim" in result["sections"]:
        out += ["Simulator (all tools side by side per trial):", "", table(result, names), ""]
        out.append(
            f"load time (same for all tools): configured {result['load_seconds_configured']:g} s, measured "
            f"median {result['load_seconds_measured_median']} s; limits {result['limits_s']}"
        )
        out += [f"{f}: {note}" for f, note in result["skipped"].items()]
        out += did_lines(result)
    real = result.get("real_vllm")
    if real is not None:
        out += ["", "Real vLLM CPU (one tool at a time, a fresh server each):", "", table(real, names), ""]
        codes = real["engine_died_exit_codes"] or "none seen"
        out.append(
            f"load time (same for all tools): measured median {real['load_seconds_measured_median']} s, "
            f"the reload that ended an outage {real.get('reload_seconds_measured_median')} s; "
            f"limits {real['limits_s']}; engine core SIGKILL -> container exit code(s) {codes}; "
            f"{real['trials_per_tool']} trial(s) per tool, {real['seconds_taken']:.0f} s"
        )
        out += [f"{f}: {note}" for f, note in real["skipped"].items()]
        out += [f"error: {e['fault']} {e['tool']} trial {e['trial']}: {e['error']}" for e in real["errors"]]
        out += [
            f"void (dockerd restarted meanwhile; run again): {v['fault']} {v['tool']}" for v in real["void"]
        ]
    return "\n".join(out)


def did_lines(result: dict[str, Any]) -> list[str]:
    """What each tool did in each row (its last trial): restarted, nothing, killed a healthy load..."""
    out = []
    for fault, trials in result.get("details", {}).items():
        did = (trials[-1] or {}).get("measure", {}).get("did") if trials else None
        if did:
            out.append(f"{fault} did: " + "; ".join(f"{n}: {v}" for n, v in did.items()))
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench.compare", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="the simulator only, 1 trial, no dockerd restart")
    p.add_argument("--json", action="store_true", help="print only the JSON result on stdout")
    p.add_argument(
        "--only",
        default="",
        help="comma list of a section (sim|real; default both, --quick: sim) and/or rows (fault names: "
        "re-runs just those rows, as --faults)",
    )
    p.add_argument("--trials", type=int, help="simulator trials per fault (default 5, --quick 1)")
    p.add_argument("--real-trials", type=int, default=1, help="real vLLM trials per fault and tool")
    p.add_argument(
        "--real-limit",
        type=float,
        metavar="S",
        help="seconds after a real fault before a tool counts as never served again (default per fault, "
        "180-240 s): a tool that never acts costs the whole limit in every trial",
    )
    p.add_argument("--faults", default=",".join(FAULTS))
    p.add_argument("--tools", "--tool", default=",".join(TOOLS))
    p.add_argument("--save", type=Path, help="write each row's JSON to DIR/SECTION-ROW.json (bench/results)")
    p.add_argument("--load-seconds", type=float, default=LOAD_S, help="VSIM_LOAD_SECONDS (default 10)")
    ns = p.parse_args(argv)
    only = [x for x in ns.only.split(",") if x]
    rows = tuple(x for x in only if x not in ("sim", "real"))
    ns.only = next((x for x in only if x in ("sim", "real")), None)
    if len({x for x in only if x in ("sim", "real")}) > 1:
        p.error("--only takes one section (sim or real); drop it for both")
    if rows:
        ns.faults = ",".join(rows)
    ns.fault_list = tuple(f for f in ns.faults.split(",") if f)
    ns.tool_list = tuple(t for t in ns.tools.split(",") if t)
    if set(ns.fault_list) - set(FAULTS) or set(ns.tool_list) - set(TOOLS + VARIANTS):
        p.error(f"faults: {','.join(FAULTS)}; tools: {','.join(TOOLS + VARIANTS)}")
    if ns.quick and ns.only == "real":
        p.error("--quick is the simulator only; drop it for the real section (--only real --real-trials 1)")
    if (ns.trials is not None and ns.trials < 1) or ns.real_trials < 1:
        p.error("--trials and --real-trials must be at least 1")
    if ns.real_limit is not None and not 30.0 <= ns.real_limit <= 3600.0:  # NaN fails too
        p.error("--real-limit must be between 30 and 3600 seconds")
    ns.sections = ("sim",) if ns.quick else ((ns.only,) if ns.only else ("sim", "real"))
    ns.trials = ns.trials or (1 if ns.quick else 5)
    return ns


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    ns = parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)
    loads, ran_on = os.getloadavg(), commit()
    try:
        result = run(ns)
    except KeyboardInterrupt:
        log("interrupted; containers removed")
        return 130
    finally:
        cf.thaw()
    if ns.save is not None:
        for path in save_rows(result, ns.save, loads, ran_on):
            log(f"saved {path}")
    if ns.json:
        print(json.dumps(result))
    else:
        print(render(result, ns.tool_list))
    return 0


if __name__ == "__main__":
    sys.exit(main())
