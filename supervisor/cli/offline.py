"""``supervisorctl``'s offline commands (no daemon needed): check-config, snapshot, restore, test-alert,
unit-failed. Their modules are imported lazily so the CLI starts fast and works even when
one of them is missing."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path

from supervisor.cli.common import DEFAULT_CONFIG, EXIT_USAGE, err, socket_path

TYPE_CHECKING = False  # not typing's: supervisorctl starts without it (tests/test_cli_imports.py)
if TYPE_CHECKING:
    from typing import TextIO

    from supervisor.config import DaemonConfig
    from supervisor.offline.init_plan import InitOptions
    from supervisor.offline.restore import RestoreContext

DEFAULT_RESTORE_DIR = Path("restore")

__all__ = [
    "DEFAULT_RESTORE_DIR",
    "cmd_check_config",
    "cmd_restore",
    "cmd_snapshot",
    "cmd_test_alert",
    "cmd_unit_failed",
    "restore_dir",
]


def cmd_check_config(ns: argparse.Namespace) -> int:
    from supervisor.config import cli_check_config
    from supervisor.offline.watchdog import watchdog_line

    code = int(cli_check_config(Path(ns.path)))
    if code == 0:  # wedge insurance (docs/wedge.md): will this host reset itself if it wedges?
        print(f"note: {watchdog_line()}")
    return code


def _daemon_config(config: str | None) -> DaemonConfig | int | None:
    """The config named by ``--config``, else the default one when it exists (None: there is none).

    A config that does not load is an error (its problems are printed; exit code), never a silent
    fallback to other values.
    """
    path = Path(config) if config is not None else DEFAULT_CONFIG
    if config is None and not path.exists():
        return None
    from supervisor.config import load_config
    from supervisor.core.errors import ConfigError

    try:
        return load_config(path)
    except ConfigError as exc:
        for problem in exc.problems:
            err(str(problem))
        return EXIT_USAGE


def restore_dir(explicit: str | None, config: str | None) -> Path | int:
    """Where snapshots go: ``--out``/``--from``, else the daemon config's ``restore_dir``, else ./restore."""
    if explicit is not None:
        return Path(explicit)
    cfg = _daemon_config(config)
    if isinstance(cfg, int):
        return cfg
    return cfg.restore_dir if cfg is not None else DEFAULT_RESTORE_DIR


def cmd_snapshot(ns: argparse.Namespace) -> int:
    out = restore_dir(ns.out, ns.config)
    return out if isinstance(out, int) else cli_snapshot(ns.container, out)


def cmd_restore(ns: argparse.Namespace) -> int:
    """Restore under the daemon config's host settings (load slot, page cache, memory) and its profiles."""
    from supervisor.offline.restore import context_for

    cfg = _daemon_config(ns.config)
    if isinstance(cfg, int):
        return cfg
    src = Path(ns.from_dir) if ns.from_dir is not None else cfg.restore_dir if cfg else DEFAULT_RESTORE_DIR
    ctx = context_for(cfg, ns.name, [socket_path(getattr(ns, "socket", None))])
    return cli_restore(ns.name, src, ns.replace, ctx=ctx, wait_s=ns.wait)


def cmd_test_alert(ns: argparse.Namespace) -> int:
    """Send a test message to every channel of the daemon config (no daemon needed)."""
    from supervisor.config import load_config
    from supervisor.core.errors import ConfigError
    from supervisor.offline.alerts import run_test_alert

    try:
        config = load_config(ns.config)
    except ConfigError as exc:
        for problem in exc.problems:
            err(str(problem))
        return EXIT_USAGE
    code, text = run_test_alert(config)
    print(text)
    return code


#: What a webhook URL looks like: refused on the command line (``ps`` and the shell's history show it).
_URL_SHAPE = "://"


def _secret_input(value: str, what: str, stdin: TextIO) -> str:
    """A secret given as a file path or ``-`` (one line of standard input); never the value itself."""
    if _URL_SHAPE in value:
        raise ValueError(
            f"{what}: a secret on the command line is visible in ps and the shell's history: put it in a "
            f"file (0600) and give its path, or give - and type it on standard input"
        )
    if value == "-":
        line = stdin.readline().strip()
        if not line:
            raise ValueError(
                f"{what}: standard input gave no line (one line per '-', in the order documented)"
            )
        return line
    try:
        text = Path(value).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(
            f"{what}: cannot read the file {value} ({exc.__class__.__name__}); the secret itself is never "
            "taken from the command line: give a file holding it, or -"
        ) from exc
    if not text:
        raise ValueError(f"{what}: {value} is empty")
    return text


