"""Prometheus text parser and the vLLM metrics summary, on text in vLLM's real exposition format."""

# ruff: noqa: E501  -- verbatim log/exposition lines read better unsplit

from __future__ import annotations

import math

import pytest

from supervisor.core.vllm.metrics import Sample, VllmMetrics, parse_line, parse_prometheus

# Shape of vLLM 0.11 /metrics (prometheus_client: HELP/TYPE, sorted labels, engine="0", _total/_created).
V011 = """\
# HELP python_gc_objects_collected_total Objects collected during gc
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{generation="0"} 12345.0
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="Qwen/Qwen3-8B"} 3.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="Qwen/Qwen3-8B"} 1.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="Qwen/Qwen3-8B"} 0.125
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="Qwen/Qwen3-8B"} 10240.0
# HELP vllm:prompt_tokens_created Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_created gauge
vllm:prompt_tokens_created{engine="0",model_name="Qwen/Qwen3-8B"} 1.7296848e+09
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="Qwen/Qwen3-8B"} 5120.0
# HELP vllm:request_success_total Count of successfully processed requests.
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="Qwen/Qwen3-8B"} 7.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="Qwen/Qwen3-8B"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="Qwen/Qwen3-8B"} 7.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="Qwen/Qwen3-8B"} 7.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="Qwen/Qwen3-8B"} 0.42
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="auto",calculate_kv_scales="False",cpu_offload_gb="0",\
enable_prefix_caching="True",engine="0",gpu_memory_utilization="0.9",is_attention_free="False",\
num_cpu_blocks="None",num_gpu_blocks="26589",num_gpu_blocks_override="None",prefix_caching_hash_algo="builtin",\
sliding_window="None",swap_space="4",swap_space_bytes="4294967296"} 1.0
"""


def test_parse_groups_samples_by_name() -> None:
    """Samples are grouped by series name; HELP/TYPE lines are skipped; labels are a dict."""
    series = parse_prometheus(V011)
    assert series["vllm:num_requests_running"] == [
        Sample("vllm:num_requests_running", {"engine": "0", "model_name": "Qwen/Qwen3-8B"}, 3.0)
    ]
    buckets = series["vllm:time_to_first_token_seconds_bucket"]
    assert [b.labels["le"] for b in buckets] == ["0.001", "+Inf"]
    assert series["vllm:prompt_tokens_created"][0].value == pytest.approx(1.7296848e9)
    assert not any(name.startswith("#") for name in series)


def test_vllm_metrics_summary() -> None:
    """The 0.11-format text summarises to the supervisor's fields (numbers, blocks from cache_config_info)."""
    m = VllmMetrics.from_text(V011)
    assert m == VllmMetrics(
        requests_running=3.0,
        requests_waiting=1.0,
        generation_tokens_total=5120.0,
        prompt_tokens_total=10240.0,
        kv_cache_usage=0.125,
        num_gpu_blocks=26589,
        block_size=16,
        kv_cache_size_tokens=None,
    )


def test_missing_series_are_none_and_fallbacks() -> None:
    """Without vLLM series every field is None; gpu_cache_usage_perc is the fallback; DP engines are summed."""
    assert VllmMetrics.from_text("# only comments\nprocess_cpu_seconds_total 1.0\n") == VllmMetrics(
        None, None, None, None, None, None, None, None
    )
    text = (
        'vllm:gpu_cache_usage_perc{model_name="m"} 0.5\n'
        'vllm:num_requests_waiting{engine="0",model_name="m"} 2.0\n'
        'vllm:num_requests_waiting{engine="1",model_name="m"} 3.0\n'
        'vllm:cache_config_info{block_size="16",engine="0",kv_cache_size_tokens="1069759",num_gpu_blocks="None"} 1.0\n'
    )
    m = VllmMetrics.from_text(text)
    assert (m.kv_cache_usage, m.requests_waiting) == (0.5, 5.0)
    assert (m.num_gpu_blocks, m.kv_cache_size_tokens, m.block_size) == (None, 1069759, 16)


def test_escaped_labels_special_values_and_timestamps() -> None:
    """Escaped quotes/backslashes/newlines in label values, NaN/+Inf/-Inf and trailing timestamps parse."""
    s = parse_line(
        r'vllm:lora_requests_info{model_name="a \"quoted\" \\ path\nx",running="",waiting="b,c"} NaN'
    )
    assert s is not None
    assert s.labels == {"model_name": 'a "quoted" \\ path\nx', "running": "", "waiting": "b,c"}
    assert math.isnan(s.value)
    inf = parse_line('x_bucket{le="+Inf"} +Inf 1700000000000')
    assert inf is not None
    assert inf.value == math.inf
    neg = parse_line("y -Inf")
    assert neg is not None
    assert neg.value == -math.inf
    assert neg.labels == {}
    spaced = parse_line('z{ a = "1" , b="2", } 4.5e-1')
    assert spaced is not None
    assert spaced.labels == {"a": "1", "b": "2"}
    assert spaced.value == 0.45


def test_malformed_lines_skipped_or_raised() -> None:
    """Lenient mode skips malformed lines and keeps the rest; strict mode names the line."""
    text = 'good 1\nbad{a="x} 1\n{nope} 2\nalso_good{b="y"} 2 3 4\nok2 7\n'
    assert sorted(parse_prometheus(text)) == ["good", "ok2"]
    with pytest.raises(ValueError, match="line 2"):
        parse_prometheus(text, strict=True)
