"""Parse the daemon config file (and every profile file it lists) into a :class:`DaemonConfig`."""

from __future__ import annotations

import glob
from pathlib import Path
from urllib.parse import urlsplit

from supervisor.config.bounds import url_problem
from supervisor.config.metrics import parse_metrics
from supervisor.config.model import (
    ALERT_KINDS,
    AlertChannel,
    AlertKind,
    AlertsConfig,
    DaemonConfig,
    HeartbeatConfig,
    Profile,
)
from supervisor.config.profile import parse_profile
from supervisor.config.reader import Ctx, Section, default_of
from supervisor.config.seats import check_seats
from supervisor.config.source import check_private_file, load_yaml
from supervisor.core.alerts.catalog import LANGUAGES
from supervisor.core.fleet.digest import parse_hhmm
from supervisor.core.host.paths import DEFAULT_SOCKET, DEFAULT_STATE_DIR
from supervisor.core.settings.daemon import (
    KERNEL_MEMORY_POLICIES,
    ORPHAN_POLICIES,
    BackoffConfig,
    BreakerConfig,
    HostConfig,
    MaintenanceConfig,
    MemoryGuardConfig,
)

LOG_LEVELS = ("debug", "info", "warning", "error")
#: Profile files one config may list (globs included): each is read and parsed at start and on reload.
MAX_PROFILE_FILES = 32
_SECRET_KEYS = frozenset({"url", "secret"})


def validate_cron(expr: str, tz: str | None = None) -> str | None:
    """None if `expr` is a valid crontab expression (5 fields or an @-nickname) in zone `tz`, else why not."""
    from supervisor.core.maintenance.schedule import (  # imports apscheduler: lazily
        CronSchedule,
        ScheduleError,
    )

    try:
        CronSchedule.parse(expr, tz)
    except ScheduleError as exc:
        return str(exc)
    return None


def validate_timezone(tz: str | None) -> str | None:
    """None if `tz` is a known IANA zone name (None: the host's zone must be known), else why not."""
    from supervisor.core.maintenance.schedule import ScheduleError, zone

    try:
        zone(tz)
    except ScheduleError as exc:
        return str(exc)
    return None


def _secret_path(sec: Section, key: str, what: str) -> Path | None:
    raw = sec.str_(key, None)
    if raw is None:
        return None
    path = sec.ctx.path(raw)
    check_private_file(sec.ctx, sec.key(key), path, what)
    return path


def _url(sec: Section, key: str) -> str | None:
    url = sec.str_(key, None)
    why = url_problem(url) if url is not None else None
    if why is not None:
        sec.bad(key, why, url)
        return None
    return url


def _channel(sec: Section) -> AlertChannel | None:
    if not sec.ok:
        return None
    sec.required("kind")
    kind = sec.str_("kind", None, choices=ALERT_KINDS)
    url = _url(sec, "url")
    url_file = _secret_path(sec, "url_file", "alert URL file")
    secret = sec.str_("secret", None)
    secret_file = _secret_path(sec, "secret_file", "alert secret file")
    chat_id = sec.str_("chat_id", None)
    language = sec.str_("language", None, choices=LANGUAGES)
    proxy = _url(sec, "proxy")
    name = sec.str_("name", kind or "")
    sec.done()
    if sec.raw("url") is None and sec.raw("url_file") is None:
        sec.ctx.add(sec.path, "set one of 'url' or 'url_file'")
        return None
    if url is not None and url_file is not None:
        sec.ctx.add(sec.path, "set only one of 'url' and 'url_file'")
        return None
    if secret is not None and secret_file is not None:
        sec.ctx.add(sec.path, "set only one of 'secret' and 'secret_file'")
        return None
    if kind == "telegram" and chat_id is None:
        sec.required("chat_id")
        return None
    if kind is None:
        return None
    typed_kind: AlertKind = kind  # type: ignore[assignment]  # checked against ALERT_KINDS above
    return AlertChannel(typed_kind, name, url, url_file, secret, secret_file, chat_id, language, proxy)


