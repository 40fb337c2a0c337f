"""Parse a profile's ``container:`` section (keys = :class:`ContainerSpec` field names)."""

from __future__ import annotations

import re
from pathlib import Path

from supervisor.config.reader import Ctx, Section, check_private_file, join, type_name
from supervisor.core.spec.model import (
    ContainerSpec,
    DeviceRequest,
    EnvVar,
    LogConfig,
    Mount,
    PortBinding,
    Ulimit,
)

ULIMIT_NAMES = frozenset(
    {
        *("core", "cpu", "data", "fsize", "locks", "memlock", "msgqueue", "nice"),
        *("nofile", "nproc", "rss", "rtprio", "rttime", "sigpending", "stack"),
    }
)
PROPAGATIONS = ("private", "rprivate", "shared", "rshared", "slave", "rslave")
MOUNT_TYPES = ("bind", "volume", "tmpfs")
PROTOCOLS = ("tcp", "udp", "sctp")
DEFAULT_STOP_TIMEOUT = 120
_NAME_RE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]*$")
_SIZE_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*([bkmgtp]?)(?:i?b)?$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}
_PORT_RE = re.compile(
    r"^(?:(?P<ip>[0-9.]+|\[[0-9a-fA-F:]+\]):)?(?P<host>\d+):(?P<cont>\d+)(?:/(?P<proto>\w+))?$"
)
_RESTART_EXPLAIN = (
    "only 'no' is allowed: the supervisor alone restarts the container; a Docker restart policy would "
    "restart it behind the supervisor's back (crash loops, no backoff, no circuit breaker)"
)


def parse_size(raw: object) -> int | None:
    """`32g` / `512m` / `1.5g` / an int of bytes -> bytes (binary units, as docker); None if invalid."""
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int):
        return raw if raw > 0 else None
    if isinstance(raw, str):
        m = _SIZE_RE.match(raw.strip())
        if m:
            size = int(float(m.group(1)) * _UNITS[m.group(2).lower()])
            return size if size > 0 else None
    return None


