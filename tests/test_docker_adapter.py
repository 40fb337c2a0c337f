"""The Docker adapter against the real engine: lifecycle, error translation, logs and events streams."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from typing import Any

import docker
import docker.errors
import pytest

from supervisor.adapters.docker import errors as docker_errors
from supervisor.adapters.docker.adapter import DockerAdapter, OnePoolUnixAdapter
from supervisor.adapters.docker.errors import until_reaped
from supervisor.adapters.docker.stream import split_lines
from supervisor.core.errors import (
    ContainerMissing,
    DockerError,
    EngineUnreachable,
    ImageMissing,
    NameConflict,
    PortInUse,
)
from supervisor.core.spec.model import ContainerSpec, EnvVar, PortBinding
from tests.conftest import Resources
from tests.harness import free_port, wait_for

pytestmark = pytest.mark.docker

SECRET = "sk-adapter-SECRET-51c0"
PY_LOOP = (
    "import sys,time\nfor i in range(3): print('line', i, flush=True)\n"
    "print('err', file=sys.stderr, flush=True)\ntime.sleep(600)"
)


@pytest.fixture
def adapter() -> Iterator[DockerAdapter]:
    """An adapter on the real engine."""
    a = DockerAdapter(timeout=30.0)
    yield a
    a.close()


def _spec(resources: Resources, base_image: str, stem: str, **kw: Any) -> ContainerSpec:
    kw.setdefault("command", ("python3", "-c", PY_LOOP))
    return ContainerSpec(name=resources.name(stem), image=base_image, stop_timeout=2, **kw)


def test_every_request_shares_one_pool_and_its_socket(adapter: DockerAdapter) -> None:
    """docker-py keys pools by URL (a new socket per container id); ours: one pool, one connection reused."""
    adapter.ping()
    for i in range(30):
        with pytest.raises(ContainerMissing):
            adapter.inspect(f"vsup-no-such-{i:03d}")
    transport = adapter._api.get_adapter("http+docker://localhost")
    assert isinstance(transport, OnePoolUnixAdapter)
    assert len(transport.pools) == 1
    idle = transport.get_connection("http+docker://localhost/any").pool.queue
    assert len([conn for conn in idle if conn is not None]) == 1


def test_create_start_inspect_find(adapter: DockerAdapter, resources: Resources, base_image: str) -> None:
    """create -> id; restart policy 'no'; labels merged; find by exact name; env passed through."""
    spec = _spec(resources, base_image, "life", env=(EnvVar("K", SECRET),), labels=(("a", "1"),))
    cid = adapter.create(spec, resources.labels)
    adapter.start(cid)
    info = adapter.inspect(cid)
    assert info["State"]["Running"]
    assert info["HostConfig"]["RestartPolicy"]["Name"] == "no"
    assert info["Config"]["Labels"]["a"] == "1"
    assert resources.labels.items() <= info["Config"]["Labels"].items()
    assert f"K={SECRET}" in info["Config"]["Env"]
    found = adapter.find(spec.name)
    assert found is not None
    assert found["Id"] == cid
    assert adapter.find(spec.name + "-nope") is None
    assert adapter.ping()


def test_stop_graceful_exit_code(adapter: DockerAdapter, resources: Resources, base_image: str) -> None:
    """stop() sends SIGTERM: a process handling it exits with its own code, reported by wait()."""
    code = (
        "import signal,sys,time\nsignal.signal(signal.SIGTERM, lambda *a: sys.exit(3))\n"
        "print('armed', flush=True)\ntime.sleep(600)"
    )
    cid = adapter.create(
        _spec(resources, base_image, "stop", command=("python3", "-c", code)), resources.labels
    )
    adapter.start(cid)
    wait_for(lambda: "armed" in list(adapter.logs(cid)), 15, message="handler installed")
    adapter.stop(cid, grace_s=20)
    assert adapter.wait(cid, timeout=10) == 3


def test_stop_kills_after_grace(adapter: DockerAdapter, resources: Resources, base_image: str) -> None:
    """A PID 1 that ignores SIGTERM is SIGKILLed once the grace has passed (exit 137)."""
    cid = adapter.create(_spec(resources, base_image, "stopkill"), resources.labels)
    adapter.start(cid)
    # python is PID 1 once it prints. A stop sent right after start on a loaded box once ended the container
    # with status 2, not 137 (a from-zero run, 2026-12-06): most likely it reached the container's init
    # before python was exec'd (runc's init is a Go program; Go exits 2 on a fatal signal)
    wait_for(lambda: "line 0" in list(adapter.logs(cid)), 30, message="python running")
    adapter.stop(cid, grace_s=1)
    assert adapter.wait(cid, timeout=10) == 137
    assert not adapter.inspect(cid)["State"]["Running"]


def test_kill_with_signal_and_wait(adapter: DockerAdapter, resources: Resources, base_image: str) -> None:
    """kill(SIGKILL) -> exit 137; wait on a running container times out as a DockerError."""
    spec = _spec(resources, base_image, "kill")
    cid = adapter.create(spec, resources.labels)
    adapter.start(cid)
    with pytest.raises(DockerError, match="did not exit"):
        adapter.wait(cid, timeout=1)
    adapter.kill(cid, "SIGKILL")
    assert adapter.wait(cid, timeout=10) == 137
    adapter.remove(cid)
    with pytest.raises(ContainerMissing):
        adapter.inspect(cid)


def test_missing_image(adapter: DockerAdapter, resources: Resources) -> None:
    """A missing image is ImageMissing with a message naming it."""
    spec = ContainerSpec(name=resources.name("noimg"), image="vsup-test-no-such-image:none")
    with pytest.raises(ImageMissing, match="not present locally"):
        adapter.create(spec, resources.labels)
    with pytest.raises(ImageMissing):
        adapter.image_config("vsup-test-no-such-image:none")


def test_name_conflict(adapter: DockerAdapter, resources: Resources, base_image: str) -> None:
    """Creating a second container with the same name is NameConflict."""
    spec = _spec(resources, base_image, "dup")
    adapter.create(spec, resources.labels)
    with pytest.raises(NameConflict):
        adapter.create(spec, resources.labels)


def test_port_in_use(adapter: DockerAdapter, resources: Resources, base_image: str) -> None:
    """Publishing a port that a host process holds fails at start with PortInUse."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        port = holder.getsockname()[1]
        spec = _spec(resources, base_image, "port", ports=(PortBinding(8000, port, host_ip="127.0.0.1"),))
        cid = adapter.create(spec, resources.labels)
        with pytest.raises(PortInUse):
            adapter.start(cid)


