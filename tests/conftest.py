"""Fixtures shared by every test: a real Docker client, per-test names/labels, forced cleanup, fake clock."""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import docker
import docker.errors
import pytest

from supervisor.adapters.docker.errors import until_reaped
from supervisor.core.clock import FakeClock
from tests.harness import TEST_LABEL, WebhookReceiver, socket_dir, unique_name, webhook_receiver
from tests.real_server import RealVllm, serve
from tests.sim_world import World
from tools.images import base_image_tag, ensure_base_image
from tools.realvllm import ENGINE_CPUS_ENV

#: xdist groups of the tests that start a real vLLM CPU server (``real_vllm``): each group runs on one
#: worker, one test after another, so at most this many real servers run at once in a run (each takes
#: 2-3 GB and up to a core of this 2-core box; VSUP_REAL_VLLM_AT_ONCE overrides it).
REAL_VLLM_GROUP = "real_vllm"
REAL_VLLM_AT_ONCE = int(os.environ.get("VSUP_REAL_VLLM_AT_ONCE", "2"))
#: Seconds each real-vLLM module takes in the suite's parallel phase: the phase of bbcd6e7 beside the 2-hour
#: soak (2026-12-06; the kmsg tests not in it; the engine core started by fork and the shared model-info
#: cache: docs/testing.md), every test's setup, call and teardown. Only the ratios matter. Every real-vLLM
#: module is listed (tests/test_parallel.py checks it): an unlisted one counts REAL_VLLM_DEFAULT_S, and
#: test_daemon_real_vllm_same_cause.py counted so (196 s) had left the groups 848 against 744 s. Dealt by
#: the figures before these (ff4e69a's run), the groups took 660 and 570 s in that phase.
REAL_VLLM_MODULE_S = {
    "tests/test_daemon_real_liveness.py": 221,
    "tests/test_conformance.py": 213,
    "tests/test_daemon_real_vllm_same_cause.py": 189,
    "tests/test_daemon_real_judgements.py": 147,  # 3 tests on 1 shared server (overlays)
    "tests/test_daemon_real_vllm_sentinel.py": 96,
    "tests/test_daemon_real_vllm.py": 80,
    "tests/test_daemon_real_vllm_failed_starts.py": 51,  # the shm start + the first-request death (overlay)
    "tests/test_daemon_real_spin.py": 48,
    "tests/test_daemon_real_vllm_keys.py": 46,
    "tests/test_daemon_real_vllm_stops.py": 44,  # the load held in its initialisation by an overlay
    "tests/test_snapshot.py": 38,
    "tests/test_daemon_real_vllm_death_cause.py": 33,
    "tests/test_real_vllm.py": 24,  # the shared server's load + reads
    "tests/test_real_vllm_gates.py": 1,  # shares test_real_vllm.py's server (REAL_VLLM_SHARED_SERVER)
}
REAL_VLLM_DEFAULT_S = 30
#: Every split into groups is tried when there are at most this many (2 groups: 2^(units-1)).
EXACT_SPLITS = 50_000
#: Modules whose tests share the session's tiny server (the ``real_vllm`` fixture, tests/real_server.py):
#: dealt to one group as one unit, so one worker loads it once for all of them.
REAL_VLLM_SHARED_SERVER = ("tests/test_real_vllm.py", "tests/test_real_vllm_gates.py")
#: Modules that keep a real engine computing for minutes (the bigger model's long prefills, a full batch):
#: dealt to one group as one unit, one after another. vLLM's CPU worker binds its OpenMP thread to core 0
#: of what it sees (``core ids=[0]``, core 1 reserved), so two such servers at once share one core: dealt
#: apart by time alone (2026-12-05, a quiet box), the 10,000-token prefill took 145 s instead of ~50 s,
#: the full batch's six rounds did not come within 120 s, and 4 tests failed.
REAL_VLLM_ONE_CORE = (
    "tests/test_conformance.py",
    "tests/test_daemon_real_liveness.py",
    "tests/test_daemon_real_judgements.py",
)
#: Modules dealt together: each unit to one group.
REAL_VLLM_UNITS = (REAL_VLLM_SHARED_SERVER, REAL_VLLM_ONE_CORE)


