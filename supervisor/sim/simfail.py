"""Failure, engine-death and shutdown log texts for the simulator (docs/vllm-facts.md §3.1, §3.2, §8). Pure.

Stdlib only: this file is copied next to ``vllm_sim.py`` into the simulator image. Lines are built with
``simlog.LogFormat``, as the startup lines are.
"""

from __future__ import annotations

try:
    from supervisor.sim.simlog import (
        API,
        ENGINE,
        ENGINE_DEAD_MSG,
        ERR,
        SITE,
        WORKER,
        Flavor,
        Line,
        LogFormat,
        kv_gib,
    )
except ImportError:  # running as /opt/vllm-sim/vllm_sim.py: siblings are top-level modules
    from simlog import (  # type: ignore[no-redef,import-not-found]
        API,
        ENGINE,
        ENGINE_DEAD_MSG,
        ERR,
        SITE,
        WORKER,
        Flavor,
        Line,
        LogFormat,
        kv_gib,
    )


# ----------------------------------------------------------------------------------------------- failures

_CORE_STACK = [
    ("core.py", 699, "run_engine_core", "engine_core = EngineCoreProc(*args, **kwargs)"),
    ("core.py", 498, "__init__", "super().__init__(vllm_config, executor_class, log_stats,"),
    ("core.py", 83, "__init__", "self.model_executor = executor_class(vllm_config)"),
    ("executor_base.py", 54, "__init__", "self._init_executor()"),
]


def _frames(stack: list[tuple[str, int, str, str]]) -> list[str]:
    out: list[str] = []
    for fname, lineno, func, code in stack:
        sub = "executor" if fname == "executor_base.py" else "v1/engine"
        out.append(f'  File "{SITE}/vllm/{sub}/{fname}", line {lineno}, in {func}')
        out.append(f"    {code}")
    return out


def failure_exception(
    kind: str, flavor: Flavor, max_model_len: int, avail_gib: float, shm: tuple[int, int] = (0, 0)
) -> list[str]:
    """Extra frames + the final exception line of one startup failure of docs/vllm-facts.md §3.1."""
    if kind == "fail_gpu_mem_util":
        dev = " cuda:0" if flavor.name == "v0_32" else ""
        return [
            f'  File "{SITE}/vllm/v1/worker/gpu_worker.py", line 190, in init_device',
            "    raise ValueError(",
            f"ValueError: Free memory on device{dev} (31.44/47.38 GiB) on startup is less than desired "
            "GPU memory utilization (0.95, 45.01 GiB). Decrease GPU memory utilization or reduce GPU "
            "memory used by other processes.",
        ]
    if kind == "fail_oom":
        return [
            f'  File "{SITE}/vllm/model_executor/model_loader/default_loader.py", line 270, in load_weights',
            "    loaded_weights = model.load_weights(",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 224.00 MiB. GPU 0 has a "
            "total capacity of 23.56 GiB of which 101.75 MiB is free. Including non-PyTorch memory, this "
            "process has 23.44 GiB memory in use. Of the allocated memory 22.88 GiB is allocated by "
            "PyTorch, and 275.38 MiB is reserved by PyTorch but unallocated. If reserved but unallocated "
            "memory is large try setting "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.",
        ]
    if kind == "fail_kv_insufficient":
        need = kv_gib(max_model_len)
        avail = min(avail_gib, need / 2)
        est = int(max_model_len * avail / need)
        models = "model's" if flavor.name == "v0_32" else "models's"
        return [
            f'  File "{SITE}/vllm/v1/core/kv_cache_utils.py", line 686, in check_enough_kv_cache_memory',
            "    raise ValueError(",
            f"ValueError: To serve at least one request with the {models} max seq len ({max_model_len}), "
            f"({need:.2f} GiB KV cache is needed, which is larger than the available KV cache memory "
            f"({avail:.2f} GiB). Based on the available memory, the estimated maximum model length is {est}. "
            "Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing "
            "the engine.",
        ]
    if kind == "fail_no_kv":
        return [
            f'  File "{SITE}/vllm/v1/core/kv_cache_utils.py", line 671, in check_enough_kv_cache_memory',
            '    raise ValueError("No available memory for the cache blocks. "',
            "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
            "when initializing the engine.",
        ]
    if kind == "fail_shm":  # vLLM 0.32's check before the shared-memory broadcast ring (real text)
        need, free = shm
        return [
            f'  File "{SITE}/vllm/distributed/device_communicators/shm_broadcast.py", line 253, in '
            "check_shm_free_space",
            "    raise RuntimeError(",
            "RuntimeError: Insufficient space in /dev/shm for shared-memory allocation: "
            f"{need} MiB required, {free} MiB free. Increase /dev/shm (e.g. --shm-size or --ipc=host).",
        ]
    return [  # fail_engine_init, fail_worker_exception: the executor's wrapper (worker_failure_lines before)
        f'  File "{SITE}/vllm/v1/executor/multiproc_executor.py", line 92, in _init_executor',
        "    self.workers = WorkerProc.wait_for_ready(unready_workers)",
        "Exception: WorkerProc initialization failed due to an exception in a background process. "
        "See stack trace for root cause.",
    ]


