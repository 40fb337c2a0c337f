"""The field's hard shapes in ``bench.compare`` (issue 40), each row saying what every restarter DID.

* ``engine_spinning``: the engine stuck while a thread burns CPU (the simulator's ``spin`` fault, at
  :data:`SPIN_DUTY` of a core per container so eight of them do not starve a shared 2-core box; the fault
  matrix' row spins a whole core): ``/health`` 200, no counter moves, generation hangs. Measured by the
  recovery clock (seconds to served again). The row's engine is the field's (:func:`field_rate`): it
  prefills at the Spark seed's measured :data:`FIELD_PREFILL_RATE` prompt tokens/s and our profile says
  so, as the shipped Spark example profile does (``probes.prefill_tokens_per_s: 1670``). Without it the
  daemon would bound a step at the default 100 tokens/s until it learned a rate (2 x 8,192 / 100 = 164 s),
  which the field's box, with its rate in its profile, never does. Setting the rate rather than serving a
  lone prompt first to have it learned: that is what the field's profile does, the figure does not hang
  on how one timed sample fell on a loaded box, and learning is tested apart
  (tests/test_machine_liveness.py).
* ``healthy_boot_nv_err``: the GB10 healthy-boot sequence: :data:`BOOT_LINES` ``NV_ERR_NO_MEMORY`` lines
  written to the real ``/dev/kmsg`` over the first :data:`BOOT_SPREAD_S` s of a :data:`FIELD_LOAD_S` s
  load that completes. Figure: **false kills** (deaths of the tool's container after the first line).
* ``forged_kernel_line``: the NV_ERR text embedded mid-message of another kernel line (a USB device's
  product string: anyone with a USB gadget chooses it), written once while every tool serves. Figure:
  **false kills**.
* ``daemon_killed_mid_load``: the supervising process SIGKILLed mid-load and started again (ours: the
  daemon; supervisord: supervisord; bash-loop: the loop. systemd (PID 1), Docker's policies, the
  healthcheck and the liveness loop have no supervising process of their own to kill: dockerd's restart
  is the ``host_reboot_like`` row). Figure:
  **loads lost** (deaths of the container after the kill until it serves); ours also says whether that
  start's ledger row was written (KV pool, load time).
* ``low_contiguity_before_start``: the host low on physically contiguous memory when the tools start
  (:data:`LOW_BUDDYINFO`, the field's GB10 a few hours after a restart: :data:`LOW_BLOCKS` free 4 MiB blocks;
  our daemon reads it through the adapter's test seam ``VSUP_BUDDYINFO``: a shared host's memory cannot be
  fragmented safely, and no other tool reads buddyinfo at all). Figure: **warned** before the start (1) or
  not (0); every tool's server still starts (the wedge needs a reboot, the operator's call).
* ``init_failure_same_line``: every start dies on the same traceback line (``VSIM_SCENARIO=
  fail_worker_exception``: the worker raises the field's NvFp4 ``ValueError``, its traceback in the log as
  a real vLLM prints it; ``fail_engine_init`` is the worker's silent death, no line to compare). Figure:
  **loads** started in :data:`INIT_WINDOW_S` s, and whether the tool gave up.

The kernel rows write to ``/dev/kmsg`` (root) and every daemon on the box whose ``host.kernel_memory_error``
is ``kill`` acts on an unattributed line: they run under ``flock /tmp/vsup-heavy.lock`` (bench/README.md).
"""

from __future__ import annotations

import signal
import subprocess
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.compare_peers import BashLoopTool, SystemdTool
from bench.compare_server import Server
from bench.compare_tools import DaemonTool, SupervisordTool, ensure_supervisord, supervisord_env
from bench.served import generate
from supervisor.adapters.host.buddyinfo import BUDDYINFO_ENV
from tests.kmsg_probe import kmsg_writable, write_kmsg

