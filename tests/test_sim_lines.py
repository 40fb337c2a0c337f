"""Pure tests of the simulator's log lines, config parsing and metrics text (no Docker, no sleeping)."""

# ruff: noqa: E501  - the §3.3 regexes are copied verbatim; splitting them would hide copy mistakes

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Any

import pytest

from supervisor.core.vllm.analyzer import LogAnalyzer
from supervisor.sim import simengine, simfail, simlog, vllm_sim
from supervisor.sim.launch import SIM_IMAGE as LAUNCH_SIM_IMAGE, sim_image, sim_run_kwargs
from tools.images import SIM_IMAGE

# --- copied from docs/vllm-facts.md §3.3 (the parser contract the simulator must satisfy)
ANSI = r"(?:\x1b)?\[[0-9;]{1,8}m"
PROC = r"^\((?P<proc>[^()\s]+(?: [^()\s]+)*?) pid=(?P<pid>\d+)\)\s?"
HEADER = (
    r"^(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) "
    r"(?P<ts>\d\d-\d\d \d\d:\d\d:\d\d|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[.,]\d+) "
    r"\[?(?P<file>[^\s\[\]]+):(?P<line>\d+)(?:\[\]|\])\s?"
)
P = {
    "kv_tokens": r"(?P<dev>[A-Z]{2,5}(?: \+ host)?) KV cache size: (?P<tok>[\d,]+) tokens",
    "max_conc": r"Maximum concurrency for (?P<len>[\d,]+) tokens per request: (?P<x>[\d.]+)x",
    "avail_kv": r"Available KV cache memory: (?P<gib>[\d.]+) GiB",
    "model_load": r"(?:Model loading took (?P<gib>[\d.]+) (?:GiB|GB)(?: memory)? and (?P<s>[\d.]+) seconds"
    r"|Loading model weights took (?P<gib2>[\d.]+) (?:GiB|GB))",
    "weights_read": r"Loading weights took (?P<s>[\d.]+) seconds",
    "shards": r"Loading (?:safetensors|pt|np_cache) checkpoint shards(?: \(eager\))?:\s+(?P<pct>\d+)% Completed"
    r" \| (?P<done>\d+)/(?P<total>\d+) \[",
    "graph": r"Graph capturing finished in (?P<s>\d+) secs(?:, took (?P<gib>[\d.]+) GiB)?",
    "init_engine": r"init engine \(profile, create kv cache, warmup model\) took (?P<s>[\d.]+) (?:seconds|s)\b",
    "num_gpu_blocks": r"cache_config_info with initialization after num_gpu_blocks is: (?P<n>\d+)",
    "engine_version": r"Initializing an? (?:V[01] )?LLM engine \(v(?P<v>[^)]+)\) with config",
    "version": r"(?:vLLM API server version (?P<v1>\S+)|vLLM server version (?P<v2>[^,\s]+), serving model "
    r"(?P<m2>\S+)|█ +version (?P<v3>\S+))",
    "server_start": r"Starting vLLM (?:API )?server(?: \d+)? on (?P<url>\S+)",
    "route": r"Route: (?P<path>\S+), Methods: (?P<methods>.+)",
    "ready": r"Application startup complete\.",
    "access_log": r'INFO:\s+(?P<peer>\S+) - "(?P<method>[A-Z]+) (?P<path>\S+) HTTP/[\d.]+" (?P<code>\d{3})',
    "hang_hint": r"No available shared memory broadcast block found in (?P<s>\d+) seconds",
    "free_mem": r"Free memory on device(?: (?P<dev>\S+))? \((?P<free>[\d.]+)/(?P<total>[\d.]+) GiB\) on startup "
    r"is less than desired GPU memory utilization \((?P<util>[\d.]+), (?P<req>[\d.]+) GiB\)",
    "kv_insufficient": r"To serve at least one request with the models?'s max seq len \((?P<len>\d+)\)"
    r"(?:, \((?P<need>[\d.]+) GiB KV\s*cache is needed, which is larger than the available KV cache memory"
    r" \((?P<avail>[\d.]+) GiB\))?",
    "no_kv_mem": r"No available memory for the cache blocks",
    "oom": r"(?:OutOfMemoryError: CUDA out of memory(?:\. Tried to allocate (?P<amt>[\d.]+) (?P<unit>[KMG]i?B))?"
    r"|CUDA (?:driver )?error: out of memory|Failed to load model - not enough GPU memory)",
    "core_failed": r"EngineCore (?:failed to start|hit an exception)|WorkerProc (?:initialization failed|failed to start)",
    "init_failed": r"RuntimeError: Engine core initialization failed\. See root cause above\.(?: Failed core proc\(s\):"
    r" (?P<procs>\{[^}]*\}))?",
    "engine_dead": r"EngineDeadError|AsyncEngineDeadError|MQEngineDeadError|AsyncLLM output_handler failed"
    r"|(?:Engine core proc|Worker proc) (?P<name>\S+) died unexpectedly|engine core exited unexpectedly"
    r"|EngineCore encountered a fatal error",
    "shutdown": r"\[shutdown\] API server: shutdown triggered|Shutting down FastAPI HTTP server"
    r"|Application shutdown complete\.|Finished server process \[(?P<pid>\d+)\]"
    r"|\[shutdown\] EngineCore: trigger received signal=(?P<sig>\w+)"
    r"|stopping engine client mode=(?P<mode>\w+) timeout=(?P<timeout>\d+)s",
    "interrupted": r"KeyboardInterrupt: terminated",
}
FLAVORS = ["v0_9", "v0_11", "v0_32"]


