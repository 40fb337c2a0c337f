"""Rules for vLLM failure, engine-death and shutdown lines (docs/vllm-facts.md §3.1, §3.2, §8). Pure.

Each rule takes a bare message (already known to contain its guard substring) and returns the signal
plus the numbers it carries (keys named as in the diagnose JSON), or None.
"""

from __future__ import annotations

import re

from supervisor.core.spec.secrets import MASK
from supervisor.core.vllm.types import EngineDead, Fields, Shutdown, Signal, StartupFailure
from supervisor.core.vocab import Outcome

_UNIT_MIB = {
    "B": 1 / 2**20,
    "KB": 1 / 1024,
    "KiB": 1 / 1024,
    "MB": 1.0,
    "MiB": 1.0,
    "GB": 1024.0,
    "GiB": 1024.0,
}


def _mib(amount: str, unit: str) -> float:
    return round(float(amount) * _UNIT_MIB.get(unit, 1.0), 4)


# --- failures -------------------------------------------------------------------------------------------

_OOM = re.compile(
    r"OutOfMemoryError: CUDA out of memory(?:\. Tried to allocate (?P<amt>[\d.]+) (?P<unit>[KMG]i?B))?"
    r"|CUDA (?:driver )?error: out of memory|Failed to load model - not enough GPU memory"
)
_OOM_TOTAL = re.compile(
    r"total capac(?:i)?ty of (?P<a>[\d.]+) (?P<u>[KMG]i?B)|(?P<b>[\d.]+) (?P<v>[KMG]i?B) total capac(?:i)?ty"
)
_OOM_FREE = re.compile(r"of which (?P<a>[\d.]+) (?P<u>[KMG]i?B) is free|(?P<b>[\d.]+) (?P<v>[KMG]i?B) free\b")
_FREE_MEM = re.compile(
    r"Free memory on device(?: (?P<dev>\S+))? \((?P<free>[\d.]+)/(?P<total>[\d.]+) GiB\) on startup "
    r"is less than desired GPU memory utilization \((?P<util>[\d.]+), (?P<req>[\d.]+) GiB\)"
)
_KV_INSUFF = re.compile(
    r"To serve at least one request with the models?'s max seq len \((?P<len>\d+)\)"
    r"(?:, \((?P<need>[\d.]+) GiB KV\s*cache is needed, which is larger than the available KV cache memory"
    r" \((?P<avail>[\d.]+) GiB\))?"
)
_KV_EST = re.compile(r"the estimated maximum model length is (?P<est>\d+)")
_V0_KV_INSUFF = re.compile(
    r"The model's max seq len \((?P<len>\d+)\) is larger than the maximum number of tokens that can be "
    r"stored in KV cache \((?P<cap>\d+)\)"
)
_INIT_FAILED = re.compile(
    r"RuntimeError: Engine core initialization failed\. See root cause above\."
    r"(?: Failed core proc\(s\): (?P<procs>\{[^}]*\}))?"
)
_CORE_FAILED = re.compile(
    r"EngineCore (?:failed to start|hit an exception)|WorkerProc (?:initialization failed|failed to start)"
)


_SHM = re.compile(
    r"Insufficient space in /dev/shm for shared-memory allocation: (?P<need>[\d.]+) MiB required, "
    r"(?P<free>[\d.]+) MiB free"
)
#: vLLM's config dataclasses refuse a value (pydantic): ``ValidationError: 1 validation error for
#: ModelConfig`` (a request's validation error names a request class, not a ``*Config``).
_CONFIG = re.compile(r"ValidationError: \d+ validation errors? for (?P<cls>\w*Config)\b")
_NO_WEIGHTS = re.compile(r"Cannot find any model weights with `?(?P<path>[^`\s]+)")
_ARGPARSE = re.compile(r"^(?:vllm(?: serve)?|[\w.-]+\.py): error: (?P<what>.+)$")
#: The indented line under a ValidationError with the reason (``  Value error, User-specified ...``).
_VALUE_ERROR = re.compile(r"^\s+Value error, (?P<why>.*?\.)(?:\s|$)")
MAX_DETAIL_CHARS = 300
#: How an argparse refusal's ``config_error`` begins (printed before the banner: no start line is due).
ARGUMENT_ERROR = "argument error: "
_UNRECOGNIZED = "unrecognized arguments: "
_LONG_OPTION = re.compile(r"--[\w-]+")


