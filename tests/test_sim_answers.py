"""The simulator's answers (pure): a thinking model's fields per vLLM era, thinking turned off, the leak
mode, the streamed deltas, reasoning_tokens, and tool_choice required vs auto."""

from __future__ import annotations

from typing import Any

import pytest

from supervisor.sim.simgen import THINK_TOKENS, Answers, answers_from_env

OFFER: dict[str, Any] = {"tools": [{"type": "function", "function": {"name": "get_weather"}}]}
THINK_OFF = {"chat_template_kwargs": {"enable_thinking": False}}


def test_a_short_answer_is_thinking_only_and_a_long_one_answers_after_thinking() -> None:
    """vLLM 0.32's reasoning parser: thinking in `reasoning`, content null while it thinks."""
    a = Answers(reasoning="reasoning")
    assert a.message(4, {}) == {"content": None, "reasoning": "the quick brown fox"}
    long = a.message(THINK_TOKENS + 3, {})
    assert long["content"] == "the quick brown"
    assert len(long["reasoning"].split()) == THINK_TOKENS
    assert a.usage_details(THINK_TOKENS + 3, {}) == {"completion_tokens_details": {"reasoning_tokens": 24}}
    assert a.delta(True, " fox") == {"reasoning": " fox"}
    assert a.delta(False, " fox") == {"content": " fox"}


def test_field_names_of_older_vllm_and_thinking_off() -> None:
    """`reasoning_content` (up to 0.11), both (between), and enable_thinking false: no thinking at all."""
    assert Answers(reasoning="reasoning_content").message(2, {}) == {
        "content": None,
        "reasoning_content": "the quick",
    }
    both = Answers(reasoning="both")
    assert both.delta(True, "x") == {"reasoning": "x", "reasoning_content": "x"}
    assert both.message(2, THINK_OFF) == {
        "content": "the quick",
        "reasoning": None,
        "reasoning_content": None,
    }
    assert both.usage_details(2, THINK_OFF) == {"completion_tokens_details": {"reasoning_tokens": 0}}
    assert Answers().message(2, {}) == {"content": "the quick"}
    assert Answers().usage_details(2, {}) == {}


def test_leak_mode_keeps_the_markup_in_the_content() -> None:
    """No parser: the thinking stays in content between <think> and </think>."""
    leak = Answers(reasoning="leak")
    content = leak.message(THINK_TOKENS + 2, {})["content"]
    assert content.startswith("<think>\nthe quick brown")
    assert content.endswith("\n</think>\n\nthe quick")
    assert leak.message(3, {}) == {"content": "<think>\nthe quick brown"}  # cut off while thinking
    assert leak.delta(True, "x") == {"content": "x"}
    assert leak.message(2, THINK_OFF) == {"content": "the quick"}


def test_tool_choice_required_and_auto() -> None:
    """Default: required and auto both call the first tool; VSIM_TOOL_CALLS=auto: only auto does."""
    default = answers_from_env({})
    assert default.tool_call({**OFFER, "tool_choice": "required"}) is not None
    auto = default.tool_call({**OFFER, "tool_choice": "auto"})
    assert auto is not None
    assert auto["function"]["name"] == "get_weather"
    only_auto = answers_from_env({"VSIM_TOOL_CALLS": "auto"})
    assert only_auto.tool_call({**OFFER, "tool_choice": "required"}) is None
    assert only_auto.tool_call({**OFFER, "tool_choice": "auto"}) is not None
    assert answers_from_env({"VSIM_TOOL_CALLS": "0"}).tool_call({**OFFER, "tool_choice": "auto"}) is None


def test_knob_values() -> None:
    """VSIM_REASONING takes the modes or nothing; anything else is a usage error."""
    assert answers_from_env({"VSIM_REASONING": "both"}).reasoning == "both"
    assert answers_from_env({}).reasoning == ""
    with pytest.raises(ValueError, match="VSIM_REASONING='deepseek'"):
        answers_from_env({"VSIM_REASONING": "deepseek"})


def test_plain_modes_open_the_content_with_a_preamble_and_no_tags() -> None:
    for mode, opening in (
        ("plain", "Thinking Process:\n\n1. **Analyze"),
        ("plain_zh", "思考过程：\n\n1. **分析"),
    ):
        content = Answers(reasoning=mode).message(THINK_TOKENS + 2, {})["content"]
        assert content.startswith(opening)
        assert "<think>" not in content
        assert Answers(reasoning=mode).message(2, THINK_OFF) == {"content": "the quick"}