def normalise(text: str) -> list[tuple[str | None, str]]:
    """§2.1: drop \\r, strip ANSI, split off the process prefix and the vLLM header -> (proc, message)."""
    out: list[tuple[str | None, str]] = []
    for raw in text.split("\n"):
        line = re.sub(ANSI, "", raw.replace("\r", ""))
        proc = None
        m = re.match(PROC, line)
        if m:
            proc, line = m["proc"], line[m.end() :]
        h = re.match(HEADER, line)
        if h:
            line = line[h.end() :]
        out.append((proc, line))
    return out


def fmt(flavor: str) -> simlog.LogFormat:
    return simlog.LogFormat(simlog.FLAVORS[flavor], 1, 123, clock=lambda: 1_764_400_000.0)


def startup_text(flavor: str, tokens: int, max_len: int) -> str:
    f = fmt(flavor)
    lines = simlog.banner_lines(f, "{'api_key': '***'}", "tiny", max_len)
    lines += simlog.engine_init_lines(f, "/models/tiny", "tiny", max_len)
    for i in range(5):
        lines += simlog.shard_lines(f, i, 4, i * 0.5, 0.5)
    lines += simlog.weights_loaded_lines(f, 1.25, 15.27)
    lines += simlog.profile_lines(f, simlog.kv_gib(tokens))
    lines += simlog.kv_lines(f, tokens, max_len)
    lines += simlog.engine_ready_lines(f, 7.0, 25.99, tokens // 16)
    lines += simlog.server_start_lines(f, "http://0.0.0.0:8000", 1)
    lines.append(
        simlog.access_line(
            f, peer="172.17.0.1:5000", method="GET", path="/health", version="HTTP/1.1", code=200, phrase="OK"
        )
    )
    return "\n".join(text for _stream, text in lines)


def find(pattern: str, msgs: list[tuple[str | None, str]]) -> list[tuple[str | None, re.Match[str]]]:
    return [(proc, m) for proc, msg in msgs if (m := re.search(pattern, msg))]


@pytest.mark.parametrize("flavor", FLAVORS)
def test_startup_lines_match_facts_regexes(flavor: str) -> None:
    """Every startup line a parser keys on matches the §3.3 regex with the right captured values."""
    msgs = normalise(startup_text(flavor, 1_069_759, 32_768))
    for key in (
        "avail_kv",
        "model_load",
        "weights_read",
        "graph",
        "init_engine",
        "engine_version",
        "version",
        "server_start",
        "route",
        "ready",
        "access_log",
    ):
        assert find(P[key], msgs), f"{flavor}: no line matches {key}"
    kv = find(P["kv_tokens"], msgs)
    conc = find(P["max_conc"], msgs)
    assert len(kv) == 1
    assert len(conc) == 1
    assert kv[0][1]["tok"] == "1,069,759"
    assert conc[0][1]["len"] == "32,768"
    assert conc[0][1]["x"] == f"{1_069_759 / 32_768:.2f}" == "32.65"
    blocks = find(P["num_gpu_blocks"], msgs)
    if flavor == "v0_32":
        assert blocks == []  # DEBUG-only in 0.32: the real server's log does not have it
    else:
        assert blocks[0][1]["n"] == str(1_069_759 // 16)
    shards = find(P["shards"], msgs)
    assert [(m["done"], m["total"], m["pct"]) for _p, m in shards][-1] == ("4", "4", "100")
    assert len(shards) == 5
    versions = find(P["engine_version"], msgs)
    assert versions[0][1]["v"] == simlog.FLAVORS[flavor].version


def test_merged_kv_line_only_in_v0_32() -> None:
    """0.32 prints one merged KV line; older flavours two separate lines; both regexes hit either way."""
    merged = normalise(startup_text("v0_32", 557_599, 65_536))
    kv_line = [msg for _p, msg in merged if "KV cache size" in msg]
    assert len(kv_line) == 1
    assert re.search(P["max_conc"], kv_line[0])
    two = normalise(startup_text("v0_11", 557_599, 65_536))
    assert len([m for _p, m in two if "KV cache size" in m or "Maximum concurrency" in m]) == 2


def test_process_prefix_per_flavour() -> None:
    """v0_9 has no prefix, v0_11 an ANSI-coloured one (also on uvicorn lines), v0_32 prefixes log records only."""
    raw9 = startup_text("v0_9", 1000, 100)
    raw11 = startup_text("v0_11", 1000, 100)
    raw32 = startup_text("v0_32", 1000, 100)
    assert "pid=" not in raw9
    assert "\x1b[1;36m(EngineCore_DP0 pid=123)\x1b[0;0m INFO " in raw11
    assert "\x1b[1;36m(APIServer pid=1)\x1b[0;0m INFO:     Application startup complete." in raw11
    assert "(EngineCore pid=123) INFO " in raw32
    assert "\nINFO:     Application startup complete." in raw32
    procs = {p for p, m in normalise(raw11) if "KV cache size" in m}
    assert procs == {"EngineCore_DP0"}


@pytest.mark.parametrize("flavor", FLAVORS)
@pytest.mark.parametrize(
    ("kind", "key"),
    [
        ("fail_gpu_mem_util", "free_mem"),
        ("fail_oom", "oom"),
        ("fail_kv_insufficient", "kv_insufficient"),
        ("fail_no_kv", "no_kv_mem"),
        ("fail_engine_init", "core_failed"),
        ("fail_worker_exception", "core_failed"),
    ],
)
def test_failure_lines_match(flavor: str, kind: str, key: str) -> None:
    """Each startup failure shows its specific cause, EngineCore failed to start, and the API RuntimeError."""
    f = fmt(flavor)
    msgs = normalise("\n".join(t for _s, t in simfail.startup_failure_lines(f, kind, 32768, 16.3)))
    assert find(P[key], msgs)
    assert find(P["core_failed"], msgs)
    init = find(P["init_failed"], msgs)
    assert init
    assert init[-1][1]["procs"] == "{}"
    if kind == "fail_kv_insufficient":
        m = find(P["kv_insufficient"], msgs)[0][1]
        assert m["len"] == "32768"
        assert float(m["need"]) > float(m["avail"])


def _analysed(flavor: str, kind: str) -> tuple[dict[str, Any], str]:
    a = LogAnalyzer()
    for _stream, text in simfail.startup_failure_lines(fmt(flavor), kind, 32768, 16.3):
        for raw in text.split("\r\n"):
            a.feed(raw)
    return a.report(), a.outcome()


@pytest.mark.parametrize("flavor", FLAVORS)
def test_a_worker_exception_is_quoted_with_its_frame_and_a_silent_death_quotes_none(flavor: str) -> None:
    """``fail_worker_exception`` dies as a real multiprocess executor does when the worker raises: the
    worker's ``WorkerProc failed to start.`` traceback, then the wrappers; the daemon's analyzer quotes the
    worker's line and its frame (what the same-cause rule compares), not a wrapper. ``fail_engine_init`` is
    the worker's silent death (the field's, killed without a traceback): only wrappers, no line to quote."""
    v, outcome = _analysed(flavor, "fail_worker_exception")
    where = (
        f"{simlog.SITE}/vllm/model_executor/layers/fused_moe/oracle/nvfp4.py:304 in select_nvfp4_moe_backend"
    )
    assert (v["last_exception"], v["last_exception_where"], outcome) == (
        simfail.INIT_ERROR,
        where,
        "failed_engine_init",
    )
    v, outcome = _analysed(flavor, "fail_engine_init")
    assert (v["last_exception"], outcome) == (None, "failed_engine_init")


def test_death_shutdown_and_interrupt_lines() -> None:
    """Engine death, shutdown (both families), hang hint and SIGTERM-before-ready lines match their regexes."""
    for flavor in FLAVORS:
        f = fmt(flavor)
        dead = normalise("\n".join(t for _s, t in simfail.engine_death_lines(f)))
        assert any("AsyncLLM output_handler failed" in m for _p, m in dead)
        assert any("EngineCore encountered a fatal error" in m for _p, m in dead)
        assert find(P["engine_dead"], dead)
        shut = simfail.shutdown_lines(f, "SIGTERM", 5, 1, 1) + simfail.shutdown_done_lines(f, 1)
        msgs = normalise("\n".join(t for _s, t in shut))
        assert len(find(P["shutdown"], msgs)) >= 2
        assert find(P["hang_hint"], normalise(simlog.hang_line(f)[1]))
        intr = normalise("\n".join(t for _s, t in simfail.interrupted_lines(f, "SIGTERM")))
        assert find(P["interrupted"], intr)
    modes = find(
        P["shutdown"],
        normalise("\n".join(t for _s, t in simfail.shutdown_lines(fmt("v0_32"), "SIGTERM", 5, 1, 1))),
    )
    assert any(m["mode"] == "drain" and m["timeout"] == "5" for _p, m in modes)


def test_argv_parsing_ignores_unknown_flags_and_prints_the_key_like_vllm_0_32() -> None:
    """Real profile argv works: unknown flags with/without values skipped; the key is printed in clear in
    `non-default args` by the 0.11 flavour, as vLLM 0.11 prints it, so leak checks on the simulator can
    fail; the 0.32 flavour (the default) redacts it as vLLM 0.32's redact_sensitive_args does."""
    argv = [
        "serve",
        "/models/qwen",
        "--served-model-name",
        "qwen",
        "--enforce-eager",
        "--dtype",
        "bfloat16",
        "--gpu-memory-utilization=0.8",
        "--api-key",
        "sk-secret-1",
        "--port",
        "9000",
        "--seed",
        "-1",
        "-tp",
        "2",
        "--trust-remote-code",
        "--max-model-len",
        "4096",
        "--shutdown-timeout",
        "7",
    ]
    cfg = vllm_sim.load_config(argv, {"VLLM_API_KEY": "env-key", "VSIM_FLAVOR": "v0_11"}, random.Random(1))
    assert (cfg.model, cfg.served, cfg.port, cfg.max_model_len, cfg.shutdown_timeout) == (
        "/models/qwen",
        "qwen",
        9000,
        4096,
        7,
    )
    assert cfg.api_keys == ("sk-secret-1",)
    assert "'api_key': ['sk-secret-1']" in cfg.nondefault
    v32 = vllm_sim.load_config(argv, {}, random.Random(1))  # 0.32 by default
    assert "sk-secret-1" not in v32.nondefault
    assert "'api_key': '***'" in v32.nondefault
    assert "'enforce_eager': True" in cfg.nondefault
    assert "'seed': -1" in cfg.nondefault
    env_only = vllm_sim.load_config(["--model", "m"], {"VLLM_API_KEY": "env-key"}, random.Random(1))
    assert env_only.api_keys == ("env-key",)
    assert env_only.served == "m"


def test_bad_env_is_a_usage_error() -> None:
    """Unknown scenario/flavour or a non-number knob is refused with a message."""
    for env in (
        {"VSIM_SCENARIO": "nope"},
        {"VSIM_FLAVOR": "v9"},
        {"VSIM_LOAD_SECONDS": "x"},
        {"VSIM_KV_TOKENS": "a"},
    ):
        with pytest.raises(vllm_sim.UsageError):
            vllm_sim.load_config([], env, random.Random(1))


def test_kv_tokens_spec_forms() -> None:
    """A list picks a member, a range stays inside it, a single number is taken as is."""
    rng = random.Random(7)
    picks = {vllm_sim.pick_kv_tokens("1013816,557599,557599", rng) for _ in range(50)}
    assert picks == {1013816, 557599}
    assert all(400_000 <= vllm_sim.pick_kv_tokens("400000-1100000", rng) <= 1_100_000 for _ in range(50))
    assert vllm_sim.pick_kv_tokens("1069759", rng) == 1069759


def test_metrics_text_and_go_float() -> None:
    """Exposition has HELP/TYPE, sorted labels, prometheus float formatting and moves with the engine."""
    eng = simengine.Engine(max_running=2, kv_tokens=1_600_000)
    assert eng.admit(10)
    assert eng.prefill(10)
    assert eng.step(0)
    eng.finish("stop", 11)
    text = simengine.render_metrics(eng, "tiny", simengine.CacheInfo(100_000, 1_600_000, 32768, True), False)
    assert "# TYPE vllm:num_requests_running gauge" in text
    assert 'vllm:prompt_tokens_total{engine="0",model_name="tiny"} 10.0' in text
    assert 'vllm:generation_tokens_total{engine="0",model_name="tiny"} 1.0' in text
    assert 'vllm:request_success_total{engine="0",finished_reason="stop",model_name="tiny"} 1.0' in text
    assert 'num_gpu_blocks="100000"' in text
    assert 'kv_cache_size_tokens="1600000"' in text
    assert 'kv_cache_max_concurrency="48.828125"' in text  # str(float), as the real 0.32 prints it
    created = re.search(r'^vllm:generation_tokens_created\{engine="0",model_name="tiny"\} (\S+)$', text, re.M)
    assert created
    assert abs(float(created[1]) - eng.created) < 1
    assert 'finished_reason="repetition"' in text
    assert simengine.go_float(1_069_759) == "1.069759e+06"
    assert simengine.go_float(0.25) == "0.25"


def test_sim_run_kwargs_shape() -> None:
    """The docker SDK kwargs publish 8000 on 127.0.0.1, carry labels/env and never restart."""
    kw = sim_run_kwargs("n1", 12345, {"a": "b"}, env={"VSIM_SCENARIO": "stuck"}, args=["--port", "8000"])
    assert SIM_IMAGE == LAUNCH_SIM_IMAGE  # the stable alias is the same in the tool and the package
    assert kw["image"] == sim_image()
    assert kw["ports"] == {"8000/tcp": ("127.0.0.1", 12345)}
    assert kw["labels"] == {"a": "b"}
    assert kw["environment"] == {"VSIM_SCENARIO": "stuck"}
    assert kw["restart_policy"] == {"Name": "no"}
    assert kw["detach"] is True
    assert kw["command"] == ["--port", "8000"]
    assert "--served-model-name" in sim_run_kwargs("n2", 1, {})["command"]


def test_v0_32_lines_as_the_real_server_prints_them() -> None:
    """0.32 specifics seen on the real CPU server: Worker loads weights, `Supported tasks`, \\r tqdm bars,
    `[shutdown] MPClient` on engine death, and no `Finished server process` or num_gpu_blocks record."""
    raw = startup_text("v0_32", 1_048_576, 512)
    assert "(Worker pid=135) INFO " in raw
    assert [p for p, m in normalise(raw) if "Loading weights took" in m] == ["Worker"]
    assert "Supported tasks: ['generate']" in raw
    assert "\rLoading safetensors checkpoint shards: 100% Completed | 4/4" in raw
    assert "num_gpu_blocks is" not in raw
    assert "Supported_tasks" in startup_text("v0_11", 1000, 100)
    f = fmt("v0_32")
    dead = "\n".join(t for _s, t in simfail.engine_death_lines(f))
    assert "WARNING" in dead
    assert "[shutdown] MPClient: engine core exited unexpectedly; starting cleanup" in dead
    assert "died unexpectedly" not in dead
    done = [t for _s, t in simfail.shutdown_done_lines(f, 1)]
    assert done[-1] == "INFO:     Application shutdown complete."
    assert not any("Finished server process" in t for t in done)
    assert any("Finished server process [1]" in t for _s, t in simfail.shutdown_done_lines(fmt("v0_11"), 1))
    first = [t for _s, t in simfail.shutdown_lines(f, "SIGTERM", 0, 3, 1)]
    assert "[shutdown] API server: shutdown triggered" in first[0]
    assert first[-1].endswith("[shutdown] EngineCore: aborting in-flight requests count=3")


def test_term_during_init_knob() -> None:
    """VSIM_TERM_DURING_INIT takes ignore (default, as real vLLM 0.32) or interrupt; anything else is a usage
    error."""
    assert vllm_sim.load_config([], {}, random.Random(1)).term_during_init == "ignore"
    cfg = vllm_sim.load_config([], {"VSIM_TERM_DURING_INIT": "interrupt"}, random.Random(1))
    assert cfg.term_during_init == "interrupt"
    with pytest.raises(vllm_sim.UsageError):
        vllm_sim.load_config([], {"VSIM_TERM_DURING_INIT": "later"}, random.Random(1))


def test_kv_sequence_file_replays_the_pools_in_order(tmp_path: Path) -> None:
    """VSIM_KV_SEQUENCE_FILE: one pool per start in list order, the last repeating; the counter is a file."""
    env = {"VSIM_KV_TOKENS": "1013816,1013816,557599", "VSIM_KV_SEQUENCE_FILE": str(tmp_path / "count")}
    pools = [vllm_sim.load_config([], env, random.Random(i)).kv_tokens for i in range(5)]
    assert pools == [1013816, 1013816, 557599, 557599, 557599]
    assert (tmp_path / "count").read_text(encoding="utf-8").strip() == "5"
    (tmp_path / "count").write_text("x\n", encoding="utf-8")
    with pytest.raises(vllm_sim.UsageError, match="VSIM_KV_SEQUENCE_FILE"):
        vllm_sim.load_config([], env, random.Random(1))


def test_stuck_engine_metrics_keep_the_last_report() -> None:
    """Stuck: the snapshot keeps the values of the freeze; a request admitted meanwhile is unseen; resume thaws."""
    eng = simengine.Engine(max_running=4, kv_tokens=1000)
    assert eng.admit(8)
    assert eng.prefill(8)
    assert eng.step(0)
    assert eng.stick()
    assert not eng.stick()  # only from OK
    before = eng.snapshot()
    assert before["running"] == 1
    assert before["gen"] == 1
    assert eng.admit(8)  # a slot is free: admitted, but the frozen engine never reports it
    assert eng.snapshot() == before
    assert eng.resume()
    assert not eng.resume()
    assert eng.snapshot()["running"] == 1  # the held request is counted once its first step ends
    assert eng.prefill(8)
    assert eng.snapshot()["running"] == 2


def test_stick_after_n_completed_requests_once() -> None:
    """stick_after=N: the engine freezes as the Nth request finishes, and only once."""
    eng = simengine.Engine(max_running=4, kv_tokens=1000, stick_after=2)
    for _ in range(2):
        assert eng.admit(1)
        assert eng.prefill(1)
        eng.finish("length", 1)
    assert eng.current_state() == simengine.STUCK
    assert eng.snapshot()["running"] == 0
    assert eng.resume()
    assert eng.admit(1)
    assert eng.prefill(1)
    eng.finish("length", 1)
    assert eng.current_state() == simengine.OK
    assert eng.completed_requests() == 3


def test_silent_exit_scenario_and_after_requests_knob() -> None:
    """silent_exit is a scenario; VSIM_DIE_AFTER_REQUESTS is a count (default 0 = use VSIM_DIE_AFTER)."""
    cfg = vllm_sim.load_config(
        [], {"VSIM_SCENARIO": "silent_exit", "VSIM_DIE_AFTER_REQUESTS": "3"}, random.Random(1)
    )
    assert (cfg.scenario, cfg.die_after_requests, cfg.die_exit_code) == ("silent_exit", 3, 0)
    assert vllm_sim.load_config([], {}, random.Random(1)).die_after_requests == 0
    with pytest.raises(vllm_sim.UsageError):
        vllm_sim.load_config([], {"VSIM_DIE_AFTER_REQUESTS": "many"}, random.Random(1))


def test_a_prefill_is_counted_as_real_vllm_counts_it() -> None:
    """Counted nowhere until its first step ends; KV per chunk; the prompt at the end; no CPU while stuck."""
    eng = simengine.Engine(max_running=4, kv_tokens=100_000, prefill_rate=1e9, chunk_tokens=1000)
    assert eng.admit(3000)
    assert eng.snapshot()["running"] == 0  # counted nowhere before its first step ends
    assert eng.snapshot()["prompt"] == 0
    assert eng.prefill(3000)
    snap = eng.snapshot()
    assert snap["running"] == 1
    assert snap["prompt"] == 3000
    assert snap["gen"] == 0  # no token before the first decode step
    assert snap["iters"] == 1
    mono = simengine.Engine(max_running=4, kv_tokens=100_000, prefill_rate=1e9, chunk_tokens=None)
    assert mono.admit(5000)
    assert mono.prefill(5000)
    assert mono.snapshot()["kv"] == 0.05
    text = simengine.render_metrics(eng, "tiny", simengine.CacheInfo(100, 100_000, 32768, True), False)
    assert 'vllm:iteration_tokens_total_count{engine="0",model_name="tiny"} 1.0' in text


def test_the_prefill_step_size_comes_from_the_command_line() -> None:
    env = {"VSIM_PREFILL_TOKENS_PER_S": "400"}
    cfg = vllm_sim.load_config(["--max-num-batched-tokens", "2048"], env, random.Random(1))
    assert (cfg.chunk_tokens, cfg.prefill_rate) == (2048, 400.0)
    assert vllm_sim.load_config(["--no-enable-chunked-prefill"], env, random.Random(1)).chunk_tokens is None
    assert vllm_sim.load_config([], {}, random.Random(1)).chunk_tokens == 8192
