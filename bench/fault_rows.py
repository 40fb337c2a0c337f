"""The fault matrix' cases: each inflicts one fault on a real daemon and checks the state it must end in.

A case returns :class:`Outcome` (passed, seconds from the fault to the end state, a short detail); the runner
(bench/faults.py) counts the alerts the case's webhook receiver got.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.dockerd import hung_dockerd
from bench.fault_env import FaultEnv, slow_receiver
from supervisor.adapters.control.client import ControlClient
from supervisor.adapters.secrets import new_key
from tests.daemon_harness import DaemonProc, ProfileSpec, sim_args
from tests.harness import free_port, wait_for

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Outcome:
    ok: bool
    seconds: float | None
    detail: str


def _names(d: DaemonProc, name: str) -> list[str]:
    return [str(e["name"]) for e in d.events(name, n=500)]


def _running(fenv: FaultEnv, **spec_kw: Any) -> tuple[ProfileSpec, DaemonProc, str]:
    spec = fenv.spec(**spec_kw)
    d = fenv.daemon([spec])
    st = d.wait_state(spec.name, "RUNNING", 60)
    return spec, d, str(st["container_id"])


def _recovers(
    fenv: FaultEnv, inflict: Callable[[ProfileSpec], float], need: str = "", **spec_kw: Any
) -> Outcome:
    """RUNNING -> fault -> RUNNING again in a new container (after the event ``need``, if given)."""
    spec, d, cid = _running(fenv, **spec_kw)
    t0 = inflict(spec)
    st = d.wait_recovered(spec.name, cid, 90)
    secs = round(time.time() - t0, 2)
    ok = not need or need in _names(d, spec.name)
    detail = f"new container{f', {need}' if need else ''}, restarts={st['restarts']}"
    # a start that failed on the way (a restart more than the fault asks for) says why in the figure's row
    failed = [e["fields"] for e in d.events(spec.name, n=500) if e["name"] == "start.failed"]
    if failed:
        detail += "; failed starts: " + ", ".join(f"{f.get('outcome')} ({f.get('reason')})" for f in failed)
    return Outcome(ok, secs, detail)


def sigkill(env: FaultEnv) -> Outcome:
    def kill(spec: ProfileSpec) -> float:
        t0 = time.time()
        env.container(spec).kill()
        return t0

    return _recovers(env, kill)


def exit0_lines(env: FaultEnv) -> Outcome:
    return _recovers(env, lambda s: env.fault(s, {"kind": "die"}))


def exit0_silent(env: FaultEnv) -> Outcome:
    return _recovers(env, lambda s: env.fault(s, {"kind": "exit", "code": 0}))


def stuck(env: FaultEnv) -> Outcome:
    return _recovers(env, lambda s: env.fault(s, {"kind": "stuck"}), need="emergency.stop")


def health_503(env: FaultEnv) -> Outcome:
    """Engine dead, /health 503 held for 10 min (the process does not exit by itself)."""
    die = {"kind": "die"}
    return _recovers(
        env, lambda s: env.fault(s, die), need="emergency.stop", env={"VSIM_DEAD_HEALTH_SECONDS": "600"}
    )


def startup_failure(scenario: str, outcome: str) -> Callable[[FaultEnv], Outcome]:
    def case(env: FaultEnv) -> Outcome:
        spec = env.spec(env={"VSIM_SCENARIO": scenario})
        t0 = time.time()
        d = env.daemon([spec])
        d.wait_state(spec.name, "BACKOFF", 60)
        secs = round(time.time() - t0, 2)
        failed = [e for e in d.events(spec.name) if e["name"] == "start.failed"]
        got = failed[-1]["fields"].get("outcome") if failed else None
        try:  # the diagnosis is worked out off the loop, after the failure
            st = wait_for(lambda: (x := d.status(spec.name))["last_diagnosis"] and x, 15, message="diagnosis")
        except AssertionError:
            st = d.status(spec.name)
        ok = got == outcome and bool(st["last_diagnosis"])
        return Outcome(
            ok, secs, f"outcome={got} (want {outcome}); diagnosis={str(st['last_diagnosis'])[:60]!r}"
        )

    return case


def dash_key(env: FaultEnv) -> Outcome:
    """``--api-key K -K2``: vLLM refuses the second key and prints it back (docs/vllm-facts.md "A key that
    begins with '-'"): one start, FATAL, the diagnosis names the fix, the key nowhere the daemon writes."""
    key = f"-K{new_key()}"  # not "-O...": vLLM takes that for its -O option and starts
    spec = env.spec(api_key=False, args=sim_args("sim-model", "--api-key", new_key(), key))
    t0 = time.time()
    d = env.daemon([spec])
    d.wait_state(spec.name, "FATAL", 60)
    secs = round(time.time() - t0, 2)
    try:
        st = wait_for(lambda: (x := d.status(spec.name))["last_diagnosis"] and x, 15, message="diagnosis")
    except AssertionError:
        st = d.status(spec.name)
    said = str(st["last_diagnosis"])
    seen = [json.dumps(st), json.dumps(d.events(spec.name)), d.log_tail(100_000)]
    seen += [r.body.decode("utf-8", "replace") for r in env.recv.received()]
    leaked = any(key[1:] in text for text in seen)
    ok = st["start_attempts"] == 1 and "unrecognized arguments" in said and "'='" in said and not leaked
    return Outcome(ok, secs, f"attempts={st['start_attempts']}, key leaked={leaked}; diagnosis={said[:70]!r}")


def hang_load(env: FaultEnv) -> Outcome:
    spec = env.spec(env={"VSIM_SCENARIO": "hang_load", "VSIM_HANG_INTERVAL": "2"}, deadline_s=15.0)
    t0 = time.time()
    d = env.daemon([spec])
    d.wait_state(spec.name, "BACKOFF", 60)
    failed = [e for e in d.events(spec.name) if e["name"] == "start.failed"]
    got = failed[-1]["fields"].get("outcome") if failed else None
    return Outcome(got in ("timeout", "timeout_silence"), round(time.time() - t0, 2), f"outcome={got}")


def slow_load(env: FaultEnv) -> Outcome:
    """A 20 s load printing progress every 0.3 s, silence timeout 6 s: must not be killed."""
    spec = env.spec(env={"VSIM_LOAD_SECONDS": "20", "VSIM_SHARDS": "40"}, silence_timeout_s=6.0)
    t0 = time.time()
    d = env.daemon([spec])
    d.wait_state(spec.name, "RUNNING", 90)
    bad = [n for n in _names(d, spec.name) if n in ("start.failed", "start.timeout", "emergency.stop")]
    return Outcome(not bad, round(time.time() - t0, 2), f"failures={bad}")


def memory_floor(env: FaultEnv) -> Outcome:
    spec = env.spec()
    t0 = time.time()
    d = env.daemon([spec], extra={"host": {"min_mem_available_gib": 4000, "settle_timeout_s": 2}})
    st = d.wait_state(spec.name, "BACKOFF", 60)
    names = _names(d, spec.name)
    refused = [n for n in names if n in ("preflight.failed", "settle.failed")]  # settle: after the slot
    ok = st["breaker"]["emergencies"] == 0 and bool(refused) and "container.started" not in names
    detail = f"breaker={st['breaker']['emergencies']}, {refused[:1]}, no container"
    return Outcome(ok, round(time.time() - t0, 2), detail)


def daemon_kill(mid_load: bool) -> Callable[[FaultEnv], Outcome]:
    def case(env: FaultEnv) -> Outcome:
        spec = env.spec(env={"VSIM_LOAD_SECONDS": "8"} if mid_load else {})
        d = env.daemon([spec])
        if mid_load:
            st = d.wait_state(spec.name, "STARTING", 30)
            wait_for(lambda: d.status(spec.name)["container_id"], 30, message="container id")
        st = d.status(spec.name) if mid_load else d.wait_state(spec.name, "RUNNING", 60)
        cid = str(st["container_id"])
        before = len(d.call("history", name=spec.name, n=50)["data"]["starts"])
        t0 = time.time()
        d.kill9()
        d.start()
        st = d.wait_state(spec.name, "RUNNING", 60)
        same = st["container_id"] == cid
        rows = d.call("history", name=spec.name, n=50)["data"]["starts"][before:]
        secs = round(time.time() - t0, 2)
        if not mid_load:  # a serving container adopted: its start was recorded before, nothing new
            return Outcome(same and not rows, secs, f"same container={same}, new ledger rows={len(rows)}")
        # the start adopted mid-load gets its ledger row: KV pool and load time (from the container's start)
        row = rows[0] if len(rows) == 1 else {}
        written = row.get("kv_tokens") is not None and row.get("load_s") is not None
        detail = f"same container={same}, ledger rows={len(rows)} (kv_tokens={row.get('kv_tokens')}, "
        return Outcome(same and written, secs, detail + f"load_s={row.get('load_s')})")

    return case


def dockerd_hung(env: FaultEnv) -> Outcome:
    """dockerd SIGSTOPped 15 s: status must answer, then RUNNING in the same container, no emergency."""
    spec, d, cid = _running(env)
    client = ControlClient(d.socket, timeout=5)
    worst = 0.0
    with hung_dockerd(15.0) as t0:
        while time.time() < t0 + 14.0:
            s = time.perf_counter()
            client.call("status")
            worst = max(worst, time.perf_counter() - s)
            time.sleep(0.5)  # sampling period of the status latency while dockerd is frozen
    st = d.wait_state(spec.name, "RUNNING", 60)
    ok = st["container_id"] == cid and st["emergencies_total"] == 0 and worst < 0.3
    return Outcome(ok, round(time.time() - t0, 2), f"status worst {worst * 1000:.0f} ms, same container")


def _tmpfs_state(env: FaultEnv, size: str) -> Path:
    mnt = env.tmp / "statefs"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)], check=True)
    env.cleanups.append(lambda: subprocess.run(["umount", "-l", str(mnt)], check=False))
    return mnt


