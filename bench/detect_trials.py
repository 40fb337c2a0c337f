"""Detection trials: inject one fault into a RUNNING server, time the daemon's reaction and the recovery.

Each trial waits for the profile to be RUNNING in a fresh container, injects the fault and measures, on
the daemon's own event timestamps, fault -> the acting event (``emergency.stop`` or ``container.exited``,
whichever comes first) and fault -> ``state.changed new=RUNNING`` of the next container. The fault time is
the wall clock just before the injection (``time.time()``, the clock the daemon stamps its events with).
"""

from __future__ import annotations

import contextlib
import functools
import os
import random
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import requests

from tests.daemon_harness import DaemonProc
from tests.harness import WaitTimeout, wait_for

#: The events that count as "the daemon acted on the fault".
ACT_EVENTS = ("emergency.stop", "container.exited")
#: The container stopped by someone else (another engineer's dockerd restart on a shared machine): the
#: daemon then holds the profile as manually stopped, and the trial is void, not a miss.
INTERFERED = "container.stopped_externally"
#: How long a trial waits for the daemon to act, and then for RUNNING again (real vLLM restarts slowly).
ACT_TIMEOUT_S = 150.0


@dataclass
class Trial:
    """One fault, timed (seconds from the fault, on the daemon's event clock)."""

    fault: str
    detect_s: float | None = None
    detect_event: str | None = None
    recover_s: float | None = None
    phase_s: float = 0.0  # random wait between RUNNING and the fault (spreads the probe-cycle phase)
    note: str = ""
    interfered: bool = False
    history: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "fault": self.fault,
            "detect_s": self.detect_s,
            "detect_event": self.detect_event,
            "recover_s": self.recover_s,
            "phase_s": self.phase_s,
        }
        if self.note:
            out["note"] = self.note
        if self.interfered:
            out["interfered"] = True
        if self.history:
            out["history"] = self.history
        return out


@dataclass(frozen=True)
class Injected:
    """What an injection did: when (wall clock) and how to undo it (real engine core: SIGCONT)."""

    at: float
    undo: Callable[[], None] | None = None
    note: str = ""


#: An injector gets the daemon, the profile name and its RUNNING container id, and injects the fault.
Injector = Callable[[DaemonProc, str, str], Injected]


def wait_running(d: DaemonProc, name: str, previous: str | None, timeout: float) -> str:
    """Wait until ``name`` is RUNNING in a container other than ``previous``; its container id."""

    def check() -> str | None:
        st = d.status(name)
        cid = st.get("container_id")
        if st["state"] == "RUNNING" and st.get("observed", True) and cid and cid != previous:
            return str(cid)
        return None

    return wait_for(check, timeout, interval=0.2, message=f"{name} RUNNING in a new container")


def first_event(
    d: DaemonProc, name: str, since: float, names: tuple[str, ...], pred: Callable[[dict[str, Any]], bool]
) -> dict[str, Any] | None:
    for e in d.events(name, n=300):
        if e["name"] in names and float(e["ts"]) >= since and pred(e):
            return e
    return None


def _any(e: dict[str, Any]) -> bool:
    return True


def history(d: DaemonProc, name: str, since: float) -> list[dict[str, Any]]:
    """The profile's events from ``since`` on (1 s slack), times relative to it."""
    return [
        {"t": round(float(e["ts"]) - since, 3), "name": e["name"], "fields": e.get("fields", {})}
        for e in d.events(name, n=300)
        if float(e["ts"]) >= since - 1.0
    ]