def test_port_allocated_by_other_container(
    adapter: DockerAdapter, resources: Resources, base_image: str
) -> None:
    """Two containers publishing the same host port: the second start is PortInUse."""
    port = free_port()
    a = adapter.create(_spec(resources, base_image, "pa", ports=(PortBinding(8000, port),)), resources.labels)
    adapter.start(a)
    b = adapter.create(_spec(resources, base_image, "pb", ports=(PortBinding(8000, port),)), resources.labels)
    with pytest.raises(PortInUse):
        adapter.start(b)


def test_missing_container(adapter: DockerAdapter) -> None:
    """Every operation on an unknown container is ContainerMissing."""
    for op in (
        lambda: adapter.inspect("vsup-test-none-xyz"),
        lambda: adapter.start("vsup-test-none-xyz"),
        lambda: adapter.stop("vsup-test-none-xyz", 1),
        lambda: adapter.kill("vsup-test-none-xyz"),
        lambda: adapter.remove("vsup-test-none-xyz"),
        lambda: adapter.wait("vsup-test-none-xyz", 1),
        lambda: list(adapter.logs("vsup-test-none-xyz")),
    ):
        with pytest.raises(ContainerMissing):
            op()


def test_engine_unreachable(tmp_path: Any) -> None:
    """A socket path with no engine behind it is EngineUnreachable."""
    with pytest.raises(EngineUnreachable):
        DockerAdapter(base_url=f"unix://{tmp_path}/no.sock", timeout=2).ping()


def test_logs_lines_and_follow_with_stop(
    adapter: DockerAdapter, resources: Resources, base_image: str
) -> None:
    """logs() gives stdout+stderr lines; a follow stream ends within a moment of stop being set."""
    cid = adapter.create(_spec(resources, base_image, "logs"), resources.labels)
    adapter.start(cid)
    wait_for(lambda: "err" in list(adapter.logs(cid)), 15, message="log lines")
    lines = list(adapter.logs(cid))
    assert sorted(lines) == ["err", "line 0", "line 1", "line 2"]  # stdout/stderr interleave freely
    assert [x for x in lines if x.startswith("line")] == ["line 0", "line 1", "line 2"]
    stop = threading.Event()
    got: list[str] = []
    done = threading.Event()

    def follow() -> None:
        got.extend(adapter.logs(cid, follow=True, stop=stop))
        done.set()

    threading.Thread(target=follow, daemon=True).start()
    wait_for(lambda: len(got) >= 4, 10, message="followed lines")
    assert not done.is_set()
    stop.set()
    assert done.wait(3), "follow stream did not end after stop"


