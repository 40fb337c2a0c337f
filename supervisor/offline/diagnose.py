"""Offline diagnosis: a vLLM log (+ optionally the kernel log) -> what happened and what to do.

``diagnose`` is pure (lines in, dict out, docs/contract.md shape). ``read_kernel_log`` is the one host read
(``dmesg`` with a timeout, falling back to ``/dev/kmsg`` read non-blocking). ``run_diagnose`` is what
``supervisorctl diagnose`` calls: it returns (exit code, output text). Exit codes: 0 no problem found,
1 a failure was diagnosed, 2 an input could not be read.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from typing import Any

from supervisor.adapters.host import read_kernel_log
from supervisor.core.errors import HostError
from supervisor.core.host.kernel_log import (
    MEMORY_KINDS,
    KernelEvent,
    KernelKind,
    classify_kernel_line,
    is_vllm_process,
)
from supervisor.core.vllm.analyzer import LogAnalyzer
from supervisor.core.vocab import FAILURE_RANK

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
_FAILED = tuple(FAILURE_RANK)


def _event_dict(ev: KernelEvent) -> dict[str, Any]:
    return {
        "kind": ev.kind,
        "xid": ev.xid,
        "pci": ev.pci,
        "pid": ev.pid,
        "proc_name": ev.proc_name,
        "line": ev.line,
    }


def _fmt(n: Any, unit: str = "") -> str:
    if n is None:
        return "?"
    if isinstance(n, bool) or not isinstance(n, (int, float)):
        return f"{n}{unit}"
    if isinstance(n, int):
        return f"{n:,}{unit}"
    return f"{n:g}{unit}"


def _vllm_sentence(v: dict[str, Any]) -> str:
    outcome, cause = v["outcome"], v.get("cause")
    if outcome == "failed_oom" or (outcome == "engine_dead" and cause == "oom"):
        when = "while serving" if outcome == "engine_dead" else "during startup"
        tried = (
            f" (tried to allocate {_fmt(v.get('oom_tried_mib'), ' MiB')}" if v.get("oom_tried_mib") else ""
        )
        free = f", {_fmt(v.get('gpu_free_mib'), ' MiB')} free" if tried and v.get("gpu_free_mib") else ""
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
            f"vLLM refused to start: only {_fmt(v.get('free_gib'))}/{_fmt(v.get('total_gib'))} GiB were "
            f"free but --gpu-memory-utilization {_fmt(v.get('util'))} asks for "
            f"{_fmt(v.get('requested_gib'))} GiB; drop the page cache (sync; echo 1 > "
            "/proc/sys/vm/drop_caches) or lower gmu: vLLM counts reclaimable cache as used "
            "(also check for leftover VLLM::Worker processes holding memory)."
        )
    if outcome == "failed_kv_insufficient":
        est = v.get("estimated_max_model_len")
        fix = f"set --max-model-len <= {est:,}" if isinstance(est, int) else "lower --max-model-len"
        return (
            f"The KV cache cannot hold one request of max_model_len {_fmt(v.get('max_model_len'))} "
            f"(needs {_fmt(v.get('needed_kv_gib'))} GiB, {_fmt(v.get('available_kv_gib'))} GiB available): "
            f"{fix} or raise --gpu-memory-utilization."
        )
    if outcome == "failed_no_kv_memory":
        return (
            "No memory was left for the KV cache after loading the weights: raise --gpu-memory-utilization "
            "(keeping the host reserve), or use a smaller/more quantized model."
        )
    if outcome == "failed_engine_init":
        return (
            "The engine core failed to initialize and the log shows no more specific cause: read the "
            "EngineCore traceback above 'Engine core initialization failed' and check the kernel log "
            "(supervisorctl diagnose --kernel) for NV_ERR_NO_MEMORY."
        )
    if outcome == "engine_dead":
        return (
            "The engine core died after startup (EngineDeadError); vLLM then exits with code 0, so "
            "restart it and read the EngineCore traceback and the kernel log (--kernel) for the root cause."
        )
    if outcome == "shutdown":
        sig = f" by {v['signal']}" if v.get("signal") else ""
        return (
            f"vLLM was shut down{sig} on request; nothing is broken, start it again if that was not intended."
        )
    if outcome == "ready":
        return (
            f"vLLM started and is ready (KV pool {_fmt(v.get('kv_tokens'))} tokens, max_model_len "
            f"{_fmt(v.get('max_model_len'))}, {_fmt(v.get('max_concurrency'))}x concurrency); "
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


def _kernel_sentence(events: list[KernelEvent], outcome: str) -> str | None:
    """The kernel-side cause, if the kernel log holds one (kernel events outrank vLLM's own log)."""
    xids = [e for e in events if e.kind == KernelKind.XID]
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
            KernelKind.NV_ERR_NO_MEMORY: "the NVIDIA driver ran out of memory (NV_ERR_NO_MEMORY)",
            KernelKind.RM_INIT_FAILED: (
                "the NVIDIA driver failed to initialise the GPU (RmInitAdapter failed)"
            ),
            KernelKind.NVGPU_INFO: "the Tegra GPU driver could not allocate DMA memory",
            KernelKind.CMA_ENOMEM: "the kernel's contiguous memory allocator ran out (cma_alloc ret -12)",
            KernelKind.NVMAP_ENOMEM: "NvMap could not allocate memory",
        }[last.kind]
        return (
            f"{what}{' while vLLM was starting' if outcome in _FAILED else ''}: "
            f"lower --gpu-memory-utilization so the host keeps >= {HOST_RESERVE_GIB} GiB free "
            "(unified memory: the GPU and the host share RAM)."
        )
    kills = [e for e in events if e.kind == KernelKind.OOM_KILL and is_vllm_process(e)]
    if kills:
        e = kills[-1]
        return (
            f"The Linux OOM killer killed {e.proc_name} (pid {e.pid}): host memory ran out; lower "
            f"--gpu-memory-utilization or --max-num-seqs so the host keeps >= {HOST_RESERVE_GIB} GiB free."
        )
    if any(e.kind == KernelKind.NVRM_NO_GPU for e in events):
        return (
            "The Tegra GPU is not usable from the container (NvRmMemInit failed): run it with "
            "--runtime nvidia and the GPU device nodes."
        )
    if any(e.kind == KernelKind.NVGPU_ERR for e in events):
        return (
            "The Tegra GPU driver (nvgpu) reported errors: check host memory and the JetPack/L4T driver; "
            "reboot if the GPU stays unusable."
        )
    return None


