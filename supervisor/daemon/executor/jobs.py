"""The slow work behind the machine's actions: each job does its I/O and returns the events answering it.

Jobs run on the executor's pool, never on the loop. They read only their arguments (the profile's
configuration and the values carried by the action) and the adapters; they never read or change a
profile's state. An empty answer means "nothing is known" (e.g. a stop Docker did not confirm).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

import structlog

from supervisor.adapters.docker.adapter import DockerAdapter
from supervisor.adapters.docker.spec import inspect_spec
from supervisor.adapters.host import system as host
from supervisor.adapters.host.buddyinfo import read_contiguity
from supervisor.adapters.secrets import SecretBook, command_with_key, declared_names, spec_with_key
from supervisor.adapters.store import patchset
from supervisor.config import Profile
from supervisor.core.clock import Clock
from supervisor.core.errors import ContainerMissing, EngineUnreachable, HostError, SupervisorError
from supervisor.core.events import (
    ContainerExited,
    ContainerObserved,
    ContainerStarted,
    ContainerStartFailed,
    ContainerStopped,
    DockerAnswered,
    DriftChecked,
    Event,
    ExternalStopChecked,
    ObserveFailed,
    PreflightDone,
)
from supervisor.core.spec.drift import DriftItem, drift_fields, spec_drift
from supervisor.core.spec.model import ContainerSpec
from supervisor.core.spec.patchset import (
    PATCH_LABEL,
    PatchEntry,
    labelled,
    patch_drift,
    patched_fingerprint,
    to_label,
)
from supervisor.core.spec.secrets import MASK
from supervisor.core.vllm import cmdline, kv_pool
from supervisor.core.vocab import UNWANTED

log = structlog.get_logger("supervisor.jobs")

#: Label put on every container the daemon creates.
MANAGED_LABEL = "vllm-supervisor.profile"


# ---- container ---------------------------------------------------------------------------------------


def observe(docker: DockerAdapter, profile: Profile) -> list[Event]:
    """Look at the profile's container by name: found (running or not), absent, or Docker silent."""
    try:
        status = docker.status(profile.container.name)
    except SupervisorError as exc:
        return [ObserveFailed(str(exc))]
    if status is None:
        return [ContainerObserved(None, False, None)]
    return [ContainerObserved(status.id, status.running, status.exit_code, status.restart_policy)]


def missing_bind_sources(spec: ContainerSpec) -> list[str]:
    """Host paths of bind mounts that do not exist (weights, patched files): a start would be wasted."""
    return [m.source for m in spec.mounts if m.type == "bind" and not os.path.exists(m.source)]


def preflight(profile: Profile) -> list[Event]:
    """The cheap checks before the load slot is asked for: bind sources exist (settling comes later)."""
    missing = missing_bind_sources(profile.container)
    if missing:
        # Docker would silently create an empty directory and vLLM would fail minutes later
        return [PreflightDone(False, "bind mount source does not exist: " + ", ".join(missing), None)]
    try:
        mem: float | None = host.mem_available_gib()
    except (HostError, OSError, ValueError):
        mem = None
    contiguous = read_contiguity()
    return [PreflightDone(True, "", mem, contiguous.free_blocks if contiguous is not None else None)]


def create_and_start(
    docker: DockerAdapter,
    name: str,
    spec: ContainerSpec,
    declared: Sequence[str],
    clock: Clock,
    stand_in_image_id: str | None = None,
    patches: Sequence[PatchEntry] = (),
) -> list[Event]:
    """Remove a stale container of the spec's name, create a fresh one from ``spec`` (already resolved:
    the profile's or the last known good, key injected), start it.

    ``declared``: env names holding secrets (masked in the fingerprint); ``stand_in_image_id``: the image
    id the fingerprint of a failed create uses when the tag is the one it stood for before; ``patches``:
    the content of its bind mounts (in the fingerprint, and on the container as a label for drift).
    """
    labels = {MANAGED_LABEL: name, **({PATCH_LABEL: to_label(patches)} if patches else {})}
    try:
        if docker.status(spec.name) is not None:
            docker.remove(spec.name, force=True)
        created = clock.now()
        cid = docker.create(spec, labels)
        docker.start(cid)
    except EngineUnreachable as exc:
        return [ContainerStartFailed(str(exc), transient=True)]
    except SupervisorError as exc:
        fingerprint = start_fingerprint(spec, stand_in_image_id, declared, patches)
        return [ContainerStartFailed(str(exc), fingerprint=fingerprint)]
    image_id = _image_id(docker, cid)
    fingerprint = start_fingerprint(spec, image_id, declared, patches)
    gmu = cmdline.gpu_memory_utilization(cmdline.argv_of(spec))
    # the machine answers with WatchContainer(cid) and ReadKvBaseline(fingerprint)
    return [ContainerStarted(cid, created, image_id=image_id, fingerprint=fingerprint, gmu=gmu)]


def start_fingerprint(
    spec: ContainerSpec, image_id: str | None, declared: Sequence[str], patches: Sequence[PatchEntry]
) -> str:
    """The config fingerprint of a start: image id, command, env (docs/kv-pool.md) and the patch set."""
    return patched_fingerprint(kv_pool.spec_fingerprint(spec, image_id, declared), patches)


