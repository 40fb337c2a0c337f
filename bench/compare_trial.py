"""One trial of ``bench.compare``: fresh tools on one model server, steady state, a fault, the recovery clock.

Shared by the simulator section (all tools side by side in one trial, bench/compare.py) and the real vLLM
section (one tool per trial, bench/compare_real.py). Every container, process and temp dir of the trial is
removed in a ``finally`` (label sweep included), whatever happens.
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import signal
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import docker
from docker.errors import DockerException, NotFound
from requests import RequestException

from bench import compare_faults as cf, compare_field as ff
from bench.compare_peers import BashLoopTool, SystemdTool, make_tools
from bench.compare_server import Server
from bench.compare_tools import Autoheal, DaemonTool, SupervisordTool, Tool, Trial, cleanup_dir
from bench.daemon_probes import parse_rfc3339, ready_line_ts
from bench.dockerd import restart_dockerd
from bench.served import Recovery, wait_serving
from tests.harness import TEST_LABEL, wait_for

#: The faults that end the container by themselves (their own death is not the tool's act).
SELF_DEATH = ("container_killed", "process_killed", "engine_died_exit_0", "oom_killed", "host_reboot_like")
#: Inflicts a fault on a tool's server now; returns the wall time it was inflicted.
Injector = Callable[[str, Tool, Any], float]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def kill_container(tool: Tool, client: Any) -> float:
    """``docker kill`` (SIGKILL through Docker's API: Docker itself takes it for a manual stop)."""
    t0 = time.time()
    client.containers.get(tool.target.container).kill()
    return t0


def kill_main_process(tool: Tool, client: Any) -> float:
    """SIGKILL to the container's main process from the host, not via Docker's API: a crash, to Docker."""
    pid = int(client.containers.get(tool.target.container).attrs["State"]["Pid"])
    t0 = time.time()
    os.kill(pid, signal.SIGKILL)
    return t0


@dataclass(frozen=True)
class Section:
    """What differs between the simulator and the real vLLM runs of the same trial procedure."""

    server: Server
    inject: Injector
    limits_s: dict[str, float]
    serve_timeout_s: float  # tools up -> first generation served
    steady_timeout_s: float = 60.0  # served -> daemon RUNNING / healthcheck healthy
    run_prefix: str = "bench-cmp"  # the label value of a trial's containers: PREFIX-<hex>
    servers: tuple[tuple[str, Server], ...] = ()  # a fault's own server (its load time, prefill rate...)
    prompt: str | tuple[int, ...] = ""  # the long_prefill row's prompt (text, or token ids for a real model)

    def server_for(self, fault: str) -> Server:
        return dict(self.servers).get(fault, self.server)


def _ready(tool: Tool, client: Any) -> bool:
    """Steady state before a fault: serving, the daemon RUNNING, the healthcheck healthy."""
    if isinstance(tool, DaemonTool):
        assert tool.proc is not None
        if tool.proc.status(tool.trial.server.profile)["state"] != "RUNNING":
            return False
    liveness = getattr(tool, "liveness", None)
    if liveness is not None and not liveness.started:  # its probe saw /health answer (k8s-liveness)
        return False
    if tool.target.tool == "docker-healthcheck":
        c = client.containers.get(tool.target.container)
        if c.attrs["State"].get("Health", {}).get("Status") != "healthy":
            return False
    return True


def load_seconds(client: Any, name: str) -> float | None:
    """Container start -> `Application startup complete.` of the container's current run."""
    try:
        c = client.containers.get(name)
    except (NotFound, DockerException):
        return None
    ready = ready_line_ts(c)
    return None if ready is None else round(ready - parse_rfc3339(str(c.attrs["State"]["StartedAt"])), 2)


def sweep(run_id: str, prefix: bool = False) -> None:
    """Force-remove every container of the run, or of every run whose id starts with ``run_id``.

    A fresh client: the trial's may be the broken thing.
    """
    with contextlib.suppress(DockerException, RequestException):
        client = docker.from_env(timeout=120)
        try:
            label = TEST_LABEL if prefix else f"{TEST_LABEL}={run_id}"
            for c in client.containers.list(all=True, filters={"label": label}):
                if prefix and not str(c.labels.get(TEST_LABEL, "")).startswith(run_id):
                    continue
                with contextlib.suppress(NotFound, DockerException, RequestException):
                    c.remove(force=True)
        finally:
            client.close()


class ExitWatch:
    """Every death of the named containers from now on (Docker's ``die`` events): [s after t0, exit code].

    A live subscription, not a history query: dockerd keeps only its last 256 events, which a busy shared
    box (healthchecks are events too) replaces within a trial.
    """

    def __init__(self, names: list[str]) -> None:
        self.t0 = time.time()
        self.deaths: dict[str, list[list[float]]] = {}
        self._client: Any = docker.from_env()
        self._stream = self._client.events(
            since=int(self.t0) - 1, decode=True, filters={"container": names, "event": "die"}
        )
        self._thread = threading.Thread(target=self._loop, name="exit-watch", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        with contextlib.suppress(Exception):  # the stream ends with an error when closed or dockerd goes
            for e in self._stream:
                attrs = e.get("Actor", {}).get("Attributes", {})
                t = round(float(e.get("timeNano", 0)) / 1e9 - self.t0, 2)
                self.deaths.setdefault(str(attrs.get("name")), []).append([t, int(attrs.get("exitCode", -1))])

    def stop(self) -> dict[str, list[list[float]]]:
        time.sleep(0.5)  # the last die event on its way
        with contextlib.suppress(Exception):
            self._stream.close()
        self._thread.join(timeout=5)
        with contextlib.suppress(Exception):
            self._client.close()
        return self.deaths


def run_trial(fault: str, section: Section, names: tuple[str, ...]) -> dict[str, Any]:
    """One trial of one fault across the named tools; per tool seconds (None = never) plus details."""
    run_id = f"{section.run_prefix}-{uuid.uuid4().hex[:12]}"
    tmp = Path(tempfile.mkdtemp(prefix="vsup-cmp-"))
    tools: dict[str, Tool] = {}
    heal = Autoheal(run_id) if "docker-healthcheck" in names else None
    client: Any = None
    watchers: dict[str, Recovery] = {}
    deaths: ExitWatch | None = None
    server = section.server_for(fault)
    served = server.served
    out: dict[str, Any] = {"seconds": {}, "load_s": {}, "reload_s": {}, "details": {}}
    host = cf.GUARD_HOST if fault == "memory_guard_load" else ()
    denv = ff.LOW_ENV if fault == "low_contiguity_before_start" else ()
    try:
        tools = make_tools(Trial(run_id, server, tmp, daemon_host=host, daemon_env=denv), names)
        client = docker.from_env(timeout=120)
        if fault == "memory_guard_load" or fault in ff.DURING_LOAD:  # the fault comes during the load
            deaths = ExitWatch([t.target.container for t in tools.values()])
            for t in tools.values():
                t.up()
            out["seconds"], out["details"]["measure"] = _during_load(fault, tools, deaths, served, client)
            _details(out["details"], tools, heal, client)
            out["details"]["exits"] = deaths.stop()
            deaths = None
            return out
        for t in tools.values():
            t.up()
        if heal is not None:
            heal.start()
        for n, t in tools.items():
            wait_serving(t.target.url, t.target.key, served, section.serve_timeout_s)
            steady = partial(_ready, t, client)
            wait_for(steady, section.steady_timeout_s, interval=0.5, message=f"{n} steady")
            out["load_s"][n] = load_seconds(client, t.target.container)
        deaths = ExitWatch([t.target.container for t in tools.values()])
        if fault in cf.UNITS or fault in ff.UNITS:  # measured otherwise than by a recovery clock
            if fault == "nv_err_no_memory":
                out["seconds"], out["details"]["measure"] = cf.nv_err(tools, deaths)
            elif fault == "forged_kernel_line":
                out["seconds"], out["details"]["measure"] = ff.forged(tools, deaths)
            else:
                prompt = section.prompt if isinstance(section.prompt, str) else list(section.prompt)
                measured = cf.long_prefill(tools, deaths, served, prompt, section.limits_s[fault])
                out["seconds"], out["details"]["measure"] = measured
            _details(out["details"], tools, heal, client)
            out["details"]["exits"] = deaths.stop()
            deaths = None
            return out
        after = cf.IDLE_REQUEST_AFTER_S if fault == "engine_frozen_idle" else 0.0
        watchers = {
            n: Recovery(t.target.url, t.target.key, served, first_after=after) for n, t in tools.items()
        }
        if fault == "host_reboot_like":
            now = time.time()
            for w in watchers.values():
                w.start(now)
            t0 = restart_dockerd()
            for w in watchers.values():
                w.t0 = t0
        else:
            order = list(tools.items())
            random.shuffle(order)
            for n, t in order:
                watchers[n].start(section.inject(fault, t, client))
        first = min(w.t0 for w in watchers.values())
        deadline = first + section.limits_s[fault]
        while time.time() < deadline and not all(w.done for w in watchers.values()):
            time.sleep(0.5)  # the watchers' threads do the polling; this only waits for them or the limit
        did = out["details"].setdefault("measure", {}).setdefault("did", {})
        for n, w in watchers.items():
            out["seconds"][n] = w.seconds
            # what the tool did: the fault's own death aside, a kill with no answer after it is still an act
            acted = ff.deaths_after(deaths, tools[n].target.container, w.t0, time.time())
            acted -= 1 if fault in SELF_DEATH else 0
            did[n] = "restarted" if w.done else "killed, not serving again" if acted > 0 else "nothing"
            if w.done:  # the load that ended the outage (warm page cache: often shorter than the first)
                out["reload_s"][n] = load_seconds(client, tools[n].target.container)
        _details(out["details"], tools, heal, client)
        out["details"]["exits"] = deaths.stop()
        deaths = None
    finally:
        try:
            for w in watchers.values():
                w.stop()
            if deaths is not None:
                deaths.stop()
            if heal is not None and heal.started:
                heal.stop()
            for t in tools.values():
                try:
                    t.down()
                except Exception as exc:  # noqa: BLE001 - cleanup goes on for the other tools
                    log(f"cleanup of {t.target.tool} failed: {exc!r}")
            sweep(run_id)
            cf.thaw()
            if client is not None:
                client.close()
        finally:
            cleanup_dir(tmp)
    return out


def _during_load(
    fault: str, tools: dict[str, Tool], deaths: ExitWatch, served: str, client: Any
) -> tuple[dict[str, float | None], dict[str, Any]]:
    """The rows whose fault comes during the load (the tools are up, nothing steady yet)."""
    if fault == "healthy_boot_nv_err":
        return ff.healthy_boot(tools, deaths, served)
    if fault == "daemon_killed_mid_load":
        return ff.daemon_killed(tools, deaths, served, client)
    if fault == "init_failure_same_line":
        return ff.init_failure(tools, deaths, client)
    if fault == "low_contiguity_before_start":
        return ff.low_contiguity(tools, deaths, served)
    return cf.guard_load(tools, deaths)


def _details(details: dict[str, Any], tools: dict[str, Tool], heal: Autoheal | None, client: Any) -> None:
    for n, t in tools.items():
        if isinstance(t, DaemonTool):
            details[n] = t.events()[-40:]
        elif isinstance(t, SupervisordTool | SystemdTool | BashLoopTool):
            details[n] = t.log_tail().splitlines()
        else:
            try:
                c = client.containers.get(t.target.container)
                st = c.attrs["State"]
                details[n] = {
                    "status": st["Status"],
                    "exit_code": st["ExitCode"],
                    "oom_killed": st["OOMKilled"],
                    "restart_count": c.attrs.get("RestartCount"),
                    "health": st.get("Health", {}).get("Status"),
                }
                liveness = getattr(t, "liveness", None)
                if liveness is not None:
                    details[n] |= {"liveness_restarts": liveness.restarts, "liveness_probes": liveness.probes}
            except (NotFound, DockerException) as exc:
                details[n] = repr(exc)
    if heal is not None:
        details["autoheal_restarts"] = len(heal.restarts)


def median_or_none(values: list[float | None]) -> float | None:
    """Median with "never" as +infinity: None when at least half of the trials never recovered."""
    m = statistics.median_high([math.inf if v is None else v for v in values])
    return None if math.isinf(m) else round(m, 2)
