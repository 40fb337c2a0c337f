"""What an alert says, in one language, pure: the card every platform renders, and the plain text.

A card is short enough for a phone: the headline (host, profile, title), then at most four rows (the
state flip, the reason, the diagnosis, one line of details), the one-line "what to do" and the time.
Titles, labels and "what to do" come from the catalogue in ``alerts.language``; the reason, the
diagnosis and the details are evidence and stay verbatim (a long one is cut on the card: the history
and the generic payload keep it whole). Platforms escape the values (core/alerts/payloads.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from supervisor.core.alerts import localize
from supervisor.core.alerts.catalog_types import CHINESE
from supervisor.core.alerts.message import AlertMessage, iso_local, one_line

#: Severity -> marker emoji (Telegram and the plain text have no colour of their own).
EMOJI = {"critical": "🔴", "warning": "🟠", "info": "🟢"}
#: Longest reason / diagnosis / details line on a card (characters; a kernel line is ~300), and headline.
ROW_MAX = 200
HEADLINE_MAX = 150
#: Detail values that say nothing (a KV pool not known yet): left off the card.
_EMPTY = frozenset({"", "-"})


@dataclass(frozen=True)
class Card:
    """An alert laid out for a chat card; every text unescaped, labels already in the language."""

    severity: str
    language: str
    marker: str  # "🔴 CRITICAL" / "🔴 严重"
    headline: str  # "[thor] qwen: circuit breaker open: not restarting"
    #: (label, value) rows; label "" for the details line (its items carry their own labels).
    rows: tuple[tuple[str, str], ...]
    todo: str  # "" when the kind has none
    at: str  # ISO 8601, local zone

    def sep(self) -> str:
        """Between a label and its value in the card's language."""
        return separator(self.language)

    def label(self, name: str) -> str:
        """A field label (``what to do``, ``at``, ...) in the card's language."""
        return localize.label(name, self.language)

    def todo_line(self) -> str:
        """``what to do: ...`` (unescaped), "" when there is nothing to say."""
        return f"{self.label('what to do')}{self.sep()}{self.todo}" if self.todo else ""

    def at_line(self) -> str:
        """``at: 2026-...`` / ``时间：2026-...``."""
        return f"{self.label('at')}{self.sep()}{self.at}"

    def lines(self) -> list[str]:
        """The rows as ``label: value`` lines (the details line as it is)."""
        return [f"{label}{self.sep()}{value}" if label else value for label, value in self.rows]


def separator(language: str) -> str:
    """Between a label and its value: ": " in English, a full-width colon in Chinese."""
    return "：" if language in CHINESE else ": "


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, the cut marked with an ellipsis."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def title(msg: AlertMessage, language: str) -> str:
    """The message's title in ``language`` (the catalogue's, else ``msg.title`` as it is)."""
    return localize.title(msg.kind, msg.params, language, msg.title, profile=msg.profile, host=msg.host)


def todo(msg: AlertMessage, language: str) -> str:
    """The one-line "what to do" in ``language`` ("" for a message without a catalogue kind)."""
    return localize.todo(msg.kind, msg.params, language, profile=msg.profile, host=msg.host)


def headline(msg: AlertMessage, language: str) -> str:
    """``[host] profile: title``, one line of at most :data:`HEADLINE_MAX` characters."""
    return clip(
        f"[{one_line(msg.host)}] {one_line(msg.profile)}: {one_line(title(msg, language))}", HEADLINE_MAX
    )


def marker(severity: str, language: str) -> str:
    """``🔴 CRITICAL`` / ``🔴 严重``."""
    return f"{EMOJI.get(severity, '⚪')} {localize.severity_word(severity, language)}"


def details_line(msg: AlertMessage, language: str) -> str:
    """``container: vllm-qwen · restarts: 3 · ...`` (labels translated, empty values left off)."""
    items = [
        f"{localize.label(one_line(k), language)}{separator(language)}{one_line(v)}"
        for k, v in msg.details
        if one_line(v) not in _EMPTY
    ]
    return " · ".join(items)


def card(msg: AlertMessage, language: str) -> Card:
    """The card of ``msg`` in ``language`` (``en`` | ``zh``)."""
    rows: list[tuple[str, str]] = []
    flip = localize.transition(msg.old_state, msg.new_state, language)
    if flip:
        rows.append((localize.label("state", language), flip))
    reason = localize.reason(one_line(msg.reason), language)
    if reason:
        rows.append((localize.label("reason", language), clip(reason, ROW_MAX)))
    if msg.diagnosis:
        rows.append((localize.label("diagnosis", language), clip(one_line(msg.diagnosis), ROW_MAX)))
    details = details_line(msg, language)
    if details:
        rows.append(("", clip(details, ROW_MAX)))
    return Card(
        severity=msg.severity,
        language=language,
        marker=marker(msg.severity, language),
        headline=headline(msg, language),
        rows=tuple(rows),
        todo=clip(one_line(todo(msg, language)), ROW_MAX),
        at=iso_local(msg.at),
    )


def render_text(msg: AlertMessage, language: str = "en") -> str:
    """The card as plain text (no markup): marker and headline, rows, what to do, time."""
    c = card(msg, language)
    lines = [f"{c.marker} {c.headline}", *c.lines()]
    if c.todo:
        lines.append(c.todo_line())
    lines.append(c.at_line())
    return "\n".join(lines)
