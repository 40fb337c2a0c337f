"""vLLM log line shapes for the simulator, per version flavour (pure: strings in, strings out).

The flavours, the line envelope (:class:`LogFormat`) and the startup/serving lines live here; the
failure, engine-death and shutdown texts are in ``simfail``.

Stdlib only: this file is copied next to ``vllm_sim.py`` into the simulator image. Every function returns
``Line`` tuples ``(stream, text)``; ``vllm_sim`` decides when to write them. Formats follow docs/vllm-facts.md
sections 2 and 3 (envelope, message strings, line numbers of the real releases where known).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

OUT = "stdout"
ERR = "stderr"
Line = tuple[str, str]

API = "api"
ENGINE = "engine"
WORKER = "worker"  # 0.32: model loading is logged by `(Worker pid=N)`, a child of the engine core


@dataclass(frozen=True)
class Flavor:
    """One vLLM release family the simulator imitates."""

    name: str
    version: str
    engine_proc: str
    prefix_mode: str  # "none" | "ansi" (0.10-0.31 stdout wrapper) | "format" (0.32+ inside the log format)
    merged_kv: bool
    dead_health_code: int
    init_unit: str
    server_start: str
    tasks_word: str = "Supported_tasks"
    #: The `non-default args` line shows api_key/hf_token as '***' (0.32 does; 0.9 and 0.11 print the key).
    redacts_secret_args: bool = False


FLAVORS: dict[str, Flavor] = {
    "v0_9": Flavor(
        "v0_9", "0.9.2", "EngineCore_0", "none", False, 500, "seconds", "Starting vLLM API server on {url}"
    ),
    "v0_11": Flavor(
        "v0_11",
        "0.11.0",
        "EngineCore_DP0",
        "ansi",
        False,
        503,
        "seconds",
        "Starting vLLM API server 0 on {url}",
    ),
    "v0_32": Flavor(
        "v0_32",
        "0.32.0",
        "EngineCore",
        "format",
        True,
        503,
        "s",
        "Starting vLLM server on {url}",
        "Supported tasks",
        redacts_secret_args=True,
    ),
}

ROUTES = [
    ("/openapi.json", "HEAD, GET"),
    ("/docs", "HEAD, GET"),
    ("/health", "GET"),
    ("/load", "GET"),
    ("/ping", "POST"),
    ("/ping", "GET"),
    ("/version", "GET"),
    ("/v1/models", "GET"),
    ("/v1/chat/completions", "POST"),
    ("/v1/completions", "POST"),
    ("/metrics", "GET"),
]

SITE = "/usr/local/lib/python3.12/dist-packages"
ENGINE_DEAD_MSG = "EngineCore encountered an issue. See stack trace (above) for the root cause."
HANG_MSG = (
    "No available shared memory broadcast block found in 60 seconds. This typically happens when "
    "some processes are hanging or doing some time-consuming work "
    "(e.g. compilation, weight/kv cache quantization)."
)


def group(n: int) -> str:
    """Comma-grouped integer, as vLLM prints token counts."""
    return f"{n:,}"


#: The simulated KV bytes per token.
KV_BYTES_PER_TOKEN = 16384


def kv_gib(tokens: int) -> float:
    """A plausible KV pool size in GiB for a token count (16 KiB per token)."""
    return tokens * KV_BYTES_PER_TOKEN / 2**30


def kv_tokens_of(pool_bytes: int) -> int:
    """The tokens a pinned pool of ``pool_bytes`` holds (whole 16-token blocks, as vLLM sizes it)."""
    return pool_bytes // KV_BYTES_PER_TOKEN // 16 * 16


class LogFormat:
    """Builds complete log lines for the two simulated processes of one flavour."""

    def __init__(
        self, flavor: Flavor, api_pid: int, engine_pid: int, clock: Callable[[], float] = time.time
    ) -> None:
        self.flavor = flavor
        self.pids = {API: api_pid, ENGINE: engine_pid, WORKER: engine_pid + 12}
        self.clock = clock

    def proc_name(self, proc: str) -> str:
        if proc == WORKER and self.flavor.name == "v0_32":
            return "Worker"
        return "APIServer" if proc == API else self.flavor.engine_proc

    @property
    def loader(self) -> str:
        """The process that logs weight loading: the worker in 0.32 (seen running), the engine core before."""
        return WORKER if self.flavor.name == "v0_32" else ENGINE

    def _tag(self, proc: str) -> str:
        return f"({self.proc_name(proc)} pid={self.pids[proc]})"

    def raw_prefix(self, proc: str) -> str:
        """What the 0.10-0.31 stdout/stderr wrapper puts before every raw write of a process."""
        if self.flavor.prefix_mode == "ansi":
            return f"\x1b[1;36m{self._tag(proc)}\x1b[0;0m "
        return ""

    def header(self, proc: str, level: str, fileline: str) -> str:
        ts = time.strftime("%m-%d %H:%M:%S", time.localtime(self.clock()))
        head = f"{level} {ts} [{fileline}] "
        if self.flavor.prefix_mode == "format":
            return f"{self._tag(proc)} {head}"
        return self.raw_prefix(proc) + head

    def log(self, proc: str, level: str, fileline: str, msg: str) -> Line:
        """One logger record; a multi-line message repeats the header on each line (NewLineFormatter)."""
        head = self.header(proc, level, fileline)
        return (OUT, head + msg.replace("\n", "\r\n" + head))

    def raw(self, proc: str, text: str, stream: str = OUT) -> Line:
        """A raw write (uvicorn, print, escaping traceback): only the wrapper prefix, if any."""
        return (stream, self.raw_prefix(proc) + text)

    def info(self, proc: str, fileline: str, msg: str) -> Line:
        return self.log(proc, "INFO", fileline, msg)


# ----------------------------------------------------------------------------------------------- startup


def banner_lines(f: LogFormat, nondefault: str, model: str, max_model_len: int) -> list[Line]:
    """API server start: version banner, non-default args, config resolution."""
    v = f.flavor.version
    out: list[Line] = []
    if f.flavor.name == "v0_32":
        logo = (
            f"\n       █     █     █▄   ▄█\n ▄▄ ▄█ █     █     █ ▀▄▀ █  version {v}\n"
            f"  █▄█▀ █     █     █     █  model   {model}\n   ▀▀  ▀▀▀▀▀ ▀▀▀▀▀ ▀     ▀\n"
        )
        out.append(f.info(API, "utils.py:299", logo))
    else:
        out.append(f.info(API, "api_server.py:1839", f"vLLM API server version {v}"))
    out.append(f.info(API, "utils.py:233", f"non-default args: {nondefault}"))
    out.append(f.info(API, "model.py:547", "Resolved architecture: LlamaForCausalLM"))
    out.append(f.info(API, "model.py:1510", f"Using max model len {max_model_len}"))
    out.append(
        f.info(API, "scheduler.py:205", "Chunked prefill is enabled with max_num_batched_tokens=8192.")
    )
    return out


def engine_init_lines(f: LogFormat, model: str, served: str, max_model_len: int) -> list[Line]:
    """EngineCore start, up to the beginning of weight loading."""
    cfg = (
        f"model='{model}', speculative_config=None, tokenizer='{model}', skip_tokenizer_init=False, "
        f"tokenizer_mode=auto, revision=None, trust_remote_code=False, dtype=torch.bfloat16, "
        f"max_seq_len={max_model_len}, download_dir=None, load_format=auto, tensor_parallel_size=1, "
        f"pipeline_parallel_size=1, quantization=None, enforce_eager=False, kv_cache_dtype=auto, "
        f"device_config=cuda, seed=0, served_model_name={served}, enable_prefix_caching=True"
    )
    return [
        f.info(ENGINE, "core.py:644", "Waiting for init message from front-end."),
        f.info(
            ENGINE, "core.py:77", f"Initializing a V1 LLM engine (v{f.flavor.version}) with config: {cfg}"
        ),
        f.info(
            ENGINE,
            "parallel_state.py:1208",
            "rank 0 in world size 1 is assigned as DP rank 0, PP rank 0, TP rank 0, EP rank 0",
        ),
        f.info(f.loader, "gpu_model_runner.py:2602", f"Starting to load model {model}..."),
        f.info(ENGINE, "cuda.py:366", "Using Flash Attention backend on V1 engine."),
    ]


def _clock_fmt(seconds: float) -> str:
    s = max(0, int(seconds))
    return f"{s // 60:02d}:{s % 60:02d}"


def shard_lines(f: LogFormat, done: int, total: int, elapsed: float, per_shard: float) -> list[Line]:
    """One tqdm shard-progress line (stderr, un-prefixed, starting with tqdm's ``\\r``; 0.10-0.31 put the bare
    prefix on its own line; the 100 % bar is followed by an empty line, as real 0.32 prints it)."""
    pct = round(100 * done / total) if total else 100
    if done == 0:
        tail = f"[{_clock_fmt(elapsed)}<?, ?it/s]"
    else:
        remaining = per_shard * (total - done)
        rate = f"{1 / per_shard:.2f}it/s" if per_shard >= 0.01 else "99.99it/s"
        if per_shard >= 1:
            rate = f"{per_shard:.2f}s/it"
        tail = f"[{_clock_fmt(elapsed)}<{_clock_fmt(remaining)}, {rate}]"
    bar = f"Loading safetensors checkpoint shards: {pct:3d}% Completed | {done}/{total} {tail}"
    out: list[Line] = []
    if f.flavor.prefix_mode == "ansi":
        out.append(f.raw(ENGINE, "", ERR))
    out.append((ERR, "\r" + bar))
    if done == total:
        out.append((ERR, ""))
    return out


def weights_loaded_lines(f: LogFormat, load_s: float, weights_gib: float) -> list[Line]:
    mem = "GiB memory" if f.flavor.name == "v0_32" else "GiB"
    return [
        f.info(f.loader, "default_loader.py:267", f"Loading weights took {load_s:.2f} seconds"),
        f.info(
            f.loader,
            "gpu_model_runner.py:2653",
            f"Model loading took {weights_gib:.4f} {mem} and {load_s:.6f} seconds",
        ),
    ]


def profile_lines(f: LogFormat, avail_gib: float, pinned_bytes: int | None = None) -> list[Line]:
    """torch.compile summary and the KV memory budget (after which KV failures are raised); with
    ``--kv-cache-memory-bytes`` vLLM skips the profiling and says what it reserved instead."""
    gib = f"{round(avail_gib, 2)}" if f.flavor.name == "v0_32" else f"{avail_gib:.2f}"
    budget = f"Available KV cache memory: {gib} GiB"
    if pinned_bytes:
        reserved = round(pinned_bytes / 2**30, 2)
        budget = " ".join(
            [
                f"Initial free memory {FREE_AT_START_GIB} GiB, reserved {reserved} GiB memory for KV Cache",
                "as specified by kv_cache_memory_bytes config and skipped memory profiling. This does not",
                "respect the gpu_memory_utilization config. Only use kv_cache_memory_bytes config when you",
                "want manual control of KV cache memory size. If OOM'ed, check the difference of initial",
                "free memory between the current run and the previous run where kv_cache_memory_bytes is",
                "suggested and update it correspondingly.",
            ]
        )
    return [
        f.info(ENGINE, "monitor.py:34", "torch.compile takes 7.14 s in total"),
        f.info(ENGINE, "gpu_worker.py:298" if not pinned_bytes else "gpu_worker.py:669", budget),
    ]


#: The simulated device: total and free memory at start-up (GiB), non-torch memory, activation, graphs.
TOTAL_GIB, FREE_AT_START_GIB, NON_TORCH_GIB, ACTIVATION_GIB, GRAPH_GIB = 122.82, 112.4, 0.57, 3.1, 0.95


def _g(x: float) -> str:
    """vLLM's format_gib: GiB rounded to 2 decimals, no padding."""
    return f"{round(x, 2)}"


