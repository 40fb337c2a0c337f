"""ContainerSpec -> the profile's ``container:`` YAML shape, and -> docker SDK low-level create kwargs.

Pure functions over plain values (this module does not import ``docker``).
"""

from __future__ import annotations

from typing import Any

from supervisor.core.spec.model import ContainerSpec, Mount


def container_spec_to_yaml_dict(spec: ContainerSpec, env_file: str | None) -> dict[str, Any]:
    """The ``container:`` mapping that parses back to `spec` (env goes to `env_file` when given).

    With `env_file` the environment is referenced, not inlined (the file holds the values); without it
    the values are inlined under ``env`` (they are secrets: write the result 0600).
    """
    out: dict[str, Any] = {"name": spec.name, "image": spec.image}
    if spec.entrypoint is not None:
        out["entrypoint"] = list(spec.entrypoint)
    if spec.command:
        out["command"] = list(spec.command)
    if env_file is not None:
        out["env_file"] = env_file
    elif spec.env:
        out["env"] = spec.env_dict()
    if spec.mounts:
        out["mounts"] = [_mount_dict(m) for m in spec.mounts]
    for key in ("network_mode", "ipc_mode", "pid_mode"):
        if getattr(spec, key) is not None:
            out[key] = getattr(spec, key)
    if spec.shm_size is not None:
        out["shm_size"] = spec.shm_size
    if spec.ulimits:
        out["ulimits"] = [{"name": u.name, "soft": u.soft, "hard": u.hard} for u in spec.ulimits]
    if spec.runtime is not None:
        out["runtime"] = spec.runtime
    if spec.device_requests:
        out["device_requests"] = [
            {
                "driver": d.driver,
                "count": d.count,
                "device_ids": list(d.device_ids),
                "capabilities": [list(c) for c in d.capabilities],
                "options": dict(d.options),
            }
            for d in spec.device_requests
        ]
    if spec.ports:
        out["ports"] = [
            {
                "container_port": p.container_port,
                "host_port": p.host_port,
                "protocol": p.protocol,
                "host_ip": p.host_ip,
            }
            for p in spec.ports
        ]
    if spec.labels:
        out["labels"] = dict(spec.labels)
    for key in ("devices", "security_opt", "cap_add", "cap_drop", "extra_hosts", "group_add"):
        if getattr(spec, key):
            out[key] = list(getattr(spec, key))
    if spec.privileged:
        out["privileged"] = True
    for key in ("user", "working_dir", "hostname", "init", "stop_signal"):
        if getattr(spec, key) is not None:
            out[key] = getattr(spec, key)
    if spec.log_config is not None:
        out["log_config"] = {"type": spec.log_config.type, "config": dict(spec.log_config.config)}
    out["stop_timeout"] = spec.stop_timeout  # None is written as null: Docker's StopTimeout stays unset
    out["restart_policy"] = "no"
    return out


def _mount_dict(m: Mount) -> dict[str, Any]:
    d: dict[str, Any] = {"type": m.type, "source": m.source, "target": m.target, "read_only": m.read_only}
    if m.propagation is not None:
        d["propagation"] = m.propagation
    if m.rw_explicit:
        d["rw_explicit"] = True
    return d


def _bind(m: Mount) -> str:
    """``src:dst[:opts]``: ``ro``, or ``rw`` only when written out (Docker records the mode as given)."""
    opts = ["ro"] if m.read_only else (["rw"] if m.rw_explicit else [])
    if m.propagation:
        opts.append(m.propagation)
    return f"{m.source}:{m.target}" + (f":{','.join(opts)}" if opts else "")


