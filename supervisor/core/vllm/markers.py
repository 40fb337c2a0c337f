"""Operator log markers, pure: counted expected markers and forbidden ones (docs/configuration.md "markers").

An expected marker is a regex with a count: it is *proved* once at least ``count`` lines matched it (the
field checks "MADV 16/16": all 16 workers printed the line, so "at least N" is the reading; more lines
than N, e.g. a worker that printed twice, still prove it). Count 1 is the plain-string form. A forbidden
marker is proved by one line. Markers are searched in the normalised message and in the ANSI-free raw line.

The name of an expected marker (what events, reasons and alerts show) is its pattern, with `` x{count}``
appended when the count is above 1 (:func:`marker_name`), so a one-count marker keeps its old name.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from supervisor.core.vllm.envelope import ANSI, normalize


def marker_name(pattern: str, count: int = 1) -> str:
    """The name of an expected marker: the pattern, plus `` x{count}`` when more than one line is needed."""
    return pattern if count <= 1 else f"{pattern} x{count}"


def marker_names(patterns: Sequence[str], counts: Sequence[int] = ()) -> tuple[str, ...]:
    """The names of expected markers; ``counts`` pairs with ``patterns`` (missing or empty: 1 each)."""
    return tuple(marker_name(p, counts[i] if i < len(counts) else 1) for i, p in enumerate(patterns))


@dataclass(frozen=True)
class MarkerResult:
    """What one line proved: expected markers (by name) and forbidden markers (by pattern) it matched.

    From :meth:`MarkerMatcher.match` every expected marker the line matched; from :meth:`MarkerMatcher.feed`
    only those whose count this line reached (each name once per boot)."""

    expected: tuple[str, ...]
    forbidden: tuple[str, ...]


@dataclass(frozen=True)
class MarkerTally:
    """An expected marker's progress: ``seen`` matching lines of the ``count`` needed."""

    name: str
    seen: int
    count: int

    @property
    def proved(self) -> bool:
        return self.seen >= self.count

    def text(self) -> str:
        """``MADV 3/16`` style (the pattern, the lines seen, the count needed)."""
        pattern = self.name.rsplit(" x", 1)[0] if self.count > 1 else self.name
        return f"{pattern} {self.seen}/{self.count}"


class MarkerMatcher:
    """A profile's expected (counted) and forbidden markers; ``feed`` counts, ``match`` is stateless.

    ``missing`` tells which expected markers the log has not proved yet (docs/field-notes.md item 7: a
    flag only counts when the log proves it).
    """

    def __init__(self, expected: list[str], forbidden: list[str], counts: Sequence[int] = ()) -> None:
        self.expected = tuple(expected)
        self.forbidden = tuple(forbidden)
        self.counts = tuple(max(1, counts[i]) if i < len(counts) else 1 for i in range(len(self.expected)))
        self.names = marker_names(self.expected, self.counts)
        self._exp = [(name, _compile(p)) for name, p in zip(self.names, self.expected, strict=True)]
        self._forb = [(p, _compile(p)) for p in self.forbidden]
        self._hits: dict[str, int] = {}
        self._forbidden_seen: list[str] = []

    def match(self, raw: str) -> MarkerResult:
        """Markers matched by this one line (no state change)."""
        if not self._exp and not self._forb:
            return MarkerResult((), ())
        msg = normalize(raw).message
        plain = ANSI.sub("", raw.rstrip("\r\n"))
        exp = tuple(n for n, rx in self._exp if rx.search(msg) or rx.search(plain))
        forb = tuple(p for p, rx in self._forb if rx.search(msg) or rx.search(plain))
        return MarkerResult(exp, forb)

    def feed(self, raw: str) -> MarkerResult:
        """Match and count one line: the expected markers it proved (count just reached), forbidden ones."""
        res = self.match(raw)
        reached: list[str] = []
        for name in res.expected:
            n = self._hits.get(name, 0) + 1
            self._hits[name] = n
            if n == self._count_of(name):
                reached.append(name)
        for p in res.forbidden:
            if p not in self._forbidden_seen:
                self._forbidden_seen.append(p)
        return MarkerResult(tuple(reached), res.forbidden)

    def feed_all(self, lines: Iterable[str]) -> None:
        """Count many lines (an adopted container's start-up log)."""
        for line in lines:
            self.feed(line)

    def _count_of(self, name: str) -> int:
        return self.counts[self.names.index(name)]

    def tally(self) -> tuple[MarkerTally, ...]:
        """Every expected marker's progress, in config order."""
        return tuple(
            MarkerTally(n, self._hits.get(n, 0), c) for n, c in zip(self.names, self.counts, strict=True)
        )

    @property
    def seen(self) -> frozenset[str]:
        """The expected markers proved so far (by name)."""
        return frozenset(t.name for t in self.tally() if t.proved)

    @property
    def missing(self) -> tuple[str, ...]:
        """The expected markers not proved yet (by name), in config order."""
        return tuple(t.name for t in self.tally() if not t.proved)

    @property
    def forbidden_seen(self) -> tuple[str, ...]:
        return tuple(self._forbidden_seen)

    @property
    def all_expected_seen(self) -> bool:
        return not self.missing

    def reset(self) -> None:
        """Forget what was seen (a new boot)."""
        self._hits.clear()
        self._forbidden_seen.clear()


def _compile(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"invalid log marker regex {pattern!r}: {exc}") from exc


def marker_matcher(expected: list[str], forbidden: list[str], counts: Sequence[int] = ()) -> MarkerMatcher:
    """A matcher for a profile's expected (with ``counts``, 1 each by default) and forbidden markers
    (regexes; ValueError if invalid)."""
    return MarkerMatcher(expected, forbidden, counts)
