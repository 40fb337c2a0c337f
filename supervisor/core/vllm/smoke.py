"""Smoke gates: checks of a fresh vLLM server's answers after every start and maintenance restart (pure).

The daemon runs the configured gates off the loop (``RunSmokeGates``) once the first generation
succeeded and answers with one :class:`GateResult` per gate; the machine decides from those and the
gates' policies (``fail``: the start fails, ``warn``: a warning and it serves). See docs/operations.md
"Smoke gates".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from supervisor.core.vocab import Outcome

#: The kinds of gate (profile key ``smoke.gates[].kind``).
KIND_STREAM_USAGE: Final = "stream_usage"
KIND_TOOL_CALL: Final = "tool_call"
KIND_DEGENERATION: Final = "degeneration"
KIND_CONTAINS: Final = "contains"
KIND_THINK_LEAK: Final = "think_leak"
KIND_DECODE_FLOOR: Final = "decode_floor"
GATE_KINDS: Final = (
    KIND_STREAM_USAGE,
    KIND_TOOL_CALL,
    KIND_DEGENERATION,
    KIND_CONTAINS,
    KIND_THINK_LEAK,
    KIND_DECODE_FLOOR,
)
#: Reasoning markup that must not reach ``content`` when vLLM runs a reasoning parser (the start and end
#: tokens of vLLM 0.32's parsers: DeepSeek-R1/Qwen3 ``<think>``, Mistral ``[THINK]``, Seed-OSS, Kimi).
THINK_MARKERS: Final = (
    "<think>",
    "</think>",
    "[THINK]",
    "[/THINK]",
    "<seed:think>",
    "</seed:think>",
    "\u25c1think\u25b7",
    "\u25c1/think\u25b7",
)
#: The tool_choice modes the tool_call gate tries, in order (``required`` alone gave false failures).
TOOL_CHOICES: Final = ("required", "auto")
#: What a failed gate does: ``fail`` fails the start, ``warn`` alerts and serves.
POLICY_FAIL: Final = "fail"
POLICY_WARN: Final = "warn"
GATE_POLICIES: Final = (POLICY_FAIL, POLICY_WARN)
#: Ledger outcome of a start failed by a ``fail`` gate of ``kind``: ``failed_smoke_<kind>``.
OUTCOME_PREFIX: Final = "failed_smoke_"
#: Every kind has its Outcome member (a kind without one fails at import).
_OUTCOMES: Final = {kind: Outcome(OUTCOME_PREFIX + kind) for kind in GATE_KINDS}


@dataclass(frozen=True)
class GateSpec:
    """One configured gate as the machine sees it: its name (unique per profile), kind and policy."""

    name: str
    kind: str
    policy: str


def outcome_for(kind: str) -> Outcome:
    """The ledger outcome of a start failed by a gate of ``kind``."""
    return _OUTCOMES[kind]


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


def judged_text(content: str, reasoning: str) -> str:
    """The text a gate judges: the answer's ``content``, or its reasoning when the content is empty (a
    thinking model that spent its tokens thinking leaves ``content`` empty: docs/vllm-facts.md
    "Reasoning output")."""
    return content if content.strip() else reasoning


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


#: A reasoning preamble by its shape, no tags: the answer opens with a heading that names its thinking
#: (field report 001: ``Thinking Process:\n\n1. **Analyze the Request:**``; ``**Thought process**:``;
#: ``思考过程：``), or with the way a model talks to itself (``Okay, the user asks ...``, ``好的，用户...``).
PREAMBLE = re.compile(
    r"\A\s*(?:#{1,6}\s*)?(?:\*\*|__)?\s*(?:"
    r"(?:thinking|thought|reasoning|analysis)(?:\s+process)?|let me think|"
    r"思考过程|思考|思路|推理过程|分析过程|内心独白"
    r")\s*(?:\*\*|__)?\s*[:：]"
    r"|\A\s*(?:okay|ok|alright|hmm)[,.]?\s+(?:so\s+)?(?:the user|let me|i need to|i should)\b"
    r"|\A\s*(?:好的|嗯|好)[，,。]?\s*(?:用户|我需要|让我|我得|首先)",
    re.IGNORECASE,
)


def judge_think_leak(content: str, markers: tuple[str, ...]) -> tuple[bool, str]:
    """(ok, detail): no reasoning in ``content``: neither its markup (the reasoning parser took it all out)
    nor a plain preamble shaped like thinking (:data:`PREAMBLE`: a model that thinks without tags)."""
    found = [m for m in markers if m in content]
    if found:
        return False, f"reasoning markup {', '.join(found)} in the content: {sample(content)}"
    if PREAMBLE.search(content):
        return False, f"a reasoning preamble opens the content: {sample(content)}"
    return True, "no reasoning in the content"


def decode_rate(tokens: int | None, last_ms: float | None) -> float | None:
    """Tokens per second of a streamed answer: its completion tokens over the time from sending the request
    to the last chunk carrying text (the time to the first token included: real vLLM 0.32's chunks can arrive
    in one burst, so the time between the first and the last is not the decode speed; docs/operations.md
    "Smoke gates"). None when that cannot be measured."""
    if tokens is None or tokens < 1 or last_ms is None or last_ms <= 0:
        return None
    return tokens / (last_ms / 1000.0)


def judge_decode_floor(rate: float | None, tokens: int | None, floor: float) -> tuple[bool, str]:
    """(ok, detail): the decode rate of the canary is at least ``floor`` tokens/s."""
    if rate is None:
        return False, f"decode speed not measurable ({tokens} tokens streamed)"
    if rate < floor:
        return False, f"{rate:.1f} tokens/s < {floor:g} over {tokens} tokens"
    return True, f"{rate:.1f} tokens/s >= {floor:g} over {tokens} tokens"


def judge_tool_call(tool: str, called: tuple[str, ...], choice: str, text: str) -> tuple[bool, str]:
    """(ok, detail): the answer to a request with ``tool_choice`` ``choice`` called ``tool``."""
    names = ", ".join(called) or "none"
    if tool in called:
        return True, f"tool calls ({choice}): {names}"
    return False, f"tool calls ({choice}): {names}; answer {sample(text)}"
