"""Supervised threads: a real thread crashes (the test hook it calls raises), is restarted with a pause,
its crash is counted and reported; a crash loop is given up; the daemon records ``daemon.thread.crashed``
and shows the thread in ``status`` while the pinger, the control socket and the metrics server go on."""

from __future__ import annotations

import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from supervisor.adapters import threads
from supervisor.adapters.control.client import ControlClient
from supervisor.adapters.docker.adapter import DockerAdapter
from supervisor.adapters.metrics.server import BoundedHTTPServer
from supervisor.adapters.threads import Supervised, ThreadBook, ThreadCrash, checkpoint, set_test_hook
from supervisor.config import load_config
from supervisor.core.clock import FakeClock
from supervisor.core.errors import ControlError
from supervisor.core.events import ContainerExited
from supervisor.daemon import build_daemon
from supervisor.daemon.executor.containers import ContainerWatch
from tests.harness import wait_for
from tests.test_daemon_inprocess import _config as in_process_config


class Boom(RuntimeError):
    pass


def crash_times(n: int) -> Callable[[], None]:
    """A hook that raises on its first ``n`` calls, then lets the thread run."""
    left = [n]

    def hook() -> None:
        if left[0] > 0:
            left[0] -= 1
            raise Boom(f"injected crash, {left[0]} left")

    return hook


@pytest.fixture
def hook() -> Iterator[Callable[[str, Callable[[], None]], None]]:
    names: list[str] = []

    def put(prefix: str, fn: Callable[[], None]) -> None:
        names.append(prefix)
        set_test_hook(prefix, fn)

    yield put
    for name in names:
        set_test_hook(name, None)


