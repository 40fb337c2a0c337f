"""adapters/cputime.ThreadDemand: the busiest thread's runnable share of a span, read from a cgroup's thread
list and each thread's ``/proc/<tid>/schedstat`` (on a CPU + waiting for one), and the one rule that turns it
and the CPU time into activity (core/vllm/activity.py). Plain files first, then real containers: computing,
asleep, stopped, and computing on a CPU that eight containers share (docs/vllm-facts.md "Forward progress
under CPU starvation")."""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest
import requests

from supervisor.adapters.docker.errors import until_reaped
from supervisor.adapters.host.cputime import ThreadDemand, container_cpu_s
from supervisor.adapters.store.files import write_atomic
from supervisor.core.vllm.activity import RUNNABLE_SHARE, cpu_signal
from supervisor.sim.launch import sim_run_kwargs
from tests.conftest import Resources
from tests.harness import free_port, interned_names, wait_for

CID = "c0ffee"
T = TypeVar("T")


class Tree:
    """A fake /sys/fs/cgroup (v1 cpu controller, cgroupfs driver) and /proc."""

    def __init__(self, tmp: Path) -> None:
        self.root, self.proc = tmp / "cgroup", tmp / "proc"
        (self.root / "cpu" / "docker" / CID).mkdir(parents=True)
        self.proc.mkdir()

    def threads(self, stats: dict[str, tuple[float, float]]) -> None:
        """Thread id -> (seconds on a CPU, seconds waiting) so far."""
        (self.root / "cpu" / "docker" / CID / "tasks").write_text("".join(f"{t}\n" for t in stats))
        for tid, (run, wait) in stats.items():
            (self.proc / tid).mkdir(exist_ok=True)
            (self.proc / tid / "schedstat").write_text(f"{int(run * 1e9)} {int(wait * 1e9)} 7\n")


def test_the_busiest_threads_share_of_the_span_on_a_cpu_or_waiting(tmp_path: Path) -> None:
    t = Tree(tmp_path)
    demand = ThreadDemand(t.root, t.proc)
    t.threads({"10": (100.0, 50.0), "11": (3.0, 1.0)})
    assert demand.read(CID, 1000.0) is None  # a first read has no span
    # in 5 s: thread 10 ran 1 s and waited 3.5 s (starved), thread 11 ran 0.1 s and waited 0.2 s
    t.threads({"10": (101.0, 53.5), "11": (3.1, 1.2)})
    assert demand.read(CID, 1005.0) == 0.9
    t.threads({"10": (101.0, 53.5), "11": (3.2, 1.3)})  # 10 stopped, 11 polls
    assert demand.read(CID, 1010.0) == 0.04


def test_reading_a_containers_threads_interns_no_thread_or_container_id(
    tmp_path: Path,
) -> None:
    """Every probe round reads each thread's schedstat: the ids must not become interned strings (Python
    3.11's pathlib interned every path part, churning CPython's interned-strings table in a soak's daemon;
    adapters/host/cputime.py). Seen through ``sys.intern``, which that pathlib calls for each part it parses;
    the atomic state write (a random temp name per write) is held to the same."""
    t = Tree(tmp_path)
    (t.root / "cpuacct" / "docker" / CID).mkdir(parents=True)
    (t.root / "cpuacct" / "docker" / CID / "cpuacct.usage").write_text("2500000000\n")
    demand = ThreadDemand(t.root, t.proc)
    t.threads({"4711": (1.0, 0.0), "4712": (2.0, 0.0)})
    interned: list[str] = []

    def watched(call: Callable[[], T]) -> T:  # only the code under test, not the fake tree's own writes
        with interned_names() as names:
            result = call()
        interned.extend(names)
        return result

    watched(lambda: demand.read(CID, 0.0))
    t.threads({"4711": (1.5, 0.0), "4712": (2.0, 0.0)})
    assert watched(lambda: demand.read(CID, 1.0)) == 0.5
    assert watched(lambda: container_cpu_s(CID, t.root)) == 2.5
    watched(lambda: write_atomic(tmp_path / "alive.json", b"{}"))
    assert (tmp_path / "alive.json").read_bytes() == b"{}"
    assert not [s for s in interned if "4711" in s or "4712" in s or CID in s or ".tmp-" in s], interned


