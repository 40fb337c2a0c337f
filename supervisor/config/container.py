"""Parse a profile's ``container:`` section (keys = :class:`ContainerSpec` field names)."""

from __future__ import annotations

import math
import re
from pathlib import Path

from supervisor.config.bounds import NAME_RULE, SHM_MAX_BYTES, name_ok
from supervisor.config.container_items import (
    parse_device_request,
    parse_gpus,
    parse_mount,
    parse_port,
    parse_ulimit,
)
from supervisor.config.reader import Ctx, Section, join, type_name
from supervisor.config.source import check_private_file
from supervisor.core.spec.model import ContainerSpec, EnvVar, LogConfig

DEFAULT_STOP_TIMEOUT = 120
_SIZE_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*([bkmgtp]?)(?:i?b)?$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}
_RESTART_EXPLAIN = (
    "only 'no' is allowed: the supervisor alone restarts the container; a Docker restart policy would "
    "restart it behind the supervisor's back (crash loops, no backoff, no circuit breaker)"
)


def parse_size(raw: object) -> int | None:
    """`32g` / `512m` / `1.5g` / an int of bytes -> bytes (binary units, as docker); None if invalid or
    above :data:`SHM_MAX_BYTES` (a 400-digit size must not overflow into a traceback)."""
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int):
        return raw if 0 < raw <= SHM_MAX_BYTES else None
    if isinstance(raw, str) and len(raw) <= 64:
        m = _SIZE_RE.match(raw.strip())
        if m:
            size = float(m.group(1)) * _UNITS[m.group(2).lower()]
            if not math.isfinite(size) or not 0 < size <= SHM_MAX_BYTES:
                return None
            return int(size) or None
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


def parse_container(sec: Section, default_name: str) -> ContainerSpec | None:
    """The ContainerSpec described by a ``container:`` section (None when it has errors)."""
    before = len(sec.ctx.problems)
    name = sec.str_("name", default_name)
    if not name_ok(name):
        sec.bad("name", f"container {NAME_RULE}", name)
    sec.required("image")
    image = sec.str_("image", "")
    command = sec.str_list("command")
    entrypoint = sec.str_list("entrypoint") if sec.raw("entrypoint") is not None else None
    env = _env(sec)
    mounts = [m for kp, it in sec.items("mounts") if (m := parse_mount(sec.ctx, kp, it))]
    ulimits = [u for kp, it in sec.items("ulimits") if (u := parse_ulimit(sec.ctx, kp, it))]
    ports = [p for kp, it in sec.items("ports") if (p := parse_port(sec.ctx, kp, it))]
    devreqs = parse_gpus(sec) + [
        d for kp, it in sec.items("device_requests") if (d := parse_device_request(sec.ctx, kp, it))
    ]
    shm_raw = sec.raw("shm_size")
    shm = parse_size(shm_raw) if shm_raw is not None else None
    if shm_raw is not None and shm is None:
        sec.bad(
            "shm_size",
            f"must be a positive size of at most {SHM_MAX_BYTES >> 40} TiB: bytes (int) or a string like "
            "'32g', '512m'",
            shm_raw,
        )
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