#: The deterministic engine-init error of ``fail_worker_exception`` (the field's, docs/state-machine.md "The
#: same root cause twice"): the same config dies on this line at every start, raised in the last frame below.
INIT_ERROR = (
    "ValueError: NvFp4 MoE backend 'VLLM_CUTLASS' does not support the deployment configuration since "
    "kernel does not support quantization scheme QuantKey(u8, scale(f8e4m3fn, static, GroupShape(row=1, "
    "col=16)))"
)
_WORKER_STACK = [
    ("v1/executor/multiproc_executor.py", 920, "worker_main", "worker = WorkerProc(*args, **kwargs)"),
    ("v1/executor/multiproc_executor.py", 652, "__init__", "self.worker.load_model()"),
    ("v1/worker/gpu_worker.py", 289, "load_model", "self.model_runner.load_model(eep_scale_up=eep_scale_up)"),
    (
        "model_executor/layers/quantization/modelopt.py",
        1496,
        "process_weights_after_loading",
        "self.nvfp4_backend = select_nvfp4_moe_backend()",
    ),
    ("model_executor/layers/fused_moe/oracle/nvfp4.py", 304, "select_nvfp4_moe_backend", "raise ValueError("),
]


def worker_failure_lines(f: LogFormat) -> list[Line]:
    """The worker's own ``WorkerProc failed to start.`` record (vLLM 0.32 multiproc_executor.py:953,
    ``logger.exception``) with its traceback, ending in :data:`INIT_ERROR`: what a real multiprocess
    executor prints before the executor's wrapper ``Exception: WorkerProc initialization failed ...``.
    """
    tb = ["Traceback (most recent call last):"]
    for path, lineno, func, code in _WORKER_STACK:
        tb += [f'  File "{SITE}/vllm/{path}", line {lineno}, in {func}', f"    {code}"]
    tb.append(INIT_ERROR)
    return [
        f.log(WORKER, "ERROR", "multiproc_executor.py:953", "WorkerProc failed to start.\n" + "\n".join(tb))
    ]


def startup_failure_lines(
    f: LogFormat, kind: str, max_model_len: int, avail_gib: float, shm: tuple[int, int] = (0, 0)
) -> list[Line]:
    """EngineCore `failed to start` record + process dump, then the API server's RuntimeError traceback.

    ``shm`` is (MiB required, MiB free) of ``fail_shm``.
    """
    tb = ["Traceback (most recent call last):", *_frames(_CORE_STACK)]
    tb += failure_exception(kind, f.flavor, max_model_len, avail_gib, shm)
    out: list[Line] = worker_failure_lines(f) if kind == "fail_worker_exception" else []
    out.append(f.log(ENGINE, "ERROR", "core.py:708", "EngineCore failed to start.\n" + "\n".join(tb)))
    out.append(f.raw(ENGINE, f"Process {f.flavor.engine_proc}:", ERR))
    out += [f.raw(ENGINE, t, ERR) for t in tb]
    api_tb = [
        "Traceback (most recent call last):",
        '  File "<frozen runpy>", line 198, in _run_module_as_main',
        '  File "<frozen runpy>", line 88, in _run_code',
        f'  File "{SITE}/vllm/entrypoints/openai/api_server.py", line 1953, in <module>',
        "    uvloop.run(run_server(args))",
        f'  File "{SITE}/vllm/v1/engine/utils.py", line 887, in wait_for_engine_startup',
        "    raise RuntimeError(",
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
    ]
    out += [f.raw(API, t, ERR) for t in api_tb]
    return out


