"""What the simulator answers: the generated text, tool calls, and the knobs that spoil them.

Stdlib only (copied into the simulator image). The knobs (``VSIM_DEGENERATE``, ``VSIM_TOOL_CALLS``,
``VSIM_STREAM_USAGE``) make each smoke gate of the supervisor fail on demand (docs/simulator.md).
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


@dataclass(frozen=True)
class Answers:
    """How answers are spoiled: ``degenerate`` (each token is this text), no tool calls, no usage chunk."""

    degenerate: str = ""
    tool_calls: bool = True
    stream_usage: bool = True

    def piece(self, i: int) -> str:
        """The text of completion token ``i`` (the first word has no leading space)."""
        if self.degenerate:
            return self.degenerate
        word = PASSAGE[i % len(PASSAGE)]
        return word if i == 0 else " " + word

    def text(self, n: int) -> str:
        """The whole answer of ``n`` tokens."""
        return "".join(self.piece(i) for i in range(n))

    def tool_call(self, body: dict[str, Any]) -> dict[str, Any] | None:
        """The tool call a chat request forces (``tool_choice`` ``required`` or a named function), as
        vLLM 0.32 answers it; None when none is forced, or ``VSIM_TOOL_CALLS=0``."""
        tools = [t for t in body.get("tools") or [] if isinstance(t, dict)]
        choice = body.get("tool_choice")
        if not self.tool_calls or not tools:
            return None
        fn: dict[str, Any] | None = None
        if choice == "required":
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
    """The ``VSIM_DEGENERATE``, ``VSIM_TOOL_CALLS`` and ``VSIM_STREAM_USAGE`` knobs (ValueError if bad)."""
    return Answers(
        degenerate=env.get("VSIM_DEGENERATE", ""),
        tool_calls=_flag(env, "VSIM_TOOL_CALLS"),
        stream_usage=_flag(env, "VSIM_STREAM_USAGE"),
    )
