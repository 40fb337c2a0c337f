"""The smoke gates against the REAL vLLM CPU server (tiny random-weight model: gibberish text, no reasoning
parser, no tool parser). The gates it can pass (stream usage, degeneration, contains, the decode floor)
pass on its real answers, with ``enable_thinking`` sent to its chat template; the same gates fail where
they must (a substring it never writes, a floor no engine reaches, a tool call it cannot make).

The run's shared tiny server (tests/real_server.py, the ``real_vllm`` fixture of tests/conftest.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from supervisor.adapters.vllm import chat as chat_probes
from supervisor.config.model import Profile
from supervisor.config.smoke import DEFAULT_PROMPT, SmokeConfig, SmokeGate
from supervisor.core.events import SmokeChecked
from supervisor.core.probe_events import GateResult
from supervisor.core.spec.model import ContainerSpec
from supervisor.core.vllm.smoke import repeated_trigram_share
from supervisor.daemon.executor import probe_jobs
from tests.real_server import RealVllm
from tools.realvllm import SERVED_MODEL_NAME

pytestmark = [pytest.mark.real_vllm, pytest.mark.docker, pytest.mark.slow]

#: Generous: two CPU cores shared with other work.
TIMEOUT_S = 180.0


def _run(server: RealVllm, tmp_path: Path, gates: tuple[SmokeGate, ...]) -> dict[str, GateResult]:
    profile = Profile(
        name="real",
        source=tmp_path / "real.yaml",
        container=ContainerSpec(name="real", image="unused"),
        base_url=server.base_url,
        served_model_name=SERVED_MODEL_NAME,
        smoke=SmokeConfig(gates),
    )
    [answer] = probe_jobs.smoke_gates(profile, lambda: server.api_key)
    assert isinstance(answer, SmokeChecked)
    return {r.name: r for r in answer.results}


def test_the_gates_the_tiny_model_can_pass(real_vllm: RealVllm, tmp_path: Path) -> None:
    """stream usage, contains (a word of its own greedy answer) and a 1 tok/s decode floor pass on the real
    server; degeneration judges the very answer the server gives (enable_thinking sent); a foreign
    substring, a 10^6 tok/s floor and a tool call without a tool parser fail."""
    greedy = chat_probes.chat(
        real_vllm.base_url,
        real_vllm.api_key,
        SERVED_MODEL_NAME,
        prompt=DEFAULT_PROMPT,
        max_tokens=32,
        timeout=TIMEOUT_S,
    )
    assert greedy.ok, greedy
    assert greedy.reasoning == ""  # no reasoning parser: nothing but content
    assert greedy.text.strip(), greedy
    word = max(greedy.text.split(), key=len)  # temperature 0: the contains gate gets the same answer
    looped = chat_probes.chat(
        real_vllm.base_url,
        real_vllm.api_key,
        SERVED_MODEL_NAME,
        prompt=DEFAULT_PROMPT,
        max_tokens=64,
        timeout=TIMEOUT_S,
    )
    gates = (
        SmokeGate("stream", "stream_usage", max_tokens=16, timeout_s=TIMEOUT_S),
        SmokeGate("loop", "degeneration", max_tokens=64, timeout_s=TIMEOUT_S, enable_thinking=False),
        SmokeGate("own", "contains", max_tokens=32, timeout_s=TIMEOUT_S, substring=word),
        SmokeGate("speed", "decode_floor", max_tokens=64, timeout_s=TIMEOUT_S, min_tokens_per_s=1.0),
        SmokeGate("paris", "contains", max_tokens=32, timeout_s=TIMEOUT_S, substring="Paris is the capital"),
        SmokeGate("rocket", "decode_floor", max_tokens=64, timeout_s=TIMEOUT_S, min_tokens_per_s=1e6),
        SmokeGate("tools", "tool_call", max_tokens=64, timeout_s=TIMEOUT_S),
    )
    by = _run(real_vllm, tmp_path, gates)
    print({name: (r.ok, r.detail, r.value) for name, r in by.items()})  # the figures, for the record
    for name in ("stream", "own", "speed"):
        assert by[name].ok, by[name]
    assert by["stream"].value is not None
    assert by["stream"].value > 0
    assert by["speed"].value is not None
    assert by["speed"].value >= 1.0
    # the random model loops on this prompt (share 0.81 seen): the gate judges exactly what it was sent,
    # chat_template_kwargs included (the tiny model's template ignores enable_thinking)
    share = round(repeated_trigram_share(looped.text), 4)
    assert (by["loop"].value, by["loop"].ok) == (share, share <= 0.5), (by["loop"], looped.text)
    assert not by["paris"].ok
    assert by["paris"].detail.startswith("'Paris is the capital' not in the answer: ")
    assert not by["rocket"].ok
    assert " tokens/s < 1e+06 over " in by["rocket"].detail
    # without --enable-auto-tool-choice/--tool-call-parser vLLM 0.32 refuses both modes (HTTP 400)
    assert (by["tools"].ok, by["tools"].detail) == (
        False,
        "tool calls (required): HTTP 400; tool calls (auto): HTTP 400",
    )