def diagnose(log_lines: Iterable[str], kernel_lines: Iterable[str] | None) -> dict[str, Any]:
    """{"vllm": {...}, "kernel": {"events": [...]}, "diagnosis": "<one sentence>"} (docs/contract.md)."""
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
    elif outcome in ("ready", "shutdown"):
        # a healthy log: older kernel errors are worth a note, not the headline
        text = f"{vllm_text[:-1]}; note: the kernel log holds earlier errors: {kernel[0].lower()}{kernel[1:]}"
    else:
        text = kernel[0].upper() + kernel[1:]
    return {"vllm": vllm, "kernel": {"events": [_event_dict(e) for e in events]}, "diagnosis": text}


def _fmt_row(label: str, items: list[tuple[str, Any, str]]) -> str | None:
    parts = [f"{name} {_fmt(val, unit)}" for name, val, unit in items if val is not None]
    return f"  {label}: " + ", ".join(parts) if parts else None


def render_text(report: dict[str, Any]) -> str:
    """A human-readable rendering of a ``diagnose`` report."""
    v = report["vllm"]
    out = [f"diagnosis: {report['diagnosis']}", ""]
    head = f"vLLM log: outcome {v['outcome']}"
    if v.get("cause"):
        head += f" (cause: {v['cause']})"
    out.append(head)
    rows = [
        _fmt_row("server", [("version", v.get("version"), ""), ("listen", v.get("listen_url"), "")]),
        _fmt_row("process", [("name", v.get("proc"), "")]),
        _fmt_row("load", [("shards", v.get("shards_done"), ""), ("of", v.get("shards_total"), ""),
                          ("weights", v.get("model_load_gib"), " GiB"), ("in", v.get("model_load_s"), " s")]),
        _fmt_row("kv pool", [("tokens", v.get("kv_tokens"), ""),
                             ("max_model_len", v.get("max_model_len"), ""),
                             ("concurrency", v.get("max_concurrency"), "x"),
                             ("available", v.get("available_kv_gib"), " GiB"),
                             ("gpu blocks", v.get("num_gpu_blocks") or v.get("gpu_blocks"), "")]),
        _fmt_row("timing", [("graph capture", v.get("graph_capture_s"), " s"),
                            ("engine init", v.get("init_engine_s"), " s")]),
        _fmt_row("memory", [("free", v.get("free_gib"), " GiB"), ("total", v.get("total_gib"), " GiB"),
                            ("gmu", v.get("util"), ""), ("requested", v.get("requested_gib"), " GiB"),
                            ("kv needed", v.get("needed_kv_gib"), " GiB"),
                            ("est. max_model_len", v.get("estimated_max_model_len"), "")]),
    ]  # fmt: skip
    out.extend(r for r in rows if r)
    events = report["kernel"]["events"]
    out.append("")
    if report["kernel"].get("error"):
        out.append(f"kernel log: not read ({report['kernel']['error']})")
    out.append(f"kernel log: {len(events)} relevant event(s)")
    for e in events[-20:]:
        out.append(f"  {e['kind']:<16} {e['line'][:160]}")
    return "\n".join(out) + "\n"


def _read_lines(path: str | os.PathLike[str]) -> list[str]:
    with open(path, encoding="utf-8", errors="replace") as fh:
        return fh.read().splitlines()


def run_diagnose(
    log_file: str | os.PathLike[str] | None,
    kernel_file: str | os.PathLike[str] | None,
    use_kernel: bool,
    as_json: bool,
    log_lines: list[str] | None = None,
) -> tuple[int, str]:
    """``supervisorctl diagnose``: (exit code, output); 0 fine, 1 failure found, 2 unreadable input."""
    lines: list[str] = list(log_lines or [])
    try:
        if log_file is not None:
            lines = _read_lines(log_file)
        kernel: list[str] | None = _read_lines(kernel_file) if kernel_file is not None else None
    except OSError as exc:
        return 2, f"diagnose: cannot read {exc.filename}: {exc.strerror}\n"
    kernel_error = None
    if kernel is None and use_kernel:
        try:
            kernel = read_kernel_log()
        except HostError as exc:
            kernel_error = str(exc)
    report = diagnose(lines, kernel)
    if kernel_error:
        report["kernel"]["error"] = kernel_error
    bad = report["vllm"]["outcome"] in (*_FAILED, "engine_dead") or bool(report["kernel"]["events"])
    text = json.dumps(report, indent=2, ensure_ascii=False) + "\n" if as_json else render_text(report)
    return (1 if bad else 0), text
