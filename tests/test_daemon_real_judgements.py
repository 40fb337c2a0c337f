"""Three judgements proven before only on the simulator, on the real vLLM 0.32 CPU server (tiny model) with
the shipped probe defaults (5 s rounds, freeze 15 s, timeout 30 s, 4 failures, the emergency grace 10 s) and
the shipped profiles' planned stop grace (120 s). The faults are laid over the real server by the test
overlay tools/overlays/faults (tests/real_faults.py), never by signals whose effect depends on vLLM's
timing:

- every batch slot busy under a full batch (``--max-num-seqs 2``, 6 clients sending long generations back
  to back: requests waiting all along) is judged live for several probe rounds: 0 emergencies, no failed
  or stalled round, the same container;
- the engine dying after serving (the overlay's ``die``: the engine core SIGKILLs itself in its next step;
  vLLM answers 500 and exits 0) is a death the daemon restarts from, never a stop it was asked for;
- a frozen serving engine whose API server ignores SIGTERM (the overlay's ``freeze``) is stopped after
  the stuck verdict and killed only after the 10 s emergency grace (exit 137), not after the planned 120 s.

The three tests share one daemon and one real server (a module fixture: one load instead of three); each
begins by waiting until the profile is RUNNING, and the engine's death waits for the new container to
serve (the freeze, the module's last, does not: nothing after it needs one). The engine dying on its
first request (a failed start) is tests/test_daemon_real_vllm_failed_starts.py; the spinning engine is
tests/test_daemon_real_spin.py."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import pytest
import requests

from bench.detect_real import send_in_thread
from bench.detect_trials import wait_running
from supervisor.core.settings.profile import StopConfig
from tests.daemon_harness import DaemonProc, write_daemon_config, write_profile
from tests.harness import TEST_LABEL, GiveUp, WaitTimeout, unique_name, wait_for
from tests.real_faults import FROZEN, SIGTERM_IGNORED, arm, disarm, faults_spec, trigger_dir
from tools.realvllm import SERVED_MODEL_NAME, server_argv

pytestmark = [pytest.mark.docker, pytest.mark.real_vllm, pytest.mark.slow]

NAME = "real"
SLOTS = 2
CLIENTS = 6
#: Probe rounds judged under the full batch: 6 rounds of 5 s, twice the 15 s freeze bound.
ROUNDS = 6
PLANNED_GRACE_S = 120
EMERGENCY_GRACE_S = StopConfig().emergency_grace_s


@dataclass(frozen=True)
class Judged:
    """The module's daemon supervising the real server with the fault overlay."""

    d: DaemonProc
    docker: docker.DockerClient
    base: str
    key: str
    triggers: Path

    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

    def running(self) -> str:
        """The serving container's id, once the profile is RUNNING (after a restart: the new one)."""
        return wait_running(self.d, NAME, None, 400)

    def events(self, since: float) -> list[dict[str, Any]]:
        return [e for e in self.d.events(NAME, n=500) if float(e["ts"]) >= since]

    def complete(self, max_tokens: int = 8) -> int | None:
        """One completion; its HTTP status (None: the connection went away)."""
        body = {"model": SERVED_MODEL_NAME, "prompt": "hello there", "max_tokens": max_tokens}
        try:
            return requests.post(
                self.base + "/v1/completions", json=body, headers=self.auth(), timeout=60
            ).status_code
        except requests.ConnectionError:
            return None

    def gauges(self, *names: str) -> dict[str, float]:
        """The named series of one /metrics read, each summed over its labels."""
        text = requests.get(self.base + "/metrics", timeout=5).text
        return {
            name: sum(float(ln.rsplit(" ", 1)[1]) for ln in text.splitlines() if ln.startswith(name + "{"))
            for name in names
        }

    def log_has(self, cid: str, text: str) -> bool:
        return text in self.docker.containers.get(cid).logs().decode("utf-8", errors="replace")