def real_vllm_groups(
    modules: list[str], at_once: int = REAL_VLLM_AT_ONCE, seconds: dict[str, int] | None = None
) -> dict[str, str]:
    """Module path -> ``real_vllm_N`` (N < at_once), so that the heaviest group is as light as it can be
    (``seconds``: each module's weight, REAL_VLLM_MODULE_S unless given). Every split is tried when there
    are few splits (EXACT_SPLITS: the first of the best, in the order longest first, group 0 before 1);
    else longest first, each to the lightest group. The run is as long as its heaviest group:
    on 2026-12-03 the greedy deal left 931 against 829 s where 883 against 877 was possible."""
    table = REAL_VLLM_MODULE_S if seconds is None else seconds
    k = max(1, at_once)
    units: dict[str, list[str]] = {}  # the first module of a unit -> its modules
    for mod in sorted(set(modules)):
        head = next((unit[0] for unit in REAL_VLLM_UNITS if mod in unit), mod)
        units.setdefault(head, []).append(mod)

    def weight(unit: list[str]) -> int:
        return sum(table.get(m, REAL_VLLM_DEFAULT_S) for m in unit)

    order = [u for _h, u in sorted(units.items(), key=lambda kv: (-weight(kv[1]), kv[0]))]
    weights = [weight(u) for u in order]
    if order and k ** (len(order) - 1) <= EXACT_SPLITS:
        # the first unit in group 0 (the groups are interchangeable); product() counts up in order
        splits = ((0, *rest) for rest in itertools.product(range(k), repeat=len(order) - 1))
        best = min(
            splits,
            key=lambda g: max(sum(w for w, x in zip(weights, g, strict=True) if x == i) for i in range(k)),
        )
    else:
        load = [0] * k
        picks = []
        for w in weights:
            i = load.index(min(load))
            load[i] += w
            picks.append(i)
        best = tuple(picks)
    return {m: f"{REAL_VLLM_GROUP}_{i}" for unit, i in zip(order, best, strict=True) for m in unit}


#: Fixture scopes wider than a test but narrower than the session: such a fixture (a systemd box, a real
#: vLLM per module) is made once per worker that runs one of its tests, so its tests share one worker.
SHARED_SCOPES = frozenset({"module", "class", "package"})


def xdist_group_of(item: pytest.Item, real: dict[str, str] | None = None) -> str | None:
    """The group an item runs in under ``--dist loadgroup`` (docs/testing.md "Running in parallel"): an
    explicit ``xdist_group`` mark, else its module's ``real_vllm_N`` (``real``: :func:`real_vllm_groups`)
    for a ``real_vllm`` test, else its module's path when it uses a module/class/package-scoped fixture,
    else None (any worker)."""
    marks = [m for m in item.iter_markers("xdist_group")]
    if marks:
        return "_".join(
            sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default")) for m in marks})
        )
    module = item.nodeid.split("::", 1)[0]
    if item.get_closest_marker("real_vllm"):
        return (real or {}).get(module, REAL_VLLM_GROUP)
    info = getattr(item, "_fixtureinfo", None)
    defs = getattr(info, "name2fixturedefs", {}) or {}
    if any(d.scope in SHARED_SCOPES for chain in defs.values() for d in chain):
        return module
    return None


