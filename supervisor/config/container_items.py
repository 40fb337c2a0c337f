"""The list items of a profile's ``container:`` section: mounts, ulimits, ports, GPU device requests.

Each takes Docker's short form (``/src:/dst:ro``, ``nofile=65536:65536``, ``127.0.0.1:8000:8000``,
``gpus: all``) or the long mapping form, and bounds every number it holds (config.bounds).
"""

from __future__ import annotations

import re

from supervisor.config.bounds import INT64_MAX
from supervisor.config.reader import Ctx, Section, join
from supervisor.core.spec.model import DeviceRequest, Mount, PortBinding, Ulimit

ULIMIT_NAMES = frozenset(
    {
        *("core", "cpu", "data", "fsize", "locks", "memlock", "msgqueue", "nice"),
        *("nofile", "nproc", "rss", "rtprio", "rttime", "sigpending", "stack"),
    }
)
PROPAGATIONS = ("private", "rprivate", "shared", "rshared", "slave", "rslave")
MOUNT_TYPES = ("bind", "volume", "tmpfs")
PROTOCOLS = ("tcp", "udp", "sctp")
_PORT_RE = re.compile(
    r"^(?:(?P<ip>[0-9.]+|\[[0-9a-fA-F:]+\]):)?(?P<host>\d+):(?P<cont>\d+)(?:/(?P<proto>\w+))?$"
)


def parse_mount(ctx: Ctx, kp: str, item: object) -> Mount | None:
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


def parse_ulimit(ctx: Ctx, kp: str, item: object) -> Ulimit | None:
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
    if soft > INT64_MAX or hard > INT64_MAX:
        ctx.add(kp, f"ulimit values must be <= {INT64_MAX} (Docker's int64; -1 = unlimited)", item)
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


def parse_port(ctx: Ctx, kp: str, item: object) -> PortBinding | None:
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


def parse_device_request(ctx: Ctx, kp: str, item: object) -> DeviceRequest | None:
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


def parse_gpus(sec: Section) -> list[DeviceRequest]:
    v = sec.raw("gpus")
    if v is None:
        return []
    if v == "all":
        return [DeviceRequest(count=-1, capabilities=(("gpu",),))]
    if isinstance(v, int) and not isinstance(v, bool) and 0 < v <= 1024:
        return [DeviceRequest(count=v, capabilities=(("gpu",),))]
    if isinstance(v, str) and v.startswith("device="):
        ids = tuple(x for x in v.removeprefix("device=").split(",") if x)
        if ids:
            return [DeviceRequest(count=0, device_ids=ids, capabilities=(("gpu",),))]
    sec.bad("gpus", "must be 'all', a count 1-1024, or 'device=ID[,ID...]'", v)
    return []
