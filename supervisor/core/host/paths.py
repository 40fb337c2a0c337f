"""Where the installed service keeps its files: one home for every default path.

The daemon config can move the state directory, the control socket and the load lock
(``state_dir``, ``socket_path``, ``host.load_lock_path``); these are the defaults, shared by the
daemon, ``supervisorctl`` and the config parser. ``/run/vllm-supervisor`` is created by the unit
(``RuntimeDirectory=``) and writable by root only.
"""

from __future__ import annotations

from pathlib import Path

#: The installed service's config directory (``supervisorctl init`` writes the config and profiles here).
ETC = Path("/etc/vllm-supervisor")
#: The daemon config ``vllm-supervisor`` and ``supervisorctl`` read unless ``--config`` names another.
DEFAULT_CONFIG = ETC / "daemon.yaml"
#: Where ``supervisorctl init`` installs the systemd unit.
UNIT_DIR = Path("/etc/systemd/system")
#: systemd manager drop-ins (init --hardware-watchdog writes one: docs/wedge.md "Wedge insurance")
SYSTEMD_CONF_D = Path("/etc/systemd/system.conf.d")
#: State, history, ledger, last known good (``state_dir``).
DEFAULT_STATE_DIR = Path("/var/lib/vllm-supervisor")
#: The daemon's runtime directory (root only).
RUN_DIR = Path("/run/vllm-supervisor")
#: The control socket (``socket_path``); ``$VLLM_SUPERVISOR_SOCKET`` overrides it for the client.
DEFAULT_SOCKET = RUN_DIR / "control.sock"
#: One model load per host (``host.load_lock_path``): an flock every daemon and ``restore`` take. It lives in
#: the root-only runtime directory: in the world-writable /run/lock any user could create it first (or a
#: symlink) and block every model start.
DEFAULT_LOAD_LOCK = RUN_DIR / "load.lock"
SOCKET_ENV = "VLLM_SUPERVISOR_SOCKET"
#: The host's shared-memory tmpfs: listed and swept of leaked segments, never written.
SHM_DIR = Path("/dev/shm")  # noqa: S108 - the system's tmpfs, not a temp file of ours

#: The longest name (profile, container, seat, companion, gate) a config may give: names become file names
#: (state, history, archived logs) and one of 128 characters plus any suffix stays under NAME_MAX (255).
NAME_MAX_LEN = 128
#: What every such name looks like: no '/', no leading '.' or '-', bounded (config and store share it).
NAME_PATTERN = rf"[A-Za-z0-9][A-Za-z0-9._-]{{0,{NAME_MAX_LEN - 1}}}"