def usage_lines(f: LogFormat, avail_gib: float, weights_gib: float) -> list[Line]:
    """vLLM's memory-profiling summary after CUDA-graph capture (0.11: weight and non-torch apart; 0.32:
    "consumed memory (weights + non-torch)"; 0.9 printed none). Shapes: docs/vllm-facts.md."""
    if f.flavor.name == "v0_9":
        return []
    used = weights_gib + NON_TORCH_GIB + ACTIVATION_GIB + GRAPH_GIB
    requested = used + avail_gib
    head = (
        f"Free memory on device ({FREE_AT_START_GIB}/{TOTAL_GIB} GiB) on startup. Desired GPU memory "
        f"utilization is ({round(requested / TOTAL_GIB, 2)}, {_g(requested)} GiB). "
    )
    act, graphs = _g(ACTIVATION_GIB), _g(GRAPH_GIB)
    if f.flavor.name == "v0_32":
        consumed = _g(weights_gib + NON_TORCH_GIB)
        usage = (
            f"Actual usage is {consumed} GiB for consumed memory (weights + non-torch), "
            f"{act} GiB for peak activation, and {graphs} GiB for CUDAGraph memory. "
        )
    else:
        usage = (
            f"Actual usage is {_g(weights_gib)} GiB for weight, {act} GiB for peak activation, "
            f"{_g(NON_TORCH_GIB)} GiB for non-torch memory, and {graphs} GiB for CUDAGraph memory. "
        )
    fit = int(avail_gib * 2**30) - 150 * 2**20
    full = int((FREE_AT_START_GIB - used) * 2**30) - 150 * 2**20
    tail = (
        f"Replace gpu_memory_utilization config with `--kv-cache-memory={fit}` ({_g(fit / 2**30)} GiB) "
        f"to fit into requested memory, or `--kv-cache-memory={full}` ({_g(full / 2**30)} GiB) to fully "
        f"utilize gpu memory. Current kv cache memory in use is {_g(avail_gib)} GiB."
    )
    fileline = "gpu_worker.py:1034" if f.flavor.name == "v0_32" else "gpu_worker.py:391"
    return [f.info(ENGINE, fileline, head + usage + tail)]


