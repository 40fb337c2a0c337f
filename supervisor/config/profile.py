"""Parse one profile file (a supervised model server) into a :class:`Profile`."""

from __future__ import annotations

import re
from pathlib import Path

from supervisor.config.bounds import NAME_RULE, name_ok, url_problem
from supervisor.config.container import parse_container
from supervisor.config.model import DEFAULT_API_KEY_ENV, ApiKeySource, CompanionConfig, Profile
from supervisor.config.reader import Ctx, Section, default_of, type_name
from supervisor.config.sentinel import parse_sentinel
from supervisor.config.smoke import parse_smoke
from supervisor.config.source import check_private_file
from supervisor.core.settings.profile import (
    KvPoolConfig,
    MarkerConfig,
    ProbeConfig,
    StartupConfig,
    StopConfig,
)
from supervisor.core.spec.model import ContainerSpec
from supervisor.core.vllm import cmdline
from supervisor.core.vocab import DAEMON_PROFILE

_PROFILE_NAME_RE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]*$")


def derive_base_url(spec: ContainerSpec) -> str:
    """How the supervisor reaches the server: the `--port` arg (or 8000), through a published port if any."""
    port = cmdline.port(cmdline.argv_of(spec))
    if spec.network_mode != "host":
        for p in spec.ports:
            if p.container_port == port and p.protocol == "tcp":
                host = p.host_ip if p.host_ip not in ("", "0.0.0.0", "::") else "127.0.0.1"  # noqa: S104
                host = f"[{host}]" if ":" in host and not host.startswith("[") else host
                return f"http://{host}:{p.host_port}"
    return f"http://127.0.0.1:{port}"


def _api_key(sec: Section, spec: ContainerSpec | None) -> ApiKeySource | None:
    if not sec.ok:
        return None
    env = sec.str_("env", None)
    file_raw = sec.str_("file", None)
    inject_arg = sec.str_("inject_arg", None)
    inject = sec.str_("inject_env", None if inject_arg else DEFAULT_API_KEY_ENV)
    generate = sec.bool_("generate", False)
    sec.done()
    if env is None and file_raw is None:
        sec.ctx.add(sec.path, "set either 'env' (a container env var name) or 'file' (a 0600 key file)")
        return None
    if env is not None and file_raw is not None:
        sec.ctx.add(sec.path, "set only one of 'env' and 'file'")
        return None
    file = sec.ctx.path(file_raw) if file_raw is not None else None
    if inject_arg is not None and (file is None or not inject_arg.startswith("--")):
        sec.bad("inject_arg", "a command flag such as --api-key, and only with 'file'", inject_arg)
    elif inject_arg is not None and spec is not None and cmdline.flag_value(spec.command, inject_arg) is None:
        sec.bad("inject_arg", "the container's command has no value for this flag", inject_arg)
    if file is not None and not (generate and not file.exists()):
        check_private_file(sec.ctx, sec.key("file"), file, "API key file")
    if env is not None and spec is not None and env not in spec.env_dict():
        sec.bad("env", "the container's environment (env / env_file) does not define this variable", env)
    return ApiKeySource(
        env=env,
        file=file,
        inject_env=inject if file is not None else None,
        generate=generate,
        inject_arg=inject_arg if file is not None else None,
    )


def _probes(sec: Section) -> ProbeConfig:
    d = ProbeConfig()
    health = sec.str_("health_path", d.health_path)
    if not health.startswith("/"):
        sec.bad("health_path", "must start with '/'", health)
        health = d.health_path
    kind = sec.str_("generation_kind", d.generation_kind, choices=("chat", "completion"))
    cfg = ProbeConfig(
        interval_s=sec.float_("interval_s", d.interval_s, positive=True),
        timeout_s=sec.float_("timeout_s", d.timeout_s, positive=True),
        failure_threshold=sec.int_("failure_threshold", d.failure_threshold, lo=1),
        health_path=health,
        generation=sec.bool_("generation", d.generation),
        generation_kind="chat" if kind == "chat" else "completion",
        prompt=sec.str_("prompt", d.prompt),
        max_tokens=sec.int_("max_tokens", d.max_tokens, lo=1),
        stall_after_s=sec.float_("stall_after_s", d.stall_after_s, positive=True),
        freeze_after_s=sec.float_("freeze_after_s", d.freeze_after_s, positive=True),
        canary_deadline_s=sec.float_("canary_deadline_s", d.canary_deadline_s, positive=True),
        cpu_busy_cores=sec.float_("cpu_busy_cores", d.cpu_busy_cores, positive=True),
        step_factor=sec.float_("step_factor", d.step_factor, positive=True),
        stack_wait_s=sec.float_("stack_wait_s", d.stack_wait_s),
        prefill_tokens_per_s=sec.float_("prefill_tokens_per_s", d.prefill_tokens_per_s, positive=True),
        saturation_grace=sec.bool_("saturation_grace", d.saturation_grace),
        metrics=sec.bool_("metrics", d.metrics),
        warmup_s=sec.float_("warmup_s", d.warmup_s),
        unauthorized_check=sec.bool_("unauthorized_check", d.unauthorized_check),
    )
    sec.done()
    return cfg


