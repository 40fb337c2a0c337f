"""A failed start explained, from its vLLM log and the kernel log: what happened and what to do (pure).

``diagnose`` takes lines and returns the docs/contract.md shape; the daemon calls it on a failed start (with
the kernel-log follower's lines), and ``supervisorctl diagnose`` (supervisor/offline/diagnose.py) offline.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from supervisor.core.host.kernel_log import MEMORY_KINDS, KernelEvent, classify_kernel_line, is_vllm_process
from supervisor.core.spec.secrets import MASK
from supervisor.core.vllm.analyzer import LogAnalyzer
from supervisor.core.vllm.failures import ARGUMENT_ERROR, PROC_DIED
from supervisor.core.vllm.gmu_advice import MEMORY_OUTCOMES, MemoryFacts, advise_report
from supervisor.core.vocab import LOG_FAILURES, UNAUTHORIZED_REASON, Outcome

MAX_KERNEL_EVENTS = 200
HOST_RESERVE_GIB = 15

_XID_MEANING = {
    13: "a graphics engine exception (often an illegal memory access in a CUDA kernel)",
    31: "a GPU memory-management (MMU) fault: the engine touched memory it does not own",
    43: "the GPU stopped processing (a kernel was killed or hung)",
    45: "preemptive channel cleanup after another error",
    48: "an uncorrectable ECC memory error",
    61: "a GPU firmware (PMU) breakpoint",
    62: "a GPU firmware (PMU) halt",
    63: "an ECC page retirement or row remap event",
    64: "an ECC page retirement or row remap failure",
    74: "an NVLink error",
    79: "the GPU has fallen off the bus",
    92: "a high single-bit ECC error rate",
    94: "a contained ECC error",
    95: "an uncontained ECC error",
    109: "a context-switch timeout",
    119: "a GSP firmware timeout",
    120: "a GSP firmware error",
    154: "the driver requests a GPU reset or reboot",
}
_HARDWARE_XIDS = {48, 63, 64, 74, 79, 92, 94, 95, 119, 120, 154}
#: The log analyzer's failed-start outcomes (the ranked ones, failed_engine_init included).
FAILED_OUTCOMES = LOG_FAILURES


def _event_dict(ev: KernelEvent) -> dict[str, Any]:
    return {
        "kind": ev.kind,
        "xid": ev.xid,
        "pci": ev.pci,
        "pid": ev.pid,
        "proc_name": ev.proc_name,
        "line": ev.line,
    }


def fmt(n: Any, unit: str = "") -> str:
    if n is None:
        return "?"
    if isinstance(n, bool) or not isinstance(n, (int, float)):
        return f"{n}{unit}"
    if isinstance(n, int):
        return f"{n:,}{unit}"
    return f"{n:g}{unit}"


def _engine_dead_sentence(v: dict[str, Any], exc: str | None) -> str:
    """The engine died after the load: when (on its first request, or after serving) and what the log
    names as the cause (a process of the engine that vanished, else the last exception)."""
    first = v.get("requests_served") == 0 and bool(v.get("http_500_count"))
    when = "on its first request (no request was answered before the HTTP 500)" if first else "after startup"
    died = PROC_DIED.search(str(v.get("engine_dead_detail") or ""))
    if died is not None:
        again = (
            " An engine that dies on its first request will most likely die the same way at every start "
            "(the breaker ends the retries): check that this vLLM build supports this hardware and model."
            if first
            else ""
        )
        return (
            f"The engine core died {when}: its process {died.group('name')} died unexpectedly, with no "
            "Python traceback of its own (a crash in native code, or a kill): check the kernel log "
            "(supervisorctl diagnose --kernel) for a segfault, an OOM kill or an Xid; vLLM then exits with "
            f"code 0.{again}"
        )
    root = f" with `{exc}` (the last exception of the EngineCore traceback)" if exc else ""
    return (
        f"The engine core died {when}{root} (EngineDeadError); vLLM then exits with code 0, so "
        "restart it and read the EngineCore traceback and the kernel log (--kernel) for the root cause."
    )


def _vllm_sentence(v: dict[str, Any]) -> str:
    outcome, cause = v["outcome"], v.get("cause")
    if outcome == "failed_oom" or (outcome == "engine_dead" and cause == "oom"):
        when = "while serving" if outcome == "engine_dead" else "during startup"
        tried = f" (tried to allocate {fmt(v.get('oom_tried_mib'), ' MiB')}" if v.get("oom_tried_mib") else ""
        free = f", {fmt(v.get('gpu_free_mib'), ' MiB')} free" if tried and v.get("gpu_free_mib") else ""
        return (
            f"CUDA ran out of memory {when}{tried}{free}{')' if tried else ''}: "
            "lower --gpu-memory-utilization, --max-num-seqs or --max-model-len, and make sure no other "
            "process holds GPU memory."
        )
    if outcome == "failed_gpu_mem_util":
        if v.get("profiling_error") and v.get("free_gib") is None:
            return (
                "GPU memory changed while vLLM was profiling it (another process allocated or freed memory): "
                "stop other GPU processes (leftover VLLM::Worker processes) and start again."
            )
        return (
            f"vLLM refused to start: only {fmt(v.get('free_gib'))}/{fmt(v.get('total_gib'))} GiB were "
            f"free but --gpu-memory-utilization {fmt(v.get('util'))} asks for "
            f"{fmt(v.get('requested_gib'))} GiB; drop the page cache (sync; echo 1 > "
            "/proc/sys/vm/drop_caches) or lower gmu: vLLM counts reclaimable cache as used "
            "(also check for leftover VLLM::Worker processes holding memory)."
        )
    if outcome == "failed_kv_insufficient":
        est = v.get("estimated_max_model_len")
        fix = f"set --max-model-len <= {est:,}" if isinstance(est, int) else "lower --max-model-len"
        return (
            f"The KV cache cannot hold one request of max_model_len {fmt(v.get('max_model_len'))} "
            f"(needs {fmt(v.get('needed_kv_gib'))} GiB, {fmt(v.get('available_kv_gib'))} GiB available): "
            f"{fix} or raise --gpu-memory-utilization."
        )
    if outcome == "failed_no_kv_memory":
        return (
            "No memory was left for the KV cache after loading the weights: raise --gpu-memory-utilization "
            "(keeping the host reserve), or use a smaller/more quantized model."
        )
    exc = v.get("last_exception")
    if outcome == "failed_config":
        return _config_sentence(v.get("config_error") or exc)
    if outcome == "failed_shm":
        need, free = fmt(v.get("shm_required_mib"), " MiB"), fmt(v.get("shm_free_mib"), " MiB")
        return (
            f"The container's shared memory is too small: vLLM needs {need} and {free} are free (Docker's "
            "default /dev/shm is 64 MB): give the container a bigger one (profile container.shm_size, e.g. "
            "16g, i.e. docker --shm-size) or the host's IPC namespace (container.ipc_mode: host, i.e. "
            "--ipc host), then start again."
        )
    if outcome == "failed_engine_init":
        if exc:
            return (
                f"The engine core failed to initialize with `{exc}` (the last exception of its traceback): "
                "that line is the root cause; also check the kernel log (supervisorctl diagnose --kernel)."
            )
        return (
            "The engine core failed to initialize and the log shows no more specific cause: read the "
            "EngineCore traceback above 'Engine core initialization failed' and check the kernel log "
            "(supervisorctl diagnose --kernel) for NV_ERR_NO_MEMORY."
        )
    if outcome == "engine_dead":
        return _engine_dead_sentence(v, exc)
    if exc and outcome in ("starting", "none"):
        return (
            f"vLLM stopped while starting with `{exc}` (the last exception in its log) and no rule knows "
            "it: that line is the root cause; read the traceback around it (supervisorctl logs --previous)."
        )
    if outcome == "shutdown":
        sig = f" by {v['signal']}" if v.get("signal") else ""
        return (
            f"vLLM was shut down{sig} on request; nothing is broken, start it again if that was not intended."
        )
    if outcome == "ready":
        return (
            f"vLLM started and is ready (KV pool {fmt(v.get('kv_tokens'))} tokens, max_model_len "
            f"{fmt(v.get('max_model_len'))}, {fmt(v.get('max_concurrency'))}x concurrency); "
            "no action needed."
        )
    if outcome == "starting":
        parts = []
        if v.get("shards_total"):
            parts.append(f"shards {v.get('shards_done')}/{v['shards_total']}")
        if v.get("last_phase"):
            parts.append(f"last phase {v['last_phase']}")
        where = f" ({', '.join(parts)})" if parts else ""
        if v.get("hang_hint_s"):
            return (
                f"vLLM is still loading{where} and a worker reported no progress for {v['hang_hint_s']} s: "
                "if it stays silent, stop it and check the kernel log and host memory."
            )
        return (
            f"vLLM is still starting{where}; no failure in the log yet: wait, loading can take 5-20 minutes."
        )
    return "No vLLM startup or failure lines in this log: check that it is the vLLM container's output."


def _config_sentence(why: str | None) -> str:
    """vLLM refused its configuration: the refusal quoted, what to change, and why retrying cannot help."""
    said = f" ({why.rstrip('.')})" if why else ""
    text = why or ""
    if "max_model_len" in text:
        fix = "lower --max-model-len to what the model supports (or drop it)"
    elif "Invalid repository ID or local directory" in text or "model weights" in text:
        fix = "point --model at a directory holding the model (config.json and weights; check the bind mount)"
    elif ARGUMENT_ERROR in text and (MASK in text or ("expected" in text and "argument" in text)):
        fix = (
            "a value that begins with '-' (an API key may) is read as an option: join it to its flag with "
            "'=' as one argument, or give the key in the environment variable VLLM_API_KEY"
        )
    elif ARGUMENT_ERROR in text and "unrecognized arguments" in text:
        fix = "remove the arguments this vLLM does not know (or use the vLLM version they belong to)"
    else:
        fix = "correct the argument it names"
    return (
        f"vLLM refused its configuration{said}: {fix}; every retry fails the same way, so the breaker is "
        "open: fix the profile, then `supervisorctl reset`."
    )


def _kernel_sentence(events: list[KernelEvent], outcome: str) -> str | None:
    """The kernel-side cause, if the kernel log holds one (kernel events outrank vLLM's own log)."""
    xids = [e for e in events if e.kind == "xid"]
    vllm_xids = [e for e in xids if is_vllm_process(e)]
    for e in reversed(vllm_xids or [x for x in xids if x.xid in _HARDWARE_XIDS]):
        meaning = _XID_MEANING.get(e.xid or -1, "a GPU error")
        who = f" on the vLLM process {e.proc_name}" if is_vllm_process(e) else ""
        if e.xid in _HARDWARE_XIDS:
            fix = "check the GPU hardware (power, PCIe, ECC counters in nvidia-smi -q) and reboot the host"
        else:
            fix = (
                "restart vLLM; if it recurs, disable the feature that triggers it (speculative decoding, "
                "custom kernels or patches) or change the driver version"
            )
        return f"The kernel reported NVIDIA Xid {e.xid}{who} (PCI {e.pci}): {meaning}; {fix}."
    mem = [e for e in events if e.kind in MEMORY_KINDS]
    if mem:
        last = mem[-1]
        what = {
            "nv_err_no_memory": "the NVIDIA driver ran out of memory (NV_ERR_NO_MEMORY)",
            "rm_init_failed": "the NVIDIA driver failed to initialise the GPU (RmInitAdapter failed)",
            "nvgpu_info": "the Tegra GPU driver could not allocate DMA memory",
            "cma_enomem": "the kernel's contiguous memory allocator ran out (cma_alloc ret -12)",
            "nvmap_enomem": "NvMap could not allocate memory",
        }[last.kind]
        starting = outcome in FAILED_OUTCOMES
        return (
            f"{what}{' while vLLM was starting' if starting else ''}: "
            f"lower --gpu-memory-utilization so the host keeps >= {HOST_RESERVE_GIB} GiB free "
            "(unified memory: the GPU and the host share RAM)."
        )
    kills = [e for e in events if e.kind == "oom_kill" and is_vllm_process(e)]
    if kills:
        e = kills[-1]
        return (
            f"The Linux OOM killer killed {e.proc_name} (pid {e.pid}): host memory ran out; lower "
            f"--gpu-memory-utilization or --max-num-seqs so the host keeps >= {HOST_RESERVE_GIB} GiB free."
        )
    if any(e.kind == "nvrm_no_gpu" for e in events):
        return (
            "The Tegra GPU is not usable from the container (NvRmMemInit failed): run it with "
            "--runtime nvidia and the GPU device nodes."
        )
    if any(e.kind == "nvgpu_err" for e in events):
        return (
            "The Tegra GPU driver (nvgpu) reported errors: check host memory and the JetPack/L4T driver; "
            "reboot if the GPU stays unusable."
        )
    return None


def _start_sentence(start_outcome: str | None) -> tuple[str, str] | None:
    """(cause, sentence) when the supervisor's own verdict on the start outranks what the log says."""
    if start_outcome == Outcome.FAILED_UNAUTHORIZED:
        return "unauthorized", (
            f"{UNAUTHORIZED_REASON[0].upper()}{UNAUTHORIZED_REASON[1:]} (HTTP 401 on the first generation): "
            "the key in the container (--api-key or VLLM_API_KEY) is not the one the probes send; give the "
            "profile the container's key (api_key: or the command's --api-key), then `supervisorctl reset`."
        )
    return None


def diagnose(
    log_lines: Iterable[str],
    kernel_lines: Iterable[str] | None,
    start_outcome: str | None = None,
    memory: MemoryFacts | None = None,
) -> dict[str, Any]:
    """{"vllm": {...}, "kernel": {"events": [...]}, "diagnosis": "<one sentence>"} (docs/contract.md).

    ``start_outcome`` is the supervisor's outcome of the start (e.g. ``failed_unauthorized``): when it
    names the cause itself, the report's ``cause`` and sentence say so (the log only shows the stop).
    """
    analyzer = LogAnalyzer()
    for raw in log_lines:
        analyzer.feed(raw)
    vllm = analyzer.report()
    events: list[KernelEvent] = []
    seen: set[str] = set()
    for raw in kernel_lines or ():
        ev = classify_kernel_line(raw)
        key = raw.strip()  # the same record read twice (not: the same message at two times)
        if ev is not None and key not in seen:
            seen.add(key)
            events.append(ev)
    events = events[-MAX_KERNEL_EVENTS:]
    outcome = vllm["outcome"]
    kernel = _kernel_sentence(events, outcome)
    vllm_text = _vllm_sentence(vllm)
    if kernel is None:
        text = vllm_text
    elif outcome in ("ready", "shutdown", "failed_config"):
        # a healthy log, or a refusal that is certain: older kernel errors are worth a note, not the headline
        text = f"{vllm_text[:-1]}; note: the kernel log holds earlier errors: {kernel[0].lower()}{kernel[1:]}"
    else:
        text = kernel[0].upper() + kernel[1:]
    out: dict[str, Any] = {"vllm": vllm, "kernel": {"events": [_event_dict(e) for e in events]}}
    own = _start_sentence(start_outcome)
    if own is not None and kernel is None:
        out["cause"], text = own
    died_of_memory = (
        outcome in MEMORY_OUTCOMES
        or start_outcome in MEMORY_OUTCOMES
        or any(e.kind in MEMORY_KINDS for e in events)
        or any(e.kind == "oom_kill" and is_vllm_process(e) for e in events)
    )
    advice = advise_report(vllm, memory) if memory is not None and died_of_memory else None
    if advice is not None:
        out["gmu_advice"] = {"gmu": advice.gmu, "at_gmu": advice.at_gmu, "host_kept_gib": advice.left_gib}
        text = f"{text.rstrip('.')}; {advice.text()}."
    out["diagnosis"] = text
    return out