def _alerts(sec: Section) -> AlertsConfig:
    channels = [
        c
        for kp, item in sec.items("channels")
        if (c := _channel(Section(sec.ctx, item, kp, secret_keys=_SECRET_KEYS)))
    ]
    digest_at = sec.str_("digest_at", None)
    if digest_at is not None and parse_hhmm(digest_at) is None:
        sec.bad("digest_at", "must be a 24-hour local time HH:MM, e.g. '09:00'", digest_at)
        digest_at = None
    d = AlertsConfig()
    cfg = AlertsConfig(
        channels=tuple(channels),
        dedupe_s=sec.float_("dedupe_s", d.dedupe_s),
        digest_at=digest_at,
        language=sec.str_("language", d.language, choices=LANGUAGES),
    )
    sec.done()
    return cfg


def _heartbeat(sec: Section) -> HeartbeatConfig:
    d = HeartbeatConfig()
    fail_path = sec.str_("fail_path", d.fail_path, nonempty=False)
    if fail_path and not fail_path.startswith("/"):
        sec.bad("fail_path", "must start with '/' (e.g. '/fail'), or be '' for no failure pings", fail_path)
    heartbeat = HeartbeatConfig(
        url=_url(sec, "url"),
        url_file=_secret_path(sec, "url_file", "heartbeat URL file"),
        interval_s=sec.float_("interval_s", d.interval_s, positive=True),
        fail_after_s=sec.float_("fail_after_s", d.fail_after_s, positive=True),
        fail_path=fail_path,
        fail_url=_url(sec, "fail_url"),
        fail_url_file=_secret_path(sec, "fail_url_file", "heartbeat failure URL file"),
    )
    if heartbeat.url is not None and heartbeat.url_file is not None:
        sec.ctx.add(sec.path, "set only one of 'url' and 'url_file'")
    if heartbeat.fail_url is not None and heartbeat.fail_url_file is not None:
        sec.ctx.add(sec.path, "set only one of 'fail_url' and 'fail_url_file'")
    sec.done()
    return heartbeat


def _host(sec: Section) -> HostConfig:
    d, g = HostConfig(), MemoryGuardConfig()
    mg = sec.sub("memory_guard")
    guard = MemoryGuardConfig(
        enabled=mg.bool_("enabled", g.enabled),
        mem_available_min_gib=mg.float_("mem_available_min_gib", g.mem_available_min_gib),
        samples=mg.int_("samples", g.samples, lo=1),
        memfree_min_gib=mg.float_("memfree_min_gib", g.memfree_min_gib),
        memavailable_below_gib=mg.float_("memavailable_below_gib", g.memavailable_below_gib),
        sample_interval_s=mg.float_("sample_interval_s", g.sample_interval_s, positive=True),
        psi_full_avg10_max=mg.float_("psi_full_avg10_max", g.psi_full_avg10_max, lo=0.0, hi=100.0),
        hard_mem_available_min_gib=mg.float_(
            "hard_mem_available_min_gib", g.hard_mem_available_min_gib, lo=0.0
        ),
        hard_memfree_min_gib=mg.float_("hard_memfree_min_gib", g.hard_memfree_min_gib, lo=0.0),
    )
    mg.done()
    lock = sec.str_("load_lock_path", None)
    floor_auto = sec.raw("min_mem_available_gib") == "auto"
    cfg = HostConfig(
        drop_caches=sec.bool_("drop_caches", d.drop_caches),
        drop_caches_level=sec.int_("drop_caches_level", d.drop_caches_level, lo=1, hi=3),
        min_mem_available_gib=0.0
        if floor_auto
        else sec.float_("min_mem_available_gib", d.min_mem_available_gib),
        min_mem_available_auto=floor_auto,
        settle_timeout_s=sec.float_("settle_timeout_s", d.settle_timeout_s),
        load_lock_path=sec.ctx.path(lock) if lock else d.load_lock_path,
        memory_guard=guard,
        reserve_gib=sec.float_("reserve_gib", d.reserve_gib, lo=0.0),
        state_dir_min_free_gib=sec.float_("state_dir_min_free_gib", d.state_dir_min_free_gib, lo=0.0),
        orphans=sec.str_("orphans", d.orphans, choices=ORPHAN_POLICIES),
        kernel_memory_error=sec.str_(
            "kernel_memory_error", d.kernel_memory_error, choices=KERNEL_MEMORY_POLICIES
        ),
        contiguity_min_free_blocks=sec.int_("contiguity_min_free_blocks", d.contiguity_min_free_blocks, lo=0),
    )
    sec.done()
    return cfg


