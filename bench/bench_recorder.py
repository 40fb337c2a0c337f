"""The flight recorder's CPU cost: per record, and as a share of one core at the daemon's rate (1 Hz).

Run: ``.venv/bin/python -m bench.bench_recorder [--seconds S] [--records N]``.
(a) ``--records`` samples written back to back the way the recorder thread does (real /proc/meminfo and
PSI reads, encode, append, the fsync pace): CPU time per record. (b) the real FlightDuty (its thread)
fed one tick a second with three profiles for ``--seconds``: this process's CPU time (user+sys) over the
wall time, in % of one core, with the fsyncs done and the bytes kept. Files in a temp dir, removed after.
Exits 1 when (b) is above 0.2 %.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from supervisor.adapters.store.flight_recorder import FlightFiles
from supervisor.core.clock import SystemClock
from supervisor.core.profile_state import ProfileState
from supervisor.core.states import State
from supervisor.daemon.executor.flight import FlightDuty, host_sample

TARGET_PCT = 0.2


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


def per_record(directory: Path, n: int) -> float:
    """CPU seconds per sample record written (reads, encode, append, paced fsync)."""
    files = FlightFiles(directory, time.monotonic)
    profiles = {f"p{i}": ["RUNNING", 3.0, 0.0] for i in range(3)}
    start = _cpu()
    for _ in range(n):
        rec = {"t": round(time.time(), 3), "k": "s", "p": profiles} | host_sample()
        files.append(rec)
        files.sync()
    used = _cpu() - start
    files.close()
    return used / n


def at_rate(directory: Path, seconds: float) -> dict[str, float]:
    """The real recorder thread at one tick a second: % of one core over ``seconds``."""
    duty = FlightDuty(directory, SystemClock())
    duty.start()
    states = {f"p{i}": ProfileState(f"p{i}", state=State.RUNNING) for i in range(3)}
    t0, c0 = time.monotonic(), _cpu()
    ticks = 0
    while time.monotonic() - t0 < seconds:
        duty.sample({n: st.state.value for n, st in states.items()})
        ticks += 1
        time.sleep(max(0.0, t0 + ticks - time.monotonic()))
    wall, cpu = time.monotonic() - t0, _cpu() - c0
    status = duty.status()
    duty.stop()
    return {
        "seconds": round(wall, 1),
        "ticks": ticks,
        "cpu_s": round(cpu, 4),
        "pct_of_one_core": round(100 * cpu / wall, 4),
        "fsyncs": float(status["fsyncs"]),
        "bytes": float(status["bytes"]),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.bench_recorder", description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=120.0, help="real-rate run (default 120)")
    p.add_argument("--records", type=int, default=5000, help="back-to-back records (default 5000)")
    ns = p.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="vsup-bench-flight-"))
    try:
        each = per_record(tmp / "a", max(1, ns.records))
        rate = at_rate(tmp / "b", max(5.0, ns.seconds))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out = {"cpu_us_per_record": round(each * 1e6, 1), "at_1hz": rate, "load_avg": os.getloadavg()}
    print(f"per record: {each * 1e6:.1f} us CPU (= {each * 100:.4f} % of one core at 1 record/s)")
    print(
        f"real rate: {rate['pct_of_one_core']:.4f} % of one core over {rate['seconds']} s, "
        f"{rate['fsyncs']:.0f} fsyncs, {rate['bytes']:.0f} bytes kept (target <= {TARGET_PCT} %)"
    )
    print(json.dumps(out))
    return 0 if rate["pct_of_one_core"] <= TARGET_PCT else 1


if __name__ == "__main__":
    sys.exit(main())