# ----------------------------------------------------------------------- configuration refused (0.32)

_CONFIG_STACK = [
    ("engine/arg_utils.py", 2240, "create_engine_config", "model_config = self.create_model_config()"),
    ("engine/arg_utils.py", 1955, "create_model_config", "return ModelConfig("),
]
_PYDANTIC_TAIL = (
    " [type=value_error, input_value=ArgsKwargs((), {'model': ...nderer_num_workers': 1}), "
    "input_type=ArgsKwargs]"
)


def max_len_reason(max_model_len: int, positions: int) -> list[str]:
    """vLLM 0.32's refusal of a ``--max-model-len`` above the model's positions (one line, real text)."""
    return [
        f"User-specified max_model_len ({max_model_len}) is greater than the derived max_model_len "
        f"(max_position_embeddings={float(positions)} or model_max_length=None in model's config.json). "
        "To allow overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. "
        "VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used with extreme caution."
    ]


def no_model_reason(model: str) -> list[str]:
    """vLLM 0.32's refusal of a ``--model`` directory without a config (several lines, real text)."""
    return [
        f"Invalid repository ID or local directory specified: '{model}'.",
        "Please verify the following requirements:",
        "1. Provide a valid Hugging Face repository ID.",
        "2. Specify a local directory that contains a recognized configuration file.",
        "   - For Hugging Face models: ensure the presence of a 'config.json'.",
        "   - For Mistral models: ensure the presence of a 'params.json'.",
    ]


def config_error_lines(f: LogFormat, reason: list[str]) -> list[Line]:
    """The API server refuses its configuration before any engine starts: a raw pydantic traceback."""
    tb = [
        "Traceback (most recent call last):",
        '  File "<frozen runpy>", line 198, in _run_module_as_main',
        f'  File "{SITE}/vllm/entrypoints/openai/api_server.py", line 59, in <module>',
        "    main()",
    ]
    for fname, lineno, func, code in _CONFIG_STACK:
        tb += [f'  File "{SITE}/vllm/{fname}", line {lineno}, in {func}', f"    {code}"]
    tb += [
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig",
        f"  Value error, {reason[0]}" + ("" if len(reason) > 1 else _PYDANTIC_TAIL),
        *reason[1:-1],
        *([reason[-1] + "\n" + _PYDANTIC_TAIL] if len(reason) > 1 else []),
        "    For further information visit https://errors.pydantic.dev/2.14/v/value_error",
    ]
    return [f.raw(API, t, ERR) for t in "\n".join(tb).split("\n")]


def interrupted_lines(f: LogFormat, signame: str) -> list[Line]:
    """SIGTERM/SIGINT before ready: the unhandled KeyboardInterrupt traceback of the API server."""
    last = "KeyboardInterrupt: terminated" if signame == "SIGTERM" else "KeyboardInterrupt"
    tb = [
        "Traceback (most recent call last):",
        '  File "<frozen runpy>", line 198, in _run_module_as_main',
        f'  File "{SITE}/vllm/entrypoints/openai/api_server.py", line 1953, in <module>',
        "    uvloop.run(run_server(args))",
        f'  File "{SITE}/vllm/entrypoints/launcher.py", line 67, in signal_handler',
        '    raise KeyboardInterrupt("terminated")',
        last,
    ]
    return [f.raw(API, t, ERR) for t in tb]