FIELD_FAULTS = (
    "engine_spinning",
    "healthy_boot_nv_err",
    "forged_kernel_line",
    "daemon_killed_mid_load",
    "init_failure_same_line",
    "low_contiguity_before_start",
)
#: The rows whose fault comes during the load, or before it (no steady state first).
DURING_LOAD = (
    "healthy_boot_nv_err",
    "daemon_killed_mid_load",
    "init_failure_same_line",
    "low_contiguity_before_start",
)
INIT_WINDOW_S = 45.0
LIMIT_S = {
    "engine_spinning": 60.0,
    "healthy_boot_nv_err": 120.0,
    "forged_kernel_line": 20.0,
    "daemon_killed_mid_load": 90.0,
    "init_failure_same_line": INIT_WINDOW_S,
    "low_contiguity_before_start": 60.0,
}
UNITS = {
    "healthy_boot_nv_err": "false kills",
    "forged_kernel_line": "false kills",
    "daemon_killed_mid_load": "loads lost",
    "init_failure_same_line": "loads",
    "low_contiguity_before_start": "warned (1 = yes)",
}
#: The field's measured prefill rate (prompt tokens/s, the Spark seed; the shipped Spark example profile's
#: ``probes.prefill_tokens_per_s``).
FIELD_PREFILL_RATE = 1670.0
#: The field's record of a GB10 a few hours after a restart (tests/fixtures/buddyinfo/README.md) and what it
#: measures on 4 KiB pages: under the daemon's shipped ``host.contiguity_min_free_blocks`` (256).
LOW_BUDDYINFO = (
    Path(__file__).resolve().parent.parent / "tests/fixtures/buddyinfo/gb10-hours-after-restart.txt"
)
LOW_BLOCKS = 12
LOW_ENV = ((BUDDYINFO_ENV, str(LOW_BUDDYINFO)),)
SPIN_DUTY = 0.5  # of a core per container, above cpu_busy_cores (0.2); eight on 2 cores get ~0.25 each
INIT_SCENARIO = "fail_worker_exception"  # the worker raises the same line at every start
FIELD_LOAD_S = 20.0
BOOT_LINES = 60
BOOT_SPREAD_S = 10.0
#: The healthy-boot line as GB10 prints it (docs/field-notes.md; the token in the allocator's argument).
BOOT_LINE = (
    "<3>NVRM: GPU0 nvCheckOkFailedNoLog: Check failed: Out of memory [NV_ERR_NO_MEMORY] (0x00000051) "
    "returned from _memdescAllocInternal({token}) @ mem_desc.c:1359\n"
)
#: Another subsystem's line quoting the NV_ERR text mid-message (a USB product string is the device's).
FORGED_LINE = (
    "<6>usb 3-1: Product: NVRM: nvCheckOkFailedNoLog: Check failed: Out of memory [NV_ERR_NO_MEMORY] "
    "(0x00000051) returned from _memdescAllocInternal({token}) @ mem_desc.c:1353\n"
)


def field_rate(server: Server) -> Server:
    """``server`` prefilling at the field's rate, our profile told that rate (the shipped Spark example)."""
    env = (*server.env, ("VSIM_PREFILL_TOKENS_PER_S", f"{FIELD_PREFILL_RATE:g}"))
    return replace(server, env=env, probes=(("prefill_tokens_per_s", FIELD_PREFILL_RATE),))


def deaths_after(exits: Any, container: str, t0: float, until: float) -> int:
    """How many times the container died between ``t0`` and ``until`` (Docker ``die`` events)."""
    return sum(1 for s, _code in exits.deaths.get(container, []) if t0 - 0.001 <= exits.t0 + s <= until)


def _daemons(tools: dict[str, Any]) -> dict[str, DaemonTool]:
    return {n: t for n, t in tools.items() if isinstance(t, DaemonTool)}


def _wait(pred: Any, timeout: float, every: float = 0.5) -> bool:
    """Poll ``pred`` until true or ``timeout`` s (bounded); whether it came true."""
    end = time.time() + timeout
    while time.time() < end:
        if pred():
            return True
        time.sleep(every)
    return bool(pred())


def _state(t: DaemonTool) -> dict[str, Any]:
    assert t.proc is not None
    return t.proc.status(t.trial.server.profile)


def _loading(tools: dict[str, Any]) -> None:
    """Until every daemon's container is up and loading (bounded: 60 s)."""
    for t in _daemons(tools).values():
        ok = _wait(lambda t=t: (s := _state(t))["state"] == "STARTING" and bool(s["container_id"]), 60)
        if not ok:
            raise RuntimeError(f"{t.target.tool}: no container loading within 60 s: {_state(t)['state']}")


def _serve_all(tools: dict[str, Any], model: str, until: float) -> dict[str, float | None]:
    """Until every tool answers a generation or ``until``; per tool the wall time it first did."""
    served: dict[str, float | None] = dict.fromkeys(tools)
    while time.time() < until and any(v is None for v in served.values()):
        for n, t in tools.items():
            if served[n] is None and generate(t.target.url, t.target.key, model, timeout=1.0):
                served[n] = time.time()
        time.sleep(0.5)
    return served


def _kill_verdict(kills: int, serving: bool) -> str:
    if kills == 0:
        return "nothing (load kept)" if serving else "nothing"
    return f"killed a healthy load ({kills}x)" + ("" if serving else ", not serving at the end")


