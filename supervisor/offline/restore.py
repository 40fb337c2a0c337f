"""Restore a container from a snapshot, prove it healthy and its API key still enforced.

``restore`` recreates the container from ``<name>.profile.yaml`` (+ its env file), starts it, waits until
``/health`` answers 200, then - if the snapshot holds an API key (``VLLM_API_KEY`` or ``--api-key``) -
requires ``/v1/models`` WITHOUT a key to answer 401. The expectation comes from the profile AND from
the original ``docker inspect`` in the snapshot, so an env file that lost the key is caught too. A server
that answers without a key is stopped and the restore fails loudly: that is exactly how a key got
lost before (docs/field-notes.md item 8).

A restore loads a model like a daemon start (``supervisor.offline.restore_load``): it refuses a container a
running daemon manages, takes the host's load slot, drops the page cache, waits for memory, creates from
the exact image the container ran, and waits for the load as long as the startup deadline, with progress.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog
import yaml

from supervisor.adapters.docker.adapter import DockerAdapter
from supervisor.adapters.host import system as host
from supervisor.adapters.vllm.probes import check_auth
from supervisor.config import DaemonConfig, HostConfig, Profile, load_profile
from supervisor.core.clock import Clock, SystemClock, format_duration
from supervisor.core.errors import ConfigError, ContainerMissing, SnapshotError
from supervisor.core.settings.profile import StopConfig
from supervisor.core.spec.model import ContainerSpec
from supervisor.core.vllm import cmdline
from supervisor.core.vllm.server_keys import server_keys
from supervisor.offline.restore_load import (
    LoadWatch,
    Say,
    pick_image,
    refuse_if_daemon_owned,
    settle_host,
    take_slot,
)
from supervisor.offline.restore_rules import load_deadline

log = structlog.get_logger(__name__)

DEFAULT_GRACE_S = 120.0
#: A load that missed its deadline is stopped with the daemon's emergency grace, not the planned one: vLLM
#: loses the first SIGTERM while its engine initialises, so a longer grace only holds the load slot and the
#: memory (docs/vllm-facts.md §8.1; the daemon stops every failed start the same way).
LOAD_GRACE_S = StopConfig().emergency_grace_s


@dataclass(frozen=True)
class RestoreResult:
    """A restored, healthy container."""

    name: str
    container_id: str
    base_url: str
    ready_s: float
    auth: str  # enforced | open (no key in the snapshot) | unknown
    replaced: bool
    image_id: str = ""  # the image the restored container runs (sha256:...)


def api_key_expected(spec: ContainerSpec) -> bool:
    """True if the spec gives the server an API key (env ``VLLM_API_KEY`` or an ``--api-key`` argument)."""
    return bool(server_keys(cmdline.argv_of(spec), spec.env_dict()))


def original_had_key(inspect_path: Path) -> bool:
    """True if the snapshotted container itself had an API key (its inspect is the record of truth)."""
    try:
        info = json.loads(inspect_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    cfg = info.get("Config") or {}
    env = dict(e.partition("=")[::2] for e in cfg.get("Env") or [])
    argv = (*(cfg.get("Entrypoint") or ()), *(cfg.get("Cmd") or ()))
    return bool(server_keys(argv, env))


def server_port(spec: ContainerSpec) -> int:
    """The port vLLM listens on inside the container: ``--port`` or 8000."""
    return cmdline.port(cmdline.argv_of(spec))


def base_url_of(spec: ContainerSpec, inspect: dict[str, Any]) -> str:
    """Where the restored server answers: host network -> 127.0.0.1:<port>; else the published port."""
    port = server_port(spec)
    if spec.network_mode == "host":
        return f"http://127.0.0.1:{port}"
    published = ((inspect.get("NetworkSettings") or {}).get("Ports") or {}).get(f"{port}/tcp") or []
    for b in published:
        if b.get("HostPort"):
            ip = b.get("HostIp") or ""
            ip = "127.0.0.1" if ip in ("", "0.0.0.0", "::") else ip  # noqa: S104
            return f"http://{ip}:{b['HostPort']}"
    ip = (inspect.get("NetworkSettings") or {}).get("IPAddress") or "127.0.0.1"
    return f"http://{ip}:{port}"


def _grace(spec: ContainerSpec) -> float:
    """Seconds to wait between SIGTERM and SIGKILL when restore stops a container."""
    return float(spec.stop_timeout if spec.stop_timeout is not None else DEFAULT_GRACE_S)


def _running(adapter: DockerAdapter, ref: str) -> bool:
    try:
        return bool(adapter.inspect(ref).get("State", {}).get("Running"))
    except ContainerMissing:
        return False


@dataclass(frozen=True)
class RestoreContext:
    """What the host and the daemon config say about a restore (:func:`context_for` builds it)."""

    host: HostConfig = field(default_factory=HostConfig)  # load slot, page cache, memory settle
    daemon_profile: Profile | None = None  # the daemon config's profile naming the container, if any
    sockets: tuple[Path, ...] = ()  # control sockets of daemons that may own the container


def context_for(config: DaemonConfig | None, container: str, sockets: Sequence[Path] = ()) -> RestoreContext:
    """The restore context of ``container`` under a daemon config (None: no config, the host defaults)."""
    if config is None:
        return RestoreContext(sockets=tuple(sockets))
    owner = next((p for p in config.profiles if p.container.name == container), None)
    return RestoreContext(config.host, owner, tuple(dict.fromkeys([config.socket_path, *sockets])))


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _snapshot_deadline(profile_path: Path) -> float | None:
    """``startup.deadline_s`` when the snapshot's profile sets it (a snapshot writes none)."""
    try:
        doc = yaml.safe_load(profile_path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return None
    value = ((doc or {}).get("startup") or {}).get("deadline_s") if isinstance(doc, dict) else None
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def restore(
    adapter: DockerAdapter,
    name: str,
    from_dir: Path | str,
    ctx: RestoreContext,
    *,
    replace: bool = False,
    wait_s: float | None = None,
    probe_timeout_s: float = 5.0,
    say: Say | None = None,
    clock: Clock | None = None,
) -> RestoreResult:
    """Recreate ``name`` from its snapshot in ``from_dir`` like a daemon start (load slot, page cache,
    memory, the exact image), wait for the load with progress, verify the API key is enforced."""
    say = say or (lambda text: log.info("restore.progress", container=name, text=text))
    clock = clock or SystemClock()
    profile_path = Path(from_dir) / f"{name}.profile.yaml"
    if not profile_path.is_file():
        raise SnapshotError(f"no snapshot of {name} in {from_dir} ({profile_path.name} is missing)")
    try:
        spec = load_profile(profile_path).container
    except ConfigError as exc:
        raise SnapshotError(f"snapshot profile of {name} is invalid:\n{exc}") from exc
    owner = ctx.daemon_profile
    refuse_if_daemon_owned(spec.name, ctx.sockets, owner.name if owner else None)
    if owner is not None:
        say(f"note: profile {owner.name} of the daemon config names this container; no daemon answers now")
    existing = adapter.find(spec.name)
    if existing is not None and existing.get("State", {}).get("Running") and not replace:
        raise SnapshotError(f"container {spec.name} is running; stop it first or restore with --replace")
    choice = pick_image(adapter, spec.image, _read_json(Path(from_dir) / f"{name}.inspect.json"))
    if choice.warning:
        say(f"warning: {choice.warning}")
    deadline_s, source = load_deadline(
        wait_s, _snapshot_deadline(profile_path), owner.startup.deadline_s if owner else None
    )
    lock = host.LoadLock(ctx.host.load_lock_path, owner=f"supervisorctl restore {spec.name}")
    take_slot(lock, deadline_s, say, clock)
    try:
        replaced = _clear_name(adapter, spec)
        settle_host(ctx.host, say, clock, cmdline.gpu_memory_utilization(cmdline.argv_of(spec)))
        started = clock.monotonic()
        cid = adapter.create(dataclasses.replace(spec, image=choice.ref))
        adapter.start(cid)
        info = adapter.inspect(cid)
        base_url = base_url_of(spec, info)
        up_to = format_duration(deadline_s)
        say(f"created {cid[:12]}; waiting up to {up_to} ({source}) for {base_url}/health")
        watch = LoadWatch(adapter, cid, say, clock)
        health = watch.wait(base_url, deadline_s, alive=lambda: _running(adapter, cid))
        if not health.ok:
            if _running(adapter, cid):  # past the deadline: stop it, the slot is given back below
                adapter.stop(cid, min(_grace(spec), LOAD_GRACE_S))
            raise SnapshotError(
                f"restored container {spec.name} did not become healthy at {base_url} within "
                f"{format_duration(deadline_s)} ({health.error}; the log says: {watch.progress.outcome()}); "
                f"see `docker logs {spec.name}`"
            )
        ready_s = clock.monotonic() - started
        say(f"healthy after {format_duration(ready_s)}; checking that /v1/models without a key answers 401")
        auth = _verify_auth(
            adapter, spec, cid, base_url, Path(from_dir) / f"{name}.inspect.json", probe_timeout_s
        )
    finally:
        lock.release()
    log.info("restore.done", container=spec.name, id=cid[:12], ready_s=round(ready_s, 1), auth=auth)
    return RestoreResult(spec.name, cid, base_url, ready_s, auth, replaced, str(info.get("Image") or ""))


def _clear_name(adapter: DockerAdapter, spec: ContainerSpec) -> bool:
    """Stop (the profile's grace) and remove a container of the name; True if there was one."""
    existing = adapter.find(spec.name)
    if existing is None:
        return False
    if existing.get("State", {}).get("Running"):
        adapter.stop(spec.name, _grace(spec))
    adapter.remove(spec.name, force=True)
    return True


def _verify_auth(
    adapter: DockerAdapter, spec: ContainerSpec, cid: str, base_url: str, inspect_path: Path, timeout: float
) -> str:
    """``enforced`` | ``open`` | ``unknown``; a server that should need a key and does not is stopped."""
    auth = check_auth(base_url, timeout)
    expected = api_key_expected(spec) or original_had_key(inspect_path)
    if expected and auth.status != "enforced":
        adapter.stop(cid, _grace(spec))  # never leave an open server on the LAN
        log.error("restore.api_key_lost", container=spec.name, http_status=auth.http_status)
        if auth.status == "open":
            raise SnapshotError(
                f"restored server {spec.name} answers /v1/models without a key: API key lost "
                "(the container was stopped; check the snapshot's env file and --api-key)"
            )
        raise SnapshotError(
            f"restored server {spec.name}: cannot verify the API key is enforced "
            f"(/v1/models without a key answered {auth.http_status}); the container was stopped"
        )
    return auth.status
