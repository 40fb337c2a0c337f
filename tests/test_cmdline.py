"""core/vllm/cmdline.py (pure): the one reader of a vLLM command line, every spelling vLLM takes."""

from __future__ import annotations

import pytest

from supervisor.core.spec.model import ContainerSpec
from supervisor.core.vllm import cmdline
from supervisor.core.vllm.progress import EngineShape

SERVE = ("vllm", "serve", "/models/q")


@pytest.mark.parametrize(
    ("argv", "want"),
    [
        (("--gpu-memory-utilization", "0.73"), 0.73),
        (("--gpu-memory-utilization=0.8",), 0.8),
        (("--device-memory-utilization", "0.5"), 0.5),  # vLLM 0.32's alias
        (("--gpu_memory_utilization=0.6",), 0.6),  # FlexibleArgumentParser: underscores are dashes
        (("--device_memory_utilization", "0.55"), 0.55),
        (("--gpu-memory-utilization", "0.5", "--gpu-memory-utilization=0.9"), 0.9),  # argparse: last wins
        (("--gpu_memory_utilization", "0.9", "--gpu-memory-utilization", "0.5"), 0.5),
        ((), None),
        (("--gpu-memory-utilization",), None),
        (("--gpu-memory-utilization", "high"), None),
        (("--gpu-memory-utilization", "nan"), None),
        (("--gpu-memory-utilization-x", "0.5"), None),
    ],
)
def test_gmu_in_every_spelling_the_last_one_wins(argv: tuple[str, ...], want: float | None) -> None:
    assert cmdline.gpu_memory_utilization((*SERVE, *argv)) == want


def test_port_key_and_names() -> None:
    assert cmdline.port(SERVE) == cmdline.DEFAULT_PORT == 8000
    assert cmdline.port((*SERVE, "--port", "9000", "--port=9001")) == 9001
    assert cmdline.port((*SERVE, "--port", "x")) == 8000
    assert cmdline.api_keys((*SERVE, "--api_key", "a", "b", "--port", "1")) == ("a", "b")
    assert cmdline.api_keys((*SERVE, "--api-keys", "x")) == ()
    assert cmdline.api_keys((*SERVE, "--api-key", "a", "--api-key=c")) == ("c",)
    assert cmdline.flag_values((*SERVE, "--api-key"), "--api-key") == []
    assert cmdline.flag_values(SERVE, "--api-key") is None
    assert cmdline.served_model_name(SERVE) == "/models/q"
    assert cmdline.served_model_name((*SERVE, "--served_model_name", "q", "q2")) == "q"
    assert cmdline.reasoning_parser((*SERVE, "--reasoning-parser=qwen3")) == "qwen3"
    assert cmdline.reasoning_parser(SERVE) is None
    assert cmdline.API_KEY_ENV == "VLLM_API_KEY"


def test_a_negative_number_is_a_value_not_an_option() -> None:
    assert cmdline.flag_value(("--seed", "-1"), "--seed") == "-1"


def test_engine_shape_from_the_spark_recipe_and_every_form() -> None:
    argv = (*SERVE, "--max-model-len", "262144", "--max-num-batched-tokens", "4096")
    assert cmdline.engine_shape(argv) == EngineShape(True, 4096, 262144)
    monolithic = ("--no-enable-chunked-prefill", "--max_model_len=32k")
    assert cmdline.engine_shape(monolithic) == EngineShape(False, None, 32000)
    assert cmdline.engine_shape(("--enable-chunked-prefill=false",)).chunked_prefill is False
    assert cmdline.engine_shape(("--no-enable-chunked-prefill", "--enable-chunked-prefill")).chunked_prefill
    assert cmdline.engine_shape(("--max-model-len", "auto")).max_model_len is None
    assert cmdline.engine_shape(("--max-num-batched-tokens", "2048", "--max_num_batched_tokens=1024")) == (
        EngineShape(True, 1024, None)
    )


def test_argv_of_puts_the_entrypoint_first() -> None:
    spec = ContainerSpec(name="c", image="i", entrypoint=("vllm", "serve"), command=("m", "--port", "9"))
    assert cmdline.argv_of(spec) == ("vllm", "serve", "m", "--port", "9")
    assert cmdline.port(cmdline.argv_of(spec)) == 9