def _daemon_end(tools: dict[str, Any]) -> dict[str, Any]:
    """Each daemon's state and restarts at the end of the row."""
    out = {}
    for n, t in _daemons(tools).items():
        s = _state(t)
        out[n] = {"state": s["state"], "restarts": s["restarts"]}
    return out


Figures = tuple[dict[str, float | None], dict[str, Any]]


def healthy_boot(tools: dict[str, Any], exits: Any, model: str) -> Figures:
    """BOOT_LINES lines over BOOT_SPREAD_S s of the load; per tool its container's deaths (false kills)."""
    if not kmsg_writable():
        raise RuntimeError("/dev/kmsg is not writable (run as root)")
    _loading(tools)
    token = f"vsup_bench_boot_{uuid.uuid4().hex}"
    t0 = time.time()
    for i in range(BOOT_LINES):
        time.sleep(max(0.0, t0 + i * BOOT_SPREAD_S / BOOT_LINES - time.time()))
        write_kmsg(BOOT_LINE.format(token=f"{token}_{i}"))
    served = _serve_all(tools, model, t0 + LIMIT_S["healthy_boot_nv_err"])
    end = time.time() + 1.0
    time.sleep(1.0)
    kills = {n: deaths_after(exits, t.target.container, t0, end) for n, t in tools.items()}
    did = {n: _kill_verdict(kills[n], served[n] is not None) for n in tools}
    detail = {"did": did, "lines": BOOT_LINES, "spread_s": BOOT_SPREAD_S, "t0": t0}
    return {n: float(k) for n, k in kills.items()}, detail | {"daemon": _daemon_end(tools)}


def forged(tools: dict[str, Any], exits: Any) -> Figures:
    """One forged line while every tool serves; per tool its container's deaths within the limit."""
    if not kmsg_writable():
        raise RuntimeError("/dev/kmsg is not writable (run as root)")
    t0 = write_kmsg(FORGED_LINE.format(token=f"vsup_bench_forged_{uuid.uuid4().hex}"))
    time.sleep(LIMIT_S["forged_kernel_line"])  # the window a kill would fall in (ours acts in < 1 s)
    end = time.time()
    kills = {n: deaths_after(exits, t.target.container, t0, end) for n, t in tools.items()}
    did = {n: "killed a healthy server" if k else "nothing" for n, k in kills.items()}
    return {n: float(k) for n, k in kills.items()}, {"did": did, "t0": t0, "daemon": _daemon_end(tools)}


def _container_id(client: Any, name: str) -> str | None:
    try:
        return str(client.containers.get(name).id)
    except Exception:  # noqa: BLE001 - not (yet, or any more) there
        return None


def _restart_supervisord(t: SupervisordTool) -> None:
    """SIGKILL supervisord alone (its ``docker run`` child lives on, as after a crash) and start it again."""
    assert t.proc is not None
    t.proc.send_signal(signal.SIGKILL)
    t.proc.wait(10)
    log = (t.work / "stdout.log").open("ab")
    conf = t.work / "supervisord.conf"
    t.proc = subprocess.Popen(
        [str(ensure_supervisord()), "-n", "-c", str(conf)],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env=supervisord_env(),
    )
    log.close()


def _ledger(t: DaemonTool) -> list[dict[str, Any]]:
    assert t.proc is not None
    return list(t.proc.call("history", name=t.trial.server.profile, n=50)["data"]["starts"])