@pytest.fixture(scope="module")
def judged(
    tmp_path_factory: pytest.TempPathFactory,
    docker_client: docker.DockerClient,
    base_image: str,
    real_vllm_paths: tuple[Path, Path],
) -> Iterator[Judged]:
    venv, model = real_vllm_paths
    work = tmp_path_factory.mktemp("judgements")
    triggers = trigger_dir(work)
    test_id = unique_name("judgements")[len("vsup-test-") :]
    spec = faults_spec(
        NAME,
        unique_name("judged"),
        base_image,
        venv,
        model,
        triggers,
        args=[*server_argv(venv), "--max-num-seqs", str(SLOTS)],
        stop_timeout=PLANNED_GRACE_S,
    )
    config = write_daemon_config(
        work, [write_profile(work, spec, test_id)], backoff_initial_s=0.5, breaker_limit=10
    )
    d = DaemonProc(config, work)
    try:
        d.start()
        wait_running(d, NAME, None, 400)
        key = (work / f"{NAME}.key").read_text(encoding="utf-8").strip()
        yield Judged(d, docker_client, f"http://127.0.0.1:{spec.port}", key, triggers)
    finally:
        d.close()
        for fault in ("die", "freeze"):
            disarm(triggers, fault)
        for c in docker_client.containers.list(all=True, filters={"label": f"{TEST_LABEL}={test_id}"}):
            c.remove(force=True, v=True)


