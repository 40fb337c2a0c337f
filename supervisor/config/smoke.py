"""The profile's ``smoke:`` section: the gates a fresh server must pass before it serves.

``smoke: {gates: [{kind, policy, name, prompt, max_tokens, timeout_s, enable_thinking, <kind keys>}]}``.
Each kind reads only its own keys; any other key of a gate is reported as unknown (file, key path, value). See
docs/configuration.md and docs/operations.md "Smoke gates".
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from supervisor.config.bounds import NAME_RULE, name_ok
from supervisor.config.reader import Section
from supervisor.core.vllm.smoke import (
    GATE_KINDS,
    GATE_POLICIES,
    KIND_CONTAINS,
    KIND_DECODE_FLOOR,
    KIND_DEGENERATION,
    KIND_STREAM_USAGE,
    KIND_THINK_LEAK,
    KIND_TOOL_CALL,
    POLICY_FAIL,
    THINK_MARKERS,
    GateSpec,
)

#: Default prompt of a gate; the tool_call gate asks for a tool.
DEFAULT_PROMPT = "Write two sentences about the sea."
DEFAULT_TOOL_PROMPT = "What is the weather in Paris? Use the tool."
#: The decode_floor gate's fixed canary: a long, easy answer whose speed is the engine's, not the prompt's.
DEFAULT_DECODE_PROMPT = "Count from one to one hundred in words, separated by commas."
#: Default answer length per kind: the degeneration gate needs a longer answer to see a loop, the
#: decode_floor gate enough tokens that one slow chunk does not decide.
DEFAULT_MAX_TOKENS = {
    KIND_STREAM_USAGE: 16,
    KIND_TOOL_CALL: 64,
    KIND_DEGENERATION: 64,
    KIND_CONTAINS: 32,
    KIND_THINK_LEAK: 64,
    KIND_DECODE_FLOOR: 64,
}
DEFAULT_THRESHOLD = 0.5
DEFAULT_TOOL = "get_weather"
DEFAULT_TIMEOUT_S = 60.0
MAX_GATES = 16
#: OpenAI function names: letters, digits, underscores and dashes, at most 64.
_TOOL_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


@dataclass(frozen=True)
class SmokeGate:
    """One gate: what it sends and how it judges the answer."""

    name: str
    kind: str
    policy: str = POLICY_FAIL
    prompt: str = DEFAULT_PROMPT
    max_tokens: int = 16
    timeout_s: float = DEFAULT_TIMEOUT_S
    threshold: float = DEFAULT_THRESHOLD  # degeneration: the highest repeated 3-gram share allowed
    substring: str = ""  # contains: what the answer must hold
    tool: str = DEFAULT_TOOL  # tool_call: the function the answer must call
    enable_thinking: bool | None = None  # sent as chat_template_kwargs.enable_thinking (None: not sent)
    markers: tuple[str, ...] = THINK_MARKERS  # think_leak: markup that must not be in the content
    min_tokens_per_s: float = 0.0  # decode_floor: the lowest decode speed allowed

    def spec(self) -> GateSpec:
        """What the state machine needs of this gate."""
        return GateSpec(self.name, self.kind, self.policy)


@dataclass(frozen=True)
class SmokeConfig:
    """The profile's smoke gates, in the order they run (empty: the first generation alone)."""

    gates: tuple[SmokeGate, ...] = ()


def parse_smoke(sec: Section, reasoning_parser: bool | None = None) -> SmokeConfig:
    """``smoke:`` (problems go to the section's context). ``reasoning_parser``: whether the container's
    command sets vLLM's ``--reasoning-parser`` (None: unknown); a think_leak gate needs one."""
    if not sec.ok:
        return SmokeConfig()
    gates: list[SmokeGate] = []
    seen: set[str] = set()
    raw = sec.raw("gates")
    if isinstance(raw, list) and len(raw) > MAX_GATES:
        sec.bad(
            "gates", f"at most {MAX_GATES} gates (each one is a request before the server serves)", len(raw)
        )
    for where, item in sec.items("gates"):
        gate = _gate(Section(sec.ctx, item, where), seen)
        if gate is not None:
            gates.append(gate)
        if gate is not None and gate.kind == KIND_THINK_LEAK and reasoning_parser is False:
            # without a parser vLLM leaves the thinking in content by design: the gate would always fail
            sec.ctx.add(
                f"{where}.kind",
                "a think_leak gate needs vLLM's --reasoning-parser in container.command",
                gate.kind,
            )
    sec.done()
    return SmokeConfig(tuple(gates))


def _gate(g: Section, seen: set[str]) -> SmokeGate | None:
    if not g.ok:
        return None
    before = len(g.ctx.problems)
    # without a known kind, which other keys belong is unknown: only the kind is reported
    if not g.required("kind"):
        return None
    kind = g.str_("kind", "", choices=GATE_KINDS)
    if not kind:
        return None
    name = g.str_("name", kind)
    if not name_ok(name):
        g.bad("name", f"gate {NAME_RULE}", name)
    elif name in seen:
        g.bad("name", "another gate of this profile has this name (set 'name' to tell them apart)", name)
    seen.add(name)
    default_prompt = {KIND_TOOL_CALL: DEFAULT_TOOL_PROMPT, KIND_DECODE_FLOOR: DEFAULT_DECODE_PROMPT}.get(
        kind, DEFAULT_PROMPT
    )
    gate = SmokeGate(
        name=name,
        kind=kind,
        policy=g.str_("policy", POLICY_FAIL, choices=GATE_POLICIES),
        prompt=g.str_("prompt", default_prompt),
        max_tokens=g.int_("max_tokens", DEFAULT_MAX_TOKENS[kind], lo=1, hi=4096),
        timeout_s=g.float_("timeout_s", DEFAULT_TIMEOUT_S, positive=True),
        enable_thinking=g.bool_("enable_thinking", None),
    )
    if kind == KIND_DEGENERATION:
        gate = replace(gate, threshold=g.float_("threshold", DEFAULT_THRESHOLD, lo=0.0, hi=1.0))
    elif kind == KIND_CONTAINS:
        if g.required("substring"):
            gate = replace(gate, substring=g.str_("substring", "", nonempty=False))
            if not gate.substring:
                g.bad("substring", "must not be empty", gate.substring)
    elif kind == KIND_TOOL_CALL:
        tool = g.str_("tool", DEFAULT_TOOL)
        if not _TOOL_RE.fullmatch(tool):
            g.bad("tool", "a function name: letters, digits, '_' and '-', at most 64", tool)
        gate = replace(gate, tool=tool)
    elif kind == KIND_THINK_LEAK and g.has("markers"):
        markers = g.str_list("markers")
        if not markers or not all(m.strip() for m in markers):
            g.bad("markers", "a list of non-empty strings (the reasoning markup to look for)", markers)
        gate = replace(gate, markers=markers)
    elif kind == KIND_DECODE_FLOOR:
        if g.required("min_tokens_per_s"):
            gate = replace(gate, min_tokens_per_s=g.float_("min_tokens_per_s", 0.0, positive=True))
        if gate.max_tokens < 2:
            g.bad("max_tokens", "a decode speed needs at least 2 tokens", gate.max_tokens)
    g.done()  # keys of another kind (e.g. 'threshold' on a contains gate) are unknown here
    return gate if len(g.ctx.problems) == before else None