def _init_options(ns: argparse.Namespace, stdin: TextIO) -> InitOptions:
    """The options; secrets read from files or standard input in this order: channels (feishu, dingtalk,
    wecom, slack, generic, each as given), --secret, --heartbeat."""
    import os as _os

    from supervisor.offline.init_derive import language_from_locale
    from supervisor.offline.init_plan import Channel, InitOptions

    urls = [(k, _secret_input(v, f"--{k}", stdin)) for k in CHANNEL_FLAGS for v in getattr(ns, k) or ()]
    secret = _secret_input(ns.secret, "--secret", stdin) if ns.secret is not None else None
    heartbeat = _secret_input(ns.heartbeat, "--heartbeat", stdin) if ns.heartbeat is not None else None
    channels = [Channel(k, u, secret if k in ("feishu", "dingtalk") else None) for k, u in urls]
    language = ns.language or language_from_locale(_os.environ)
    return InitOptions(tuple(channels), language, heartbeat, Path(ns.etc), Path(ns.unit_dir))


CHANNEL_FLAGS = ("feishu", "dingtalk", "wecom", "slack", "generic")


def cmd_init(ns: argparse.Namespace) -> int:
    """Snapshot a running container into a supervised service; print its status and a test alert."""
    from supervisor.offline.init import init

    if ns.secret is not None and not (ns.dingtalk or ns.feishu):
        err("--secret is a Feishu or DingTalk bot's signing secret: give --feishu or --dingtalk too")
        return EXIT_USAGE
    if not ns.dry_run and os.geteuid() != 0:
        err("init writes /etc/vllm-supervisor and the systemd unit: run it as root (or try --dry-run)")
        return EXIT_USAGE
    try:
        opts = _init_options(ns, sys.stdin)
    except ValueError as exc:
        err(str(exc))
        return EXIT_USAGE
    sock = socket_path(ns.socket)
    code = init(
        ns.container,
        opts,
        dry_run=ns.dry_run,
        force=ns.force,
        wait_s=ns.wait,
        socket=sock,
        say=print,
        allow_user_install=ns.allow_user_install,
    )
    code = code or _hardware_watchdog(ns)
    if code != 0 or ns.dry_run:
        return code
    import time

    from supervisor.adapters.control.client import ControlClient
    from supervisor.cli.render import render_status

    print("$ supervisorctl status")
    reply = ControlClient(sock, timeout=ns.timeout).call("status")
    data = reply.get("data")
    print(render_status(data if isinstance(data, dict) else {}, time.time()))
    if opts.channels:
        print("$ supervisorctl test-alert")
        return cmd_test_alert(argparse.Namespace(config=str(opts.etc / "daemon.yaml")))
    return 0


def _hardware_watchdog(ns: argparse.Namespace) -> int:
    """init's wedge insurance: arm the hardware watchdog when asked; say whether it will reset this host."""
    from supervisor.offline.watchdog import install, watchdog_line

    code = 0
    if ns.hardware_watchdog is not None:
        if ns.dry_run:
            print(f"would write {Path(ns.systemd_conf_dir)}: RuntimeWatchdogSec={ns.hardware_watchdog}s")
            print("would run: systemctl daemon-reexec")
        else:
            code = install(ns.hardware_watchdog, print, Path(ns.systemd_conf_dir))
    print(watchdog_line())
    return code


def cmd_uninit(ns: argparse.Namespace) -> int:
    """Remove one profile (NAME), or disable and remove the unit (and the hardware-watchdog drop-in init
    wrote); the models keep running."""
    from supervisor.offline.init_types import InitOptions
    from supervisor.offline.uninit import uninit
    from supervisor.offline.watchdog import remove

    opts = InitOptions(etc=Path(ns.etc), unit_dir=Path(ns.unit_dir))
    code = uninit(
        opts,
        remove_config=ns.remove_config,
        remove_state=ns.remove_state,
        say=print,
        name=ns.name,
        socket=socket_path(ns.socket),
    )
    return code if code or ns.name else remove(print, Path(ns.systemd_conf_dir))


