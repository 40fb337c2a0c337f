"""Docker's defaults written out or left out mean the same container (pure): one normal form.

A profile may state a default explicitly (``shm_size: 64m``, ``ipc_mode: private``, ``runtime: runc``,
``devices: [/dev/fuse]``) where ``docker inspect`` leaves it out or spells it another way. Drift compares
both sides through :func:`normalised` and :mod:`supervisor.core.spec.inspect` ends with it, so a default
is never drift ("shm_size: profile 67108864, container None" was).
"""

from __future__ import annotations

from dataclasses import replace

from supervisor.core.spec.model import ContainerSpec

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
    )
    if network == "host":
        out = replace(out, ports=(), hostname=None)
    return out