def test_a_thread_born_in_the_span_counts_from_zero_and_a_gone_one_is_dropped(tmp_path: Path) -> None:
    t = Tree(tmp_path)
    demand = ThreadDemand(t.root, t.proc)
    t.threads({"10": (1.0, 0.0)})
    demand.read(CID, 0.0)
    t.threads({"12": (1.5, 0.5)})  # 10 exited; 12 started and was runnable 2 s of the 4
    (t.proc / "10" / "schedstat").unlink()
    assert demand.read(CID, 4.0) == 0.5


def test_nothing_is_known_for_another_container_an_unknown_one_or_another_pid_namespace(
    tmp_path: Path,
) -> None:
    t = Tree(tmp_path)
    demand = ThreadDemand(t.root, t.proc)
    t.threads({"10": (1.0, 0.0)})
    demand.read(CID, 0.0)
    assert demand.read("0ther", 5.0) is None  # no cgroup: unknown
    assert demand.read(CID, 10.0) is None  # the previous read was of another container: no span
    assert demand.read("../../etc", 15.0) is None  # not a container id
    (t.root / "cpu" / "docker" / CID / "tasks").write_text("999\n")  # a thread id /proc does not know
    assert demand.read(CID, 20.0) is None


@pytest.mark.parametrize(
    ("cpu_delta", "demand", "signal"),
    [
        (1.0, None, "cpu"),  # 0.2 cores over 5 s: the CPU alone says it works
        (1.0, 0.0, "cpu"),
        (0.5, 0.95, "cpu_starved"),  # 0.1 cores, its thread runnable throughout
        (0.5, RUNNABLE_SHARE, "cpu_starved"),
        (0.1, 0.3, None),  # stopped under contention: its pollers wait a little
        (0.1, None, None),
    ],
)
def test_the_activity_rule(cpu_delta: float, demand: float | None, signal: str | None) -> None:
    assert cpu_signal(10.0, 10.0 + cpu_delta, 5.0, 0.2, demand) == signal


SPIN = ["python3", "-c", "while True: pass"]
SLEEP = ["sleep", "3600"]
HOGS = 7  # with the one measured, eight spinning containers share CPU 0: about 1/8 core each


def _measure(resources: Resources, cid: str, span_s: float = 2.0) -> tuple[float, float | None]:
    """(cores used, busiest thread's runnable share) of the container over ``span_s``."""
    demand = ThreadDemand()
    cpu0, t0 = container_cpu_s(cid), time.monotonic()
    assert demand.read(cid, t0) is None
    assert cpu0 is not None
    time.sleep(span_s)
    share, cpu1, t1 = demand.read(cid, time.monotonic()), container_cpu_s(cid), time.monotonic()
    assert cpu1 is not None
    return (cpu1 - cpu0) / (t1 - t0), share


def _run(resources: Resources, base_image: str, stem: str, cmd: list[str], cpuset: str | None = None) -> str:
    name = resources.name(stem)
    resources.track(name)
    c = resources.client.containers.run(
        base_image, cmd, name=name, detach=True, labels=resources.labels, cpuset_cpus=cpuset
    )

    def running() -> bool:
        c.reload()
        return bool(c.status == "running")

    wait_for(running, 30, interval=0.1, message=f"{stem} running")
    return str(c.id)