def _startup(sec: Section) -> StartupConfig:
    d = StartupConfig()
    cfg = StartupConfig(
        deadline_s=sec.float_("deadline_s", d.deadline_s, positive=True),
        silence_timeout_s=sec.float_("silence_timeout_s", d.silence_timeout_s, positive=True),
        adopt_grace_s=sec.float_("adopt_grace_s", d.adopt_grace_s),
        ready_requires_health=sec.bool_("ready_requires_health", d.ready_requires_health),
    )
    sec.done()
    return cfg


def _stop(sec: Section, default_grace: float) -> StopConfig:
    cfg = StopConfig(
        grace_s=sec.float_("grace_s", default_grace),
        drain_timeout_s=sec.float_("drain_timeout_s", StopConfig().drain_timeout_s),
        emergency_grace_s=sec.float_("emergency_grace_s", StopConfig().emergency_grace_s, positive=True),
    )
    sec.done()
    return cfg


def _regexes(sec: Section, key: str) -> tuple[str, ...]:
    return tuple(p for i, p in enumerate(sec.str_list(key)) if _regex_ok(sec, f"{sec.key(key)}[{i}]", p))


#: Upper bound of an expected marker's count (the field counts workers: "MADV 16/16").
MAX_MARKER_COUNT = 10_000


def _regex_ok(sec: Section, where: str, pattern: str) -> bool:
    try:
        re.compile(pattern)
    except re.error as exc:
        sec.ctx.add(where, f"not a valid regular expression: {exc}", pattern)
        return False
    return True


def _markers(sec: Section) -> MarkerConfig:
    """``expected: [regex | {pattern, count}]`` (count: at least that many lines; 1 = the plain form),
    ``forbidden: [regex]``."""
    patterns: list[str] = []
    counts: list[int] = []
    for where, item in sec.items("expected"):
        if isinstance(item, str):
            if _regex_ok(sec, where, item):
                patterns.append(item)
                counts.append(1)
            continue
        if not isinstance(item, dict):
            sec.ctx.add(
                where,
                f"must be a regex string or a mapping {{pattern, count}}, not a {type_name(item)}",
                item,
            )
            continue
        one = Section(sec.ctx, item, where)
        ok = one.required("pattern")
        pattern = one.str_("pattern", "")
        count = one.int_("count", 1, lo=1, hi=MAX_MARKER_COUNT)
        one.done()
        if ok and pattern and _regex_ok(one, one.key("pattern"), pattern):
            patterns.append(pattern)
            counts.append(count)
    return MarkerConfig(
        expected=tuple(patterns),
        forbidden=_regexes(sec, "forbidden"),
        expected_counts=tuple(counts) if any(c != 1 for c in counts) else (),
    )


#: Upper bound of kv_pool.max_redraws: each redraw is a full model load (minutes on the target boxes).
MAX_REDRAWS_LIMIT = 10


def _kv_pool(sec: Section) -> KvPoolConfig:
    d = KvPoolConfig()
    pin = sec.str_("pin", d.pin, choices=("off", "advise", "apply"))
    cfg = KvPoolConfig(
        warn_below_tokens=sec.int_("warn_below_tokens", None, lo=0),
        warn_drop_pct=sec.float_("warn_drop_pct", d.warn_drop_pct, lo=0.0, hi=100.0),
        min_tokens=sec.int_("min_tokens", None, lo=0),
        max_redraws=sec.int_("max_redraws", d.max_redraws, lo=0, hi=MAX_REDRAWS_LIMIT),
        pin="advise" if pin == "advise" else "apply" if pin == "apply" else "off",
    )
    sec.done()
    return cfg


#: Upper bound of rollback_after: every failed start of the change is a full model load.
MAX_ROLLBACK_AFTER = 20


