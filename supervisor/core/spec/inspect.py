"""``docker inspect`` -> the :class:`ContainerSpec` that recreates the container (pure; docs/snapshot.md).

The inverse of :mod:`supervisor.core.spec.shape`. ``supervisorctl snapshot`` writes its result as a profile;
the Docker adapter answers drift checks with it (what the running container *is*, in the profile's terms).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from supervisor.core.errors import SnapshotError
from supervisor.core.spec.model import (
    ContainerSpec,
    DeviceRequest,
    EnvVar,
    LogConfig,
    Mount,
    PortBinding,
    Ulimit,
)

DEFAULT_SHM_SIZE = 64 * 1024 * 1024
_PROPAGATIONS = frozenset({"private", "rprivate", "shared", "rshared", "slave", "rslave"})
# HostConfig / Config fields a ContainerSpec cannot express: reported when set to a non-default value.
_UNSUPPORTED_HOST = (
    *("Memory", "MemoryReservation", "MemorySwap", "NanoCpus", "CpuShares", "CpuQuota", "CpuPeriod"),
    *("CpusetCpus", "CpusetMems", "PidsLimit", "OomScoreAdj", "OomKillDisable", "Sysctls", "Dns"),
    *("DnsSearch", "DnsOptions", "ReadonlyRootfs", "VolumesFrom", "Links", "CgroupParent", "UTSMode"),
    *("UsernsMode", "StorageOpt", "BlkioWeight", "AutoRemove", "PublishAllPorts", "VolumeDriver"),
)
_DEFAULTS: tuple[object, ...] = (None, 0, -1, "", [], {}, False)
_UNSUPPORTED_CONFIG = ("Tty", "OpenStdin", "Domainname", "MacAddress")


def _env_pairs(entries: Iterable[str], what: str) -> list[tuple[str, str]]:
    out = []
    for entry in entries:
        name, sep, value = entry.partition("=")
        if not sep or not name:
            raise SnapshotError(f"{what}: environment entry {name!r} has no NAME=value form")
        out.append((name, value))
    return out


def _parse_bind(text: str) -> tuple[Mount, list[str]]:
    parts = text.split(":")
    source, target = parts[0], parts[1] if len(parts) > 1 else parts[0]
    read_only, propagation, rw_explicit, lost = False, None, False, []
    for opt in parts[2].split(",") if len(parts) > 2 else []:
        if opt in ("ro", "rw"):
            read_only, rw_explicit = opt == "ro", opt == "rw"
        elif opt in _PROPAGATIONS:
            propagation = opt
        elif opt:
            lost.append(f"mount {target}: option {opt!r} is not reproduced")
    kind = "bind" if source.startswith("/") else "volume"
    return Mount(source, target, read_only, kind, propagation, rw_explicit), lost


def _mounts(host: Mapping[str, Any]) -> tuple[tuple[Mount, ...], list[str]]:
    mounts: list[Mount] = []
    lost: list[str] = []
    for text in host.get("Binds") or []:
        m, why = _parse_bind(str(text))
        mounts.append(m)
        lost += why
    for item in host.get("Mounts") or []:
        kind = str(item.get("Type") or "bind")
        target = str(item.get("Target") or "")
        prop = (item.get("BindOptions") or {}).get("Propagation") or None
        if item.get("VolumeOptions") or item.get("TmpfsOptions"):
            lost.append(f"mount {target}: volume/tmpfs options are not reproduced")
        ro = bool(item.get("ReadOnly"))
        mounts.append(Mount(str(item.get("Source") or ""), target, ro, kind, prop))
    for target, opts in (host.get("Tmpfs") or {}).items():
        flags = [o for o in str(opts).split(",") if o]
        if any(o not in ("ro", "rw") for o in flags):
            lost.append(f"tmpfs {target}: options {opts!r} are not reproduced")
        mounts.append(Mount("", str(target), "ro" in flags, "tmpfs"))
    return tuple(mounts), lost


def _ports(host: Mapping[str, Any]) -> tuple[PortBinding, ...]:
    out = []
    for key, bindings in sorted((host.get("PortBindings") or {}).items()):
        port, _, proto = str(key).partition("/")
        for b in bindings or [{}]:
            hp = str(b.get("HostPort") or "0")
            out.append(
                PortBinding(int(port), int(hp) if hp.isdigit() else 0, proto or "tcp", b.get("HostIp") or "")
            )
    return tuple(out)


def _device_requests(host: Mapping[str, Any]) -> tuple[DeviceRequest, ...]:
    return tuple(
        DeviceRequest(
            driver=str(d.get("Driver") or ""),
            count=int(d.get("Count") if d.get("Count") is not None else -1),
            device_ids=tuple(d.get("DeviceIDs") or ()),
            capabilities=tuple(tuple(c) for c in d.get("Capabilities") or ()),
            options=tuple(sorted((d.get("Options") or {}).items())),
        )
        for d in host.get("DeviceRequests") or []
    )


def _entrypoint(cfg: Mapping[str, Any], image: Mapping[str, Any]) -> tuple[str, ...] | None:
    mine = list(cfg.get("Entrypoint") or [])
    theirs = list(image.get("Entrypoint") or [])
    # Docker fills Cmd from the image only when the entrypoint is not given: an explicit copy of the
    # image's entrypoint with no Cmd must stay explicit, or the image's Cmd would come back.
    image_cmd_would_return = not cfg.get("Cmd") and bool(image.get("Cmd"))
    if mine == theirs and not image_cmd_would_return:
        return None
    return tuple(mine)


def _own(cfg: Mapping[str, Any], image: Mapping[str, Any], key: str) -> str | None:
    """The container's value of ``key`` unless empty or inherited unchanged from the image."""
    value = cfg.get(key) or None
    return None if value is None or value == (image.get(key) or None) else str(value)