def argument_error(what: str) -> str:
    """argparse's refusal as ``config_error``, with the arguments it echoes masked unless they are option
    names: an unrecognized argument may be an API key that begins with ``-`` (fixture 053)."""
    head, sep, rest = what.partition(_UNRECOGNIZED)
    if sep:
        shown = []
        for token in rest.split():
            name, eq, _value = token.partition("=")
            shown.append(f"{name}{eq}{MASK if eq else ''}" if _LONG_OPTION.fullmatch(name) else MASK)
        what = head + sep + " ".join(shown)
    return f"{ARGUMENT_ERROR}{what}"[:MAX_DETAIL_CHARS]


def _shm(msg: str) -> tuple[Signal, Fields] | None:
    m = _SHM.search(msg)
    if m is None:
        return None
    f: Fields = {"shm_required_mib": float(m.group("need")), "shm_free_mib": float(m.group("free"))}
    return StartupFailure(Outcome.FAILED_SHM, dict(f)), f


def _config(msg: str) -> tuple[Signal, Fields] | None:
    m = _CONFIG.search(msg)
    if m is not None:
        f: Fields = {"config_class": m.group("cls")}
        return StartupFailure(Outcome.FAILED_CONFIG, dict(f)), f
    w = _NO_WEIGHTS.search(msg)
    if w is not None:
        f = {"config_error": f"Cannot find any model weights with {w.group('path')}"[:MAX_DETAIL_CHARS]}
        return StartupFailure(Outcome.FAILED_CONFIG, dict(f)), f
    a = _ARGPARSE.match(msg.strip())
    if a is not None:
        f = {"config_error": argument_error(a.group("what"))}
        return StartupFailure(Outcome.FAILED_CONFIG, dict(f)), f
    return None


def config_reason(msg: str) -> str | None:
    """The first sentence of the ``  Value error, ...`` line under a config ValidationError, else None."""
    m = _VALUE_ERROR.match(msg)
    return None if m is None else m.group("why")[:MAX_DETAIL_CHARS]


def _oom(msg: str) -> tuple[Signal, Fields] | None:
    m = _OOM.search(msg)
    if m is None:
        return None
    f: Fields = {}
    if m.group("amt"):
        f["oom_tried_mib"] = _mib(m.group("amt"), m.group("unit"))
    t = _OOM_TOTAL.search(msg)
    if t is not None:
        a, u = (t.group("a"), t.group("u")) if t.group("a") else (t.group("b"), t.group("v"))
        f["gpu_total_gib"] = round(_mib(a, u) / 1024, 4)
    fr = _OOM_FREE.search(msg)
    if fr is not None:
        a, u = (fr.group("a"), fr.group("u")) if fr.group("a") else (fr.group("b"), fr.group("v"))
        f["gpu_free_mib"] = _mib(a, u)
    return StartupFailure(Outcome.FAILED_OOM, dict(f)), f


def _free_mem(msg: str) -> tuple[Signal, Fields] | None:
    m = _FREE_MEM.search(msg)
    if m is None:
        return None
    f: Fields = {
        "free_gib": float(m.group("free")),
        "total_gib": float(m.group("total")),
        "util": float(m.group("util")),
        "requested_gib": float(m.group("req")),
    }
    if m.group("dev"):
        f["device"] = m.group("dev")
    return StartupFailure(Outcome.FAILED_GPU_MEM_UTIL, dict(f)), f


def _profiling(msg: str) -> tuple[Signal, Fields] | None:
    f: Fields = {"profiling_error": True}
    return StartupFailure(Outcome.FAILED_GPU_MEM_UTIL, dict(f)), f


def _kv_insufficient(msg: str) -> tuple[Signal, Fields] | None:
    m = _KV_INSUFF.search(msg)
    f: Fields = {}
    if m is not None:
        f["max_model_len"] = int(m.group("len"))
        if m.group("need"):
            f["needed_kv_gib"] = float(m.group("need"))
            f["available_kv_gib"] = float(m.group("avail"))
        e = _KV_EST.search(msg)
        if e is not None:
            f["estimated_max_model_len"] = int(e.group("est"))
    else:
        v0 = _V0_KV_INSUFF.search(msg)
        if v0 is None:
            return None
        f["max_model_len"] = int(v0.group("len"))
        f["kv_capacity_tokens"] = int(v0.group("cap"))
    return StartupFailure(Outcome.FAILED_KV_INSUFFICIENT, dict(f)), f