@pytest.fixture
def fast(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(threads, "RESTART_INITIAL_S", 0.05)
    monkeypatch.setattr(threads, "RESTART_MAX_S", 0.05)


def test_a_crashed_body_runs_again_and_the_crash_is_reported(hook: Any, fast: None) -> None:
    book = ThreadBook()
    got: list[ThreadCrash] = []
    book.listen(got.append)
    stop = threading.Event()
    rounds = []

    def body() -> None:
        while not stop.is_set():
            checkpoint("t-worker")
            rounds.append(1)
            stop.wait(0.01)

    hook("t-worker", crash_times(2))
    t = Supervised("t-worker", body, stop, book=book)
    t.start()
    wait_for(lambda: len(rounds) >= 3, 10, message="the body runs after two crashes")
    assert t.is_alive()
    assert [(c.name, c.streak, c.restart_in_s) for c in got] == [("t-worker", 1, 0.05), ("t-worker", 2, 0.05)]
    assert got[0].error.startswith("Boom: injected crash")
    assert got[0].record()[0] == "daemon.thread.crashed"
    [row] = book.status()
    assert (row["name"], row["running"], row["crashes"], row["given_up"]) == ("t-worker", True, 2, False)
    assert row["last_error"].startswith("Boom")
    stop.set()
    t.join(5)
    assert not t.is_alive()
    assert [r["running"] for r in book.status()] == [False]


def test_a_crash_loop_is_given_up(hook: Any, fast: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(threads, "MAX_STREAK", 3)
    book = ThreadBook()
    got: list[ThreadCrash] = []
    book.listen(got.append)
    ended = threading.Event()

    def body() -> None:
        checkpoint("t-loop")

    hook("t-loop", crash_times(100))
    t = Supervised("t-loop", body, on_end=ended.set, book=book)
    t.start()
    t.join(10)
    assert not t.is_alive()
    assert ended.is_set()
    assert [c.streak for c in got] == [1, 2, 3]
    assert got[-1].restart_in_s is None
    assert got[-1].record()[0] == "daemon.thread.gave_up"
    assert [(r["name"], r["running"], r["given_up"]) for r in book.status()] == [("t-loop", False, True)]


def test_the_metrics_server_thread_survives_a_crash(hook: Any, fast: None) -> None:
    server = BoundedHTTPServer("127.0.0.1", 0, lambda path: (200, "text/plain", b"ok\n"))
    before = crashes("metrics-http")
    hook("metrics-http", crash_times(1))
    server.start()
    try:
        wait_for(lambda: crashes("metrics-http") == before + 1, 10, message="crash counted")
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=10) as r:
            assert r.read() == b"ok\n"  # the listener was kept across the restart
    finally:
        server.stop()


def crashes(name: str) -> int:
    """The process book's crash count of ``name``."""
    return sum(r["crashes"] for r in threads.BOOK.status() if r["name"] == name)


def test_the_daemon_records_a_crashed_pinger_and_the_control_accept_loop(tmp_path: Path, hook: Any) -> None:
    """An in-process daemon: its Docker pinger and control accept loop each crash once for real; both are
    restarted (status answers, pings go on), the history has daemon.thread.crashed for each, and status
    shows them running with one crash each."""
    config = load_config(in_process_config(tmp_path))
    docker = DockerAdapter(base_url=f"unix://{tmp_path}/no-docker.sock", timeout=2)
    daemon = build_daemon(config, FakeClock(), docker=docker)
    hook("docker-ping", crash_times(1))
    thread = threading.Thread(target=daemon.run, daemon=True)
    thread.start()
    try:
        client = ControlClient(config.socket_path, timeout=5)

        def crashed(name: str) -> list[dict[str, Any]]:
            try:
                events = client.call("events", name="supervisor", n=200)["data"]["events"]
            except ControlError:
                return []
            return [
                e for e in events if e["name"] == "daemon.thread.crashed" and e["fields"]["thread"] == name
            ]

        [ev] = wait_for(lambda: crashed("docker-ping"), 15, message="the pinger's crash recorded")
        assert ev["fields"]["error"].startswith("Boom: injected crash")
        assert ev["fields"]["restart_in_s"] == 1.0
        # the restarted pinger pings again: Docker (absent here) is seen not answering
        wait_for(
            lambda: any(
                e["name"] == "docker.not_answering" for e in client.call("events", n=200)["data"]["events"]
            ),
            15,
            message="a ping after the restart",
        )
        hook("control-accept", crash_times(1))
        client.call("status")  # wakes the accept loop: its next round crashes
        wait_for(lambda: crashed("control-accept"), 15, message="the accept loop's crash recorded")
        doc = wait_for(lambda: client.call("status")["data"], 15, message="status after the restart")
        rows = {r["name"]: r for r in doc["daemon"]["threads"]}
        for name in ("docker-ping", "control-accept"):
            assert (rows[name]["running"], rows[name]["crashes"]) == (True, 1)
    finally:
        daemon.request_stop()
        thread.join(20)


def crash_on(nth: int) -> Callable[[], None]:
    """A hook that raises once, on its ``nth`` call."""
    calls = [0]

    def hook() -> None:
        calls[0] += 1
        if calls[0] == nth:
            raise Boom(f"injected crash at call {nth}")

    return hook


@pytest.mark.docker
def test_a_container_watchers_threads_crash_and_go_on_where_they_were(
    docker_client: Any, base_image: str, resources: Any, hook: Any, fast: None
) -> None:
    """A real container printing 40 lines then exiting: its log follower crashes at the 10th line and its
    event watcher at its first event; both restart. Every line is in the tail exactly once and the exit
    is reported once."""
    script = "for i in $(seq 1 40); do echo line-$i; sleep 0.05; done"
    c = docker_client.containers.create(
        base_image, ["sh", "-c", script], name=resources.name("watch-crash"), labels=resources.labels
    )
    short = c.id[:12]
    before_logs, before_watch = crashes(f"logs-{short}"), crashes(f"watch-{short}")
    hook(f"logs-{short}", crash_on(10))
    hook(f"watch-{short}", crash_on(1))
    posted: list[Any] = []
    created = time.time()
    watch = ContainerWatch(DockerAdapter(), c.id, posted.append, time.time, created)
    c.start()
    watch.start()
    try:
        wait_for(lambda: any(isinstance(e, ContainerExited) for e in posted), 30, message="the exit")
        wait_for(lambda: "line-40" in watch.tail_lines(), 15, message="the last line")
    finally:
        watch.stop()
    lines = [x for x in watch.tail_lines() if x.startswith("line-")]
    assert lines == [f"line-{i}" for i in range(1, 41)]
    assert len([e for e in posted if isinstance(e, ContainerExited)]) == 1
    assert crashes(f"logs-{short}") == before_logs + 1
    assert crashes(f"watch-{short}") == before_watch + 1
