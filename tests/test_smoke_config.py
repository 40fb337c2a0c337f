"""The smoke section of a profile: every key per kind, defaults, policy wiring, and errors naming file,
key path and value."""

from __future__ import annotations

from pathlib import Path

from supervisor.config import check_config, load_config, load_profile
from supervisor.config.smoke import DEFAULT_DECODE_PROMPT, SmokeConfig, SmokeGate
from supervisor.core.vllm.smoke import THINK_MARKERS, GateSpec
from supervisor.daemon.build import policy_for
from tests.test_config import MINIMAL, find, profile, write

EVERY_KEY = (
    MINIMAL
    + """\
smoke:
  gates:
    - kind: stream_usage
      policy: warn
      prompt: Count to five.
      max_tokens: 8
      timeout_s: 20
    - kind: tool_call
      name: tools
      tool: lookup_city
      prompt: Where is Paris?
      max_tokens: 100
      timeout_s: 30
    - kind: degeneration
      threshold: 0.4
      max_tokens: 128
    - kind: contains
      name: capital
      substring: Paris
      prompt: What is the capital of France?
"""
)


def test_no_smoke_section_means_no_gates(tmp_path: Path) -> None:
    """Absent (or empty) smoke: no gates, so the first generation alone decides."""
    assert load_profile(profile(tmp_path, MINIMAL)).smoke == SmokeConfig()
    empty = load_profile(profile(tmp_path, MINIMAL + "smoke:\n  gates: []\n", "q.yaml"))
    assert empty.smoke.gates == ()


def test_every_key_is_read(tmp_path: Path) -> None:
    """Each key of each kind lands in its gate; unset keys take the kind's defaults."""
    gates = load_profile(profile(tmp_path, EVERY_KEY)).smoke.gates
    assert gates[0] == SmokeGate(
        name="stream_usage",
        kind="stream_usage",
        policy="warn",
        prompt="Count to five.",
        max_tokens=8,
        timeout_s=20.0,
    )
    assert gates[1] == SmokeGate(
        name="tools",
        kind="tool_call",
        policy="fail",
        prompt="Where is Paris?",
        max_tokens=100,
        timeout_s=30.0,
        tool="lookup_city",
    )
    assert (gates[2].name, gates[2].threshold, gates[2].max_tokens, gates[2].policy) == (
        "degeneration",
        0.4,
        128,
        "fail",
    )
    assert gates[2].prompt == "Write two sentences about the sea."
    assert (gates[3].name, gates[3].substring, gates[3].max_tokens) == ("capital", "Paris", 32)


def test_defaults_per_kind(tmp_path: Path) -> None:
    """Only the kind given: policy fail, 60 s, threshold 0.5, tool get_weather, 64 tokens for long answers."""
    body = MINIMAL + "smoke:\n  gates:\n    - kind: degeneration\n    - kind: tool_call\n"
    deg, tool = load_profile(profile(tmp_path, body)).smoke.gates
    assert (deg.policy, deg.timeout_s, deg.threshold, deg.max_tokens) == ("fail", 60.0, 0.5, 64)
    assert (tool.tool, tool.max_tokens) == ("get_weather", 64)
    assert "weather" in tool.prompt


def test_policy_carries_the_gates_to_the_machine(tmp_path: Path) -> None:
    """policy_for hands the machine each gate's name, kind and policy, in config order."""
    prof = profile(tmp_path, EVERY_KEY.replace("image: img:1", "image: img:1\n  name: p"))
    daemon = write(tmp_path / "daemon.yaml", f"state_dir: {tmp_path / 's'}\nprofiles: [{prof}]\n")
    config = load_config(daemon)
    assert policy_for(config.profiles[0], config).smoke_gates == (
        GateSpec("stream_usage", "stream_usage", "warn"),
        GateSpec("tools", "tool_call", "fail"),
        GateSpec("degeneration", "degeneration", "fail"),
        GateSpec("capital", "contains", "fail"),
    )