def spec_from_inspect(
    inspect: Mapping[str, Any], image_env: Sequence[str], image_config: Mapping[str, Any] | None = None
) -> ContainerSpec:
    """The spec that recreates the inspected container (pure; rules in docs/snapshot.md)."""
    cfg: Mapping[str, Any] = inspect.get("Config") or {}
    host: Mapping[str, Any] = inspect.get("HostConfig") or {}
    image = dict(image_config or {})
    image.setdefault("Env", list(image_env))
    name = str(inspect.get("Name") or "").lstrip("/")
    image_pairs = set(_env_pairs(image_env, f"image of {name}"))
    env = tuple(EnvVar(n, v) for n, v in _env_pairs(cfg.get("Env") or [], name) if (n, v) not in image_pairs)
    image_labels = dict(image.get("Labels") or {})
    labels = tuple(
        (k, str(v)) for k, v in sorted((cfg.get("Labels") or {}).items()) if image_labels.get(k) != v
    )
    mounts, _lost = _mounts(host)
    network = host.get("NetworkMode") or None
    network = None if network == "default" else network
    hostname = cfg.get("Hostname") or None
    if network == "host" or hostname == str(inspect.get("Id", ""))[:12]:
        hostname = None  # Docker's own choice: the id prefix, or the host's name with --network host
    ipc = host.get("IpcMode") or None
    shm = host.get("ShmSize")
    stop_timeout = cfg.get("StopTimeout")
    log = host.get("LogConfig") or {}
    log_opts = tuple(sorted((str(k), str(val)) for k, val in (log.get("Config") or {}).items()))
    log_config = (
        None
        if log.get("Type") in (None, "", "json-file") and not log_opts  # Docker's default
        else LogConfig(str(log.get("Type") or "json-file"), log_opts)
    )
    return ContainerSpec(
        name=name,
        image=str(cfg.get("Image") or inspect.get("Image") or ""),
        command=tuple(cfg.get("Cmd") or ()),
        entrypoint=_entrypoint(cfg, image),
        env=env,
        mounts=mounts,
        network_mode=network,
        ipc_mode=None if ipc == "private" else ipc,
        pid_mode=host.get("PidMode") or None,
        shm_size=None if not shm or shm == DEFAULT_SHM_SIZE else int(shm),
        log_config=log_config,
        ulimits=tuple(
            Ulimit(str(u["Name"]), int(u["Soft"]), int(u["Hard"])) for u in host.get("Ulimits") or []
        ),
        runtime=None if host.get("Runtime") in (None, "", "runc") else str(host["Runtime"]),
        device_requests=_device_requests(host),
        devices=tuple(
            f"{d['PathOnHost']}:{d['PathInContainer']}:{d.get('CgroupPermissions') or 'rwm'}"
            for d in host.get("Devices") or []
        ),
        ports=() if network == "host" else _ports(host),
        labels=labels,
        security_opt=tuple(host.get("SecurityOpt") or ()),
        cap_add=tuple(host.get("CapAdd") or ()),
        cap_drop=tuple(host.get("CapDrop") or ()),
        privileged=bool(host.get("Privileged")),
        user=_own(cfg, image, "User"),
        working_dir=_own(cfg, image, "WorkingDir"),
        hostname=hostname,
        extra_hosts=tuple(host.get("ExtraHosts") or ()),
        group_add=tuple(host.get("GroupAdd") or ()),
        init=host.get("Init"),
        stop_signal=_own(cfg, image, "StopSignal"),
        stop_timeout=int(stop_timeout) if stop_timeout is not None else None,
    )


def unreproducible(inspect: Mapping[str, Any], image_config: Mapping[str, Any] | None = None) -> list[str]:
    """Settings of the container that the snapshot's profile cannot carry (shown as warnings)."""
    cfg: Mapping[str, Any] = inspect.get("Config") or {}
    host: Mapping[str, Any] = inspect.get("HostConfig") or {}
    out = [f"HostConfig.{k}" for k in _UNSUPPORTED_HOST if host.get(k) not in _DEFAULTS]
    out += [f"Config.{k}" for k in _UNSUPPORTED_CONFIG if cfg.get(k)]
    if cfg.get("Healthcheck") and cfg.get("Healthcheck") != (image_config or {}).get("Healthcheck"):
        out.append("Config.Healthcheck")
    policy = (host.get("RestartPolicy") or {}).get("Name") or "no"
    if policy != "no":
        out.append(f"HostConfig.RestartPolicy={policy} (recreated with 'no': only the supervisor restarts)")
    network = host.get("NetworkMode")
    extra = [n for n in ((inspect.get("NetworkSettings") or {}).get("Networks") or {}) if n != network]
    if extra and network not in (None, "", "default", "bridge"):
        out.append(f"extra networks {extra}")
    out += [
        f"port {p.container_port}/{p.protocol}: random host port" for p in _ports(host) if not p.host_port
    ]
    out += _mounts(host)[1]
    return out
