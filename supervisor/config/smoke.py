"""The profile's ``smoke:`` section: the gates a fresh server must pass before it serves.

``smoke: {gates: [{kind, policy, name, prompt, max_tokens, timeout_s, <kind keys>}]}``. Each kind reads
only its own keys; any other key of a gate is reported as unknown (file, key path, value). See
docs/configuration.md and docs/operations.md "Smoke gates".
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from supervisor.config.reader import Section
from supervisor.core.smoke import (
    GATE_KINDS,
    GATE_POLICIES,
    KIND_CONTAINS,
    KIND_DEGENERATION,
    KIND_STREAM_USAGE,
    KIND_TOOL_CALL,
    POLICY_FAIL,
    GateSpec,
)

#: Default prompt of a gate; the tool_call gate asks for a tool.
DEFAULT_PROMPT = "Write two sentences about the sea."
DEFAULT_TOOL_PROMPT = "What is the weather in Paris? Use the tool."
#: Default answer length per kind: the degeneration gate needs a longer answer to see a loop.
DEFAULT_MAX_TOKENS = {KIND_STREAM_USAGE: 16, KIND_TOOL_CALL: 64, KIND_DEGENERATION: 64, KIND_CONTAINS: 32}
DEFAULT_THRESHOLD = 0.5
DEFAULT_TOOL = "get_weather"
DEFAULT_TIMEOUT_S = 60.0
MAX_GATES = 16
_NAME_RE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]*$")
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

    def spec(self) -> GateSpec:
        """What the state machine needs of this gate."""
        return GateSpec(self.name, self.kind, self.policy)


@dataclass(frozen=True)
class SmokeConfig:
    """The profile's smoke gates, in the order they run (empty: the first generation alone)."""

    gates: tuple[SmokeGate, ...] = ()


def parse_smoke(sec: Section) -> SmokeConfig:
    """``smoke:`` (problems go to the section's context)."""
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
    if not _NAME_RE.fullmatch(name):
        g.bad("name", "gate names are [a-zA-Z0-9][a-zA-Z0-9_.-]*", name)
    elif name in seen:
        g.bad("name", "another gate of this profile has this name (set 'name' to tell them apart)", name)
    seen.add(name)
    default_prompt = DEFAULT_TOOL_PROMPT if kind == KIND_TOOL_CALL else DEFAULT_PROMPT
    gate = SmokeGate(
        name=name,
        kind=kind,
        policy=g.str_("policy", POLICY_FAIL, choices=GATE_POLICIES),
        prompt=g.str_("prompt", default_prompt),
        max_tokens=g.int_("max_tokens", DEFAULT_MAX_TOKENS[kind], lo=1, hi=4096),
        timeout_s=g.float_("timeout_s", DEFAULT_TIMEOUT_S, positive=True),
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
    g.done()  # keys of another kind (e.g. 'threshold' on a contains gate) are unknown here
    return gate if len(g.ctx.problems) == before else None
