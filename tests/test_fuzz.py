"""Fuzz: random and hostile input to every parser that reads what others write (config files, the control
protocol, vLLM's log, the kernel log, vLLM's /metrics). Each must answer (a value, a problem list, an
error reply), never raise. Bounded: a fixed number of examples each, no deadline per example."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings, strategies as st

from supervisor.adapters.control.server import ControlServer
from supervisor.config import check_config
from supervisor.core.errors import ConfigProblem
from supervisor.core.host.kernel_log import classify_kernel_line
from supervisor.core.vllm.analyzer import LogAnalyzer
from supervisor.core.vllm.metrics import VllmMetrics, parse_prometheus

BOUNDED = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

#: YAML-ish text: keys, indentation, flow collections, anchors, tags, numbers and specials.
yamlish = st.lists(
    st.sampled_from(
        [
            "name: p\n",
            "container:\n",
            "  image: x\n",
            "  command: [",
            "]",
            "{",
            "}",
            ": ",
            "- ",
            "  ",
            "\n",
            "&a ",
            "*a",
            "!!python/object ",
            ".nan",
            ".inf",
            "1e999",
            "0x",
            "~",
            "'",
            '"',
            "\\x00",
            "probes:\n",
            "  interval_s: ",
            "stop:\n",
            "  grace_s: ",
            "ports: [8000]\n",
            "\t",
            "#",
            "%YAML 1.1\n",
            "---\n",
        ]
    )
    | st.text(max_size=20),
    max_size=40,
).map("".join)


def _check_text(data: bytes) -> list[ConfigProblem]:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "p.yaml"
        path.write_bytes(data)
        os.chmod(path, 0o644)
        return check_config(path)


@BOUNDED
@given(yamlish)
def test_config_parser_answers_with_problems(text: str) -> None:
    problems = _check_text(text.encode("utf-8", "surrogatepass"))
    assert all(isinstance(p, ConfigProblem) and p.file for p in problems)


@BOUNDED
@given(st.binary(max_size=400))
def test_config_parser_takes_any_bytes(data: bytes) -> None:
    problems = _check_text(data)
    assert all(isinstance(p, ConfigProblem) for p in problems)


def _echo(request: dict[str, Any]) -> dict[str, Any]:
    return {"ok": True, "data": request["cmd"]}


SERVER = ControlServer(Path("/nonexistent/never-bound.sock"), _echo)
jsonish = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=30,
)


@BOUNDED
@given(st.one_of(st.binary(max_size=300), jsonish.map(lambda v: json.dumps(v).encode())))
def test_control_protocol_answers_every_line(line: bytes) -> None:
    reply = json.loads(SERVER._respond(line, {"pid": 1, "uid": 0, "gid": 0}))
    assert isinstance(reply, dict)
    assert "ok" in reply


@BOUNDED
@given(st.dictionaries(st.sampled_from(["cmd", "args"]), jsonish, max_size=2))
def test_control_protocol_answers_request_shapes(request: dict[str, Any]) -> None:
    reply = json.loads(SERVER._respond(json.dumps(request).encode(), {"pid": 1, "uid": 0, "gid": 0}))
    assert "ok" in reply


logish = st.lists(
    st.sampled_from(
        [
            "INFO 05-01 10:00:00 [core.py:77] ",
            "(EngineCore pid=12) ",
            "ERROR ",
            "Traceback (most recent call last):",
            "RuntimeError: Engine core initialization failed. See root cause above.",
            "GPU KV cache size: ",
            "Maximum concurrency for ",
            "Loading safetensors checkpoint shards: ",
            "% Completed",
            "Application startup complete.",
            "\x1b[1;36m",
            "\r",
            '{"message": ',
            "torch.OutOfMemoryError: CUDA",
            "Free memory on device (",
            "/",
            " GiB) on startup",
            "9999999999999999999999",
            "-1",
        ]
    )
    | st.text(max_size=30),
    max_size=12,
).map("".join)


@BOUNDED
@given(st.lists(logish, max_size=20))
def test_vllm_log_analyzer_takes_any_lines(lines: list[str]) -> None:
    analyzer = LogAnalyzer()
    for line in lines:
        analyzer.feed(line)
    report = analyzer.report()
    assert isinstance(report["outcome"], str)


kernelish = st.lists(
    st.sampled_from(
        [
            "<3>",
            "[  252.682592] ",
            "NVRM: ",
            "Xid (PCI:0000:0a:00): ",
            "31, pid=",
            "'<unknown>'",
            ", name=",
            "nvCheckOkFailedNoLog: Check failed: Out of memory [NV_ERR_NO_MEMORY] (0x00000051)",
            "Out of memory: Killed process ",
            " (python3)",
            "cma_alloc: alloc failed, req-size: 1 pages, ret: -12",
            "nvgpu: 17000000.gpu ",
            "NvMap",
            "NvRmMem",
            "process",
            "99999999999999999999",
            ",",
        ]
    )
    | st.text(max_size=20),
    max_size=10,
).map("".join)


@BOUNDED
@given(kernelish)
def test_kernel_line_classifier_takes_any_line(line: str) -> None:
    ev = classify_kernel_line(line)
    assert ev is None or isinstance(ev.kind, str)


promish = st.lists(
    st.sampled_from(
        [
            "vllm:num_requests_running",
            "vllm:generation_tokens_total",
            "{",
            "}",
            'engine="0"',
            ",",
            "=",
            '"',
            " ",
            "1",
            "NaN",
            "+Inf",
            "-1e999",
            "\n",
            "# HELP x y\n",
            "# TYPE x counter\n",
            "\\",
            'model_name="m"',
        ]
    )
    | st.text(max_size=10),
    max_size=30,
).map("".join)


@BOUNDED
@given(promish)
def test_metrics_parser_takes_any_exposition(text: str) -> None:
    samples = parse_prometheus(text)
    assert isinstance(samples, dict)
    VllmMetrics.from_samples(samples)