def add_init_parsers(add: Callable[..., argparse.ArgumentParser]) -> None:
    """The ``init`` and ``uninit`` commands."""
    from supervisor.core.host.paths import (  # not init_plan: the parser stays light
        ETC,
        SYSTEMD_CONF_D,
        UNIT_DIR,
    )

    p = add("init", cmd_init, "make a running container a supervised service: config, unit, adoption (root)")
    p.add_argument("container", help="the running container (name or id)")
    p.add_argument("--dry-run", action="store_true", help="print every file and command, change nothing")
    p.add_argument("--force", action="store_true", help="replace files with other content (keeps backups)")
    for kind in CHANNEL_FLAGS:
        p.add_argument(
            f"--{kind}",
            action="append",
            metavar="FILE",
            help=f"add a {kind} alert channel: a file holding its webhook URL, or - (standard input)",
        )
    p.add_argument(
        "--secret", metavar="FILE", help="the bot's signing secret (a file, or -), with --feishu/--dingtalk"
    )
    p.add_argument(
        "--language", choices=("en", "zh", "zh-TW"), help="alert language (default: from LC_ALL / LANG)"
    )
    p.add_argument("--heartbeat", metavar="FILE", help="a file holding the dead-man switch URL, or -")
    p.add_argument("--wait", type=float, default=180.0, metavar="S", help="wait for adoption (default 180)")
    p.add_argument(
        "--allow-user-install",
        action="store_true",
        help="install even when the daemon runs from a path a non-root user can write (warns loudly)",
    )
    p.add_argument(
        "--hardware-watchdog",
        type=int,
        metavar="SECONDS",
        help="arm systemd's hardware watchdog (RuntimeWatchdogSec, 10-600 s): a wedged host is reset",
    )
    p.add_argument("--etc", default=str(ETC), help=argparse.SUPPRESS)
    p.add_argument("--unit-dir", default=str(UNIT_DIR), help=argparse.SUPPRESS)
    p.add_argument("--systemd-conf-dir", default=str(SYSTEMD_CONF_D), help=argparse.SUPPRESS)
    p = add("uninit", cmd_uninit, "remove one profile, or the unit; the model containers keep running (root)")
    p.add_argument("name", nargs="?", help="the profile to remove (the others stay supervised)")
    p.add_argument("--remove-config", action="store_true", help=f"remove {ETC} too")
    p.add_argument("--remove-state", action="store_true", help="remove /var/lib/vllm-supervisor too")
    p.add_argument("--etc", default=str(ETC), help=argparse.SUPPRESS)
    p.add_argument("--unit-dir", default=str(UNIT_DIR), help=argparse.SUPPRESS)
    p.add_argument("--systemd-conf-dir", default=str(SYSTEMD_CONF_D), help=argparse.SUPPRESS)


def cmd_unit_failed(ns: argparse.Namespace) -> int:
    """Alert every channel that the daemon's systemd unit failed for good (run by the OnFailure= unit)."""
    from supervisor.offline.alerts import run_unit_failed_alert

    code, text = run_unit_failed_alert(Path(ns.config), ns.unit, dict(os.environ))
    print(text)
    return code


def stderr_say(name: str) -> Callable[[str], None]:
    """Progress lines of a restore, on stderr."""

    def say(text: str) -> None:
        sys.stderr.write(f"restore {name}: {text}\n")
        sys.stderr.flush()

    return say


def cli_snapshot(container: str, out_dir: Path | str, out: TextIO | None = None) -> int:
    """``supervisorctl snapshot``: write the three files, print a short summary (no secrets); exit code."""
    from supervisor.adapters.docker.adapter import DockerAdapter
    from supervisor.core.errors import SupervisorError
    from supervisor.offline.snapshot import snapshot

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


def cli_restore(
    name: str,
    from_dir: Path | str,
    replace: bool = False,
    out: TextIO | None = None,
    *,
    ctx: RestoreContext | None = None,
    wait_s: float | None = None,
) -> int:
    """``supervisorctl restore``: recreate, start, wait for the load (progress on stderr), verify auth;
    print a summary; exit code."""
    from supervisor.adapters.docker.adapter import DockerAdapter
    from supervisor.core.errors import SupervisorError
    from supervisor.offline.restore import RestoreContext, restore

    out = out or sys.stdout
    try:
        adapter = DockerAdapter()
        res = restore(
            adapter,
            name,
            from_dir,
            ctx or RestoreContext(),
            replace=replace,
            wait_s=wait_s,
            say=stderr_say(name),
        )
    except SupervisorError as exc:
        sys.stderr.write(f"supervisorctl restore: {exc}\n")
        return 1
    out.write(
        f"restored {res.name} ({res.container_id[:12]}, image {res.image_id[:19]}): "
        f"healthy at {res.base_url} after {res.ready_s:.1f}s; API key: {res.auth}"
        + ("; replaced the previous container" if res.replaced else "")
        + "\n"
    )
    return 0