@pytest.hookimpl(trylast=True)  # after xdist's own hook (a no-op on pytest 9.2: it sets the gone _nodeid)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On a ``--dist loadgroup`` worker, suffix each grouped test's node id with ``@group``: the id xdist's
    scheduler groups by. (pytest-xdist 3.8 writes ``item._nodeid``, which pytest 9.2 no longer reads:
    without this, ``xdist_group`` marks are silently ignored.)"""
    if not getattr(config.option, "loadgroup", False):  # set on the workers of --dist loadgroup only
        return
    from _pytest.nodeid import coerce_node_id  # pytest >= 9.2 keeps the id here

    real = real_vllm_groups([i.nodeid.split("::", 1)[0] for i in items if i.get_closest_marker("real_vllm")])
    for item in items:
        group = xdist_group_of(item, real)
        if group is not None and "@" not in item.nodeid:
            item._id = coerce_node_id(f"{item.nodeid}@{group}")


def engine_cpus(group: str | None, cpus: list[int]) -> str | None:
    """The CPU a real-vLLM group's engines bind to (``real_vllm_N`` -> the N-th of ``cpus``, round the
    list), so that the run's real servers compute on different cores; None for any other test, or with
    one CPU (vLLM's own binding then)."""
    head, _, n = (group or "").rpartition("_")
    if head != REAL_VLLM_GROUP or not n.isdigit() or len(cpus) < 2:
        return None
    return str(cpus[int(n) % len(cpus)])


@pytest.hookimpl(tryfirst=True)  # before the fixtures' setup: a session's shared server starts in one
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A real-vLLM test of a parallel run binds its engines to its group's core (:func:`engine_cpus`,
    tools/realvllm.ENGINE_CPUS_ENV): vLLM binds each to core 0 by itself."""
    group = item.nodeid.rpartition("@")[2] if "@" in item.nodeid else None
    cpus = engine_cpus(group, sorted(os.sched_getaffinity(0)))
    if cpus is None:
        os.environ.pop(ENGINE_CPUS_ENV, None)
    else:
        os.environ[ENGINE_CPUS_ENV] = cpus


@pytest.fixture
def fake_clock() -> FakeClock:
    """A clock that moves only when the test advances it."""
    return FakeClock()


@pytest.fixture(scope="session")
def docker_client() -> Iterator[docker.DockerClient]:
    """A client of the real Docker engine (the test command starts one); fails loudly if it is absent."""
    try:
        client = docker.from_env(timeout=120)
        client.ping()
    except Exception as exc:  # noqa: BLE001
        pytest.fail(f"Docker engine not reachable ({exc}); run the README test command, which starts it")
    yield client
    client.close()


@pytest.fixture(scope="session")
def base_image(docker_client: docker.DockerClient) -> str:
    """Tag of the offline-built Debian base image (built once if missing)."""
    tag = os.environ.get("VSUP_BASE_IMAGE") or base_image_tag()
    try:
        docker_client.images.get(tag)
    except docker.errors.ImageNotFound:
        tag = ensure_base_image()
    return tag


class Resources:
    """Names and labels for one test, and the list of things to force-remove afterwards."""

    def __init__(self, client: docker.DockerClient, test_id: str) -> None:
        self.client = client
        self.test_id = test_id
        self.labels = {TEST_LABEL: test_id}
        self.containers: list[str] = []

    def name(self, stem: str = "") -> str:
        """A unique container name, registered for cleanup."""
        n = unique_name(stem)
        self.containers.append(n)
        return n

    def track(self, name_or_id: str) -> None:
        """Register a container created some other way for cleanup."""
        self.containers.append(name_or_id)

    def cleanup(self) -> None:
        """Force-remove every registered or labelled container (one whose killed main process is not
        reaped yet is asked again, as the daemon does: ``until_reaped``)."""
        for ref in self.containers:
            with contextlib.suppress(docker.errors.NotFound):
                found = self.client.containers.get(ref)
                _removed(lambda: found.remove(force=True, v=True))  # noqa: B023 (called at once)
        for c in self.client.containers.list(all=True, filters={"label": f"{TEST_LABEL}={self.test_id}"}):
            with contextlib.suppress(docker.errors.NotFound):
                _removed(lambda: c.remove(force=True, v=True))  # noqa: B023 (called at once)


def _removed(remove: Callable[[], object]) -> None:
    """A forced removal (``until_reaped``) that another remover may be doing already: the test's daemon
    removes its containers too, and Docker answers the second caller 409 "removal ... is already in
    progress" (seen in a run on eb213aa); that one finishes it."""
    try:
        until_reaped(remove)
    except docker.errors.APIError as exc:
        if "already in progress" not in str(exc):
            raise


@pytest.fixture
def resources(docker_client: docker.DockerClient, request: pytest.FixtureRequest) -> Iterator[Resources]:
    """Per-test names + label; everything registered or labelled is force-removed even if the test fails."""
    res = Resources(docker_client, unique_name(request.node.name)[len("vsup-test-") :])
    try:
        yield res
    finally:
        res.cleanup()


@pytest.fixture
def webhook() -> Iterator[WebhookReceiver]:
    """A real HTTP receiver on 127.0.0.1 recording every request."""
    with webhook_receiver() as recv:
        yield recv


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    """A short, world-traversable directory for Unix sockets, removed after the test."""
    with socket_dir() as d:
        yield d


# --- real vLLM fixtures (engineer A) ---
# The real vLLM CPU environment (tools/realvllm.py): built once per recipe, cached outside the checkout.
# (Imports kept in this block so the rest of the file stays untouched.)

from tools.realvllm import ensure as ensure_real_vllm  # noqa: E402


@pytest.fixture(scope="session")
def real_vllm_paths() -> tuple[Path, Path]:
    """(venv_dir, model_dir) of the real vLLM CPU environment, built first if missing (minutes, once)."""
    p = ensure_real_vllm()
    return p.venv, p.model


@pytest.fixture(scope="session")
def real_vllm(
    docker_client: docker.DockerClient, base_image: str, real_vllm_paths: tuple[Path, Path]
) -> Iterator[RealVllm]:
    """The run's shared tiny real vLLM server (tests/real_server.py): made once by the worker that runs
    the ``REAL_VLLM_SHARED_SERVER`` modules, removed when that worker ends."""
    yield from serve(docker_client, base_image, real_vllm_paths)


@pytest.fixture(scope="session")
def sim_image(base_image: str) -> str:
    """Tag of the simulator image, (re)built from the base image if its content hash changed."""
    from supervisor.sim.launch import IMAGE_ENV
    from tools.images import ensure_sim_image, sim_image_tag

    assert base_image
    tag = ensure_sim_image()
    assert tag == sim_image_tag(base_image)
    os.environ[IMAGE_ENV] = tag  # every simulator this session runs is the one built from these sources
    return tag


@pytest.fixture
def world(tmp_path: Path, resources: Resources, sim_image: str) -> Iterator[World]:
    """A daemon end-to-end test's world (daemons killed, containers removed afterwards)."""
    w = World(tmp_path, resources)
    try:
        yield w
    finally:
        w.close()