def run_trials(
    d: DaemonProc,
    name: str,
    fault: str,
    inject: Injector,
    n: int,
    *,
    phase_max_s: float,
    running_timeout_s: float,
    log: Callable[[str], None],
) -> list[Trial]:
    """``n`` trials of one fault on one profile of a running daemon."""
    trials: list[Trial] = []
    previous: str | None = None
    cid = wait_running(d, name, previous, running_timeout_s)
    rng = random.Random()
    for i in range(n):
        t = Trial(fault)
        t.phase_s = round(rng.uniform(0.0, phase_max_s), 2)
        if t.phase_s:
            # a deliberate offset (not a wait for something): the fault lands at a random point of the
            # probe cycle, so the trials sample the whole range of the detection time
            time.sleep(t.phase_s)
        inj = inject(d, name, cid)
        t.note = inj.note
        try:
            ev = wait_for(
                functools.partial(first_event, d, name, inj.at, (*ACT_EVENTS, INTERFERED), _any),
                ACT_TIMEOUT_S,
                interval=0.2,
                message=f"{fault}: emergency.stop or container.exited",
            )
        except WaitTimeout:
            # never acted on: a finding; keep what the daemon recorded and end this fault's trials
            t.history = history(d, name, inj.at)
            trials.append(t)
            log(f"  {fault} {i + 1}/{n}: NOT acted on within {ACT_TIMEOUT_S:.0f} s")
            return trials
        finally:
            if inj.undo is not None:
                inj.undo()
        previous = cid
        if ev["name"] == INTERFERED:
            t.interfered, t.history = True, history(d, name, inj.at)
            t.note += " VOID: the container was stopped outside the daemon"
            trials.append(t)
            log(f"  {fault} {i + 1}/{n}: {t.note.strip()}; starting the profile again")
            d.call("start", name=name)  # the profile is STOPPED now: any RUNNING is the new start
            cid = wait_running(d, name, None, running_timeout_s)
            continue
        t.detect_s = round(float(ev["ts"]) - inj.at, 3)
        t.detect_event = str(ev["name"])
        cid = wait_running(d, name, previous, running_timeout_s)
        up = first_event(
            d, name, inj.at, ("state.changed",), lambda e: e.get("fields", {}).get("new") == "RUNNING"
        )
        t.recover_s = round(float(up["ts"]) - inj.at, 3) if up else None
        t.history = history(d, name, inj.at)  # in the JSON; printed for a trial that missed its bound
        trials.append(t)
        log(
            f"  {fault} {i + 1}/{n}: phase {t.phase_s:.1f}s -> {t.detect_event} after {t.detect_s:.2f}s,"
            f" RUNNING again after {t.recover_s}s {t.note}".rstrip()
        )
    return trials


# --- the injectors -------------------------------------------------------------------------------------


def sim_fault(base_url: str, body: dict[str, Any]) -> Injector:
    """POST ``body`` to the simulator's fault hook (docs/simulator.md "Fault hook")."""

    def inject(d: DaemonProc, name: str, cid: str) -> Injected:
        at = time.time()
        r = requests.post(base_url + "/_sim/fault", json=body, timeout=5)
        r.raise_for_status()
        return Injected(at)

    return inject


def sim_stuck(base_url: str) -> Injector:
    """The simulated frozen engine: /health, /v1/models and /metrics answer, generations hang."""
    post = sim_fault(base_url, {"kind": "stuck"})

    def inject(d: DaemonProc, name: str, cid: str) -> Injected:
        inj = post(d, name, cid)
        code = requests.get(base_url + "/health", timeout=5).status_code
        return Injected(inj.at, note=f"(/health {code} after the freeze)")

    return inject


def container_kill(client: Any) -> Injector:
    """``docker kill`` (SIGKILL) of the server's container."""

    def inject(d: DaemonProc, name: str, cid: str) -> Injected:
        c = client.containers.get(cid)
        at = time.time()
        c.kill()
        return Injected(at)

    return inject


def engine_core_stop(client: Any, base_url: str) -> Injector:
    """SIGSTOP of the real ``VLLM::EngineCore`` process (found with ``docker top``); undone by SIGCONT."""

    def inject(d: DaemonProc, name: str, cid: str) -> Injected:
        top = client.api.top(cid, ps_args="-eo pid,args")
        titles = top.get("Titles") or []
        col = titles.index("PID") if "PID" in titles else 0
        pids = [
            int(row[col])
            for row in top.get("Processes") or []
            if any("VLLM::EngineCore" in str(cell) for cell in row)
        ]
        if len(pids) != 1:
            raise AssertionError(f"expected one VLLM::EngineCore process in {cid[:12]}: {top}")
        pid = pids[0]
        at = time.time()
        os.kill(pid, signal.SIGSTOP)

        def cont() -> None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)

        try:
            code = requests.get(base_url + "/health", timeout=5).status_code
        except requests.RequestException as exc:
            note = f"(/health failed after the freeze: {exc})"
        else:
            note = f"(/health {code} after the freeze)"
        return Injected(at, undo=cont, note=note)

    return inject
