"""Fault matrix: every fault, the state the daemon must end in, trials, time to that state, alerts sent.

Run: ``.venv/bin/python -m bench.faults [--quick] [--only a,b] [--trials N] [--json]``. Real Docker, the
simulator image, the real daemon (subprocess) with the test harness' fast timings, alerts to a webhook
receiver on 127.0.0.1 (counted per case). ``--quick``: 1 trial, no dockerd freeze; full: 3 trials and the
dockerd freeze (SIGSTOP <= 20 s, always resumed: the machine's dockerd is shared). Exits 1 if a row failed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench import fault_rows as r, fault_rows_field as f, fault_rows_kill as k
from bench.compare import bench_image
from bench.fault_env import FaultEnv, fault_env
from tests.harness import wait_for


@dataclass(frozen=True)
class Case:
    name: str
    expect: str
    run: Callable[[FaultEnv], r.Outcome]
    full_only: bool = False


CASES = (
    Case("container_sigkill", "RUNNING, new container", r.sigkill),
    Case("exit_0_with_log_lines", "RUNNING, new container", r.exit0_lines),
    Case("exit_0_without_log_lines", "RUNNING, new container", r.exit0_silent),
    Case("engine_stuck", "emergency stop, RUNNING, new container", r.stuck),
    Case("health_503", "emergency stop, RUNNING, new container", r.health_503),
    Case(
        "startup_oom", "BACKOFF, outcome failed_oom + diagnosis", r.startup_failure("fail_oom", "failed_oom")
    ),
    Case(
        "startup_gpu_mem_util",
        "BACKOFF, outcome failed_gpu_mem_util + diagnosis",
        r.startup_failure("fail_gpu_mem_util", "failed_gpu_mem_util"),
    ),
    Case(
        "startup_kv_insufficient",
        "BACKOFF, outcome failed_kv_insufficient + diagnosis",
        r.startup_failure("fail_kv_insufficient", "failed_kv_insufficient"),
    ),
    Case(
        "startup_no_kv",
        "BACKOFF, outcome failed_no_kv_memory + diagnosis",
        r.startup_failure("fail_no_kv", "failed_no_kv_memory"),
    ),
    Case(
        "startup_engine_init",
        "BACKOFF, outcome failed_engine_init + diagnosis",
        r.startup_failure("fail_engine_init", "failed_engine_init"),
    ),
    Case("api_key_begins_with_dash", "FATAL after 1 start, diagnosis names the fix, key masked", r.dash_key),
    Case("load_hangs", "BACKOFF, outcome timeout/timeout_silence", r.hang_load),
    Case("slow_load_progressing", "RUNNING, never killed", r.slow_load),
    Case("memory_floor", "BACKOFF, no breaker record, no container", r.memory_floor),
    Case(
        "daemon_sigkill_mid_load",
        "RUNNING, same container (adopted), its ledger row (KV pool, load time)",
        r.daemon_kill(mid_load=True),
    ),
    Case("daemon_sigkill_mid_run", "RUNNING, same container, no new row", r.daemon_kill(mid_load=False)),
    Case("dockerd_hung", "status < 300 ms; RUNNING, same container", r.dockerd_hung, full_only=True),
    Case("state_dir_full", "daemon alive, RUNNING after a kill", r.state_dir("full")),
    Case("state_dir_read_only", "daemon alive, RUNNING after a kill", r.state_dir("ro")),
    Case("corrupt_state", "RUNNING", r.corrupt_state),
    Case("webhook_down", "RUNNING after a kill", r.webhook("down")),
    Case("webhook_slow", "RUNNING after a kill", r.webhook("slow")),
    Case("malformed_profile", "check-config exit 1 naming key paths", r.malformed_profile),
    Case("port_taken", "BACKOFF with the reason", r.port_taken),
    Case("operator_docker_stop", "STOPPED, intent stop", r.operator_docker_stop),
    Case("two_profiles_loading", "loads serialized", r.two_profiles),
    Case("long_prefill", "RUNNING, no emergency, HTTP 200, same container", k.long_prefill),
    Case(
        "starved_prefill",
        "RUNNING, no emergency, HTTP 200 after > 15 s, same container",
        k.starved_prefill,
    ),
    Case("engine_frozen_idle", "emergency stop, RUNNING, new container", k.engine_frozen_idle),
    Case("api_server_frozen", "emergency stop, RUNNING, new container", k.api_server_frozen),
    Case("nv_err_no_memory", "killed (exit 137), RUNNING, new container", k.nv_err_no_memory),
    Case("memory_guard_load", "load gone, outcome failed_memory_guard", k.memory_guard_load),
    Case("engine_spinning", "emergency stop within 30 s, RUNNING, new container", f.engine_spinning),
    Case("healthy_boot_nv_err", "RUNNING, 0 kills of the load", f.healthy_boot_nv_err),
    Case("forged_kernel_line", "no kill, same container", f.forged_kernel_line),
    Case("init_failure_same_line", "FATAL after 2 loads", f.init_failure_same_line),
    Case(
        "low_contiguity_before_start",
        "warned (contiguity.start) before the container, RUNNING",
        f.low_contiguity_before_start,
    ),
)
NAMES = tuple(c.name for c in CASES)


def settled_alerts(env: FaultEnv) -> list[str]:
    """The kinds the receiver got, once their count stopped growing for 1 s (bounded at 10 s)."""
    seen = [len(env.alerts()), time.monotonic()]

    def still() -> bool:
        n = len(env.alerts())
        if n != seen[0]:
            seen[0], seen[1] = n, time.monotonic()
        return time.monotonic() - seen[1] >= 1.0

    with contextlib.suppress(AssertionError):
        wait_for(still, 10, interval=0.2, message="alerts settled")
    return env.alerts()


def run_case(case: Case, image: str, trials: int) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    for _ in range(trials):
        with fault_env(image) as env:
            try:
                out = case.run(env)
            except Exception as exc:  # noqa: BLE001 - a failed case is a row, not a crash
                out = r.Outcome(False, None, f"{type(exc).__name__}: {str(exc)[:300]}")
            rows.append(
                {"ok": out.ok, "seconds": out.seconds, "alerts": settled_alerts(env), "detail": out.detail}
            )
    secs = [x["seconds"] for x in rows if x["seconds"] is not None]
    return {
        "case": case.name,
        "expect": case.expect,
        "passed": all(x["ok"] for x in rows),
        "trials": len(rows),
        "seconds_median": round(statistics.median(secs), 2) if secs else None,
        "alerts": [len(x["alerts"]) for x in rows],
        "alert_kinds": sorted({k for x in rows for k in x["alerts"]}),
        "detail": rows[-1]["detail"],
        "runs": rows,
    }


def table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| fault | must end in | trials | passed | seconds (median) | alerts | detail |",
        "|---" * 7 + "|",
    ]
    for x in results:
        secs = "-" if x["seconds_median"] is None else f"{x['seconds_median']:.1f}"
        alerts = ",".join(str(a) for a in x["alerts"])
        if x.get("alert_kinds"):
            alerts += " (" + ", ".join(x["alert_kinds"]) + ")"
        ok = "yes" if x["passed"] else "**NO**"
        detail = str(x["detail"]).replace("|", "/")
        lines.append(
            f"| `{x['case']}` | {x['expect']} | {x['trials']} | {ok} | {secs} | {alerts} | {detail} |"
        )
    return "\n".join(lines)


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.faults", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="1 trial, no dockerd freeze")
    p.add_argument("--only", default="", help=f"comma list of {','.join(NAMES)}")
    p.add_argument("--trials", type=int, default=None)
    p.add_argument("--json", action="store_true")
    ns = p.parse_args(argv)
    only = [x for x in ns.only.split(",") if x]
    if set(only) - set(NAMES):
        p.error(f"--only takes {','.join(NAMES)}")
    trials = ns.trials or (1 if ns.quick else 3)
    signal.signal(signal.SIGTERM, _interrupt)
    image = bench_image()
    results = []
    for case in CASES:
        if (only and case.name not in only) or (case.full_only and ns.quick):
            continue
        t = time.monotonic()
        res = run_case(case, image, trials)
        results.append(res)
        print(
            f"[{time.strftime('%H:%M:%S')}] {case.name}: {'ok' if res['passed'] else 'FAILED'} "
            f"({time.monotonic() - t:.0f} s) {res['detail']}",
            file=sys.stderr,
            flush=True,
        )
    doc = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": " ".join(["python -m bench.faults", *(argv or sys.argv[1:])]),
        "cases": results,
    }
    print(json.dumps(doc) if ns.json else table(results))
    return 0 if all(x["passed"] for x in results) else 1


if __name__ == "__main__":
    sys.exit(main())