def engine_death_lines(f: LogFormat) -> list[Line]:
    """EngineCore fatal error, then the API server's output handler failure and EngineDeadError."""
    core_tb = (
        "EngineCore encountered a fatal error.\nTraceback (most recent call last):\n"
        f'  File "{SITE}/vllm/v1/engine/core.py", line 701, in run_engine_core\n'
        "    engine_core.run_busy_loop()\n"
        f'  File "{SITE}/vllm/v1/engine/core.py", line 728, in run_busy_loop\n'
        "    self._process_engine_step()\n"
        "RuntimeError: CUDA error: an illegal memory access was encountered"
    )
    api_tb = (
        "AsyncLLM output_handler failed.\nTraceback (most recent call last):\n"
        f'  File "{SITE}/vllm/v1/engine/async_llm.py", line 439, in output_handler\n'
        "    outputs = await engine_core.get_output_async()\n"
        f'  File "{SITE}/vllm/v1/engine/core_client.py", line 846, in get_output_async\n'
        "    raise self._format_exception(outputs) from None\n"
        f"vllm.v1.engine.exceptions.EngineDeadError: {ENGINE_DEAD_MSG}"
    )
    return [
        f.log(ENGINE, "ERROR", "core.py:710", core_tb),
        _client_death_line(f),
        f.log(API, "ERROR", "async_llm.py:480", api_tb),
    ]


def worker_death_lines(f: LogFormat) -> list[Line]:
    """The engine's worker process dies on a forward with no traceback of its own (seen on the real 0.32,
    tests/fixtures/vllm-logs/055): the executor's line, EngineCore's fatal error ending in the cancelled
    read, the API server's output handler failure and EngineDeadError. Other versions: the same text
    (not seen running)."""
    core_tb = (
        "EngineCore encountered a fatal error.\nTraceback (most recent call last):\n"
        f'  File "{SITE}/vllm/v1/engine/core.py", line 1496, in run_engine_core\n'
        "    engine_core.run_busy_loop()\n"
        f'  File "{SITE}/vllm/v1/engine/core.py", line 674, in step\n'
        "    model_output = future.result()\n"
        f'  File "{SITE}/vllm/distributed/device_communicators/shm_broadcast.py", line 867, in acquire_read\n'
        '    raise RuntimeError("cancelled")\n'
        "RuntimeError: cancelled"
    )
    api_tb = (
        "AsyncLLM output_handler failed.\nTraceback (most recent call last):\n"
        f'  File "{SITE}/vllm/v1/engine/async_llm.py", line 849, in output_handler\n'
        "    outputs = await engine_core.get_output_async()\n"
        f'  File "{SITE}/vllm/v1/engine/core_client.py", line 1235, in get_output_async\n'
        "    raise self._format_exception(outputs) from None\n"
        f"vllm.v1.engine.exceptions.EngineDeadError: {ENGINE_DEAD_MSG}"
    )
    died = "Worker proc VllmWorker-0 died unexpectedly (exit code: None), shutting down executor."
    return [
        f.log(ENGINE, "ERROR", "multiproc_executor.py:315", died),
        f.info(ENGINE, "multiproc_executor.py:479", "[shutdown] Executor: waiting for worker exit count=0"),
        f.info(ENGINE, "multiproc_executor.py:486", "[shutdown] Executor: all workers exited gracefully"),
        f.log(ENGINE, "ERROR", "core.py:1512", core_tb),
        f.log(API, "ERROR", "async_llm.py:906", api_tb),
    ]


def after_worker_death_lines(f: LogFormat) -> list[Line]:
    """What the real 0.32 printed once the request that killed the worker was answered 500: uvicorn
    stopping (its ``Finished server process`` line included) and the client's cleanup; then exit 0."""
    return [
        f.raw(API, "INFO:     Shutting down"),
        f.raw(API, "INFO:     Waiting for application shutdown."),
        f.raw(API, "INFO:     Application shutdown complete."),
        f.raw(API, "INFO:     Finished server process [1]"),
        f.info(API, "core_client.py:770", "[shutdown] MPClient: start timeout=0s"),
        f.info(API, "utils.py:628", "[shutdown] Process manager: send sigterm to process EngineCore"),
        f.info(API, "core_client.py:777", "[shutdown] MPClient: complete"),
    ]