class InFlight:
    """How many of the clients' requests are sent and not answered yet."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.n = 0

    def add(self, k: int) -> None:
        with self._lock:
            self.n += k


def _load(j: Judged, stop: threading.Event, sent: InFlight) -> None:
    body = {
        "model": SERVED_MODEL_NAME,
        "prompt": "Tell me a long story.",
        "max_tokens": 200,
        "ignore_eos": True,
    }
    while not stop.is_set():
        sent.add(1)
        try:
            requests.post(j.base + "/v1/completions", json=body, headers=j.auth(), timeout=120)
        except requests.RequestException:
            stop.wait(0.5)
        finally:
            sent.add(-1)


def test_a_full_batch_with_requests_waiting_is_judged_live(judged: Judged) -> None:
    """Full: more requests sent and unanswered than the batch holds (the clients' count), so every slot can
    be busy and the rest wait at the server. Not vLLM's ``num_requests_running``/``waiting`` gauges: they
    are snapshots of the engine's last reported step, and with the tiny model's 200-token requests ending
    every fraction of a second they read 0 and 0 at most reads while the engine was saturated (6 clients,
    polled every 2 s for 40 s: 4 of 16 reads showed 2 running and 4 waiting on a quiet box, 0 of 20 beside
    two busy loops; 2026-12-05). The highest each gauge read is printed."""
    j = judged
    cid = j.running()
    before = j.d.status(NAME)["emergencies_total"]
    since, stop, sent = time.time(), threading.Event(), InFlight()
    clients = [threading.Thread(target=_load, args=(j, stop, sent), daemon=True) for _ in range(CLIENTS)]
    for th in clients:
        th.start()
    rounds: dict[float, str] = {}  # liveness.progress_at of each round judged under a full batch -> verdict
    polls: list[tuple[bool, float | None]] = []  # (full, progress_at) of every poll: the message on a timeout
    highest = {"vllm:num_requests_running": 0.0, "vllm:num_requests_waiting": 0.0}

    def judged_rounds() -> bool:
        for name, value in j.gauges(*highest).items():
            highest[name] = max(highest[name], value)
        full = sent.n > SLOTS
        st = j.d.status(NAME)
        if st["emergencies_total"] != before:
            raise GiveUp(f"an emergency under a full batch: {st['last_reason']}")
        live = st["liveness"]
        polls.append((full, live.get("progress_at")))
        if full and live.get("progress_at") is not None:
            rounds[float(live["progress_at"])] = str(live["verdict"])
        return len(rounds) >= ROUNDS

    try:
        wait_for(judged_rounds, 30 + ROUNDS * 15, interval=0.5, message=f"{ROUNDS} rounds under a full batch")
    except WaitTimeout as exc:
        fulls = sum(1 for f, _ in polls if f)
        rounds_any = len({p for _, p in polls if p is not None})
        raise AssertionError(
            f"{exc}: {len(rounds)} rounds judged full; {len(polls)} polls answered, {fulls} of them full; "
            f"{rounds_any} rounds with progress in all; verdicts {rounds}; gauges at most {highest}"
        ) from None
    finally:
        stop.set()
        for th in clients:
            th.join(130)
    names = [e["name"] for e in j.events(since)]
    st = j.d.status(NAME)
    print(
        f"full batch: {len(rounds)} rounds, verdicts {sorted(set(rounds.values()))};",
        f"gauges at most {highest};",
        f"events {sorted(set(names))}",
    )
    assert set(rounds.values()) == {"busy"}, rounds
    assert st["emergencies_total"] == before, st
    for bad in ("emergency.stop", "probe.failed", "probe.stalled", "container.exited"):
        assert bad not in names, names
    assert st["state"] == "RUNNING", st
    assert st["container_id"] == cid, st


def test_an_engine_that_dies_after_serving_is_a_death_and_restarted(judged: Judged) -> None:
    j = judged
    cid = j.running()
    assert j.complete() == 200  # it serves
    since = time.time()
    arm(j.triggers, "die")
    try:
        code = j.complete()  # the step that runs it kills the engine core
    finally:
        disarm(j.triggers, "die")  # the next container must not die on its first request
    assert code in (None, 500), code
    exited = wait_for(
        lambda: next((e for e in j.events(since) if e["name"] == "container.exited"), None),
        60,
        interval=0.5,
        message="the container's exit after the engine's death",
    )
    names = [e["name"] for e in j.events(since)]
    print("engine died:", exited["fields"], names)
    assert exited["fields"]["exit_code"] == 0, exited  # vLLM's own exit after its engine's death
    # a death (the death lines, or the exit no one asked for), never a stop the daemon was asked for
    assert "engine.dead" in names or exited["fields"]["requested"] is False, names
    for stop in ("container.stop_signal", "container.stopped_externally"):
        assert stop not in names, names

    def died_row() -> dict[str, Any] | None:
        rows = list(j.d.call("history", name=NAME, n=10)["data"]["starts"])
        return next((r for r in rows if r.get("container_id") == cid and r["outcome"] != "ready"), None)

    # the dead run's ledger row: it died, or the daemon stopped it for its death (a planned stop writes none)
    row = wait_for(died_row, 30, message="the dead run's row in the history")
    print("history:", {k: row.get(k) for k in ("outcome", "cause", "diagnosis")})
    assert row["outcome"] in ("died", "emergency"), row
    assert row["cause"] == "engine_dead", row
    new = j.running()  # restarted: a failure, not a stop
    assert new != cid
    assert j.complete() == 200  # the new container serves


def test_a_frozen_engine_ignoring_sigterm_is_killed_after_the_emergency_grace(judged: Judged) -> None:
    j = judged
    cid = j.running()
    arm(j.triggers, "freeze", "2")
    try:
        wait_for(lambda: j.log_has(cid, SIGTERM_IGNORED), 30, message="the API server ignoring SIGTERM")
        # two must be in one step: four of 400 tokens (the context is 512), so that two overlap however
        # late a busy box hands the later ones on (with two of 200 the freeze once did not come in 60 s)
        for _ in range(4):
            send_in_thread(j.base, j.key, "Tell me a long story.", 400, 240)
        wait_for(lambda: j.log_has(cid, FROZEN), 60, interval=0.2, message="the engine frozen in a step")
        since = time.time()
        stop = wait_for(
            lambda: next((e for e in j.events(since) if e["name"] == "emergency.stop"), None),
            90,
            interval=0.5,
            message="the emergency stop of the frozen engine",
        )
        done = wait_for(
            lambda: next(
                (e for e in j.events(since) if e["name"] == "container.exited" and e["fields"]["requested"]),
                None,
            ),
            PLANNED_GRACE_S,
            interval=0.5,
            message="the frozen engine's container gone",
        )
    finally:
        disarm(j.triggers, "freeze")  # the next container serves
    evs = j.events(since)
    names = [e["name"] for e in evs]
    at = {n: float(next(e for e in evs if e["name"] == n)["ts"]) for n in ("probe.stalled", "emergency.stop")}
    after = float(done["ts"]) - float(stop["ts"])
    print(f"frozen: {names}; exit {done['fields']['exit_code']} {after:.1f} s after the emergency stop")
    assert at["probe.stalled"] <= at["emergency.stop"] <= float(done["ts"]), names  # the order
    assert done["fields"]["exit_code"] == 137, done  # a SIGKILL ended it: the SIGTERM did not
    assert EMERGENCY_GRACE_S <= after < PLANNED_GRACE_S, after  # killed after the emergency grace
    # the module's last test: the restart it triggers is not waited for (a load, 15 core-s); a new container
    # serving after an emergency on the real server is test_daemon_real_liveness.py's busy freeze
