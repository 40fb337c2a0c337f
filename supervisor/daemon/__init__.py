"""The application: the loop (one writer), the executor of actions, watchers, the control API, and the
composition root that wires them (:func:`build_daemon`)."""

from supervisor.daemon.build import build_daemon, policy_for
from supervisor.daemon.loop import Daemon

__all__ = ["Daemon", "build_daemon", "policy_for"]