def state_dir(mode: str) -> Callable[[FaultEnv], Outcome]:
    """The state dir fills up (``full``) or turns read-only (``ro``) while RUNNING; a kill still recovers."""

    def case(env: FaultEnv) -> Outcome:
        mnt = _tmpfs_state(env, "4m")
        spec = env.spec()
        d = env.daemon([spec], start=False)
        text = d.config.read_text().replace(str(d.workdir / "state"), str(mnt / "state"))
        d.config.write_text(text)
        d.start()
        cid = str(d.wait_state(spec.name, "RUNNING", 60)["container_id"])
        if mode == "full":
            with (mnt / "filler").open("wb") as f, _suppress_enospc():
                while True:
                    f.write(b"\0" * 65536)
        else:
            # a read-only view over the state dir: `remount,ro` of the tmpfs itself is refused (EBUSY) while
            # the daemon holds a file there open for writing (its flight recorder), so a read-only bind
            # mount is laid over it: every new open, temp file and rename fails with EROFS, as after the
            # kernel's errors=remount-ro
            subprocess.run(["mount", "--bind", str(mnt), str(mnt)], check=True)
            env.cleanups.append(lambda: subprocess.run(["umount", "-l", str(mnt)], check=False))
            subprocess.run(["mount", "-o", "remount,bind,ro", str(mnt)], check=True)
        t0 = time.time()
        env.container(spec).kill()
        st = d.wait_recovered(spec.name, cid, 90)
        alive = d.proc is not None and d.proc.poll() is None
        return Outcome(alive, round(time.time() - t0, 2), f"daemon alive={alive}, state={st['state']}")

    return case


