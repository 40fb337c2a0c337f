"""Smoke gates: checks of a fresh server's answers after every start and maintenance restart (pure).

The daemon runs the configured gates off the loop (``RunSmokeGates``) once the first generation
succeeded and answers with one :class:`GateResult` per gate; the machine decides from those and the
gates' policies (``fail``: the start fails, ``warn``: a warning and it serves). See docs/operations.md
"Smoke gates".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

#: The kinds of gate (profile key ``smoke.gates[].kind``).
KIND_STREAM_USAGE: Final = "stream_usage"
KIND_TOOL_CALL: Final = "tool_call"
KIND_DEGENERATION: Final = "degeneration"
KIND_CONTAINS: Final = "contains"
GATE_KINDS: Final = (KIND_STREAM_USAGE, KIND_TOOL_CALL, KIND_DEGENERATION, KIND_CONTAINS)
#: What a failed gate does: ``fail`` fails the start, ``warn`` alerts and serves.
POLICY_FAIL: Final = "fail"
POLICY_WARN: Final = "warn"
GATE_POLICIES: Final = (POLICY_FAIL, POLICY_WARN)
#: Ledger outcome of a start failed by a ``fail`` gate of ``kind``: ``failed_smoke_<kind>``.
OUTCOME_PREFIX: Final = "failed_smoke_"


@dataclass(frozen=True)
class GateSpec:
    """One configured gate as the machine sees it: its name (unique per profile), kind and policy."""

    name: str
    kind: str
    policy: str


@dataclass(frozen=True)
class GateResult:
    """One gate's verdict: ``ok``; ``detail`` says why not (or what was seen); ``value`` is the gate's
    measure (stream_usage: completion tokens in the last chunk; degeneration: the repeated share)."""

    name: str
    kind: str
    ok: bool
    detail: str = ""
    latency_ms: float | None = None
    value: float | None = None


@dataclass(frozen=True)
class GateRecord:
    """The last result of one gate as kept in the profile's state (status ``smoke``)."""

    name: str = ""
    kind: str = ""
    policy: str = ""
    ok: bool = False
    detail: str = ""
    at: float | None = None
    latency_ms: float | None = None
    value: float | None = None


def outcome_for(kind: str) -> str:
    """The ledger outcome of a start failed by a gate of ``kind``."""
    return OUTCOME_PREFIX + kind


def repeated_trigram_share(text: str) -> float:
    """The share of character 3-grams of ``text`` that repeat an earlier one (0.0 for < 3 characters).

    English prose of a few hundred characters scores about 0.2-0.35; ``!!!!!!`` or one word forever
    scores above 0.95; a sentence looping scores about 0.65 and more.
    """
    total = len(text) - 2
    if total <= 0:
        return 0.0
    distinct = {text[i : i + 3] for i in range(total)}
    return 1.0 - len(distinct) / total


def judge_degeneration(text: str, threshold: float) -> tuple[bool, float, str]:
    """(ok, share, detail): degenerate when the repeated 3-gram share exceeds ``threshold``."""
    share = repeated_trigram_share(text)
    if not text.strip():
        return False, share, "empty answer"
    if share > threshold:
        return False, share, f"repeated 3-gram share {share:.2f} > {threshold:.2f}: {sample(text)}"
    return True, share, f"repeated 3-gram share {share:.2f}"


def judge_contains(text: str, substring: str) -> tuple[bool, str]:
    """(ok, detail): the answer holds ``substring`` (case-sensitive)."""
    if substring in text:
        return True, f"found {substring!r}"
    return False, f"{substring!r} not in the answer: {sample(text)}"


def sample(text: str, limit: int = 80) -> str:
    """A short quoted excerpt of an answer for a detail line."""
    flat = " ".join(text.split()) if text.strip() else text
    return repr(flat if len(flat) <= limit else flat[: limit - 3] + "...")


def policy_of(gates: tuple[GateSpec, ...], name: str) -> str | None:
    """The policy of the gate called ``name`` (None: not configured, e.g. removed by a reload)."""
    return next((g.policy for g in gates if g.name == name), None)