def _socket_mode(sec: Section) -> int:
    raw = sec.raw("socket_mode")
    if raw is None:
        return 0o660
    if isinstance(raw, str):
        try:
            raw = int(raw, 8)
        except ValueError:
            sec.bad("socket_mode", "must be an octal mode like '0660'", raw)
            return 0o660
    if isinstance(raw, bool) or not isinstance(raw, int) or not 0 <= raw <= 0o777:
        sec.bad("socket_mode", "must be an octal mode like '0660'", raw)
        return 0o660
    if raw & 0o007:
        sec.bad("socket_mode", "must not give access to others (the socket controls containers)", oct(raw))
    return raw


def _not_a_file(path: str) -> str | None:
    """Why ``path`` names no readable profile file (None: it names one)."""
    try:
        return None if Path(path).is_file() else "no such profile file"
    except OSError as exc:  # a name too long for the file system, say
        return f"not a usable path: {exc.strerror or exc}"


def _profiles(sec: Section, base_dir: Path) -> tuple[Profile, ...]:
    out: list[Profile] = []
    files = 0
    for kp, item in sec.items("profiles"):
        if not isinstance(item, str) or not item:
            sec.ctx.add(kp, "must be a profile file path or glob (string)", item)
            continue
        pattern = str(sec.ctx.path(item))
        matches = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
        if not matches:
            sec.ctx.add(kp, "the glob matches no file", item)
        elif not glob.has_magic(pattern) and (why := _not_a_file(pattern)) is not None:
            sec.ctx.add(kp, why, item)  # named here, where the path was written
            continue
        if len(matches) + files > MAX_PROFILE_FILES:
            sec.ctx.add(kp, f"more than {MAX_PROFILE_FILES} profile files in all", item)
            break
        files += len(matches)
        for m in matches:
            prof_path = Path(m)
            pctx = Ctx(file=str(prof_path), base_dir=prof_path.parent)
            data = load_yaml(prof_path, pctx)
            prof = parse_profile(pctx, data, prof_path) if not pctx.problems else None
            if prof is not None and urlsplit(prof.base_url).port == 0:
                pctx.add(
                    "container.ports",
                    "the server's port is published on a random host port (host_port 0): the daemon "
                    "could not find it to probe; set a fixed host_port, or base_url",
                )
                prof = None
            sec.ctx.problems.extend(pctx.problems)
            if prof is not None:
                out.append(prof)
    seen_names: dict[str, Path] = {}
    seen_containers: dict[str, Path] = {}
    for p in out:
        if p.name in seen_names:
            sec.ctx.add(
                sec.key("profiles"), f"two profiles are named {p.name!r}: {seen_names[p.name]} and {p.source}"
            )
        if p.container.name in seen_containers:
            sec.ctx.add(
                sec.key("profiles"),
                f"two profiles use container name {p.container.name!r}: "
                f"{seen_containers[p.container.name]} and {p.source}",
            )
        seen_names[p.name] = p.source
        seen_containers[p.container.name] = p.source
    check_seats(sec.ctx, sec.key("profiles"), out)
    return tuple(out)