class _suppress_enospc:  # noqa: N801 - a tiny context manager
    def __enter__(self) -> None:
        return None

    def __exit__(self, et: Any, ev: Any, tb: Any) -> bool:
        return isinstance(ev, OSError)


def corrupt_state(env: FaultEnv) -> Outcome:
    spec, d, _cid = _running(env)
    d.terminate()
    state = d.workdir / "state"
    hit = [p for p in state.rglob("*.json") if p.is_file()]
    for p in hit:
        p.write_bytes(b"\x00{not json")
    t0 = time.time()
    d.start()
    d.wait_state(spec.name, "RUNNING", 60)
    return Outcome(bool(hit), round(time.time() - t0, 2), f"corrupted {[p.name for p in hit]}")


def webhook(kind: str) -> Callable[[FaultEnv], Outcome]:
    """Alerts to a closed port (``down``) or a receiver answering after 20 s (``slow``): recovery as usual."""

    def case(env: FaultEnv) -> Outcome:
        with slow_receiver(20.0) as slow:
            env.alert_url = slow if kind == "slow" else f"http://127.0.0.1:{free_port()}/alert"

            def kill(spec: ProfileSpec) -> float:
                t0 = time.time()
                env.container(spec).kill()
                return t0

            return _recovers(env, kill)

    return case


