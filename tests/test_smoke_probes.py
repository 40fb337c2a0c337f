"""The smoke gates' HTTP side against simulator containers on the real Docker engine: each gate passes on a
healthy server and fails on one spoiled by its VSIM_* knob."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import docker
import pytest

from supervisor.adapters.vllm import chat as chat_probes
from supervisor.config.model import ApiKeySource, Profile
from supervisor.config.smoke import SmokeConfig, SmokeGate
from supervisor.core.events import SmokeChecked
from supervisor.core.spec.model import ContainerSpec
from supervisor.daemon.executor import probe_jobs
from tests.sim_fixtures import SimHandle, start_sim

pytestmark = pytest.mark.docker

KEY = "sk-smoke-5e1f0a"
ARGS = ["--model", "/models/sim", "--served-model-name", "sim-model", "--api-key", KEY]
GATES = (
    SmokeGate("stream", "stream_usage", max_tokens=16, timeout_s=20),
    SmokeGate("tools", "tool_call", max_tokens=64, timeout_s=20, tool="get_weather"),
    SmokeGate("loop", "degeneration", max_tokens=64, timeout_s=20, threshold=0.5),
    SmokeGate("fox", "contains", max_tokens=32, timeout_s=20, substring="quick brown fox"),
)


def _profile(sim: SimHandle, tmp_path: Path) -> Profile:
    key_file = tmp_path / "key"
    fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(KEY)
    return Profile(
        name="p",
        source=tmp_path / "p.yaml",
        container=ContainerSpec(name="p", image="sim"),
        base_url=sim.url,
        served_model_name="sim-model",
        api_key=ApiKeySource(file=key_file),
        smoke=SmokeConfig(GATES),
    )


def _sim(client: docker.DockerClient, resources: Any, **env: str) -> SimHandle:
    sim = start_sim(
        client, resources, env={"VSIM_LOAD_SECONDS": "1", "VSIM_MAX_TOKENS_DEFAULT": "64", **env}, args=ARGS
    )
    sim.wait_ready()
    return sim


def test_every_gate_passes_on_a_healthy_server(
    docker_client: docker.DockerClient, resources: Any, sim_image: str, tmp_path: Path
) -> None:
    """Usage in the last chunk, a get_weather tool call, varied 64-token prose, the expected words."""
    sim = _sim(docker_client, resources)
    [answer] = probe_jobs.smoke_gates(_profile(sim, tmp_path), lambda: KEY)
    assert isinstance(answer, SmokeChecked)
    by = {r.name: r for r in answer.results}
    assert [r.name for r in answer.results] == ["stream", "tools", "loop", "fox"]
    assert all(r.ok for r in answer.results), answer.results
    assert by["stream"].value == 16.0
    assert by["stream"].detail == "completion_tokens 16 in the last of 19 chunks"
    assert by["tools"].detail == "tool calls (required): get_weather"
    assert by["loop"].value is not None
    assert by["loop"].value < 0.3
    assert by["fox"].detail == "found 'quick brown fox'"
    assert all(r.latency_ms is not None and r.latency_ms > 0 for r in answer.results)
    # the raw answers behind the verdicts
    s = chat_probes.stream_chat(sim.url, KEY, "sim-model", prompt="hi", max_tokens=4, timeout=10)
    assert (s.ok, s.done, s.last_usage_tokens, s.text) == (True, True, 4, "the quick brown fox")
    a = chat_probes.chat(sim.url, KEY, "sim-model", prompt="hi", max_tokens=8, timeout=10, tool="lookup")
    assert (a.ok, a.tool_calls, a.text, a.completion_tokens) == (True, ("lookup",), "", 8)


def test_each_gate_fails_on_a_spoiled_server(
    docker_client: docker.DockerClient, resources: Any, sim_image: str, tmp_path: Path
) -> None:
    """No usage chunk, no tool call, '!!!!' forever: each gate fails and says why."""
    sim = _sim(docker_client, resources, VSIM_STREAM_USAGE="0", VSIM_TOOL_CALLS="0", VSIM_DEGENERATE="!")
    [answer] = probe_jobs.smoke_gates(_profile(sim, tmp_path), lambda: KEY)
    assert isinstance(answer, SmokeChecked)
    by = {r.name: r for r in answer.results}
    assert not any(r.ok for r in answer.results), answer.results
    assert by["stream"].detail == ("no usage in the last of 18 chunks (stream_options.include_usage ignored)")
    assert by["tools"].detail.startswith("tool calls (required): none; answer '!!!!")
    assert "; tool calls (auto): none; answer '!!!!" in by["tools"].detail
    assert by["loop"].value is not None
    assert by["loop"].value > 0.95
    assert by["loop"].detail.startswith("repeated 3-gram share 0.9")
    assert by["fox"].detail.startswith("'quick brown fox' not in the answer: '!!!")


def test_a_gate_without_the_key_or_server_fails_with_the_http_error(
    docker_client: docker.DockerClient, resources: Any, sim_image: str, tmp_path: Path
) -> None:
    """A refused request (401) or no server at all is a failed gate with the error, never an exception."""
    sim = _sim(docker_client, resources)
    profile = _profile(sim, tmp_path)
    keyless = Profile(
        name="p", source=profile.source, container=profile.container, base_url=sim.url, smoke=profile.smoke
    )
    [answer] = probe_jobs.smoke_gates(keyless, lambda: None)
    assert isinstance(answer, SmokeChecked)
    assert {r.detail for r in answer.results} == {"HTTP 401"}
    sim.container.remove(force=True)
    gone = probe_jobs.smoke_gate(profile, GATES[0], KEY)
    assert not gone.ok
    assert gone.detail in ("connection refused", "connection error")


THINKING_GATES = (
    *GATES,
    SmokeGate("leak", "think_leak", max_tokens=64, timeout_s=20),
    SmokeGate("speed", "decode_floor", max_tokens=32, timeout_s=30, min_tokens_per_s=5.0),
)


@pytest.mark.parametrize("field", ["reasoning", "reasoning_content", "both"])
def test_a_reasoning_model_passes_every_gate(
    docker_client: docker.DockerClient, resources: Any, sim_image: str, tmp_path: Path, field: str
) -> None:
    """A thinking model behind vLLM's reasoning parser, in each field name vLLM used: short answers are
    thinking only (content null), so the gates judge the reasoning; longer ones answer after thinking."""
    sim = _sim(docker_client, resources, VSIM_REASONING=field, VSIM_GEN_SECONDS="1")
    profile = replace(_profile(sim, tmp_path), smoke=SmokeConfig(THINKING_GATES))
    [answer] = probe_jobs.smoke_gates(profile, lambda: KEY)
    assert isinstance(answer, SmokeChecked)
    assert all(r.ok for r in answer.results), answer.results
    by = {r.name: r for r in answer.results}
    assert by["leak"].detail == "no reasoning in the content"
    assert by["speed"].value is not None
    assert by["speed"].value >= 5.0
    # the raw answers: 8 tokens are all thinking; 30 are 24 thinking, then 6 of answer
    a = chat_probes.chat(sim.url, KEY, "sim-model", prompt="hi", max_tokens=8, timeout=10)
    assert (a.text, a.reasoning) == ("", "the quick brown fox jumps over a lazy")
    s = chat_probes.stream_chat(sim.url, KEY, "sim-model", prompt="hi", max_tokens=30, timeout=10)
    assert s.text == "the quick brown fox jumps over"
    assert s.reasoning.startswith("the quick brown fox")
    assert len(s.reasoning.split()) == 24
    assert s.first_token_ms is not None
    assert s.last_token_ms is not None
    assert s.last_token_ms > s.first_token_ms


def test_thinking_off_leaked_markup_and_a_slow_engine(
    docker_client: docker.DockerClient, resources: Any, sim_image: str, tmp_path: Path
) -> None:
    """<think> left in the content fails think_leak (not with enable_thinking false); a floor the engine
    cannot reach fails decode_floor; a server whose tool_choice "required" gives text passes on "auto"."""
    sim = _sim(docker_client, resources, VSIM_REASONING="leak", VSIM_TOOL_CALLS="auto", VSIM_GEN_SECONDS="1")
    gates = (
        SmokeGate("leak", "think_leak", max_tokens=64, timeout_s=20),
        SmokeGate("leak-off", "think_leak", max_tokens=64, timeout_s=20, enable_thinking=False),
        SmokeGate("speed", "decode_floor", max_tokens=32, timeout_s=30, min_tokens_per_s=100000.0),
        GATES[1],
    )
    profile = replace(_profile(sim, tmp_path), smoke=SmokeConfig(gates))
    [answer] = probe_jobs.smoke_gates(profile, lambda: KEY)
    assert isinstance(answer, SmokeChecked)
    by = {r.name: r for r in answer.results}
    assert not by["leak"].ok
    assert by["leak"].detail.startswith("reasoning markup <think>, </think> in the content: '<think> the")
    assert by["leak-off"].ok, by["leak-off"]
    assert not by["speed"].ok
    assert by["speed"].detail.endswith("tokens/s < 100000 over 32 tokens")
    assert by["tools"].ok, by["tools"]
    assert by["tools"].detail.startswith("tool calls (required): none; answer '<think>")
    assert by["tools"].detail.endswith("tool calls (auto): get_weather")


@pytest.mark.parametrize(
    ("mode", "opening"),
    [("plain", "'Thinking Process: 1. **Analyze"), ("plain_zh", "'思考过程： 1. **分析请求：**")],
)
def test_a_plain_thinking_preamble_fails_think_leak(
    docker_client: docker.DockerClient,
    resources: Any,
    sim_image: str,
    tmp_path: Path,
    mode: str,
    opening: str,
) -> None:
    """Field report 001's "green light that lies": the model opens its content with a plain "Thinking
    Process:" paragraph (or its Chinese form), no tags; think_leak fails it by its shape, and the same
    server with thinking off (a clean answer) passes."""
    sim = _sim(docker_client, resources, VSIM_REASONING=mode, VSIM_GEN_SECONDS="1")
    gates = (
        SmokeGate("leak", "think_leak", max_tokens=64, timeout_s=20),
        SmokeGate("leak-off", "think_leak", max_tokens=64, timeout_s=20, enable_thinking=False),
    )
    profile = replace(_profile(sim, tmp_path), smoke=SmokeConfig(gates))
    [answer] = probe_jobs.smoke_gates(profile, lambda: KEY)
    assert isinstance(answer, SmokeChecked)
    by = {r.name: r for r in answer.results}
    assert not by["leak"].ok
    assert by["leak"].detail.startswith(f"a reasoning preamble opens the content: {opening}"), by[
        "leak"
    ].detail
    assert by["leak-off"].ok, by["leak-off"]
    assert by["leak-off"].detail == "no reasoning in the content"
