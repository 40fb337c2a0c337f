"""A load's progress besides its log (CPU time, block IO), its ETA and the slow-load warning: the pure
machine with a plain ``now`` (core/machine/loads.py, core/loadtime.py, core/vllm/activity.py) and the cgroup
reader on files laid out as the kernel does (adapters/host/cputime.py)."""

from __future__ import annotations

from pathlib import Path

from supervisor.adapters.host.cputime import container_io_bytes
from supervisor.cli.render import status_row
from supervisor.core import loadtime
from supervisor.core.actions import Action, Emit, ProbeHealth, SampleLoad, StopContainer
from supervisor.core.events import (
    ContainerStarted,
    HealthResult,
    LoadActivity,
    LoadHistory,
    LogProgress,
    PreflightDone,
    Settled,
    SlotAcquired,
    StartRequested,
    Tick,
)
from supervisor.core.machine import Policy
from supervisor.core.sentinel.ledger import HISTORY_WINDOW, load_times
from supervisor.core.states import State
from supervisor.core.vllm import activity
from tests.test_machine_driver import Driver, fresh_boot, policy

MIB = 1 << 20


def _creating(pol: Policy) -> Driver:
    """A fresh daemon whose start is STARTING, its container's create still in flight."""
    d = Driver(policy=pol)
    fresh_boot(d)
    if d.st() == State.STOPPED:
        d.send(StartRequested())
    d.send(PreflightDone(ok=True, detail="", mem_available_gib=100.0))
    d.send(SlotAcquired())
    d.send(Settled(ok=True, detail="", mem_available_gib=100.0))
    assert d.st() == State.STARTING
    return d


def _loading(pol: Policy, fingerprint: str | None = "fp1") -> Driver:
    """A fresh daemon whose start is STARTING with container c1 of config ``fingerprint``."""
    d = _creating(pol)
    d.send(ContainerStarted("c1", fingerprint=fingerprint))
    assert d.st() == State.STARTING
    return d


class Container:
    """What the cgroup of the loading container reads: CPU seconds and IO bytes growing at set rates; and
    whether its API listens yet (``listening``: /health 200; else refused, as a vLLM that is loading)."""

    def __init__(self) -> None:
        self.cpu_s, self.io_bytes = 0.0, 0
        self.cores, self.io_per_s = 0.0, 0
        self.listening = False
        self.readable = True  # False: the cgroup files cannot be read (None readings)

    def run(self, d: Driver, seconds: float) -> list[Action]:
        """Tick ``d`` for ``seconds``, answering every SampleLoad and ProbeHealth as the daemon's jobs
        would."""
        out: list[Action] = []
        end = d.now + seconds
        while d.now < end and d.st() == State.STARTING:
            d.now += 1.0
            self.cpu_s += self.cores
            self.io_bytes += self.io_per_s
            out.extend(self.answer(d, d.send(Tick())))
        return out

    def answer(self, d: Driver, acts: list[Action]) -> list[Action]:
        """``acts`` and what answering their samples and /health polls brought, answered in turn."""
        todo, out = list(acts), []
        while todo:
            a = todo.pop(0)
            out.append(a)
            if isinstance(a, SampleLoad):
                cpu, io = (self.cpu_s, self.io_bytes) if self.readable else (None, None)
                todo.extend(d.send(LoadActivity(a.container_id, cpu, io)))
            elif isinstance(a, ProbeHealth):
                todo.extend(d.send(self.health()))
        return out

    def health(self) -> HealthResult:
        if self.listening:
            return HealthResult(ok=True, status=200, latency_ms=2.0, error=None)
        return HealthResult(ok=False, status=None, latency_ms=0.5, error="connection refused")


def _stopped_for_silence(acts: list[Action]) -> bool:
    return [a.reason for a in acts if isinstance(a, StopContainer)] == ["no loading progress"]


def test_cpu_busy_silent_load_outlives_the_silence_window_and_an_idle_one_does_not() -> None:
    """No log line for 5x silence_timeout_s, but the container burns a core: still loading. When its CPU
    goes flat too, the silence window ends it."""
    pol = policy(startup={"silence_timeout_s": 100.0, "deadline_s": 5000.0}, probes={"cpu_busy_cores": 0.2})
    d = _loading(pol)
    box = Container()
    box.cores = 1.0
    acts = box.run(d, 500)
    assert d.st() == State.STARTING
    assert not any(isinstance(a, StopContainer) for a in acts)
    assert "load.activity" in d.emits(acts)
    assert d.s.status_dict(d.now)["load_progress"]["activity"] == "cpu"
    box.cores = 0.0  # hung: nothing moves any more
    acts = box.run(d, 200)
    assert d.st() == State.STOPPING
    assert _stopped_for_silence(acts)
    silent = [a for a in acts if isinstance(a, Emit) and a.name == "start.timeout"]
    assert [dict(a.fields)["kind"] for a in silent] == ["silence"]