def test_bad_gates_name_file_key_and_value(tmp_path: Path) -> None:
    """Every bad gate value is reported with the file, its key path and the value."""
    body = (
        MINIMAL
        + """\
smoke:
  gates:
    - kind: jokes
    - kind: degeneration
      policy: maybe
      threshold: 1.5
    - kind: contains
    - kind: tool_call
      tool: "get weather!"
      max_tokens: 0
    - kind: contains
      name: other
      substring: x
      threshold: 0.3
    - kind: stream_usage
      name: contains
    - policy: warn
    - just a string
  gate: []
"""
    )
    f = profile(tmp_path, body)
    problems = check_config(f)
    kind = find(problems, "smoke.gates[0].kind")
    assert str(kind) == (
        f"{f}: smoke.gates[0].kind: must be one of stream_usage, tool_call, degeneration, contains, "
        "think_leak, decode_floor "
        "(got 'jokes')"
    )
    assert find(problems, "smoke.gates[1].policy").value == "'maybe'"
    assert find(problems, "smoke.gates[1].threshold").message == "must be <= 1"
    assert find(problems, "smoke.gates[2].substring").message == "required key is missing"
    assert find(problems, "smoke.gates[3].tool").value == "'get weather!'"
    assert find(problems, "smoke.gates[3].max_tokens").message == "must be >= 1"
    # a key of another kind is unknown on this one
    assert find(problems, "smoke.gates[4].threshold").message == "unknown key"
    assert "another gate" in find(problems, "smoke.gates[5].name").message
    assert find(problems, "smoke.gates[6].kind").message == "required key is missing"
    assert "must be a mapping" in find(problems, "smoke.gates[7]").message
    assert "did you mean 'gates'" in find(problems, "smoke.gate").message
    assert len(problems) == 11


def test_wrong_shapes(tmp_path: Path) -> None:
    """smoke must be a mapping, gates a list; an empty substring and a bad name are refused."""
    assert (
        "must be a mapping"
        in find(check_config(profile(tmp_path, MINIMAL + "smoke: [1]\n")), "smoke").message
    )
    f = profile(tmp_path, MINIMAL + "smoke:\n  gates: {kind: contains}\n", "b.yaml")
    assert "must be a list" in find(check_config(f), "smoke.gates").message
    body = MINIMAL + "smoke:\n  gates:\n    - {kind: contains, substring: '', name: '-x'}\n"
    problems = check_config(profile(tmp_path, body, "c.yaml"))
    assert find(problems, "smoke.gates[0].substring").message == "must not be empty"
    assert find(problems, "smoke.gates[0].name").value == "'-x'"
    many = (
        MINIMAL
        + "smoke:\n  gates:\n"
        + "".join(f"    - {{kind: stream_usage, name: g{i}}}\n" for i in range(17))
    )
    assert "at most 16" in find(check_config(profile(tmp_path, many, "d.yaml")), "smoke.gates").message


REASONING = MINIMAL.replace(
    "  image: img:1\n", "  image: img:1\n  command: [--model, m, --reasoning-parser, qwen3]\n"
)


def test_reasoning_gates_are_read(tmp_path: Path) -> None:
    """think_leak (default or own markers), decode_floor (its floor, the fixed canary) and
    enable_thinking on any gate (absent: not sent)."""
    body = REASONING + (
        "smoke:\n  gates:\n"
        "    - kind: think_leak\n"
        "    - {kind: think_leak, name: own, markers: ['<reasoning>'], enable_thinking: true}\n"
        "    - {kind: decode_floor, min_tokens_per_s: 15}\n"
        "    - {kind: contains, substring: Paris, enable_thinking: false}\n"
    )
    leak, own, floor, contains = load_profile(profile(tmp_path, body)).smoke.gates
    assert (leak.markers, leak.max_tokens, leak.enable_thinking) == (THINK_MARKERS, 64, None)
    assert (own.markers, own.enable_thinking) == (("<reasoning>",), True)
    assert (floor.min_tokens_per_s, floor.max_tokens, floor.prompt) == (15.0, 64, DEFAULT_DECODE_PROMPT)
    assert contains.enable_thinking is False


def test_bad_reasoning_gates(tmp_path: Path) -> None:
    """think_leak without --reasoning-parser, decode_floor without its floor or with one token, empty
    markers, a non-boolean enable_thinking: each names its key."""
    body = MINIMAL + (
        "smoke:\n  gates:\n"
        "    - kind: think_leak\n"
        "    - {kind: decode_floor, max_tokens: 1}\n"
        "    - {kind: think_leak, name: b, markers: [], enable_thinking: 'no'}\n"
        "    - {kind: decode_floor, name: c, min_tokens_per_s: 0}\n"
    )
    problems = check_config(profile(tmp_path, body))
    assert find(problems, "smoke.gates[0].kind").message == (
        "a think_leak gate needs vLLM's --reasoning-parser in container.command"
    )
    assert find(problems, "smoke.gates[1].min_tokens_per_s").message == "required key is missing"
    assert find(problems, "smoke.gates[1].max_tokens").message == "a decode speed needs at least 2 tokens"
    assert find(problems, "smoke.gates[2].markers").value == "()"
    assert find(problems, "smoke.gates[2].enable_thinking").message == "must be true or false, not a string"
    assert find(problems, "smoke.gates[3].min_tokens_per_s").message == "must be greater than 0"