def malformed_profile(env: FaultEnv) -> Outcome:
    path = env.tmp / "bad.yaml"
    path.write_text("name: bad\ncontainer: {image: x, nmae: y}\nprobes: {interval_s: -1}\n")
    exe = ROOT / ".venv" / "bin" / "supervisorctl"
    t0 = time.time()
    out = subprocess.run(
        [str(exe), "check-config", str(path)], capture_output=True, text=True, timeout=30, check=False
    )
    text = out.stdout + out.stderr
    ok = out.returncode == 1 and "container.nmae" in text and "probes.interval_s" in text
    return Outcome(ok, round(time.time() - t0, 2), f"rc={out.returncode}: {text.strip().splitlines()[:2]}")


def port_taken(env: FaultEnv) -> Outcome:
    spec = env.spec()
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    holder.bind(("127.0.0.1", spec.port))
    holder.listen(1)
    env.cleanups.append(holder.close)
    t0 = time.time()
    d = env.daemon([spec])
    st = d.wait_state(spec.name, "BACKOFF", 60)
    why = str(st["last_diagnosis"] or st["last_reason"])
    return Outcome(True, round(time.time() - t0, 2), f"diagnosis={why[:80]!r}")


def operator_docker_stop(env: FaultEnv) -> Outcome:
    spec, d, _cid = _running(env)
    t0 = time.time()
    subprocess.run(["docker", "stop", "-t", "5", spec.container], capture_output=True, timeout=60, check=True)
    st = d.wait_state(spec.name, "STOPPED", 30)
    # confirmed an operator's stop once Docker kept answering for the engine check's few seconds
    deadline = time.time() + 20
    while "container.stopped_externally" not in _names(d, spec.name) and time.time() < deadline:
        time.sleep(0.2)
    ok = st["intent"] == "stop" and "container.stopped_externally" in _names(d, spec.name)
    return Outcome(ok, round(time.time() - t0, 2), f"intent={st['intent']}, confirmed={ok}")


def two_profiles(env: FaultEnv) -> Outcome:
    """Two 4 s loads at once: the second container starts only after the first is RUNNING."""
    specs = [env.spec(n, env={"VSIM_LOAD_SECONDS": "4"}) for n in ("a", "b")]
    t0 = time.time()
    d = env.daemon(specs)
    spans = []
    for s in specs:
        d.wait_state(s.name, "RUNNING", 90)
        started = _started_at(env, s)
        running = [
            e for e in d.events(s.name) if e["name"] == "state.changed" and e["fields"]["new"] == "RUNNING"
        ]
        spans.append((started, float(running[0]["ts"])))
    spans.sort()
    ok = spans[1][0] >= spans[0][1] - 0.05
    gap = spans[1][0] - spans[0][1]
    return Outcome(ok, round(time.time() - t0, 2), f"second load began {gap:+.2f} s after the first RUNNING")


def _started_at(env: FaultEnv, spec: ProfileSpec) -> float:
    from bench.daemon_probes import parse_rfc3339

    return parse_rfc3339(str(env.container(spec).attrs["State"]["StartedAt"]))


def is_root() -> bool:
    return os.geteuid() == 0
