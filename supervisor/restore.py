"""Restore a container from a snapshot, prove it healthy and its API key still enforced; CLI entry points.

``restore`` recreates the container from ``<name>.profile.yaml`` (+ its env file), starts it, waits until
``/health`` answers 200, then - if the snapshot holds an API key (``VLLM_API_KEY`` or ``--api-key``) -
requires ``/v1/models`` WITHOUT a key to answer 401. The expectation comes from the profile AND from
the original ``docker inspect`` in the snapshot, so an env file that lost the key is caught too. A server
that answers without a key is stopped and the restore fails loudly: that is exactly how a key got
lost before (docs/field-notes.md item 8).
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import structlog

from supervisor.adapters.docker_adapter import DockerAdapter
from supervisor.adapters.probes import check_auth, wait_until_healthy
from supervisor.config import load_profile
from supervisor.config.profile import flag_values
from supervisor.core.errors import ConfigError, ContainerMissing, SnapshotError, SupervisorError
from supervisor.core.spec import ContainerSpec
from supervisor.snapshot import API_KEY_ENV, snapshot

log = structlog.get_logger(__name__)

DEFAULT_PORT = 8000
DEFAULT_GRACE_S = 120.0


@dataclass(frozen=True)
class RestoreResult:
    """A restored, healthy container."""

    name: str
    container_id: str
    base_url: str
    ready_s: float
    auth: str  # enforced | open (no key in the snapshot) | unknown
    replaced: bool


def api_key_expected(spec: ContainerSpec) -> bool:
    """True if the spec gives the server an API key (env ``VLLM_API_KEY`` or an ``--api-key`` argument)."""
    argv = (*(spec.entrypoint or ()), *spec.command)
    return bool(spec.env_dict().get(API_KEY_ENV)) or bool(flag_values(argv, "--api-key"))


def original_had_key(inspect_path: Path) -> bool:
    """True if the snapshotted container itself had an API key (its inspect is the record of truth)."""
    try:
        info = json.loads(inspect_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    cfg = info.get("Config") or {}
    env = dict(e.partition("=")[::2] for e in cfg.get("Env") or [])
    argv = (*(cfg.get("Entrypoint") or ()), *(cfg.get("Cmd") or ()))
    return bool(env.get(API_KEY_ENV)) or bool(flag_values(argv, "--api-key"))


def server_port(spec: ContainerSpec) -> int:
    """The port vLLM listens on inside the container: ``--port`` or 8000."""
    vals = flag_values((*(spec.entrypoint or ()), *spec.command), "--port")
    return int(vals[0]) if vals and vals[0].isdigit() else DEFAULT_PORT


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


def restore(
    adapter: DockerAdapter,
    name: str,
    from_dir: Path | str,
    *,
    replace: bool = False,
    wait_s: float = 600.0,
    probe_timeout_s: float = 5.0,
) -> RestoreResult:
    """Recreate ``name`` from its snapshot in ``from_dir``, start it, wait until healthy, verify auth."""
    profile_path = Path(from_dir) / f"{name}.profile.yaml"
    if not profile_path.is_file():
        raise SnapshotError(f"no snapshot of {name} in {from_dir} ({profile_path.name} is missing)")
    try:
        spec = load_profile(profile_path).container
    except ConfigError as exc:
        raise SnapshotError(f"snapshot profile of {name} is invalid:\n{exc}") from exc
    existing = adapter.find(spec.name)
    replaced = False
    if existing is not None:
        if existing.get("State", {}).get("Running") and not replace:
            raise SnapshotError(f"container {spec.name} is running; stop it first or restore with --replace")
        if existing.get("State", {}).get("Running"):
            adapter.stop(spec.name, _grace(spec))
        adapter.remove(spec.name, force=True)
        replaced = True
    started = time.monotonic()
    cid = adapter.create(spec)
    adapter.start(cid)
    base_url = base_url_of(spec, adapter.inspect(cid))
    health = wait_until_healthy(
        base_url, wait_s, probe_timeout_s=min(probe_timeout_s, 2.0), alive=lambda: _running(adapter, cid)
    )
    if not health.ok:
        raise SnapshotError(
            f"restored container {spec.name} did not become healthy at {base_url} within {wait_s:.0f}s "
            f"({health.error}); see `docker logs {spec.name}`"
        )
    ready_s = time.monotonic() - started
    auth = check_auth(base_url, probe_timeout_s)
    expected = api_key_expected(spec) or original_had_key(Path(from_dir) / f"{name}.inspect.json")
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
    log.info("restore.done", container=spec.name, id=cid[:12], ready_s=round(ready_s, 1), auth=auth.status)
    return RestoreResult(spec.name, cid, base_url, ready_s, auth.status, replaced)


def cli_snapshot(container: str, out_dir: Path | str, out: TextIO | None = None) -> int:
    """``supervisorctl snapshot``: write the three files, print a short summary (no secrets); exit code."""
    out = out or sys.stdout
    try:
        adapter = DockerAdapter()
        paths = snapshot(adapter, container, out_dir)
    except SupervisorError as exc:  # messages name variables, never their values
        sys.stderr.write(f"supervisorctl snapshot: {exc}\n")
        return 1
    out.write(f"snapshot of {container}: {paths.env_count} env vars\n")
    for p in (paths.inspect_json, paths.env, paths.profile):
        out.write(f"  {p} (0600)\n")
    for w in paths.warnings:
        out.write(f"  warning: not reproduced: {w}\n")
    return 0


def cli_restore(name: str, from_dir: Path | str, replace: bool = False, out: TextIO | None = None) -> int:
    """``supervisorctl restore``: recreate, start, wait healthy, verify auth; print a summary; exit code."""
    out = out or sys.stdout
    try:
        adapter = DockerAdapter()
        res = restore(adapter, name, from_dir, replace=replace)
    except SupervisorError as exc:
        sys.stderr.write(f"supervisorctl restore: {exc}\n")
        return 1
    out.write(
        f"restored {res.name} ({res.container_id[:12]}): healthy at {res.base_url} after {res.ready_s:.1f}s; "
        f"API key: {res.auth}" + ("; replaced the previous container" if res.replaced else "") + "\n"
    )
    return 0
