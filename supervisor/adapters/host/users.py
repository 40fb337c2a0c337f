"""Who a uid is: the user name from the password database (``pwd``), for messages that name the caller."""

from __future__ import annotations

import pwd


def user_name(uid: int) -> str | None:
    """The login name of ``uid``; None when the password database has no entry for it."""
    try:
        return pwd.getpwuid(uid).pw_name
    except (KeyError, OverflowError):
        return None
