"""The API key: is the port guarded, and does the running server still have the configured key?

After every start a request without the key is tried (docs/field-notes.md item 8). Served without a
key although one is configured: the key was lost on re-creation, a critical alert. Served and no key
configured: the port is open to anyone who can reach it, a warning. A key file changed under a running
server (rotation) is not a failure: the server keeps the key it was created with and the probes keep
using that one; a warning says a restart applies the new key (once per change). See
docs/state-machine.md "Auth".
"""

from __future__ import annotations

from supervisor.core.events import AuthResult, KeyFileChecked
from supervisor.core.machine.builder import Step

AUTH_STATUSES = ("enforced", "open", "unknown")


def on_auth(c: Step, ev: AuthResult) -> None:
    """Any up state: record whether a request without the key was refused; alert if it was served."""
    status = ev.status if ev.status in AUTH_STATUSES else "unknown"
    if status == c.s.auth:
        return
    c.set(auth=status)
    configured = c.policy.api_key_configured
    c.emit(f"auth.{status}", key_configured=configured, url=ev.url)
    st = c.s.state
    if status == "enforced":
        # resolves an auth.open / auth.no_key raised before (this run or an earlier one); else not sent
        reason = f"{ev.url or 'the server'} refuses a request without the key"
        c.alert("info", "API key enforced again", st, st, reason, kind="auth.enforced")
    if status != "open":
        return
    if configured:
        c.alert_kind("critical", "auth.open", st, st, "auth open")
        return
    where = ev.url or "the server's port"
    c.alert_kind(
        "warning",
        "auth.no_key",
        st,
        st,
        f"{where} serves /v1 without a key; set api_key in the profile (docs/configuration.md)",
    )


def on_key_file_checked(c: Step, ev: KeyFileChecked) -> None:
    """RUNNING/DEGRADED: a rotated key file is a warning once per change, never a probe failure."""
    if not ev.differs:
        if c.s.key_rotation_warned is not None:
            c.set(key_rotation_warned=None)
            c.emit("api_key.in_sync")
        return
    if ev.key_id is not None and ev.key_id == c.s.key_rotation_warned:
        return  # this change was reported already
    c.set(key_rotation_warned=ev.key_id or "?")
    c.emit("api_key.rotated")
    st = c.s.state
    c.alert_kind(
        "warning",
        "api_key.rotated",
        st,
        st,
        "the running server keeps the key it was created with (the probes use it); "
        "`supervisorctl restart` applies the new one",
    )