def test_split_lines_partial_chunks_cr_and_utf8() -> None:
    """Chunks split mid-line and mid-character; \\r\\n and progress-bar \\r end lines too."""
    text = "ä first\r\nsecond 45%\rsecond 90%\nthird no newline".encode()
    chunks = [text[i : i + 3] for i in range(0, len(text), 3)]
    assert list(split_lines(chunks)) == ["ä first", "second 45%", "second 90%", "third no newline"]


def test_events_report_die_with_exit_code(
    adapter: DockerAdapter, resources: Resources, base_image: str
) -> None:
    """A kill shows up as a 'die' event with exit code 137 promptly; the stream ends when stop is set."""
    spec = _spec(resources, base_image, "events", env=(EnvVar("SECRET_K", SECRET),))
    cid = adapter.create(spec, resources.labels)
    stop = threading.Event()
    events: list[dict[str, Any]] = []
    done = threading.Event()

    def watch() -> None:
        events.extend(adapter.events(spec.name, stop))
        done.set()

    threading.Thread(target=watch, daemon=True).start()
    adapter.start(cid)
    wait_for(lambda: any(e["action"] == "start" for e in events), 10, message="start event")
    adapter.kill(cid, "SIGKILL")
    die = wait_for(lambda: next((e for e in events if e["action"] == "die"), None), 5, message="die event")
    assert die["exit_code"] == 137
    assert die["id"] == cid
    assert die["name"] == spec.name
    assert SECRET not in repr(events)
    stop.set()
    assert done.wait(3), "events stream did not end after stop"


def test_image_info_and_config(
    adapter: DockerAdapter, docker_client: docker.DockerClient, base_image: str
) -> None:
    """image_info gives the image's id; image_config its own Config (Env as the engine has it)."""
    attrs = docker_client.images.get(base_image).attrs
    assert adapter.image_info(base_image)["Id"] == attrs["Id"]
    assert adapter.image_config(base_image).get("Env") == attrs["Config"].get("Env")


def test_follow_logs_end_when_the_container_is_removed_mid_stream(
    adapter: DockerAdapter, resources: Resources, base_image: str
) -> None:
    """A followed log stream whose container is force-removed ends (or raises our own error), never hangs."""
    cid = adapter.create(_spec(resources, base_image, "logsrm"), resources.labels)
    adapter.start(cid)
    got: list[str] = []
    outcome: list[BaseException | None] = []

    def follow() -> None:
        try:
            got.extend(adapter.logs(cid, follow=True, stop=threading.Event()))
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 (recorded and checked below)
            outcome.append(exc)

    threading.Thread(target=follow, daemon=True).start()
    wait_for(lambda: "err" in got, 10, message="followed lines")
    adapter.remove(cid, force=True)
    wait_for(lambda: bool(outcome), 10, message="follow stream ended after removal")
    assert outcome[0] is None or isinstance(outcome[0], DockerError), repr(outcome[0])


#: What Docker 500s when a forced removal's SIGKILL left the main process a zombie (CI, real vLLM).
ZOMBIE = (
    "Could not kill running container 62947b5c62ea58af4f812657720a0242f29685029facd26a3f35523b797e048b, "
    "cannot remove - container 62947b5c62ea PID 2877 is zombie and can not be killed. Use the --init "
    "option when creating containers to run an init inside the container that forwards signals and "
    "reaps processes"
)


def test_a_removal_refused_for_a_zombie_is_asked_again_until_it_passes() -> None:
    """The zombie answer is transient (the kernel is still reaping): asked again, and the removal is done;
    any other refusal is raised at once."""
    calls: list[int] = []

    def reaped_on_the_third_call() -> None:
        calls.append(1)
        if len(calls) < 3:
            raise docker.errors.APIError("500 Server Error", explanation=ZOMBIE)

    until_reaped(reaped_on_the_third_call)
    assert len(calls) == 3

    def refused() -> None:
        calls.append(1)
        raise docker.errors.APIError("500 Server Error", explanation="driver failed removing container")

    calls.clear()
    with pytest.raises(docker.errors.APIError, match="500"):
        until_reaped(refused)
    assert len(calls) == 1


def test_a_zombie_that_stays_is_raised_after_the_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bounded: past ZOMBIE_WAIT_S the zombie answer is raised (the caller reports it)."""
    monkeypatch.setattr(docker_errors, "ZOMBIE_WAIT_S", 0.0)

    def stays() -> None:
        raise docker.errors.APIError("500 Server Error", explanation=ZOMBIE)

    with pytest.raises(docker.errors.APIError, match="500"):
        until_reaped(stays)