def _image_id(docker: DockerAdapter, container_id: str) -> str | None:
    """The image id a container was created from (None if Docker does not say: the tag stands in)."""
    try:
        status = docker.status(container_id)
    except SupervisorError as exc:
        log.warning("container.image_id_unknown", container_id=container_id[:12], error=str(exc))
        return None
    return status.image_id if status is not None else None


#: After an outside SIGTERM, Docker is asked this long whether it is going down (it stops every container
#: with SIGTERM first, then exits within a second or two).
ENGINE_CHECK_S = 6.0
ENGINE_CHECK_EVERY_S = 0.5


def check_external_stop(docker: DockerAdapter, sleep: Callable[[float], object] = time.sleep) -> list[Event]:
    """Did dockerd stop the container on its way down (it stops answering) or did an operator (it answers)?"""
    pinger = docker.with_timeout(2.0)
    try:
        for _ in range(int(ENGINE_CHECK_S / ENGINE_CHECK_EVERY_S)):
            try:
                pinger.ping()
            except SupervisorError:
                docker.reconnect()  # nothing more through a connection kept from the dockerd going down
                return [ExternalStopChecked(engine_restarting=True)]
            sleep(ENGINE_CHECK_EVERY_S)
    finally:
        pinger.close()
    return [ExternalStopChecked(engine_restarting=False)]


#: How often wait_docker pings an engine that is not answering.
WAIT_DOCKER_EVERY_S = 0.25


def wait_docker(
    docker: DockerAdapter,
    limit_s: float,
    every_s: float = WAIT_DOCKER_EVERY_S,
    monotonic: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], object] = time.sleep,
) -> list[Event]:
    """Ping Docker every ``every_s`` until it answers or ``limit_s`` passed (at least one ping)."""
    pinger = docker.with_timeout(2.0)
    deadline = monotonic() + limit_s
    was_down = False
    try:
        while True:
            try:
                pinger.ping()
                if was_down:
                    docker.reconnect()  # what it kept led to the engine that went away
                return [DockerAnswered(ok=True, was_down=was_down)]
            except SupervisorError:
                was_down = True
            if monotonic() + every_s > deadline:
                return [DockerAnswered(ok=False, was_down=True)]
            sleep(every_s)
    finally:
        pinger.close()


def stop(docker: DockerAdapter, ref: str, grace: float, reason: str, container_id: str | None) -> list[Event]:
    """Stop; answer ContainerStopped only when the container is known to be down.

    A stop Docker refused or did not answer (engine down, timeout) proves nothing: no answer, so the
    machine stays STOPPING and re-issues the stop when it is overdue, instead of reporting STOPPED
    while the container may still run. A stray container's stop never answers for ours.
    """
    try:
        docker.stop(ref, grace)
    except ContainerMissing:
        if reason == UNWANTED:
            return []
        return [ContainerExited(None, None, False, container_id)]
    except SupervisorError as exc:
        log.error("container.stop_failed", reason=reason, container=ref, error=str(exc))
        return []
    return [] if reason == UNWANTED else [ContainerStopped()]


def profile_drift(
    docker: DockerAdapter, profile: Profile, ref: str | None = None, book: SecretBook | None = None
) -> tuple[DriftItem, ...]:
    """How the container (``ref``, default the profile's by name) differs from the profile now.

    Raises ContainerMissing when there is no such container, the adapter's errors when Docker is silent.
    The secret values of both sides are taught to ``book`` (the container's may be new to the daemon).
    """
    have = inspect_spec(docker, ref or profile.container.name)
    if have is None:
        raise ContainerMissing(f"no container {ref or profile.container.name}")
    want, got = spec_with_key(profile.api_key, profile.container), have.spec
    key = profile.api_key
    secret = declared_names(key)
    if book is not None:
        book.learn_spec(want, secret)
        book.learn_spec(got, secret)
    if key is not None and key.inject_arg:  # a key on the command line never shows in a drift line
        want = replace(want, command=command_with_key(want.command, key.inject_arg, MASK))
        got = replace(got, command=command_with_key(got.command, key.inject_arg, MASK))
    items = spec_drift(
        want,
        got,
        image_env=dict(have.image_env),
        image_config=have.image_config,
        secret_names=secret,
        ignore_labels=frozenset({MANAGED_LABEL, PATCH_LABEL}),
    )
    created_with = labelled(got.labels)  # None: created without custody (an older daemon, by hand)
    if created_with is None:
        return items
    return items + patch_drift(patchset.hash_mounts(want.mounts), created_with)


def check_drift(
    docker: DockerAdapter, profile: Profile, container_id: str, book: SecretBook | None = None
) -> list[Event]:
    """Compare container ``container_id`` with the profile (after adoption and after a reload)."""
    try:
        items = profile_drift(docker, profile, container_id, book)
    except SupervisorError as exc:
        return [DriftChecked(container_id, error=str(exc))]
    detail = "; ".join(i.line() for i in items)
    return [DriftChecked(container_id, drift_fields(items), detail[:2000])]
