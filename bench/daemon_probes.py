"""The three latency measurements of the daemon benchmark: death noticed, ready noticed, status."""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.daemon_world import BenchWorld
from supervisor.adapters.control.client import ControlClient
from tests.daemon_harness import DaemonProc
from tests.harness import wait_for

READY_LINE = "Application startup complete."
ROOT = Path(__file__).resolve().parent.parent


def parse_rfc3339(stamp: str) -> float:
    """Epoch seconds of a Docker log timestamp like ``2024-05-01T07:20:01.123456789Z`` (nanoseconds kept)."""
    date, _, frac = stamp.rstrip("Z").partition(".")
    base = datetime.strptime(date, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC).timestamp()
    return base + (float(f"0.{frac}") if frac else 0.0)


def ready_line_ts(container: Any) -> float | None:
    """When the container printed the uvicorn ready line (from ``docker logs --timestamps``)."""
    raw: bytes = container.logs(timestamps=True, stdout=True, stderr=True)
    found: float | None = None
    for line in raw.decode("utf-8", errors="replace").splitlines():
        if READY_LINE in line:
            found = parse_rfc3339(line.split(" ", 1)[0])  # the last one, should the container be restarted
    return found


def _first(events: list[dict[str, Any]], name: str, since: float, **fields: Any) -> dict[str, Any] | None:
    for e in events:
        if e["name"] != name or float(e["ts"]) < since:
            continue
        if all(e["fields"].get(k) == v for k, v in fields.items()):
            return e
    return None


@dataclass
class Trials:
    """Raw per-trial figures (seconds)."""

    death: list[float] = field(default_factory=list)
    ready_log: list[float] = field(default_factory=list)
    ready_running: list[float] = field(default_factory=list)
    ready_running_raw: list[float] = field(default_factory=list)
    first_probe_ms: list[float] = field(default_factory=list)


def _wait_new_running(d: DaemonProc, name: str, previous: str | None) -> str:
    def check() -> str | None:
        st = d.status(name)
        cid = st.get("container_id")
        if st["state"] == "RUNNING" and cid and cid != previous:
            return str(cid)
        return None

    return wait_for(check, 120, interval=0.2, message=f"{name} RUNNING in a new container")


def measure_ready(world: BenchWorld, d: DaemonProc, name: str, trials: Trials) -> None:
    """Ready line printed -> log.ready, and -> RUNNING minus the first generation's own latency."""
    c = world.container(name)
    line_ts = ready_line_ts(c)
    if line_ts is None:
        raise AssertionError(f"no {READY_LINE!r} in the logs of {c.name}")
    events = d.events(name, n=200)
    since = parse_rfc3339(str(c.attrs["State"]["StartedAt"]))  # events of this container's start only
    ready = _first(events, "log.ready", since)
    running = _first(events, "state.changed", since, new="RUNNING")
    first = _first(events, "start.ready", since)
    if ready is None or running is None or first is None:
        raise AssertionError(f"missing log.ready/RUNNING/start.ready after {line_ts}: {events[-10:]}")
    probe_s = float(first["fields"].get("latency_ms") or 0.0) / 1000.0
    trials.ready_log.append(float(ready["ts"]) - line_ts)
    trials.ready_running_raw.append(float(running["ts"]) - line_ts)
    trials.ready_running.append(float(running["ts"]) - line_ts - probe_s)
    trials.first_probe_ms.append(probe_s * 1000.0)


def measure_death(world: BenchWorld, d: DaemonProc, name: str, trials: Trials) -> None:
    """``docker kill`` (SIGKILL) -> the daemon's container.exited event."""
    c = world.container(name)
    cid = str(c.id)
    t0 = time.time()
    c.kill()

    def exited() -> dict[str, Any] | None:
        for e in d.events(name, n=50):
            ecid = str(e["fields"].get("container_id") or "-")
            if e["name"] == "container.exited" and cid.startswith(ecid):
                return e
        return None

    ev = wait_for(exited, 15, interval=0.1, message=f"container.exited for {cid[:12]}")
    trials.death.append(float(ev["ts"]) - t0)


def run_cycles(world: BenchWorld, n: int, death: bool, ready: bool) -> Trials:
    """One profile, fast backoff: n cycles of (RUNNING -> ready figures -> kill or restart)."""
    spec = world.profile("cycle")
    d = world.daemon("cycle", [spec], breaker_limit=100, backoff_initial_s=0.5, backoff_max_s=1.0)
    trials = Trials()
    previous: str | None = None
    for i in range(n):
        previous = _wait_new_running(d, spec.name, previous)
        if ready:
            measure_ready(world, d, spec.name, trials)
        if death:
            measure_death(world, d, spec.name, trials)
        else:
            reply = d.call("restart", name=spec.name)
            assert reply.get("ok"), reply
        print(f"  cycle {i + 1}/{n}: {_last(trials)}", flush=True)
    return trials


def _last(t: Trials) -> str:
    parts = []
    if t.death:
        parts.append(f"death={t.death[-1]:.3f}s")
    if t.ready_log:
        parts.append(f"log.ready={t.ready_log[-1]:.3f}s running-probe={t.ready_running[-1]:.3f}s")
    return " ".join(parts)


@dataclass(frozen=True)
class StatusTimes:
    """Wall seconds of each `supervisorctl status --json` run and each raw socket round trip."""

    cli: list[float]
    socket: list[float]


def measure_status(world: BenchWorld, n: int) -> StatusTimes:
    """Run the real supervisorctl n times against a daemon with one RUNNING profile, then the raw socket."""
    spec = world.profile("status")
    d = world.daemon("status", [spec])
    d.wait_state(spec.name, "RUNNING", 120)
    exe = ROOT / ".venv" / "bin" / "supervisorctl"
    cmd = [str(exe), "--socket", str(d.socket), "status", "--json"]
    cli: list[float] = []
    for _ in range(n):
        t0 = time.perf_counter()
        out = subprocess.run(cmd, capture_output=True, timeout=30, check=False)
        cli.append(time.perf_counter() - t0)
        if out.returncode != 0:
            raise AssertionError(f"supervisorctl failed ({out.returncode}): {out.stderr[-500:]!r}")
    client = ControlClient(d.socket, timeout=10)
    sock: list[float] = []
    for _ in range(n):
        t0 = time.perf_counter()
        reply = client.call("status")
        sock.append(time.perf_counter() - t0)
        assert reply.get("ok"), reply
    return StatusTimes(cli, sock)
