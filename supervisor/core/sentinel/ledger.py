"""The ledgers read back (pure): a run's baseline from earlier starts (the perf ledger), the start ledger
with each start's canary figures (what ``supervisorctl history`` shows), the load times of earlier ready
starts of a config (what the machine's ETA and slow-load check use)."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from supervisor.core.vllm.kv_pool import KEY_FINGERPRINT
from supervisor.core.vocab import Outcome

#: Newest perf rows read for a run's baseline, and the earlier starts it keeps.
PERF_ROWS = 500
HISTORY_STARTS = 10


def history_of(
    rows: Sequence[Mapping[str, Any]], fingerprint: str | None, container_id: str
) -> tuple[tuple[float, ...], tuple[str, ...]]:
    """Per-start decode figures of the earlier starts of ``fingerprint`` (oldest first, the newest
    ``HISTORY_STARTS``) and the backends the newest of them logged."""
    starts: dict[str, list[float]] = {}
    backends: dict[str, tuple[str, ...]] = {}
    for row in rows:
        cid = row.get("container_id")
        if not isinstance(cid, str) or cid == container_id or row.get("fingerprint") != fingerprint:
            continue
        tps = row.get("decode_tps")
        if isinstance(tps, int | float) and not row.get("slow"):
            starts.setdefault(cid, []).append(float(tps))
        if row.get("backends"):
            backends[cid] = tuple(str(b) for b in row["backends"])
    figures = [statistics.median(v) for v in starts.values() if v][-HISTORY_STARTS:]
    newest = list(backends.values())[-1] if backends else ()
    return tuple(figures), newest


def with_decode(
    starts: Sequence[Mapping[str, Any]], perf: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """Start ledger rows with each start's median canary figures (``decode_tps``, ``ttft_ms``; None: no
    canary ran on that container): what `supervisorctl history` shows per start."""
    tps: dict[str, list[float]] = {}
    ttft: dict[str, list[float]] = {}
    for row in perf:
        cid = row.get("container_id")
        if isinstance(cid, str) and isinstance(row.get("decode_tps"), int | float):
            tps.setdefault(cid, []).append(float(row["decode_tps"]))
            if isinstance(row.get("ttft_ms"), int | float):
                ttft.setdefault(cid, []).append(float(row["ttft_ms"]))
    out = []
    for start in starts:
        cid = start.get("container_id")
        d, t = tps.get(cid or ""), ttft.get(cid or "")
        out.append(
            {
                **start,
                "decode_tps": round(statistics.median(d), 2) if d else None,
                "ttft_ms": round(statistics.median(t), 1) if t else None,
            }
        )
    return out


#: How many newest ready starts of a config the median looks at.
HISTORY_WINDOW = 20


def load_times(rows: Sequence[Mapping[str, Any]], fingerprint: str | None) -> tuple[float, ...]:
    """``load_s`` of the newest ready starts of ``fingerprint`` (newest first, at most HISTORY_WINDOW);
    nothing for an unknown fingerprint (an adopted container: its config is unknown)."""
    if fingerprint is None:
        return ()
    out: list[float] = []
    for row in reversed(rows):
        load = row.get("load_s")
        if row.get("outcome") != Outcome.READY or row.get(KEY_FINGERPRINT) != fingerprint:
            continue
        if isinstance(load, int | float) and not isinstance(load, bool) and load > 0:
            out.append(float(load))
            if len(out) >= HISTORY_WINDOW:
                break
    return tuple(out)