def test_idle_silent_load_is_stopped_after_the_silence_window() -> None:
    """CPU under cpu_busy_cores (a sleeping process) and no IO: the samples do not extend the window."""
    pol = policy(startup={"silence_timeout_s": 100.0, "deadline_s": 5000.0}, probes={"cpu_busy_cores": 0.2})
    d = _loading(pol)
    box = Container()
    box.cores, box.io_per_s = 0.05, 1000  # a heartbeat thread, a log write: not loading
    acts = box.run(d, 99)
    assert d.st() == State.STARTING
    acts = box.run(d, 5)
    assert d.st() == State.STOPPING
    assert _stopped_for_silence(acts)


def test_a_daemon_that_stalled_past_the_window_samples_before_it_judges_silence() -> None:
    """The daemon stopped looking (a starved host, a paused process) for longer than the silence window: its
    first tick after the stall asks for a sample instead of stopping the load; a busy container keeps
    loading, a still one is stopped once a sample taken after the window saw nothing move."""
    pol = policy(startup={"silence_timeout_s": 6.0, "deadline_s": 5000.0}, probes={"cpu_busy_cores": 0.2})
    d = _loading(pol)
    box = Container()
    box.cores = 1.0
    box.run(d, 10)
    assert d.st() == State.STARTING
    d.now += 20.0  # no tick, no sample for 20 s; the container computed all along
    box.cpu_s += 20.0
    acts = d.send(Tick())
    assert d.st() == State.STARTING
    assert not any(isinstance(a, StopContainer) for a in acts)
    samples = [a for a in acts if isinstance(a, SampleLoad)]
    assert samples, acts
    d.send(LoadActivity("c1", box.cpu_s, box.io_bytes))
    assert d.s.load.last_progress_at == d.now  # the stall's CPU time counted as progress
    box.run(d, 3)
    assert d.st() == State.STARTING
    box.cores = 0.0  # now still, and the daemon stalls again
    d.now += 20.0
    acts = d.send(Tick())
    assert d.st() == State.STARTING
    assert any(isinstance(a, SampleLoad) for a in acts)
    acts = d.send(LoadActivity("c1", box.cpu_s, box.io_bytes))  # seen: nothing moved after the window
    assert d.st() == State.STARTING  # ... and /health is asked before the verdict
    assert [a for a in acts if isinstance(a, ProbeHealth)]
    acts = d.send(box.health())  # refused: a load, not a finished server
    assert d.st() == State.STOPPING
    assert _stopped_for_silence(acts)


def test_a_slow_create_is_not_the_loads_silence() -> None:
    """The container's create takes longer than the silence window (a busy dockerd: 7.4 s against a 6 s
    window in a CI run; an image pull): no silence verdict before it exists; the window counts from its
    start, and the deadline still bounds the whole start."""
    pol = policy(startup={"silence_timeout_s": 6.0, "deadline_s": 60.0}, probes={"cpu_busy_cores": 0.2})
    d = _creating(pol)
    acts = d.advance(20)  # no container yet
    assert d.st() == State.STARTING
    assert not any(isinstance(a, StopContainer) for a in acts)
    d.send(ContainerStarted("c1", fingerprint="fp1"))
    box = Container()  # asleep: nothing moves
    box.run(d, 5)
    assert d.st() == State.STARTING  # 5 s of its own silence, under the window
    acts = box.run(d, 3)
    assert d.st() == State.STOPPING
    assert _stopped_for_silence(acts)
    d2 = _creating(pol)
    acts = d2.advance(61)  # a create that never ends: the deadline
    assert [a.reason for a in acts if isinstance(a, StopContainer)] == ["start deadline reached"]


def test_block_io_alone_counts_as_progress() -> None:
    """Weights read from disk with the CPU waiting on IO: progress."""
    pol = policy(startup={"silence_timeout_s": 60.0, "deadline_s": 5000.0}, probes={"cpu_busy_cores": 0.2})
    d = _loading(pol)
    box = Container()
    box.io_per_s = 50 * MIB
    box.run(d, 300)
    assert d.st() == State.STARTING
    assert d.s.load.activity == "io"


def test_unreadable_cgroup_leaves_the_log_alone_to_judge() -> None:
    """No cgroup file (None readings): the silence window is the log's, as before."""
    pol = policy(startup={"silence_timeout_s": 50.0, "deadline_s": 5000.0})
    d = _loading(pol)
    box = Container()
    box.readable = False
    for _ in range(60):
        d.now += 1.0
        box.answer(d, d.send(Tick()))
    assert d.st() == State.STOPPING


