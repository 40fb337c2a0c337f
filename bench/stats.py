"""Summaries of repeated trials (n, median, min, max) and the final table."""

from __future__ import annotations

import statistics
from dataclasses import dataclass


@dataclass(frozen=True)
class Summary:
    """n, median, min and max of one measured quantity (in ``unit``)."""

    n: int
    median: float | None
    min: float | None
    max: float | None
    unit: str

    def as_dict(self) -> dict[str, object]:
        return {"n": self.n, "median": self.median, "min": self.min, "max": self.max, "unit": self.unit}


def summarize(values: list[float], unit: str, digits: int = 3) -> Summary:
    """Summary of ``values`` (all None when there are none)."""
    if not values:
        return Summary(0, None, None, None, unit)
    return Summary(
        len(values),
        round(statistics.median(values), digits),
        round(min(values), digits),
        round(max(values), digits),
        unit,
    )


@dataclass(frozen=True)
class Row:
    """One line of the final table: a quantity, its summary, the target and whether it was met."""

    metric: str
    summary: Summary
    target: str
    met: bool | None


def table(rows: list[Row]) -> str:
    """The rows as a fixed-width text table."""

    def fmt(v: float | None) -> str:
        return "-" if v is None else f"{v:g}"

    head = ("metric", "n", "median", "min", "max", "unit", "target", "met")
    lines = [head]
    for r in rows:
        s = r.summary
        met = "-" if r.met is None else ("yes" if r.met else "NO")
        lines.append((r.metric, str(s.n), fmt(s.median), fmt(s.min), fmt(s.max), s.unit, r.target, met))
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in lines
    )