def read_env_file(ctx: Ctx, key_path: str, path: Path) -> list[EnvVar]:
    """One KEY=value per line, value literal to end of line; blank and `#` lines ignored; must be 0600."""
    if not check_private_file(ctx, key_path, path, "env file"):
        return []
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        ctx.add(key_path, f"env file {str(path)!r} cannot be read: {exc}")
        return []
    out: list[EnvVar] = []
    for lineno, line in enumerate(text.split("\n"), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, sep, value = line.partition("=")
        if not sep or not name or name != name.strip():
            # the line may hold a secret: show only where it is
            ctx.add(key_path, f"env file {str(path)!r} line {lineno}: expected KEY=value")
            continue
        out.append(EnvVar(name, value))
    return out


def _env(sec: Section) -> tuple[EnvVar, ...]:
    env: dict[str, str] = {}
    files = sec.raw("env_file")
    file_list: list[tuple[str, object]] = []
    if isinstance(files, list):
        file_list = [(join(sec.key("env_file"), i), f) for i, f in enumerate(files)]
    elif files is not None:
        file_list = [(sec.key("env_file"), files)]
    for kp, f in file_list:
        if not isinstance(f, str) or not f:
            sec.ctx.add(kp, f"must be a file path (string), not a {type_name(f)}", f)
            continue
        for e in read_env_file(sec.ctx, kp, sec.ctx.path(f)):
            env[e.name] = e.value
    inline = sec.raw("env")
    if isinstance(inline, dict):
        for name, value in inline.items():
            kp = join(sec.key("env"), str(name))
            if not isinstance(name, str) or not name or "=" in name:
                sec.ctx.add(kp, "environment variable names must be non-empty strings without '='", name)
            elif not isinstance(value, str):
                sec.ctx.add(
                    kp, f"must be a string (quote it in YAML), not a {type_name(value)}", value, secret=True
                )
            else:
                env[name] = value
    elif inline is not None:
        sec.bad("env", f"must be a mapping NAME: value, not a {type_name(inline)}", "<hidden>")
    return tuple(EnvVar(k, v) for k, v in env.items())


def _mount(ctx: Ctx, kp: str, item: object) -> Mount | None:
    if isinstance(item, str):
        parts = item.split(":")
        if len(parts) not in (2, 3) or not parts[0] or not parts[1]:
            ctx.add(kp, "short mount form is 'source:target[:ro]'", item)
            return None
        read_only, propagation, rw_explicit = False, None, False
        for opt in parts[2].split(",") if len(parts) == 3 else []:
            if opt in ("ro", "rw"):
                read_only, rw_explicit = opt == "ro", opt == "rw"
            elif opt in PROPAGATIONS:
                propagation = opt
            else:
                ctx.add(kp, f"unknown mount option {opt!r} (use ro, rw or a propagation mode)", item)
                return None
        src = parts[0]
        is_bind = src.startswith(("/", ".", "~"))
        kind = "bind" if is_bind else "volume"
        return _finish_mount(
            ctx, kp, src, parts[1], ro=read_only, kind=kind, propagation=propagation, rw_explicit=rw_explicit
        )
    sec = Section(ctx, item, kp)
    if not sec.ok:
        return None
    kind = sec.str_("type", "bind", choices=MOUNT_TYPES)
    source = sec.str_("source", "", nonempty=False)
    target = sec.str_("target", "")
    if not sec.has("target"):
        sec.required("target")
    if kind != "tmpfs" and not source:
        sec.required("source")
    read_only = sec.bool_("read_only", False)
    propagation = sec.str_("propagation", None, choices=PROPAGATIONS)
    rw_explicit = sec.bool_("rw_explicit", False)
    sec.done()
    if not target:
        return None
    if rw_explicit and read_only:
        ctx.add(join(kp, "rw_explicit"), "cannot be true for a read_only mount", rw_explicit)
        return None
    return _finish_mount(
        ctx, kp, source, target, ro=read_only, kind=kind, propagation=propagation, rw_explicit=rw_explicit
    )


def _finish_mount(
    ctx: Ctx,
    kp: str,
    source: str,
    target: str,
    *,
    ro: bool,
    kind: str,
    propagation: str | None,
    rw_explicit: bool = False,
) -> Mount | None:
    if not target.startswith("/"):
        ctx.add(join(kp, "target"), "must be an absolute path inside the container", target)
        return None
    if kind == "bind" and source:
        source = str(ctx.path(source))
    return Mount(
        source=source,
        target=target,
        read_only=ro,
        type=kind,
        propagation=propagation,
        rw_explicit=rw_explicit,
    )


def _ulimit(ctx: Ctx, kp: str, item: object) -> Ulimit | None:
    if isinstance(item, str):
        name, sep, rest = item.partition("=")
        soft_s, _, hard_s = rest.partition(":")
        try:
            soft = int(soft_s)
            hard = int(hard_s) if hard_s else soft
        except ValueError:
            ctx.add(kp, "ulimit short form is 'name=soft[:hard]' with integers (-1 = unlimited)", item)
            return None
        if not sep:
            ctx.add(kp, "ulimit short form is 'name=soft[:hard]'", item)
            return None
    else:
        sec = Section(ctx, item, kp)
        if not sec.ok:
            return None
        sec.required("name")
        name = sec.str_("name", "")
        soft_given = sec.int_("soft", None, lo=-1)
        hard_given = sec.int_("hard", None, lo=-1)
        sec.done()
        if soft_given is None:
            sec.required("soft")
            return None
        if not name:
            return None
        soft = soft_given
        hard = hard_given if hard_given is not None else soft
    if name not in ULIMIT_NAMES:
        ctx.add(
            join(kp, "name") if not isinstance(item, str) else kp,
            f"unknown ulimit name (known: {', '.join(sorted(ULIMIT_NAMES))})",
            name,
        )
        return None
    if soft < -1 or hard < -1:
        ctx.add(kp, "ulimit values must be >= -1 (-1 = unlimited)", item)
        return None
    return Ulimit(name, soft, hard)


def _port_ok(ctx: Ctx, kp: str, value: object, *, host: bool = False) -> int | None:
    """A port number; a host port may be 0 (Docker picks a free one, like `-p 8000`)."""
    lo = 0 if host else 1
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= 65535:
        what = "0 (Docker picks a free port) or a port number 1-65535" if host else "a port number 1-65535"
        ctx.add(kp, f"must be {what}", value)
        return None
    return value


def _port(ctx: Ctx, kp: str, item: object) -> PortBinding | None:
    if isinstance(item, str):
        m = _PORT_RE.match(item.strip())
        if not m:
            ctx.add(kp, "short port form is '[host_ip:]host_port:container_port[/protocol]'", item)
            return None
        host = _port_ok(ctx, kp, int(m.group("host")), host=True)
        cont = _port_ok(ctx, kp, int(m.group("cont")))
        proto = m.group("proto") or "tcp"
        if proto not in PROTOCOLS:
            ctx.add(kp, f"protocol must be one of {', '.join(PROTOCOLS)}", item)
            return None
        ip = (m.group("ip") or "").strip("[]")
        return PortBinding(cont, host, proto, ip) if host is not None and cont else None
    sec = Section(ctx, item, kp)
    if not sec.ok:
        return None
    sec.required("container_port")
    cont = (
        _port_ok(ctx, sec.key("container_port"), sec.raw("container_port"))
        if sec.has("container_port")
        else None
    )
    host_raw = sec.raw("host_port")
    host = _port_ok(ctx, sec.key("host_port"), host_raw, host=True) if host_raw is not None else cont
    proto = sec.str_("protocol", "tcp", choices=PROTOCOLS)
    ip = sec.str_("host_ip", "", nonempty=False)
    sec.done()
    return PortBinding(cont, host, proto, ip) if cont and host is not None else None


def _device_request(ctx: Ctx, kp: str, item: object) -> DeviceRequest | None:
    sec = Section(ctx, item, kp)
    if not sec.ok:
        return None
    driver = sec.str_("driver", "", nonempty=False)
    count = sec.int_("count", -1, lo=-1)
    ids = sec.str_list("device_ids")
    caps: list[tuple[str, ...]] = []
    raw_caps = sec.raw("capabilities")
    if raw_caps is None:
        caps = [("gpu",)]
    elif isinstance(raw_caps, list) and all(
        isinstance(c, list) and all(isinstance(x, str) for x in c) for c in raw_caps
    ):
        caps = [tuple(c) for c in raw_caps]
    else:
        sec.bad("capabilities", "must be a list of lists of strings, e.g. [[gpu]]", raw_caps)
    opts_raw = sec.raw("options")
    opts: tuple[tuple[str, str], ...] = ()
    if isinstance(opts_raw, dict) and all(isinstance(v, str) for v in opts_raw.values()):
        opts = tuple((str(k), v) for k, v in opts_raw.items())
    elif opts_raw is not None:
        sec.bad("options", "must be a mapping of strings", opts_raw)
    sec.done()
    return DeviceRequest(driver=driver, count=count, device_ids=ids, capabilities=tuple(caps), options=opts)


def _gpus(sec: Section) -> list[DeviceRequest]:
    v = sec.raw("gpus")
    if v is None:
        return []
    if v == "all":
        return [DeviceRequest(count=-1, capabilities=(("gpu",),))]
    if isinstance(v, int) and not isinstance(v, bool) and v > 0:
        return [DeviceRequest(count=v, capabilities=(("gpu",),))]
    if isinstance(v, str) and v.startswith("device="):
        ids = tuple(x for x in v.removeprefix("device=").split(",") if x)
        if ids:
            return [DeviceRequest(count=0, device_ids=ids, capabilities=(("gpu",),))]
    sec.bad("gpus", "must be 'all', a positive count, or 'device=ID[,ID...]'", v)
    return []


def parse_container(sec: Section, default_name: str) -> ContainerSpec | None:
    """The ContainerSpec described by a ``container:`` section (None when it has errors)."""
    before = len(sec.ctx.problems)
    name = sec.str_("name", default_name)
    if not _NAME_RE.fullmatch(name):
        sec.bad("name", "container names are [a-zA-Z0-9][a-zA-Z0-9_.-]*", name)
    sec.required("image")
    image = sec.str_("image", "")
    command = sec.str_list("command")
    entrypoint = sec.str_list("entrypoint") if sec.raw("entrypoint") is not None else None
    env = _env(sec)
    mounts = [m for kp, it in sec.items("mounts") if (m := _mount(sec.ctx, kp, it))]
    ulimits = [u for kp, it in sec.items("ulimits") if (u := _ulimit(sec.ctx, kp, it))]
    ports = [p for kp, it in sec.items("ports") if (p := _port(sec.ctx, kp, it))]
    devreqs = _gpus(sec) + [
        d for kp, it in sec.items("device_requests") if (d := _device_request(sec.ctx, kp, it))
    ]
    shm_raw = sec.raw("shm_size")
    shm = parse_size(shm_raw) if shm_raw is not None else None
    if shm_raw is not None and shm is None:
        sec.bad("shm_size", "must be a positive size: bytes (int) or a string like '32g', '512m'", shm_raw)
    labels_raw = sec.raw("labels")
    labels: tuple[tuple[str, str], ...] = ()
    if isinstance(labels_raw, dict):
        for k, v in labels_raw.items():
            if isinstance(k, str) and isinstance(v, str):
                labels += ((k, v),)
            else:
                sec.ctx.add(join(sec.key("labels"), str(k)), "label keys and values must be strings", v)
    elif labels_raw is not None:
        sec.bad("labels", f"must be a mapping, not a {type_name(labels_raw)}", labels_raw)
    log_config = _log_config(sec)
    restart = sec.raw("restart_policy")
    if restart is not None and restart is not False and restart != "no":
        sec.bad("restart_policy", _RESTART_EXPLAIN, restart)
    spec = ContainerSpec(
        name=name,
        image=image,
        command=command,
        entrypoint=entrypoint,
        env=env,
        mounts=tuple(mounts),
        network_mode=sec.str_("network_mode", None),
        ipc_mode=sec.str_("ipc_mode", None),
        pid_mode=sec.str_("pid_mode", None),
        shm_size=shm,
        log_config=log_config,
        ulimits=tuple(ulimits),
        runtime=sec.str_("runtime", None),
        device_requests=tuple(devreqs),
        devices=sec.str_list("devices"),
        ports=tuple(ports),
        labels=labels,
        security_opt=sec.str_list("security_opt"),
        cap_add=sec.str_list("cap_add"),
        cap_drop=sec.str_list("cap_drop"),
        privileged=sec.bool_("privileged", False),
        user=sec.str_("user", None),
        working_dir=sec.str_("working_dir", None),
        hostname=sec.str_("hostname", None),
        extra_hosts=sec.str_list("extra_hosts"),
        group_add=sec.str_list("group_add"),
        init=sec.bool_("init", None),
        stop_signal=sec.str_("stop_signal", None),
        # absent -> 120 s; an explicit `null` leaves Docker's StopTimeout unset (what a snapshot of a
        # container created without --stop-timeout writes)
        stop_timeout=None
        if sec.has("stop_timeout") and sec.raw("stop_timeout") is None
        else sec.int_("stop_timeout", DEFAULT_STOP_TIMEOUT, lo=0),
    )
    sec.done()
    return spec if len(sec.ctx.problems) == before else None


def _log_config(sec: Section) -> LogConfig | None:
    """``log_config: {type: json-file, config: {max-size: 100m, max-file: "5"}}`` (Docker's log driver)."""
    if sec.raw("log_config") is None:
        return None
    lc = sec.sub("log_config")
    driver = lc.str_("type", "json-file")
    opts: list[tuple[str, str]] = []
    raw = lc.raw("config")
    if isinstance(raw, dict):
        for k, val in raw.items():
            if isinstance(k, str) and isinstance(val, str | int) and not isinstance(val, bool):
                opts.append((k, str(val)))
            else:
                lc.ctx.add(
                    join(lc.key("config"), str(k)), "log options are strings (e.g. max-size: 100m)", val
                )
    elif raw is not None:
        lc.bad("config", f"must be a mapping, not a {type_name(raw)}", raw)
    lc.done()
    return LogConfig(driver, tuple(sorted(opts)))