def daemon_killed(tools: dict[str, Any], exits: Any, model: str, client: Any) -> Figures:
    """Kill each supervising process mid-load and start it again; loads lost until the model serves."""
    _loading(tools)
    daemons = _daemons(tools)
    for t in daemons.values():  # mid-load: the daemon has seen the load progress
        _wait(lambda t=t: _state(t)["load_progress"]["pct"] is not None, 20, every=0.2)
    ids: dict[str, str | None] = dict.fromkeys(tools)

    def all_up() -> bool:
        for n, t in tools.items():
            ids[n] = ids[n] or _container_id(client, t.target.container)
        return all(ids.values())

    if not _wait(all_up, 30):
        raise RuntimeError(f"not every tool's container is up: {ids}")
    rows = {n: len(_ledger(t)) for n, t in daemons.items()}
    t0 = time.time()
    killed = set()
    for n, t in tools.items():
        if isinstance(t, DaemonTool):
            assert t.proc is not None
            t.proc.kill9()
            t.proc.start()
            killed.add(n)
        elif isinstance(t, SupervisordTool):
            _restart_supervisord(t)
            killed.add(n)
        elif isinstance(t, BashLoopTool):  # the loop is the supervising process; its container lives on
            t.kill9()
            t.start()
            killed.add(n)
    served = _serve_all(tools, model, t0 + LIMIT_S["daemon_killed_mid_load"])
    end = time.time() + 1.0
    time.sleep(1.0)
    lost: dict[str, float | None] = {}
    did: dict[str, str] = {}
    for n, t in tools.items():
        if n not in killed:
            lost[n], did[n] = None, "n/a (no supervising process of its own)"
            continue
        now_id = _container_id(client, t.target.container) if served[n] is not None else None
        lost[n] = float(deaths_after(exits, t.target.container, t0, end))
        same = now_id == ids[n]
        kept = same and not lost[n]
        did[n] = "kept the load (same container)" if kept else "reloaded" if served[n] else "lost it"
        if isinstance(t, SupervisordTool) and "gave up" in t.log_tail(40):
            did[n] += "; then gave up on it (FATAL): nothing restarts it any more"
    took = {n: None if v is None else round(v - t0, 2) for n, v in served.items()}
    detail: dict[str, Any] = {"did": did, "t0": t0, "served_s": took, "daemon": _daemon_end(tools)}
    for n, t in daemons.items():
        new = _ledger(t)[rows[n] :]
        detail[f"{n}_ledger_rows"] = [
            {k: r.get(k) for k in ("outcome", "kv_tokens", "load_s", "container_id")} for r in new
        ]
        detail[f"{n}_adopted"] = _state(t)["adopted"]
    for t in tools.values():
        if isinstance(t, SupervisordTool):
            detail["supervisord_log"] = t.log_tail(8).splitlines()
    return lost, detail


def _gave_up(t: Any, client: Any) -> bool:
    """Whether the tool stopped restarting: ours FATAL, supervisord's program FATAL, Docker's never."""
    if isinstance(t, DaemonTool):
        return bool(_state(t)["state"] == "FATAL")
    if isinstance(t, SupervisordTool):
        return "gave up" in t.log_tail(40)
    if isinstance(t, SystemdTool | BashLoopTool):
        return t.gave_up()
    try:
        st = client.containers.get(t.target.container).attrs["State"]
    except Exception:  # noqa: BLE001 - gone: nothing restarts it
        return True
    return not (bool(st.get("Restarting")) or bool(st.get("Running")))


def init_failure(tools: dict[str, Any], exits: Any, client: Any) -> Figures:
    """Every start dies on the same line: loads per tool in INIT_WINDOW_S s and whether it gave up."""
    t0 = exits.t0
    time.sleep(max(0.0, t0 + INIT_WINDOW_S - time.time()))
    end = time.time()
    loads = {n: deaths_after(exits, t.target.container, t0, end) for n, t in tools.items()}
    gave = {n: _gave_up(t, client) for n, t in tools.items()}
    window = f"{INIT_WINDOW_S:g} s"
    did = {
        n: f"gave up after {k} loads" if gave[n] else f"still restarting ({k} loads in {window})"
        for n, k in loads.items()
    }
    detail = {"did": did, "gave_up": gave, "daemon": _daemon_end(tools)}
    return {n: float(v) for n, v in loads.items()}, detail


def low_contiguity(tools: dict[str, Any], exits: Any, model: str) -> Figures:
    """The tools start on a host low on contiguous memory: per tool whether it warned before the start
    (ours: ``start.contiguity_low`` before ``container.started``; the others have no such check), served."""
    served = _serve_all(tools, model, time.time() + LIMIT_S["low_contiguity_before_start"])
    warned: dict[str, float | None] = {}
    did: dict[str, str] = {}
    for n, t in tools.items():
        up = "served" if served[n] is not None else "not serving within the limit"
        if isinstance(t, DaemonTool):
            assert t.proc is not None
            names = [e["name"] for e in t.proc.events(t.trial.server.profile, n=300)]
            created = names.index("container.started") if "container.started" in names else len(names)
            early = "start.contiguity_low" in names[:created]
            daemon_wide = "host.contiguity_low" in [e["name"] for e in t.proc.events(n=300)]
            warned[n] = 1.0 if early else 0.0
            wide = f"daemon-wide contiguity.low: {daemon_wide}"
            did[n] = (
                f"warned before the start (contiguity.start; {wide}), then {up}"
                if early
                else f"no warning before the start ({wide}), then {up}"
            )
        else:
            warned[n], did[n] = 0.0, f"nothing (no contiguity check): started, {up}"
    return warned, {"did": did, "buddyinfo": LOW_BUDDYINFO.name, "free_4mib_blocks": LOW_BLOCKS}
