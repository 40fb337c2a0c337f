"""Docker's defaults written out or left out mean the same container (pure): one normal form.

A profile may state a default explicitly (``shm_size: 64m``, ``ipc_mode: private``, ``runtime: runc``,
``devices: [/dev/fuse]``) where ``docker inspect`` leaves it out or spells it another way. Drift compares
both sides through :func:`normalised` and :mod:`supervisor.core.spec.inspect` ends with it, so a default
is never drift ("shm_size: profile 67108864, container None" was). :func:`image_normalised` does the
same for what the container inherits from its image (command, entrypoint, user, working dir, stop
signal, labels): the profile repeating the image's value is no drift either.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from supervisor.core.spec.model import ContainerSpec, LogConfig

#: Docker's /dev/shm size when none is given (64 MiB).
DEFAULT_SHM_SIZE = 64 * 1024 * 1024
#: Docker's cgroup permissions of a device given without them.
DEFAULT_DEVICE_PERMISSIONS = "rwm"


def device(text: str) -> str:
    """``/dev/x`` or ``/dev/x:/dev/y`` -> ``/dev/x:/dev/y:rwm`` (what Docker records)."""
    parts = text.split(":")
    host = parts[0]
    inside = parts[1] if len(parts) > 1 and parts[1] else host
    perms = parts[2] if len(parts) > 2 and parts[2] else DEFAULT_DEVICE_PERMISSIONS
    return f"{host}:{inside}:{perms}"


def _none_if(value: str | None, *defaults: str) -> str | None:
    return None if value is None or value in ("", *defaults) else value


def _default_log(log: LogConfig | None) -> LogConfig | None:
    """Docker's default log settings (json-file, no options) as unset."""
    if log is None or (log.type in ("", "json-file") and not log.config):
        return None
    return log


def normalised(spec: ContainerSpec) -> ContainerSpec:
    """``spec`` with Docker's defaults as unset: shm 64 MiB (or 0), IPC ``private``, network
    ``default``, runtime ``runc``, empty strings; devices with their permissions; with the host's
    network, published ports and hostname mean nothing."""
    network = _none_if(spec.network_mode, "default")
    out = replace(
        spec,
        shm_size=None if not spec.shm_size or spec.shm_size == DEFAULT_SHM_SIZE else spec.shm_size,
        ipc_mode=_none_if(spec.ipc_mode, "private"),
        network_mode=network,
        pid_mode=_none_if(spec.pid_mode),
        runtime=_none_if(spec.runtime, "runc"),
        devices=tuple(device(d) for d in spec.devices),
        user=_none_if(spec.user),
        working_dir=_none_if(spec.working_dir),
        hostname=_none_if(spec.hostname),
        stop_signal=_none_if(spec.stop_signal),
        log_config=_default_log(spec.log_config),
    )
    if network == "host":
        out = replace(out, ports=(), hostname=None)
    return out


def image_normalised(spec: ContainerSpec, image: Mapping[str, Any] | None) -> ContainerSpec:
    """``spec`` with what equals its image's own config (``docker image inspect``'s ``Config``) as unset:
    the image's Cmd (with the image's entrypoint), its Entrypoint (kept when the image's Cmd would come
    back: Docker drops the image's Cmd only for an explicit entrypoint), User, WorkingDir, StopSignal and
    the labels it sets to the same value. The rules of :mod:`supervisor.core.spec.inspect`, on a spec."""
    if not image:
        return spec
    image_cmd = tuple(image.get("Cmd") or ())
    entrypoint = spec.entrypoint
    same = entrypoint is not None and list(entrypoint) == list(image.get("Entrypoint") or [])
    if same and (spec.command or not image_cmd):
        entrypoint = None
    command = () if entrypoint is None and spec.command == image_cmd else spec.command
    labels = dict(image.get("Labels") or {})

    def own(value: str | None, key: str) -> str | None:
        return None if value is None or value == (image.get(key) or None) else value

    return replace(
        spec,
        command=command,
        entrypoint=entrypoint,
        user=own(spec.user, "User"),
        working_dir=own(spec.working_dir, "WorkingDir"),
        stop_signal=own(spec.stop_signal, "StopSignal"),
        labels=tuple((k, v) for k, v in spec.labels if labels.get(k) != v),
    )