def container_host_config(spec: ContainerSpec) -> dict[str, Any]:
    """The Docker Engine API ``HostConfig`` for `spec` (CamelCase keys; restart policy always ``no``)."""
    hc: dict[str, Any] = {
        "RestartPolicy": {"Name": "no", "MaximumRetryCount": 0},
        "Privileged": spec.privileged,
    }
    binds = [_bind(m) for m in spec.mounts if m.type in ("bind", "volume")]
    if binds:  # none: leave Binds null, as `docker run` without -v does
        hc["Binds"] = binds
    tmpfs = {m.target: "ro" if m.read_only else "" for m in spec.mounts if m.type == "tmpfs"}
    if tmpfs:
        hc["Tmpfs"] = tmpfs
    optional: dict[str, Any] = {
        "NetworkMode": spec.network_mode,
        "IpcMode": spec.ipc_mode,
        "PidMode": spec.pid_mode,
        "ShmSize": spec.shm_size,
        "Runtime": spec.runtime,
        "Init": spec.init,
    }
    hc.update({k: v for k, v in optional.items() if v is not None})
    if spec.log_config is not None:
        hc["LogConfig"] = {"Type": spec.log_config.type, "Config": dict(spec.log_config.config)}
    if spec.ulimits:
        hc["Ulimits"] = [{"Name": u.name, "Soft": u.soft, "Hard": u.hard} for u in spec.ulimits]
    if spec.device_requests:
        hc["DeviceRequests"] = [
            {
                "Driver": d.driver,
                "Count": d.count,
                "DeviceIDs": list(d.device_ids) or None,
                "Capabilities": [list(c) for c in d.capabilities],
                "Options": dict(d.options),
            }
            for d in spec.device_requests
        ]
    if spec.ports:
        bindings: dict[str, list[dict[str, str]]] = {}
        for p in spec.ports:
            bindings.setdefault(f"{p.container_port}/{p.protocol}", []).append(
                # 0 = Docker picks: sent as "" exactly as `docker run -p 8000` does
                {"HostIp": p.host_ip, "HostPort": str(p.host_port) if p.host_port else ""}
            )
        hc["PortBindings"] = bindings
    lists = {
        "SecurityOpt": spec.security_opt,
        "CapAdd": spec.cap_add,
        "CapDrop": spec.cap_drop,
        "ExtraHosts": spec.extra_hosts,
        "GroupAdd": spec.group_add,
    }
    hc.update({k: list(v) for k, v in lists.items() if v})
    if spec.devices:
        hc["Devices"] = [_device(d) for d in spec.devices]
    return hc


def _device(text: str) -> dict[str, str]:
    parts = text.split(":")
    host = parts[0]
    cont = parts[1] if len(parts) > 1 and parts[1] else host
    perms = parts[2] if len(parts) > 2 else "rwm"
    return {"PathOnHost": host, "PathInContainer": cont, "CgroupPermissions": perms}


def container_create_kwargs(spec: ContainerSpec) -> dict[str, Any]:
    """Keyword arguments for the docker SDK's ``APIClient.create_container(**kwargs)``.

    ``host_config`` is a plain dict in the Engine API shape (Binds, NetworkMode, ...); the environment is
    a list of ``KEY=value`` strings (secret: never log the result).
    """
    kwargs: dict[str, Any] = {
        "image": spec.image,
        "name": spec.name,
        "command": list(spec.command) or None,
        # an explicitly empty entrypoint clears the image's one (what `docker run --entrypoint ""` sends)
        "entrypoint": None if spec.entrypoint is None else (list(spec.entrypoint) or [""]),
        "environment": [f"{e.name}={e.value}" for e in spec.env],
        "labels": dict(spec.labels),
        "detach": True,
        "host_config": container_host_config(spec),
    }
    if spec.stop_timeout is not None:
        kwargs["stop_timeout"] = spec.stop_timeout
    optional = {
        "user": spec.user,
        "working_dir": spec.working_dir,
        "hostname": spec.hostname,
        "stop_signal": spec.stop_signal,
    }
    kwargs.update({k: v for k, v in optional.items() if v is not None})
    if spec.ports:
        kwargs["ports"] = [(p.container_port, p.protocol) for p in spec.ports]
    return kwargs
