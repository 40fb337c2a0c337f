"""The catalogue's building blocks: a text in every language and a message kind's entry."""

from __future__ import annotations

from dataclasses import dataclass

from supervisor.core.alerts.catalog_tw import ZH_TW

LANGUAGES: tuple[str, ...] = ("en", "zh", "zh-TW")
#: The Chinese languages (full-width punctuation, state glosses).
CHINESE: frozenset[str] = frozenset({"zh", "zh-TW"})


@dataclass(frozen=True)
class Text:
    """One text in every language; ``{name}`` placeholders are filled from the alert's params."""

    en: str
    zh: str

    def get(self, language: str) -> str:
        """The text in ``language`` (English for an unknown one; zh-TW from catalog_tw.py)."""
        if language == "zh-TW":
            return ZH_TW.get(self.zh, self.zh)
        return self.zh if language == "zh" else self.en


@dataclass(frozen=True)
class Entry:
    """A message kind: its title and the one-line "what to do" for the operator.

    ``phrased``: params whose value is a key of :data:`PHRASES`, shown translated.
    """

    title: Text
    todo: Text
    phrased: tuple[str, ...] = ()
