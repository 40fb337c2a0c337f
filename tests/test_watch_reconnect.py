"""The log stream of a watched container is attached again after it breaks while the container runs (what a
dockerd restart with live-restore, or any hiccup of the engine's socket, does to it), and no line's effect
is lost or repeated: a real container printing numbered lines, a real DockerAdapter talking to dockerd
through a relay whose connections the test cuts."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from supervisor.adapters.docker.adapter import DockerAdapter
from supervisor.core.events import Event
from supervisor.daemon.executor.containers import ContainerWatch
from tests.conftest import Resources
from tests.docker_relay import relay
from tests.harness import wait_for

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def _numbers(lines: list[str]) -> list[int]:
    return [int(m.group(1)) for line in lines if (m := re.search(r"line (\d+)", line))]


def test_the_log_stream_is_attached_again_without_losing_or_repeating_a_line(
    tmp_path: Path, resources: Resources, base_image: str
) -> None:
    sock = tmp_path / "docker.sock"
    c = resources.client.containers.run(
        base_image,
        ["sh", "-c", "i=0; while true; do i=$((i+1)); echo line $i; sleep 0.2; done"],
        name=resources.name("logs"),
        labels=resources.labels,
        detach=True,
    )
    posted: list[Event] = []
    with relay(sock) as (srv,):
        watch = ContainerWatch(
            DockerAdapter(base_url=f"unix://{sock}"), str(c.id), posted.append, time.time, created_at=None
        )
        watch.start()
        try:
            wait_for(lambda: len(_numbers(watch.tail_lines())) >= 5, 30, message="lines before the cut")
            assert srv.cut() > 0
            before = max(_numbers(watch.tail_lines()))
            wait_for(
                lambda: max(_numbers(watch.tail_lines())) >= before + 10,
                30,
                message="lines after the cut (the stream attached again)",
            )
        finally:
            watch.stop()
    seen = _numbers(watch.tail_lines())
    assert seen == list(range(seen[0], seen[0] + len(seen)))  # every line once, in order, none missing


def test_the_settled_tail_holds_the_lines_printed_after_the_one_that_ended_the_start(
    resources: Resources, base_image: str
) -> None:
    """A failed start is diagnosed from the watch's tail: the line that ends the start (the engine's death)
    can come before the one that explains it (the real vLLM's access-log 500, fixture 055). ``settled_tail``
    waits until the container's log has ended; ``tail_lines`` is only what was read so far."""
    c = resources.client.containers.run(
        base_image,
        ["sh", "-c", "echo first; sleep 1.5; echo last"],
        name=resources.name("settle"),
        labels=resources.labels,
        detach=True,
    )
    watch = ContainerWatch(DockerAdapter(), str(c.id), lambda ev: None, time.time, created_at=None)
    watch.start()
    try:
        wait_for(lambda: any("first" in line for line in watch.tail_lines()), 30, message="the first line")
        assert not any("last" in line for line in watch.tail_lines())  # not printed yet
        settled = watch.settled_tail(timeout=30)
        assert any("last" in line for line in settled)
    finally:
        watch.stop()