def _client_death_line(f: LogFormat) -> Line:
    """The API server's view of a dead engine core (0.32 source: the `[shutdown] MPClient` warning)."""
    if f.flavor.name == "v0_32":
        return f.log(
            API,
            "WARNING",
            "core_client.py:818",
            "[shutdown] MPClient: engine core exited unexpectedly; starting cleanup",
        )
    return f.log(
        API,
        "ERROR",
        "core_client.py:564",
        f"Engine core proc {f.flavor.engine_proc} died unexpectedly, shutting down client.",
    )


def uvicorn_shutdown_lines(f: LogFormat, uvicorn_pid: int) -> list[Line]:
    """uvicorn stopping; real 0.32 (seen running) prints no `Finished server process [N]` line."""
    out = [
        f.raw(API, "INFO:     Shutting down"),
        f.raw(API, "INFO:     Waiting for application shutdown."),
        f.raw(API, "INFO:     Application shutdown complete."),
    ]
    if f.flavor.name != "v0_32":
        out.append(f.raw(API, f"INFO:     Finished server process [{uvicorn_pid}]"))
    return out


def shutdown_lines(f: LogFormat, signame: str, timeout: int, inflight: int, uvicorn_pid: int) -> list[Line]:
    """SIGTERM/SIGINT after ready: per flavour (0.32 speaks the `[shutdown]` family)."""
    if f.flavor.name != "v0_32":
        return [f.info(API, "launcher.py:80", "Shutting down FastAPI HTTP server.")]
    mode = "drain" if timeout > 0 else "abort"
    what = (
        f"draining in-flight requests count={inflight} timeout={timeout}s"
        if timeout > 0
        else f"aborting in-flight requests count={inflight}"
    )
    # Order and texts as the real 0.32 CPU server printed them (API server first, then the engine core).
    return [
        f.info(API, "launcher.py:254", "[shutdown] API server: shutdown triggered"),
        f.info(
            API,
            "launcher.py:270",
            f"[shutdown] API server: stopping engine client mode={mode} timeout={timeout}s",
        ),
        f.info(API, "core_client.py:770", f"[shutdown] MPClient: start timeout={timeout}s"),
        f.info(API, "core_client.py:772", "[shutdown] MPClient: stopping engine manager"),
        f.info(
            API, "utils.py:628", f"[shutdown] Process manager: send sigterm to process {f.flavor.engine_proc}"
        ),
        f.info(ENGINE, "core.py:1454", f"[shutdown] EngineCore: trigger received signal={signame}"),
        f.info(ENGINE, "core.py:1635", f"[shutdown] EngineCore: start mode={mode} timeout={timeout}s"),
        f.info(ENGINE, "core.py:1655", f"[shutdown] EngineCore: {what}"),
    ]


def shutdown_done_lines(f: LogFormat, uvicorn_pid: int) -> list[Line]:
    """After the drain/abort (0.32): teardown, then uvicorn stops."""
    if f.flavor.name != "v0_32":
        return uvicorn_shutdown_lines(f, uvicorn_pid)
    return [
        f.info(
            ENGINE,
            "core.py:1666",
            "[shutdown] EngineCore: request processing complete; starting resource teardown",
        ),
        f.info(ENGINE, "core.py:1499", "[shutdown] EngineCore: exiting busy loop"),
        f.info(API, "core_client.py:774", "[shutdown] MPClient: engine manager stopped"),
        f.info(API, "core_client.py:777", "[shutdown] MPClient: complete"),
        f.info(API, "launcher.py:279", "[shutdown] API server: engine client stopped"),
        f.info(API, "launcher.py:304", "[shutdown] API server: shutting down FastAPI HTTP server"),
        *uvicorn_shutdown_lines(f, uvicorn_pid),
    ]
