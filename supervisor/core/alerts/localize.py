"""The catalogue's texts in one language, pure: templates filled, labels, severity words, states.

Nothing here raises on odd input: a missing param shows as ``?``, a broken template falls back (to the
English title for a title), an unknown kind has no "what to do", an unknown label shows as it is.
"""

from __future__ import annotations

import string
from collections.abc import Mapping, Sequence
from typing import Any

from supervisor.core.alerts.catalog import LABELS, MESSAGES, PHRASES, REASONS, SEVERITY, STATE_GLOSS_ZH
from supervisor.core.alerts.catalog_tw import ZH_TW
from supervisor.core.alerts.catalog_types import CHINESE

#: Shown for a placeholder whose param is missing.
MISSING = "?"
Params = Sequence[tuple[str, str]]


class _Filler(string.Formatter):
    """``str.format_map`` without lookups: ``{x}`` is the value named ``x`` (``?`` when there is none);
    ``{x.attr}`` / ``{x[0]}`` name nothing (no attribute or item access on the values)."""

    def get_field(self, field_name: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
        return kwargs.get(field_name, MISSING), field_name


_FILLER = _Filler()


def try_fill(template: str, values: Mapping[str, str]) -> str | None:
    """``template`` with its placeholders filled (a missing one: ``?``); None when it is malformed."""
    try:
        return _FILLER.vformat(template, (), values)
    except (ValueError, IndexError, KeyError, AttributeError, TypeError):
        return None


def values(kind: str, params: Params, language: str, **implicit: str) -> dict[str, str]:
    """The params of a ``kind`` message ready for its templates: ``implicit`` ones (profile, host) under
    the explicit ones, phrases translated."""
    entry = MESSAGES.get(kind)
    out = {**implicit, **dict(params)}
    for name in entry.phrased if entry is not None else ():
        phrase = PHRASES.get(out.get(name, ""))
        if phrase is not None:
            out[name] = phrase.get(language)
    return out


def title_en(kind: str, params: Params = ()) -> str:
    """The English title of ``kind`` with ``params``: the ``title`` an alert keeps in the history."""
    entry = MESSAGES.get(kind)
    if entry is None:
        return kind
    return try_fill(entry.title.en, values(kind, params, "en")) or kind


def title(kind: str, params: Params, language: str, fallback: str, **implicit: str) -> str:
    """The title of ``kind`` in ``language``; ``fallback`` (the English title) for an unknown kind or a
    template that cannot be filled."""
    entry = MESSAGES.get(kind)
    if entry is None:
        return fallback
    return try_fill(entry.title.get(language), values(kind, params, language, **implicit)) or fallback


def todo(kind: str, params: Params, language: str, **implicit: str) -> str:
    """The one-line "what to do" of ``kind`` in ``language`` ("" for an unknown kind)."""
    entry = MESSAGES.get(kind)
    if entry is None:
        return ""
    return try_fill(entry.todo.get(language), values(kind, params, language, **implicit)) or ""


def label(name: str, language: str) -> str:
    """A field label in ``language``; one the catalogue does not know (a config key) as it is."""
    text = LABELS.get(name)
    return text.get(language) if text is not None else name


def severity_word(severity: str, language: str) -> str:
    """CRITICAL / WARNING / INFO (严重 / 警告 / 信息); an unknown severity upper-cased."""
    text = SEVERITY.get(severity)
    return text.get(language) if text is not None else severity.upper()


def state(name: str, language: str) -> str:
    """A state name as the CLI shows it, with a Chinese gloss in ``zh`` / ``zh-TW`` (``FATAL（已熔断）``)."""
    gloss = STATE_GLOSS_ZH.get(name) if language in CHINESE else None
    if gloss and language == "zh-TW":
        gloss = ZH_TW.get(gloss, gloss)
    return f"{name}（{gloss}）" if gloss else name


def transition(old: str, new: str, language: str) -> str:
    """``OLD -> NEW`` (the new state glossed), ``NEW`` when nothing changed, "" when there is no state."""
    if old == new:
        return "" if new in ("", "-") else state(new, language)
    return f"{old} -> {state(new, language)}"


def reason(text: str, language: str) -> str:
    """A reason in ``language`` when it is one of the catalogue's fixed reasons, else verbatim."""
    fixed = REASONS.get(text)
    return fixed.get(language) if fixed is not None else text