def kv_lines(f: LogFormat, tokens: int, max_model_len: int) -> list[Line]:
    """KV capacity: two lines before 0.28, one merged line after."""
    conc = f"Maximum concurrency for {group(max_model_len)} tokens per request: {tokens / max_model_len:.2f}x"
    size = f"GPU KV cache size: {group(tokens)} tokens"
    if f.flavor.merged_kv:
        return [f.info(ENGINE, "kv_cache_utils.py:2327", f"{size}, {conc}")]
    return [f.info(ENGINE, "kv_cache_utils.py:1087", size), f.info(ENGINE, "kv_cache_utils.py:1091", conc)]


def engine_ready_lines(f: LogFormat, graph_s: float, init_s: float, num_gpu_blocks: int) -> list[Line]:
    """CUDA graphs, init engine, and the API server's cache_config_info record."""
    bars = "█" * 40
    out: list[Line] = [
        (
            ERR,
            "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): "
            f"100%|{bars}| 67/67 [00:00<00:00, 95.18it/s]",
        ),
        (ERR, f"Capturing CUDA graphs (decode, FULL): 100%|{bars}| 35/35 [00:00<00:00, 97.82it/s]"),
        f.info(
            ENGINE,
            "gpu_model_runner.py:3480",
            f"Graph capturing finished in {graph_s:.0f} secs, took 0.95 GiB",
        ),
        f.info(
            ENGINE,
            "core.py:210",
            f"init engine (profile, create kv cache, warmup model) took {init_s:.2f} {f.flavor.init_unit}",
        ),
    ]
    if f.flavor.name == "v0_32":
        return out  # 0.32 logs this record at DEBUG only (not seen in the real server's INFO log)
    engine = "" if f.flavor.name == "v0_9" else "Engine 000: "
    msg = f"{engine}vllm cache_config_info with initialization after num_gpu_blocks is: {num_gpu_blocks}"
    out.append(f.info(API, "loggers.py:147", msg))
    return out


