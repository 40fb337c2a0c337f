"""The status document's one profile filter (``supervisorctl status NAME``, the ``status`` command).

The daemon answers ``status`` with ``name`` through it, and the CLI reads the answer through it again
(a daemon older than the ``name`` argument sends every profile). Pure: plain JSON-like values.
"""

from __future__ import annotations

from collections.abc import Mapping

TYPE_CHECKING = False  # not typing's: supervisorctl starts without it (tests/test_cli_imports.py)
if TYPE_CHECKING:
    from typing import Any


def profiles_of(doc: Mapping[str, Any], name: str | None = None) -> list[dict[str, Any]]:
    """The document's profile entries (objects only), only the one called ``name`` when given."""
    entries = doc.get("profiles")
    found = [p for p in entries if isinstance(p, dict)] if isinstance(entries, list) else []
    return found if name is None else [p for p in found if p.get("name") == name]


def only_profile(doc: Mapping[str, Any], name: str | None) -> dict[str, Any]:
    """The document with only profile ``name`` in ``profiles`` (all of them when ``name`` is None)."""
    return {**doc, "profiles": profiles_of(doc, name)}
