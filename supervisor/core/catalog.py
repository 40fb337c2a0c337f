"""The message catalogue, pure: every alert title, "what to do" line and field label in each language.

An ``Alert`` action names its message by ``kind`` (a stable dotted id) and carries the values its
templates fill in (``params``); the renderer (core/alerts.py) picks the text for ``alerts.language``.
"""

from __future__ import annotations

from dataclasses import dataclass

LANGUAGES: tuple[str, ...] = ("en", "zh")


@dataclass(frozen=True)
class Text:
    """One text in every language; ``{name}`` placeholders are filled from the alert's params."""

    en: str
    zh: str

    def get(self, language: str) -> str:
        """The text in ``language`` (English for an unknown one)."""
        return self.zh if language == "zh" else self.en


@dataclass(frozen=True)
class Entry:
    """A message kind: its title and the one-line "what to do" for the operator."""

    title: Text
    todo: Text


#: kind -> entry.
MESSAGES: dict[str, Entry] = {}
#: Field labels (state, reason, diagnosis, container, restarts, breaker, kv pool, at, ...).
LABELS: dict[str, Text] = {}