@pytest.mark.docker
@pytest.mark.exclusive  # eight spinning containers on one CPU slow everything else sharing it
def test_real_containers_computing_asleep_stopped_and_starved(resources: Resources, base_image: str) -> None:
    busy = _run(resources, base_image, "spin", SPIN)
    cores, share = _measure(resources, busy)
    print(f"spinning: {cores:.2f} cores, busiest thread runnable {share}")
    assert cpu_signal(0.0, cores * 2.0, 2.0, 0.5, share) == "cpu", (cores, share)

    asleep = _run(resources, base_image, "sleep", SLEEP)
    cores, share = _measure(resources, asleep)
    print(f"asleep: {cores:.3f} cores, busiest thread runnable {share}")
    assert share is not None  # its threads were read
    assert cpu_signal(0.0, cores * 2.0, 2.0, 0.5, share) is None, (cores, share)  # not active

    resources.client.containers.get(busy).kill(signal="SIGSTOP")
    cores, share = _measure(resources, busy)
    print(f"stopped: {cores:.3f} cores, busiest thread runnable {share}")
    assert share == 0.0  # a stopped thread is never runnable
    assert cpu_signal(0.0, cores * 2.0, 2.0, 0.5, share) is None, (cores, share)
    resources.client.containers.get(busy).kill(signal="SIGCONT")

    resources.client.containers.get(busy).update(cpuset_cpus="0")
    for i in range(HOGS):
        _run(resources, base_image, f"hog{i}", SPIN, cpuset="0")
    cores, share = _measure(resources, busy, span_s=5.0)
    print(f"starved: {cores:.2f} cores, busiest thread runnable {share}")
    assert cpu_signal(0.0, cores * 5.0, 5.0, 0.2, None) is None, cores  # the CPU time alone: not active
    assert cpu_signal(0.0, cores * 5.0, 5.0, 0.2, share) == "cpu_starved", (cores, share)


@pytest.mark.docker
@pytest.mark.exclusive  # as above
def test_the_simulator_prefills_for_its_cpu_time_its_thread_runnable_when_starved(
    resources: Resources, sim_image: str, base_image: str
) -> None:
    """As the real engine does (docs/vllm-facts.md "Forward progress under CPU starvation"): 2,000 tokens
    at 1,000 tokens/s of CPU, on a CPU eight containers share, last well over their 2 s, and the container
    uses under 0.2 cores while its prefill thread is runnable throughout."""
    port, key = free_port(), secrets.token_urlsafe(16)
    args = ["--model", "/models/sim", "--served-model-name", "sim", "--no-enable-chunked-prefill"]
    env = {"VSIM_LOAD_SECONDS": "0", "VLLM_API_KEY": key, "VSIM_PREFILL_TOKENS_PER_S": "1000"}
    name = resources.name("sim")
    resources.track(name)
    c = resources.client.containers.run(**sim_run_kwargs(name, port, resources.labels, env=env, args=args))
    url = f"http://127.0.0.1:{port}"
    wait_for(lambda: _health(url) == 200, 60, interval=0.2, message="the simulator ready")
    c.update(cpuset_cpus="0")
    hogs = [_run(resources, base_image, f"hog{i}", SPIN, cpuset="0") for i in range(HOGS)]
    result: dict[str, float] = {}

    def send() -> None:
        start = time.monotonic()
        r = requests.post(
            url + "/v1/completions",
            json={"model": "sim", "prompt": list(range(10, 2010)), "max_tokens": 1},
            headers={"Authorization": f"Bearer {key}"},
            timeout=120,
        )
        result["status"], result["took"] = r.status_code, time.monotonic() - start

    th = threading.Thread(target=send, daemon=True)
    th.start()
    # No wait for the prefill to begin: the simulator, like vLLM, counts a request nowhere until its first
    # step ends, so nothing shows it; the span starts as the request is sent and must end inside it.
    cores, share = _measure(resources, str(c.id), span_s=2.0)
    assert th.is_alive(), result  # the 2 s span lay inside the prefill (2 s of CPU on 1/9 of a core)
    for hog in hogs:  # the rest of the prefill at full speed (starved, it took ~15 s more)
        until_reaped(lambda: resources.client.containers.get(hog).remove(force=True))  # noqa: B023
    th.join(120)
    print(f"simulator starved: {cores:.2f} cores, busiest thread runnable {share}, prefill {result}")
    assert result["status"] == 200
    assert cpu_signal(0.0, cores * 2.0, 2.0, 0.2, None) is None, cores  # the CPU time alone: not active
    assert cpu_signal(0.0, cores * 2.0, 2.0, 0.2, share) == "cpu_starved", (cores, share)


def _health(url: str) -> int | None:
    try:
        return requests.get(url + "/health", timeout=1).status_code
    except requests.RequestException:
        return None
