"""What the simulator answers: the generated text, tool calls, thinking, and the knobs that spoil them.

Stdlib only (copied into the simulator image). The knobs (``VSIM_DEGENERATE``, ``VSIM_TOOL_CALLS``,
``VSIM_STREAM_USAGE``) make each smoke gate of the supervisor fail on demand; ``VSIM_REASONING`` answers
as a thinking model behind vLLM's reasoning parser (docs/simulator.md; docs/vllm-facts.md "Reasoning
output").
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

#: The answer text, one word per completion token. Long enough that a 64-token answer does not loop
#: (its repeated character 3-gram share stays well under the degeneration gate's default 0.5).
_TEXT = (
    "the quick brown fox jumps over a lazy dog and runs away into the green valley where seven old "
    "farmers grow wheat beside a narrow river while children paint small boats that drift past quiet "
    "mills toward harbour towns full of sailors mending nets under grey clouds before winter storms "
    "arrive from northern mountains covered with pine forests and frozen lakes which glitter brightly "
    "at dawn when hungry wolves wander across empty fields searching for rabbits hiding beneath "
    "thorny hedges near abandoned stone chapels"
)
PASSAGE = _TEXT.split(" ")
#: ``VSIM_REASONING``: off; the thinking in ``reasoning`` (vLLM 0.32), in ``reasoning_content`` (up to
#: 0.11), in both (the releases between); ``leak``: left in ``content`` inside ``<think>...</think>``;
#: ``plain``/``plain_zh``: left in ``content`` as a plain preamble, no tags (field report 001's
#: "Thinking Process:" paragraph, and its Chinese form).
REASONING_MODES = ("", "reasoning", "reasoning_content", "both", "leak", "plain", "plain_zh")
#: The plain preambles a model that thinks without tags writes first.
PREAMBLES = {
    "plain": "Thinking Process:\n\n1. **Analyze the Request:** ",
    "plain_zh": "思考过程：\n\n1. **分析请求：** ",
}
#: Modes whose thinking stays in ``content``.
LEAK_MODES = ("leak", "plain", "plain_zh")
#: A thinking answer's first tokens are its thinking: an answer of at most this many is thinking only.
THINK_TOKENS = 24


@dataclass(frozen=True)
class Answers:
    """How answers are spoiled: ``degenerate`` (each token is this text), no tool calls, no usage chunk."""

    degenerate: str = ""
    tool_calls: bool = True
    stream_usage: bool = True
    reasoning: str = ""  # one of REASONING_MODES
    tool_required: bool = True  # False: ``tool_choice: required`` gets text, only ``auto`` gets the call

    def piece(self, i: int) -> str:
        """The text of completion token ``i`` (the first word has no leading space)."""
        if self.degenerate:
            return self.degenerate
        word = PASSAGE[i % len(PASSAGE)]
        return word if i == 0 else " " + word

    def text(self, n: int) -> str:
        """The whole answer of ``n`` tokens."""
        return "".join(self.piece(i) for i in range(n))

    def pieces(self, n: int, body: dict[str, Any]) -> list[tuple[bool, str]]:
        """(thinking, text) of each of the ``n`` completion tokens of a chat answer: a thinking model
        thinks its first THINK_TOKENS tokens (the passage), then answers (the passage again), unless the
        request turned thinking off (``chat_template_kwargs.enable_thinking: false``, as Qwen3's template
        reads it). In ``leak`` mode the thinking is wrapped in ``<think>``/``</think>``."""
        kwargs = body.get("chat_template_kwargs")
        off = isinstance(kwargs, dict) and kwargs.get("enable_thinking") is False
        k = 0 if not self.reasoning or off else min(n, THINK_TOKENS)
        out = [(True, self.piece(i)) for i in range(k)] + [(False, self.piece(i)) for i in range(n - k)]
        if self.reasoning == "leak" and k:
            out[0] = (True, "<think>\n" + out[0][1])
            if k < n:  # the model closed its thinking before answering
                out[k - 1] = (True, out[k - 1][1] + "\n</think>\n\n")
        elif self.reasoning in PREAMBLES and k:
            out[0] = (True, PREAMBLES[self.reasoning] + out[0][1])
            if k < n:
                out[k - 1] = (True, out[k - 1][1] + "\n\n")
        return out

    def delta(self, thinking: bool, text: str) -> dict[str, Any]:
        """A streamed chat delta of one token: vLLM 0.32 sends only the fields set (``exclude_unset``)."""
        if not thinking or self.reasoning in LEAK_MODES:
            return {"content": text}
        return dict.fromkeys(self._reasoning_keys(), text)

    def message(self, n: int, body: dict[str, Any]) -> dict[str, Any]:
        """The content (and reasoning) fields of a non-streamed chat answer of ``n`` tokens: with a
        reasoning parser, ``content`` is null when the thinking took every token."""
        if not self.reasoning:
            return {"content": self.text(n)}
        parts = self.pieces(n, body)
        thought = "".join(t for thinking, t in parts if thinking)
        answer = "".join(t for thinking, t in parts if not thinking)
        if self.reasoning in LEAK_MODES:
            return {"content": thought + answer}
        return {"content": answer or None, **dict.fromkeys(self._reasoning_keys(), thought or None)}

    def usage_details(self, n: int, body: dict[str, Any]) -> dict[str, Any]:
        """``usage.completion_tokens_details`` as vLLM 0.32 adds it when it runs a reasoning parser."""
        if not self.reasoning or self.reasoning in LEAK_MODES:
            return {}
        k = sum(1 for thinking, _t in self.pieces(n, body) if thinking)
        return {"completion_tokens_details": {"reasoning_tokens": k}}

    def _reasoning_keys(self) -> tuple[str, ...]:
        return ("reasoning", "reasoning_content") if self.reasoning == "both" else (self.reasoning,)

    def tool_call(self, body: dict[str, Any]) -> dict[str, Any] | None:
        """The tool call of a chat request offering tools (``tool_choice`` ``required`` or ``auto``: the
        first tool, or a named function), as vLLM 0.32 answers it; None when none is asked for, with
        ``VSIM_TOOL_CALLS=0``, or for ``required`` with ``VSIM_TOOL_CALLS=auto``."""
        tools = [t for t in body.get("tools") or [] if isinstance(t, dict)]
        choice = body.get("tool_choice")
        if not self.tool_calls or not tools:
            return None
        fn: dict[str, Any] | None = None
        if (choice == "required" and self.tool_required) or choice == "auto":
            fn = tools[0].get("function")
        elif isinstance(choice, dict) and isinstance(choice.get("function"), dict):
            wanted = choice["function"].get("name")
            fn = next(
                (t.get("function") for t in tools if (t.get("function") or {}).get("name") == wanted), None
            )
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            return None
        raw = fn.get("parameters")
        params: dict[str, Any] = raw if isinstance(raw, dict) else {}
        required = [k for k in params.get("required") or [] if isinstance(k, str)]
        arguments = json.dumps({k: "sim" for k in required})
        return {
            "id": f"chatcmpl-tool-{uuid.uuid4().hex}",
            "type": "function",
            "function": {"name": fn["name"], "arguments": arguments},
        }


def _flag(env: dict[str, str], name: str) -> bool:
    raw = env.get(name, "1").strip().lower()
    if raw not in ("0", "1", "true", "false"):
        raise ValueError(f"{name}={raw!r}: 0 or 1")
    return raw in ("1", "true")


def answers_from_env(env: dict[str, str]) -> Answers:
    """The ``VSIM_DEGENERATE``, ``VSIM_TOOL_CALLS``, ``VSIM_STREAM_USAGE`` and ``VSIM_REASONING`` knobs
    (ValueError if bad)."""
    reasoning = env.get("VSIM_REASONING", "").strip()
    if reasoning not in REASONING_MODES:
        raise ValueError(f"VSIM_REASONING={reasoning!r}: one of {', '.join(REASONING_MODES[1:])} or empty")
    auto_only = env.get("VSIM_TOOL_CALLS", "").strip().lower() == "auto"
    return Answers(
        degenerate=env.get("VSIM_DEGENERATE", ""),
        tool_calls=auto_only or _flag(env, "VSIM_TOOL_CALLS"),
        stream_usage=_flag(env, "VSIM_STREAM_USAGE"),
        reasoning=reasoning,
        tool_required=not auto_only,
    )