def test_log_progress_still_counts_and_samples_stop_after_ready() -> None:
    pol = policy(startup={"silence_timeout_s": 30.0, "deadline_s": 5000.0})
    d = _loading(pol)
    for i in range(10):
        d.advance(20)
        d.send(LogProgress(pct=10.0 * i, phase="weights"))
    assert d.st() == State.STARTING
    assert d.s.load.activity == "log"
    assert any(isinstance(a, SampleLoad) for a in d.log)


def test_sample_cadence_follows_the_silence_window() -> None:
    assert activity.sample_every_s(1200.0) == activity.SAMPLE_MAX_S
    assert activity.sample_every_s(8.0) == 2.0
    assert activity.sample_every_s(1.0) == activity.SAMPLE_MIN_S
    d = _loading(policy(startup={"silence_timeout_s": 1200.0, "deadline_s": 5000.0}))
    acts = d.advance(60)
    assert sum(isinstance(a, SampleLoad) for a in acts) == 4  # every 15 s


def test_activity_judgement() -> None:
    assert activity.active(10.0, 12.0, 0, 0, 5.0, 0.2) == ("cpu",)  # 0.4 cores
    assert activity.active(10.0, 10.5, 0, 0, 5.0, 0.2) == ()  # 0.1 cores
    assert activity.active(None, 99.0, 0, 2 * MIB, 5.0, 0.2) == ("io",)
    assert activity.active(1.0, 9.0, 0, MIB - 1, 5.0, 0.2) == ("cpu",)
    assert activity.active(1.0, 9.0, 0, MIB, 5.0, 0.2) == ("cpu", "io")
    assert activity.active(1.0, 9.0, None, MIB, 0.0, 0.2) == ()


def test_load_times_from_the_ledger() -> None:
    rows: list[dict[str, object]] = [
        {"outcome": "ready", "fingerprint": "fp1", "load_s": 700.0},
        {"outcome": "ready", "fingerprint": "fp2", "load_s": 50.0},
        {"outcome": "timeout_silence", "fingerprint": "fp1", "load_s": 1200.0},
        {"outcome": "ready", "fingerprint": "fp1", "load_s": None},
        {"outcome": "ready", "fingerprint": "fp1", "load_s": 720},
    ]
    assert load_times(rows, "fp1") == (720.0, 700.0)  # newest first, ready starts only
    assert load_times(rows, None) == ()
    many = [{"outcome": "ready", "fingerprint": "fp1", "load_s": float(i + 1)} for i in range(50)]
    times = load_times(many, "fp1")
    assert len(times) == HISTORY_WINDOW
    assert times[0] == 50.0


def test_eta_arithmetic_and_text() -> None:
    assert loadtime.median_load_s(()) is None
    assert loadtime.median_load_s((600.0, 720.0, 900.0)) == 720.0
    assert loadtime.eta_s(720.0, 480.0) == 240.0
    assert loadtime.eta_s(720.0, 800.0) == 0.0
    assert loadtime.eta_s(None, 10.0) is None
    assert loadtime.eta_text(240.0, 720.0, 5) == "ETA ~4 min (median load 12 min over 5 starts)"
    assert loadtime.eta_text(0.0, 720.0, 1) == "overdue (median load 12 min over 1 start)"
    assert loadtime.eta_text(None, None, 0) == ""
    assert not loadtime.is_slow(720.0, 1080.0)
    assert loadtime.is_slow(720.0, 1081.0)


def test_status_shows_the_eta_while_loading_and_nothing_without_history() -> None:
    d = _loading(policy(startup={"silence_timeout_s": 1200.0, "deadline_s": 5000.0}))
    d.advance(60)
    lp = d.s.status_dict(d.now)["load_progress"]
    assert lp["eta_s"] is None
    assert lp["history_starts"] == 0
    row = status_row({"name": "p", "state": "STARTING", "load_progress": lp}, d.now)
    assert "ETA" not in " ".join(row)
    d.send(LoadHistory("other", (100.0,)))  # an answer for another config: ignored
    assert d.s.status_dict(d.now)["load_progress"]["eta_s"] is None
    d.send(LoadHistory("fp1", (720.0, 700.0, 760.0, 720.0, 730.0)))
    d.advance(420)  # 480 s since the load began (60 + 420)
    lp = d.s.status_dict(d.now)["load_progress"]
    assert (lp["eta_s"], lp["median_load_s"], lp["history_starts"]) == (240.0, 720.0, 5)
    row = status_row({"name": "p", "state": "STARTING", "load_progress": lp}, d.now)
    assert "ETA ~4 min (median load 12 min over 5 starts)" in row