def parse_daemon(ctx: Ctx, data: object, path: Path) -> DaemonConfig | None:
    """The DaemonConfig in already-loaded YAML `data` (problems go to `ctx`; None when any was found)."""
    before = len(ctx.problems)
    top = Section(ctx, data, "")
    if not top.ok:
        return None
    state_raw = top.str_("state_dir", None)
    state_dir = ctx.path(state_raw) if state_raw else DEFAULT_STATE_DIR
    sock = top.str_("socket_path", None)
    restore = top.str_("restore_dir", None)
    br, bo, mt = BreakerConfig(), BackoffConfig(), MaintenanceConfig()
    bsec = top.sub("breaker")
    breaker = BreakerConfig(
        limit=bsec.int_("limit", br.limit, lo=1),
        window_s=bsec.float_("window_s", br.window_s, positive=True),
        realert_s=bsec.float_("realert_s", br.realert_s, positive=True),
    )
    bsec.done()
    osec = top.sub("backoff")
    backoff = BackoffConfig(
        initial_s=osec.float_("initial_s", bo.initial_s),
        factor=osec.float_("factor", bo.factor, lo=1.0),
        max_s=osec.float_("max_s", bo.max_s),
        reset_after_s=osec.float_("reset_after_s", bo.reset_after_s),
    )
    if backoff.max_s < backoff.initial_s:
        osec.bad("max_s", f"must be >= initial_s ({backoff.initial_s:g})", backoff.max_s)
    osec.done()
    heartbeat = _heartbeat(top.sub("heartbeat", secret_keys=_SECRET_KEYS | {"fail_url"}))
    msec = top.sub("maintenance")
    cron = msec.str_("cron", mt.cron)
    tz = msec.str_("timezone", mt.timezone)
    tz_why = validate_timezone(tz)
    if tz_why is not None:
        msec.bad("timezone", tz_why, tz if tz is not None else "(host zone)")
    why = validate_cron(cron, tz if tz_why is None else "UTC")
    if why is not None:
        msec.bad("cron", why, cron)
    maintenance = MaintenanceConfig(
        enabled=msec.bool_("enabled", mt.enabled),
        cron=cron,
        drain_timeout_s=msec.float_("drain_timeout_s", mt.drain_timeout_s),
        timezone=tz,
        catch_up_s=msec.float_("catch_up_s", mt.catch_up_s),
    )
    msec.done()
    cfg = DaemonConfig(
        path=path,
        state_dir=state_dir,
        socket_path=ctx.path(sock) if sock else DEFAULT_SOCKET,
        restore_dir=ctx.path(restore) if restore else state_dir / "restore",
        socket_mode=_socket_mode(top),
        socket_group=top.str_("socket_group", None),
        log_level=top.str_("log_level", default_of(DaemonConfig, "log_level"), choices=LOG_LEVELS),
        host=_host(top.sub("host")),
        breaker=breaker,
        backoff=backoff,
        alerts=_alerts(top.sub("alerts")),
        heartbeat=heartbeat,
        maintenance=maintenance,
        reboot_rearms_breaker=top.bool_(
            "reboot_rearms_breaker", default_of(DaemonConfig, "reboot_rearms_breaker")
        ),
        metrics=parse_metrics(top.sub("metrics"), top.has("metrics")),
        profiles=_profiles(top, ctx.base_dir),
    )
    top.done()
    return cfg if len(ctx.problems) == before else None


def parse_alerts_only(ctx: Ctx, data: object) -> AlertsConfig:
    """Only the ``alerts:`` section of a daemon config (problems in it go to `ctx`; the rest is not read).

    For the alert that the daemon failed for good: the likeliest cause is a broken config, which must
    not also silence the alert.
    """
    top = Section(ctx, data, "")
    return _alerts(top.sub("alerts")) if top.ok else AlertsConfig()