def _no_kv(msg: str) -> tuple[Signal, Fields] | None:
    return StartupFailure(Outcome.FAILED_NO_KV_MEMORY, {}), {}


def _init_failed(msg: str) -> tuple[Signal, Fields] | None:
    m = _INIT_FAILED.search(msg)
    if m is None:
        return None
    f: Fields = {"failed_procs": m.group("procs")} if m.group("procs") else {}
    return StartupFailure(Outcome.FAILED_ENGINE_INIT, dict(f)), f


def _core_failed(msg: str) -> tuple[Signal, Fields] | None:
    m = _CORE_FAILED.search(msg)
    if m is None:
        return None
    return StartupFailure(Outcome.FAILED_ENGINE_INIT, {"where": m.group(0)}), {}


def _ready_timeout(msg: str) -> tuple[Signal, Fields] | None:
    return StartupFailure(Outcome.FAILED_ENGINE_INIT, {"where": "ready timeout"}), {"ready_timeout": True}


# --- the root cause line of a traceback -----------------------------------------------------------------

#: A traceback's exception line: ``KeyError: 110``, ``AssertionError: QSA ring capacity 12 ...``,
#: ``pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig``.
_EXC_LINE = re.compile(
    r"^(?:[A-Za-z_]\w*\.)*(?P<type>[A-Z]\w*(?:Error|Exception|Exit|Interrupt)|Exception)(?::.*)?$"
)
#: Exception lines that wrap the root cause instead of naming it (vLLM's own "see above" messages) or that
#: only say the process was stopped.
_WRAPPERS = (
    "Engine core initialization failed",
    "WorkerProc initialization failed",
    "See stack trace for root cause",
    "See stack trace (above) for the root cause",  # 0.32's EngineDeadError (tests/fixtures/vllm-logs/055)
    "See root cause above",
)
#: A wrapper that repeats the worker's own exception (vLLM 0.32's ``RuntimeError: Worker failed with error
#: '<message>', please check the stack trace above for the root cause``): the worker's own line, printed above
#: it with its traceback, is the root cause; the wrapper is quoted only when that line is not in the log.
SOFT_WRAPPER = "please check the stack trace above for the root cause"
_NOT_CAUSES = frozenset({"KeyboardInterrupt", "SystemExit", "CancelledError", "GeneratorExit"})
MAX_EXCEPTION_CHARS = 300


def exception_line(msg: str) -> str | None:
    """``msg`` (a bare message) if it is a traceback's exception line naming a cause, else None."""
    text = msg.strip()
    m = _EXC_LINE.match(text)
    if m is None or m.group("type") in _NOT_CAUSES or any(w in text for w in _WRAPPERS):
        return None
    return text[:MAX_EXCEPTION_CHARS]


# --- runtime death / shutdown ----------------------------------------------------------------------------

#: A process of the engine that vanished (no Python traceback of its own): its name is the diagnosis' subject.
PROC_DIED = re.compile(r"(?:Engine core proc|Worker proc) (?P<name>\S+) died unexpectedly")
_DEAD = re.compile(
    r"EngineDeadError|AsyncLLM output_handler failed|" + PROC_DIED.pattern + r"|engine core exited "
    r"unexpectedly|EngineCore encountered a fatal error|Background loop has errored already|Engine loop is "
    r"not running"
)
_SHUTDOWN_SIG = re.compile(r"signal=(?P<sig>\w+)")
_SHUTDOWN_MODE = re.compile(r"mode=(?P<mode>\w+)(?: timeout=(?P<timeout>\d+)s)?")


def _dead(msg: str) -> tuple[Signal, Fields] | None:
    m = _DEAD.search(msg)
    if m is None:
        return None
    return EngineDead(m.group(0)), {}


def _shutdown(msg: str) -> tuple[Signal, Fields] | None:
    f: Fields = {}
    s = _SHUTDOWN_SIG.search(msg)
    if s is not None:
        f["signal"] = s.group("sig")
    mm = _SHUTDOWN_MODE.search(msg)
    if mm is not None:
        f["mode"] = mm.group("mode")
        if mm.group("timeout"):
            f["timeout_s"] = int(mm.group("timeout"))
    if "KeyboardInterrupt: terminated" in msg:
        f["signal"] = "SIGTERM"
    return Shutdown(msg.strip()[:200]), f