def test_slow_load_warns_once_per_start() -> None:
    pol = policy(startup={"silence_timeout_s": 100.0, "deadline_s": 5000.0}, probes={"cpu_busy_cores": 0.2})
    d = _loading(pol)
    d.send(LoadHistory("fp1", (600.0, 600.0, 620.0)))
    box = Container()
    box.cores = 1.0
    acts = box.run(d, 899)
    assert not [a for a in d.alerts(acts) if a.kind == "start.slow_load"]
    acts = box.run(d, 600)
    slow = [a for a in d.alerts(acts) if a.kind == "start.slow_load"]
    assert len(slow) == 1
    assert slow[0].severity == "warning"
    assert d.emits(acts).count("load.slow") == 1
    assert d.st() == State.STARTING


def test_no_slow_warning_without_history() -> None:
    d = _loading(policy(startup={"silence_timeout_s": 100.0, "deadline_s": 5000.0}), fingerprint=None)
    box = Container()
    box.cores = 1.0
    acts = box.run(d, 3000)
    assert not [a for a in d.alerts(acts) if a.kind == "start.slow_load"]


def test_container_io_bytes_from_cgroup_v1_and_v2(tmp_path: Path) -> None:
    cid = "ab" * 32
    v1 = tmp_path / "blkio" / "docker" / cid
    v1.mkdir(parents=True)
    (v1 / "blkio.throttle.io_service_bytes").write_text(
        "8:0 Read 4096\n8:0 Write 1024\n8:0 Sync 5120\n8:0 Async 0\n8:0 Total 5120\n"
        "259:0 Read 100\n259:0 Write 0\n259:0 Total 100\nTotal 5220\n"
    )
    assert container_io_bytes(cid, tmp_path) == 5220
    other = "cd" * 32
    v2 = tmp_path / "system.slice" / f"docker-{other}.scope"
    v2.mkdir(parents=True)
    (v2 / "io.stat").write_text("8:0 rbytes=2000 wbytes=300 rios=5 wios=1 dbytes=0 dios=0\n259:0 rbytes=7\n")
    assert container_io_bytes(other, tmp_path) == 2307
    (tmp_path / "blkio" / "docker" / ("ee" * 32)).mkdir(parents=True)
    (tmp_path / "blkio" / "docker" / ("ee" * 32) / "blkio.throttle.io_service_bytes").write_text("Total 0\n")
    assert container_io_bytes("ee" * 32, tmp_path) == 0  # no IO yet (an empty accounting)
    assert container_io_bytes("ef" * 32, tmp_path) is None
    assert container_io_bytes("../../etc", tmp_path) is None
    assert container_io_bytes(None, tmp_path) is None


def test_a_load_whose_log_is_late_is_not_silent_while_its_api_answers() -> None:
    """The load finished, its CPU went quiet, and its ready line is still on its way through a slow dockerd
    (a CI run: 10 s to start a container, the log in bursts): the silence verdict asks /health first, and
    an API that answers is progress (``load.activity`` signal ``health``), not silence. The ready line
    then ends the load as usual; an API that stops answering is judged again."""
    pol = policy(startup={"silence_timeout_s": 6.0, "deadline_s": 5000.0}, probes={"cpu_busy_cores": 0.2})
    d = _loading(pol)
    box = Container()
    box.cores = 1.0
    box.run(d, 10)
    box.cores, box.listening = 0.0, True  # loaded and listening; its log lines not delivered yet
    acts = box.run(d, 30)
    assert d.st() == State.STARTING
    assert not any(isinstance(a, StopContainer) for a in acts)
    assert d.s.load.activity == "health"
    signals = [dict(a.fields)["signal"] for a in acts if isinstance(a, Emit) and a.name == "load.activity"]
    assert signals == ["health"]  # once, when what kept the window open changed
    box.listening = False  # the API went away again (crashed and restarting, say): silent
    acts = box.run(d, 10)
    assert d.st() == State.STOPPING
    assert _stopped_for_silence(acts)


def test_the_verdict_waits_for_the_health_answer_and_asks_once_per_window() -> None:
    """While /health's answer is outstanding, ticks give no verdict and ask no second time; the answer
    given, the verdict comes at once. A refusal from before the window ran out is no answer to it."""
    pol = policy(startup={"silence_timeout_s": 6.0, "deadline_s": 5000.0}, probes={"cpu_busy_cores": 0.2})
    d = _loading(pol)
    box = Container()
    d.send(box.health())  # a refusal seen early (an answer to nobody's question): not the verdict's
    asked: list[Action] = []
    for _ in range(30):  # samples answered, /health never
        d.now += 1.0
        for a in d.send(Tick()):
            if isinstance(a, SampleLoad):
                asked += d.send(LoadActivity(a.container_id, box.cpu_s, box.io_bytes))
            asked.append(a)
    assert d.st() == State.STARTING
    assert len([a for a in asked if isinstance(a, ProbeHealth)]) == 1
    acts = d.send(box.health())
    assert d.st() == State.STOPPING
    assert _stopped_for_silence(acts)