def _companions(top: Section) -> tuple[CompanionConfig, ...]:
    """``companions: [{name, url, expect_status, timeout_s, interval_s}]``: services checked, never owned."""
    out: list[CompanionConfig] = []
    seen: set[str] = set()
    d = CompanionConfig(name="", url="")
    for where, item in top.items("companions"):
        sec = Section(top.ctx, item, where)
        if not sec.ok:
            continue
        ok = sec.required("name") & sec.required("url")
        name = sec.str_("name", "")
        url = sec.str_("url", "")
        if name and not name_ok(name):
            sec.bad("name", f"companion {NAME_RULE}", name)
            ok = False
        elif name in seen:
            sec.bad("name", "another companion of this profile has this name", name)
            ok = False
        seen.add(name)
        why = url_problem(url) if url else None
        if why is not None:
            sec.bad("url", why, url)
            ok = False
        cfg = CompanionConfig(
            name=name,
            url=url,
            expect_status=sec.int_("expect_status", d.expect_status, lo=100, hi=599),
            timeout_s=sec.float_("timeout_s", d.timeout_s, positive=True),
            interval_s=sec.float_("interval_s", d.interval_s, positive=True),
        )
        sec.done()
        if ok and name and url:
            out.append(cfg)
    return tuple(out)


def _default_name(path: Path) -> str:
    name = path.name
    for suffix in (".yaml", ".yml", ".profile"):
        name = name.removesuffix(suffix)
    return name


def parse_profile(ctx: Ctx, data: object, path: Path) -> Profile | None:
    """The Profile in already-loaded YAML `data` (problems go to `ctx`; None when any was found)."""
    before = len(ctx.problems)
    top = Section(ctx, data, "")
    if not top.ok:
        return None
    name = top.str_("name", _default_name(path))
    if not name_ok(name):
        top.bad("name", f"profile {NAME_RULE}", name)
    elif name == DAEMON_PROFILE:
        top.bad("name", f"{DAEMON_PROFILE!r} is reserved for the daemon's own alerts and events", name)
    top.required("container")
    csec = top.sub("container")
    spec = parse_container(csec, name) if top.has("container") and csec.ok else None
    api_key = _api_key(top.sub("api_key"), spec) if top.raw("api_key") is not None else None
    base_url = top.str_("base_url", None)
    why = url_problem(base_url) if base_url is not None else None
    if why is not None:
        top.bad("base_url", why, base_url)
    served = top.str_("served_model_name", None)
    probes = _probes(top.sub("probes"))
    startup = _startup(top.sub("startup"))
    container_grace = spec.stop_timeout if spec is not None else None
    stop = _stop(
        top.sub("stop"), float(container_grace) if container_grace is not None else StopConfig().grace_s
    )
    msec = top.sub("markers")
    markers = _markers(msec)
    msec.done()
    kv_pool = _kv_pool(top.sub("kv_pool"))
    autostart = top.bool_("autostart", default_of(Profile, "autostart"))
    companions = _companions(top)
    seat = top.str_("seat", None)
    if seat is not None and not name_ok(seat):
        top.bad("seat", f"seat {NAME_RULE}", seat)
    rollback_after = top.int_(
        "rollback_after", default_of(Profile, "rollback_after"), lo=1, hi=MAX_ROLLBACK_AFTER
    )
    on_failed = top.str_(
        "on_failed_change", default_of(Profile, "on_failed_change"), choices=("rollback", "hold")
    )
    parser = cmdline.reasoning_parser(cmdline.argv_of(spec)) is not None if spec is not None else None
    smoke = parse_smoke(top.sub("smoke"), parser)
    sentinel = parse_sentinel(top.sub("sentinel"))
    top.done()
    if spec is not None and base_url is None and (why := url_problem(derive_base_url(spec))) is not None:
        ctx.add(top.key("base_url"), f"the URL derived from container.ports and --port {why}: set base_url")
    if spec is None or len(ctx.problems) != before:
        return None
    return Profile(
        name=name,
        source=path,
        container=spec,
        base_url=(base_url or derive_base_url(spec)).rstrip("/"),
        served_model_name=served or cmdline.served_model_name(cmdline.argv_of(spec)),
        api_key=api_key,
        probes=probes,
        startup=startup,
        stop=stop,
        markers=markers,
        kv_pool=kv_pool,
        autostart=autostart,
        companions=companions,
        seat=seat,
        rollback_after=rollback_after,
        on_failed_change="rollback" if on_failed == "rollback" else "hold",
        smoke=smoke,
        sentinel=sentinel,
    )
