"""Seats end to end: the real daemon, real Docker, two simulator profiles on one seat and one port."""

from __future__ import annotations

import threading
from datetime import datetime
from typing import Any

import docker
import pytest

from tests.sim_world import World

pytestmark = [pytest.mark.docker, pytest.mark.slow]


class _UpWatch:
    """Samples Docker every 50 ms: which of the named containers run (a real observer, not a mock)."""

    def __init__(self, client: docker.DockerClient, names: list[str]) -> None:
        self._client = client
        self._names = names
        self._stop = threading.Event()
        self.samples: list[frozenset[str]] = []
        self._thread = threading.Thread(target=self._run, name="up-watch", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            # the list call alone (no inspect per container: another test's container removed between the
            # two made the high-level list raise 404 and ended this thread)
            listed = self._client.api.containers(filters={"status": "running"})
            up = {name.lstrip("/") for c in listed for name in c.get("Names") or ()}
            self.samples.append(frozenset(n for n in self._names if n in up))

    def __enter__(self) -> _UpWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


def _when(value: str) -> datetime:
    """Docker's RFC 3339 time (nanoseconds cut to microseconds)."""
    head, _, rest = value.rstrip("Z").partition(".")
    return datetime.fromisoformat(f"{head}.{(rest + '000000')[:6]}+00:00")


def _index(events: list[dict[str, Any]], pred: Any) -> int:
    hits = [i for i, e in enumerate(events) if pred(e)]
    assert hits, "event not found"
    return hits[0]


def test_starting_a_seat_mate_drains_and_stops_the_running_one_first(world: World) -> None:
    """Two profiles on one seat and port: `start b` while a runs drains and stops a before b's container is
    created (history order and Docker's own times), never both up; a stays stopped; status shows the seat."""
    a = world.profile("a", extra={"seat": "gpu0"})
    world.profile("b", port=a.port, extra={"seat": "gpu0", "autostart": False})
    d = world.daemon()
    a_id = d.wait_state("a", "RUNNING", 60)["container_id"]
    b = d.status("b")
    assert (b["state"], b["intent"], b["seat"]) == ("STOPPED", "stop", {"name": "gpu0", "waiting_for": []})

    names = [world.specs["a"].container, world.specs["b"].container]
    with _UpWatch(world.res.client, names) as watch:
        reply = d.call("start", name="b")
        assert reply["ok"], reply
        b = d.wait_state("b", "RUNNING", 90)
    assert all(len(s) <= 1 for s in watch.samples), "two containers of one seat up at once"
    assert frozenset({names[0]}) in watch.samples
    assert frozenset({names[1]}) in watch.samples

    st_a = d.status("a")
    assert (st_a["state"], st_a["intent"]) == ("STOPPED", "stop")
    assert b["seat"] == {"name": "gpu0", "waiting_for": []}

    # the history: handover, a drains and stops, only then b's preflight and its container
    ev = d.events()
    handover = _index(ev, lambda e: e["name"] == "seat.handover")
    assert ev[handover]["profile"] == "a"
    assert ev[handover]["fields"]["from"] == "a"
    assert ev[handover]["fields"]["to"] == "b"
    waiting = _index(ev, lambda e: e["name"] == "seat.waiting" and e["profile"] == "b")
    assert ev[waiting]["fields"]["for"] == ["a"]

    def changed(profile: str, new: str) -> int:
        return _index(
            ev,
            lambda e: e["profile"] == profile and e["name"] == "state.changed" and e["fields"]["new"] == new,
        )

    stopped_a = changed("a", "STOPPED")
    assert handover < changed("a", "DRAINING") < changed("a", "STOPPING") < stopped_a
    assert stopped_a < changed("b", "WAITING") < changed("b", "STARTING")
    started_b = _index(ev, lambda e: e["profile"] == "b" and e["name"] == "container.started")
    assert stopped_a < started_b

    # Docker's own clock: a's container had finished before b's was created
    old = world.res.client.api.inspect_container(a_id)
    new = world.res.client.api.inspect_container(b["container_id"])
    assert old["State"]["Running"] is False
    assert _when(old["State"]["FinishedAt"]) < _when(new["Created"])

    # a does not come back by itself; starting it again hands the seat back
    reply = d.call("start", name="a")
    assert reply["ok"], reply
    d.wait_state("a", "RUNNING", 90)
    st_b = d.status("b")
    assert (st_b["state"], st_b["intent"]) == ("STOPPED", "stop")