def server_start_lines(f: LogFormat, url: str, uvicorn_pid: int) -> list[Line]:
    """From `Starting vLLM ... server on` to uvicorn's `Application startup complete.` (the ready line)."""
    out: list[Line] = [
        f.info(API, "api_server.py:1634", f"{f.flavor.tasks_word}: ['generate']"),
        f.info(API, "api_server.py:1912", f.flavor.server_start.format(url=url)),
        f.info(API, "launcher.py:34", "Available routes are:"),
    ]
    out += [f.info(API, "launcher.py:42", f"Route: {path}, Methods: {m}") for path, m in ROUTES]
    out += [
        f.raw(API, f"INFO:     Started server process [{uvicorn_pid}]"),
        f.raw(API, "INFO:     Waiting for application startup."),
        f.raw(API, "INFO:     Application startup complete."),
    ]
    return out


def access_line(
    f: LogFormat, *, peer: str, method: str, path: str, version: str, code: int, phrase: str
) -> Line:
    """uvicorn access log line."""
    return f.raw(API, f'INFO:     {peer} - "{method} {path} {version}" {code} {phrase}')


def hang_line(f: LogFormat) -> Line:
    return f.log(ENGINE, "WARNING", "shm_broadcast.py:466", HANG_MSG)


def stats_line(
    f: LogFormat, *, prompt_tps: float, gen_tps: float, running: int, waiting: int, kv_pct: float
) -> Line:
    msg = (
        f"Engine 000: Avg prompt throughput: {prompt_tps:.1f} tokens/s, "
        f"Avg generation throughput: {gen_tps:.1f} tokens/s, Running: {running} reqs, "
        f"Waiting: {waiting} reqs, GPU KV cache usage: {kv_pct:.1f}%, "
        "Prefix cache hit rate: 0.0%"
    )
    return f.info(API, "loggers.py:123", msg)
