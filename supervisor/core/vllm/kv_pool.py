"""The KV-pool lottery, pure: config fingerprint, baseline over the start ledger, the judgement of a draw
(alert, what grew, pin), redraw policy.

On a unified-memory box the same vLLM config can get very different KV pools from one start to the next
(field: 1,013,816 / 557,599 / 557,599 tokens). This module decides, from plain values, what the daemon
should say and do about a start's pool; the daemon reads the ledger and acts. See docs/kv-pool.md.

Ledger rows are the mappings :meth:`Store.read_starts` returns (oldest first). Besides the keys the
store documents, a row may carry the keys named ``KEY_*`` below; older rows lack them.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from supervisor.core.events import KvBaseline
from supervisor.core.profile_state import KvDraw
from supervisor.core.spec.model import ContainerSpec
from supervisor.core.spec.secrets import MASK, mask_command, secret_env_names
from supervisor.core.vllm import memory
from supervisor.core.vllm.cmdline import argv_of
from supervisor.core.vllm.kv_pin import PinAdvice, pin_advice
from supervisor.core.vocab import Outcome

#: Ledger keys this module defines (all optional in a row).
KEY_FINGERPRINT = "fingerprint"  # config_fingerprint() of the start
KEY_GMU = "gmu"  # --gpu-memory-utilization of the start (float)
KEY_IMAGE_ID = "image_id"  # the Docker image id the container ran ("sha256:...")
KEY_KV_GIB = "kv_gib"  # vLLM's "Available KV cache memory: X GiB"
KEY_MODEL_GIB = "model_gib"  # vLLM's "Model loading took X GiB"
KEY_START_ID = "start_id"  # identity of a start; rows without it are identified by container_id
KEY_USAGE = "usage"  # vLLM's "Actual usage" breakdown, {part: GiB} (core/vllm/memory.py PARTS)
#: Outcomes whose kv_tokens count as a draw of the lottery (a redrawn start did get a pool).
DRAW_OUTCOMES = (Outcome.READY, Outcome.REDRAWN)
#: How many earlier draws the baseline looks at (newest first).
BASELINE_WINDOW = 20
_FINGERPRINT_LEN = 12
SPARK_CHARS = "▁▂▃▄▅▆▇█"
SPARK_NONE = "·"

RedrawDecision = Literal["redraw", "accept", "give_up"]


def config_fingerprint(
    image: str, command: Sequence[str], env: Mapping[str, str], secret_names: Collection[str]
) -> str:
    """A short stable hash of image + command + env; secret values (names kept) and env order do not count.

    ``command`` is the full argv (entrypoint + command); ``image`` is best the image id, so a re-pulled tag
    starts a new baseline. Secret values are hashed as the one mask (:mod:`supervisor.core.spec.secrets`):
    ``secret_names``' env values and the command's secret flag values (``--api-key``, ``--hf-token``).
    """
    hidden = set(secret_names)
    payload = {
        "image": image,
        "command": mask_command(command),
        "env": sorted((k, MASK if k in hidden else v) for k, v in env.items()),
    }
    text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:_FINGERPRINT_LEN]


def spec_fingerprint(spec: ContainerSpec, image_id: str | None, declared: Collection[str] = ()) -> str:
    """:func:`config_fingerprint` of the container the daemon creates from ``spec``.

    ``image_id`` (what Docker created it from) stands in for the tag when known; the command is the
    spec's entrypoint (when it sets one) plus its command; ``declared`` names env vars holding secrets.
    """
    env = spec.env_dict()
    command = argv_of(spec)
    return config_fingerprint(image_id or spec.image, command, env, secret_env_names(env, declared))


def _int_tokens(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value


def _row_id(row: Mapping[str, Any]) -> object:
    return row.get(KEY_START_ID) or row.get("container_id")


def earlier_draws(
    rows: Sequence[Mapping[str, Any]],
    fingerprint: str | None,
    exclude: object = None,
    window: int = BASELINE_WINDOW,
) -> tuple[int, ...]:
    """kv_tokens of the draws BEFORE this start with the same fingerprint, newest first (at most ``window``).

    ``rows`` are ledger rows, oldest first. ``exclude`` is this start's id (``start_id``, else
    ``container_id``): that row and every later one are ignored, so the current pool is never part of
    its own baseline. Without ``exclude`` (the row not written yet) all rows are earlier. A draw is a row
    whose outcome is in DRAW_OUTCOMES with an integer kv_tokens. ``fingerprint`` None matches every row.
    """
    earlier: Sequence[Mapping[str, Any]] = rows
    if exclude is not None:
        for i, row in enumerate(rows):
            if _row_id(row) == exclude:
                earlier = rows[:i]
                break
    values: list[int] = []
    for row in reversed(earlier):
        tokens = _int_tokens(row.get("kv_tokens"))
        if tokens is None or row.get("outcome") not in DRAW_OUTCOMES:
            continue
        if fingerprint is not None and row.get(KEY_FINGERPRINT) != fingerprint:
            continue
        values.append(tokens)
        if len(values) >= window:
            break
    return tuple(values)


def best_draw(
    rows: Sequence[Mapping[str, Any]],
    fingerprint: str | None,
    exclude: object = None,
    window: int = BASELINE_WINDOW,
) -> Mapping[str, Any] | None:
    """The ledger row of the baseline (:func:`baseline`'s draw; the newest of equal ones), or None."""
    best = baseline(rows, fingerprint, exclude, window)
    if best is None:
        return None
    earlier: Sequence[Mapping[str, Any]] = rows
    if exclude is not None:
        ids = [_row_id(r) for r in rows]
        earlier = rows[: ids.index(exclude)] if exclude in ids else rows
    for row in reversed(earlier):
        same = fingerprint is None or row.get(KEY_FINGERPRINT) == fingerprint
        if same and row.get("outcome") in DRAW_OUTCOMES and _int_tokens(row.get("kv_tokens")) == best:
            return dict(row)
    return None  # not reached: the best is one of those rows


def baseline(
    rows: Sequence[Mapping[str, Any]],
    fingerprint: str | None,
    exclude: object = None,
    window: int = BASELINE_WINDOW,
) -> int | None:
    """The best pool of the newest ``window`` earlier draws of the fingerprint (None without any): what this
    config can get on this box, so repeated bad draws never become the norm (docs/kv-pool.md)."""
    return max(earlier_draws(rows, fingerprint, exclude, window), default=None)


def bad_streak(recent: Sequence[int], best: int | None, warn_drop_pct: float) -> int:
    """How many of the newest earlier draws in a row (``recent``, newest first) were more than
    ``warn_drop_pct`` % under ``best``: the bad starts before this one."""
    if not best:
        return 0
    n = 0
    for tokens in recent:
        if (best - tokens) / best * 100 <= warn_drop_pct:
            break
        n += 1
    return n


@dataclass(frozen=True)
class KvVerdict:
    """A warning about one start's KV pool."""

    kind: Literal["below_floor", "drop"]
    tokens: int
    baseline: int | None
    floor: int | None
    change_pct: float | None  # signed change against the baseline (negative = smaller)
    message: str

    @property
    def event(self) -> str:
        """The dotted event name: ``kv_pool.below_floor`` or ``kv_pool.lottery``."""
        return "kv_pool.below_floor" if self.kind == "below_floor" else "kv_pool.lottery"


def _pct(change: float) -> str:
    return f"{change:+.0f} %"


def verdict(
    tokens: int | None,
    baseline: int | None,
    warn_below_tokens: int | None,
    warn_drop_pct: float,
    bad_before: int = 0,
) -> KvVerdict | None:
    """The arithmetic of :func:`judge`: a warning when ``tokens`` is below the floor or more than
    ``warn_drop_pct`` % under the baseline (the best earlier draw); ``bad_before`` bad starts came right
    before this one.

    The floor wins when both apply (its message still names the baseline). No pool, no verdict.
    """
    if tokens is None:
        return None
    change = (tokens - baseline) / baseline * 100 if baseline else None
    in_a_row = f"; {bad_before + 1} bad starts in a row" if bad_before else ""
    against = f", baseline {baseline:,} ({_pct(change)}){in_a_row}" if baseline and change is not None else ""
    if warn_below_tokens is not None and tokens < warn_below_tokens:
        return KvVerdict(
            "below_floor",
            tokens,
            baseline,
            warn_below_tokens,
            change,
            f"KV pool below floor: {tokens:,} tokens, floor {warn_below_tokens:,}{against}",
        )
    if change is not None and -change > warn_drop_pct:
        message = f"KV pool lottery: {tokens:,} tokens{against}"
        return KvVerdict("drop", tokens, baseline, warn_below_tokens, change, message)
    return None


@dataclass(frozen=True)
class KvJudgement:
    """What :func:`judge` says of a bad pool: the verdict, the bad starts right before it, the memory part
    that grew against the best draw, the pin for it (``pin`` advise/apply) and the operator's sentence."""

    verdict: KvVerdict
    bad_before: int
    grew: str | None
    pin: PinAdvice | None
    message: str


def judge(
    draw: KvDraw,
    *,
    warn_below_tokens: int | None,
    warn_drop_pct: float,
    pin_mode: str,
    mem_available_gib: float | None,
    reserve_gib: float,
) -> KvJudgement | None:
    """The one judgement of a start's pool against the baseline of its config (docs/kv-pool.md): None when
    it is fine (or unknown); else the warning, naming what grew and, with ``pin_mode`` advise or apply,
    the ``--kv-cache-memory-bytes`` of the best draw (keeping ``reserve_gib`` of the host free)."""
    bad_before = bad_streak(draw.recent, draw.baseline_tokens, warn_drop_pct)
    found = verdict(draw.tokens, draw.baseline_tokens, warn_below_tokens, warn_drop_pct, bad_before)
    if found is None:
        return None
    grew = memory.what_grew(draw.usage, draw.best_usage)
    advice = _pin(draw, mem_available_gib, reserve_gib) if pin_mode in ("advise", "apply") else None
    message = found.message + (f"; {grew}" if grew else "") + (f"; {advice.text(pin_mode)}" if advice else "")
    return KvJudgement(found, bad_before, grew, advice, message)


def _pin(draw: KvDraw, mem_available_gib: float | None, reserve_gib: float) -> PinAdvice | None:
    """The ``--kv-cache-memory-bytes`` of the best draw for this bad one (KV bytes per token of this start,
    else of the best draw), keeping the host reserve (docs/kv-pool.md "Pin")."""
    per_token = memory.bytes_per_token(draw.gib, draw.tokens) or memory.bytes_per_token(
        draw.best_gib, draw.baseline_tokens
    )
    non_kv = memory.non_kv_gib(draw.usage)
    return pin_advice(
        draw.baseline_tokens,
        per_token,
        draw.gib,
        mem_available_gib,
        non_kv if non_kv is not None else draw.model_gib,
        reserve_gib,
    )


def baseline_of(
    rows: Sequence[Mapping[str, Any]], fingerprint: str | None, exclude: object = None
) -> KvBaseline:
    """The baseline of a start from the ledger ``rows`` (oldest first), as the machine's input: the best of
    the earlier draws of its config, those draws (newest first) and the best draw's memory breakdown."""
    recent = earlier_draws(rows, fingerprint, exclude=exclude)
    best = best_draw(rows, fingerprint, exclude=exclude) or {}
    kv_gib = best.get(KEY_KV_GIB)
    best_gib = float(kv_gib) if isinstance(kv_gib, int | float) and not isinstance(kv_gib, bool) else None
    return KvBaseline(
        max(recent, default=None), fingerprint, recent, memory.as_usage(best.get(KEY_USAGE)), best_gib
    )


def redraw_decision(
    tokens: int | None, min_tokens: int | None, redraws_so_far: int, max_redraws: int
) -> RedrawDecision:
    """Whether a start's pool is kept: "accept", "redraw" (restart to draw again), or "give_up" (serve, warn).

    ``redraws_so_far`` counts the redraws in a row just before this start (0 for a fresh start).
    An unknown pool or no ``min_tokens`` is always accepted.
    """
    if tokens is None or min_tokens is None or tokens >= min_tokens:
        return "accept"
    return "redraw" if redraws_so_far < max_redraws else "give_up"


def redraw_message(decision: RedrawDecision, tokens: int, min_tokens: int, redraws_so_far: int) -> str:
    """The operator-facing line for a "redraw" or "give_up" decision."""
    if decision == "redraw":
        return (
            f"KV pool redraw {redraws_so_far + 1}: {tokens:,} tokens is below kv_pool.min_tokens "
            f"{min_tokens:,}; restarting to draw again"
        )
    return (
        f"KV pool below kv_pool.min_tokens after {redraws_so_far} redraws: {tokens:,} tokens, "
        f"minimum {min_tokens:,}; serving anyway"
    )


def ledger_fields(
    *,
    fingerprint: str | None,
    gmu: float | None,
    image_id: str | None,
    kv_gib: float | None,
    model_gib: float | None,
    start_id: str | None = None,
    usage: Sequence[tuple[str, float]] = (),
) -> dict[str, object]:
    """The extra ledger keys of one start, to merge into the row given to ``Store.append_start``."""
    row: dict[str, object] = {
        KEY_FINGERPRINT: fingerprint,
        KEY_GMU: gmu,
        KEY_IMAGE_ID: image_id,
        KEY_KV_GIB: kv_gib,
        KEY_MODEL_GIB: model_gib,
    }
    if start_id is not None:
        row[KEY_START_ID] = start_id
    if usage:
        row[KEY_USAGE] = dict(usage)
    return row


def sparkline(values: Sequence[int | None]) -> str:
    """One block character per value, scaled from 0 to the largest (so a halved pool is half height).

    None (a start without a pool) is ``·``; non-positive values are the lowest block.
    """
    known = [v for v in values if v is not None]
    top = max(known, default=0)
    out: list[str] = []
    for v in values:
        if v is None:
            out.append(SPARK_NONE)
        elif top <= 0 or v <= 0:
            out.append(SPARK_CHARS[0])
        else:
            level = math.ceil(v / top * len(SPARK_CHARS)) - 1
            out.append(SPARK_CHARS[max(0, min(len(SPARK_CHARS) - 1, level))])
    return "".join(out)
