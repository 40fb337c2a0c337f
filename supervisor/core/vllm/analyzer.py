"""vLLM log parser: normalise, classify, accumulate one boot's facts, and match operator log markers.

Pure (no I/O). The envelope stripping lives in :mod:`supervisor.core.vllm.envelope`, the per-line rules in
:mod:`supervisor.core.vllm.signals`; this module re-exports both and adds the stateful :class:`LogAnalyzer`
(what ``diagnose`` reports about the last boot in a log); the operator markers are
:mod:`supervisor.core.vllm.markers` (re-exported).
"""

from __future__ import annotations

import re
from typing import Any

from supervisor.core.vllm.envelope import Line, normalize, split_line
from supervisor.core.vllm.failures import ARGUMENT_ERROR, SOFT_WRAPPER, config_reason, exception_line
from supervisor.core.vllm.markers import MarkerMatcher, MarkerResult, marker_matcher
from supervisor.core.vllm.root_cause import frame_of
from supervisor.core.vllm.signals import (
    BOOT_START_PHASES,
    DEFAULT_BLOCK_SIZE,
    EngineDead,
    HangHint,
    KvPool,
    Phase,
    Ready,
    ShardProgress,
    Shutdown,
    Signal,
    StartupFailure,
    classify,
    match_message,
)
from supervisor.core.vocab import Outcome, failure_rank

__all__ = [
    "REPORT_KEYS",
    "EngineDead",
    "HangHint",
    "KvPool",
    "Line",
    "LogAnalyzer",
    "MarkerMatcher",
    "MarkerResult",
    "Phase",
    "Ready",
    "ShardProgress",
    "Shutdown",
    "Signal",
    "StartupFailure",
    "classify",
    "marker_matcher",
    "normalize",
]

# The diagnose "vllm" object's keys (docs/contract.md); always present, None when the log does not say.
REPORT_KEYS = (
    "outcome",
    "kv_tokens",
    "max_model_len",
    "max_concurrency",
    "available_kv_gib",
    "model_load_gib",
    "model_load_s",
    "init_engine_s",
    "graph_capture_s",
    "num_gpu_blocks",
    "gpu_blocks",
    "cpu_blocks",
    "version",
    "proc",
    "shards_done",
    "shards_total",
    "listen_url",
    "free_gib",
    "total_gib",
    "util",
    "requested_gib",
    "needed_kv_gib",
    "estimated_max_model_len",
    "cause",
)
_ACCESS = re.compile(
    r'INFO:\s+(?P<peer>\S+) - "(?P<method>[A-Z]+) (?P<path>\S+) HTTP/[\d.]+" (?P<code>\d{3})'
)
_WRAP_MIN_LEN = 79  # a physical line this long may have been hard-wrapped by a terminal
_WRAP_MAX_JOIN = 1200  # never join beyond this: bounded cost on long runs of bare lines


class LogAnalyzer:
    """Fed line by line; remembers what the LAST boot in the stream proved (a banner or engine-init line
    after progress starts a new boot, unless it is this boot's own late stdout: see :meth:`_new_boot`)."""

    def __init__(self) -> None:
        self.boots = 0
        self._reset()
        self._prev_msg = ""
        self._prev_sig: Signal | None = None
        self._prev_long = False

    def _reset(self) -> None:
        self._vals: dict[str, Any] = {}
        self._progressed = False
        self._seen_any = False
        self._ready = False
        self._failure: str | None = None
        self._failure_after_ready = False
        self._dead: str | None = None
        self._shutdown = False
        self._last_phase: str | None = None
        self._kv_proc: str | None = None
        self._engine_proc: str | None = None
        self._first_proc: str | None = None
        self._http_500 = 0
        self._served = 0  # requests (POST) answered 2xx: an engine that died before any died on its first
        self._last_proc: str | None = None
        self._last_exception: str | None = None
        self._last_frame: str | None = None  # the newest traceback frame since the last exception line
        self._exception_where: str | None = None  # the frame the last exception was raised in
        self._start_lines: set[tuple[str | None, str]] = set()  # (process, message) of this boot's start
        #: a refusal or engine failure came, which vLLM raises only after its banner: start lines are due
        self._start_due = False

    def feed(self, raw: str) -> Signal | None:
        """Take one raw line; return its signal (as :func:`classify` would, plus hard-wrap recovery)."""
        proc, _pid, level, msg = split_line(raw)
        bare = msg  # this physical line alone (the wrap recovery below may join it to the previous one)
        sig, fields = match_message(msg)
        carried = sig
        if (
            sig is None
            and self._prev_long
            and proc is None
            and level is None
            and msg
            and not msg.startswith("  ")
            and len(self._prev_msg) + len(msg) <= _WRAP_MAX_JOIN
        ):
            # best effort: a terminal hard-wrapped the previous line; join them (docs/vllm-facts.md §2.1.6)
            joined = self._prev_msg + msg
            carried, jfields = match_message(joined)
            if carried is not None and carried != self._prev_sig:
                sig, fields = carried, jfields
            msg = joined  # a third wrapped piece joins onto both
        self._prev_long = len(raw) >= _WRAP_MIN_LEN
        self._prev_msg = msg
        self._prev_sig = carried
        if proc is not None and proc != self._last_proc:
            self._last_proc = proc
            self._note_proc(proc)
        if level is None or level in ("ERROR", "CRITICAL"):
            frame = frame_of(bare)
            if frame is not None:
                self._last_frame = frame
            exc = exception_line(bare)
            if exc is not None and SOFT_WRAPPER in exc and self._last_exception is not None:
                exc = None  # the worker's own line came first, with its traceback: keep it
            if exc is not None:
                self._last_exception, self._exception_where = exc, self._last_frame
                self._last_frame = None
            if self._failure == Outcome.FAILED_CONFIG and "config_error" not in self._vals:
                why = config_reason(bare)  # the indented reason under vLLM's ValidationError
                if why is not None:
                    self._vals["config_error"] = why
        if sig is None:
            if "HTTP/" in msg:
                m = _ACCESS.search(msg)
                if m is not None and m.group("code") == "500":
                    self._http_500 += 1
                elif m is not None and m.group("method") == "POST" and m.group("code").startswith("2"):
                    self._served += 1
            return None
        self._apply(sig, fields, proc, msg)
        return sig

    def _note_proc(self, proc: str) -> None:
        if self._first_proc is None:
            self._first_proc = proc
        if self._engine_proc is None and proc.startswith("EngineCore"):
            self._engine_proc = proc

    def _new_boot(self, proc: str | None, msg: str) -> bool:
        """Whether a boot-start line (banner, ``non-default args``, engine init) begins a new boot.

        Only after progress, and only when this boot already printed that very line (the server started
        again) or printed none of its start lines (a log cut mid-boot). Docker keeps the order of each
        stream, not the order between stdout and stderr: a banner line written just before a refusal's
        traceback can be stored after it (docs/vllm-facts.md "Docker's order between stdout and stderr"),
        and such a late line is this boot's, not the next one's. When every start line is late (the
        whole stdout block after the traceback, seen in CI on the simulator), the failure itself tells:
        vLLM prints its banner and ``non-default args`` before it validates the config or starts the
        engine (fixtures 050-052), so after such a failure the first start line is still this boot's.
        Only an argument error (argparse, before the banner) leaves the next start line a new boot."""
        if not self._progressed:
            return False
        if self._start_lines:
            return (proc, msg) in self._start_lines
        return not self._start_due

    def _apply(self, sig: Signal, fields: dict[str, Any], proc: str | None, msg: str) -> None:
        kind = type(sig)
        if kind is Phase:
            name = sig.name  # type: ignore[union-attr]
            if name in BOOT_START_PHASES:
                if self._new_boot(proc, msg):
                    self._reset()  # a new boot: values describe the last one
                    self.boots += 1
                    if proc is not None:
                        self._note_proc(proc)
                self._start_lines.add((proc, msg))
            else:
                self._progressed = True
            self._last_phase = name
        else:
            self._progressed = True
        if not self.boots:
            self.boots = 1
        self._seen_any = True
        if fields:
            self._vals.update(fields)
        if kind is Phase:
            return
        if kind is KvPool:
            if proc is not None:
                self._kv_proc = proc
        elif kind is ShardProgress:
            self._last_phase = "loading_weights"
        elif kind is Ready:
            self._ready = True
        elif isinstance(sig, StartupFailure):
            if not str(sig.detail.get("config_error", "")).startswith(ARGUMENT_ERROR):
                self._start_due = True
            if self._failure is None or failure_rank(sig.outcome) > failure_rank(self._failure):
                self._failure = sig.outcome
            if self._ready:
                self._failure_after_ready = True
        elif isinstance(sig, EngineDead):
            self._dead = self._dead or sig.detail
        elif kind is Shutdown:
            self._shutdown = True

    def fact(self, key: str) -> Any:
        """One number the last boot's log gave so far (a REPORT_KEYS name, e.g. ``available_kv_gib``)."""
        return self._vals.get(key)

    def outcome(self) -> str:
        """What the log alone proves about the last boot."""
        if self._dead is not None or self._failure_after_ready:
            return Outcome.ENGINE_DEAD
        if self._failure is not None:
            return self._failure
        if self._shutdown:
            return "shutdown"
        if self._ready:
            return "ready"
        return "starting" if self._seen_any else "none"

    def report(self) -> dict[str, Any]:
        """The diagnose "vllm" object: every docs/contract.md key (None when unknown) plus a few extras."""
        v = self._vals
        out: dict[str, Any] = {k: v.get(k) for k in REPORT_KEYS}
        out["outcome"] = self.outcome()
        out["cause"] = failed.cause if (failed := Outcome.parse(self._failure)) is not None else None
        if out["kv_tokens"] is None and v.get("gpu_blocks") is not None:
            out["kv_tokens"] = v["gpu_blocks"] * DEFAULT_BLOCK_SIZE
        out["proc"] = self._kv_proc or self._engine_proc or self._first_proc
        for extra in (
            "graph_gib",
            "weights_load_s",
            "kv_device",
            "model",
            "shards_pct",
            "oom_tried_mib",
            "gpu_total_gib",
            "gpu_free_mib",
            "signal",
            "mode",
            "timeout_s",
            "hang_hint_s",
            "kv_capacity_tokens",
            "profiling_error",
            "failed_procs",
            "shm_required_mib",
            "shm_free_mib",
            "config_class",
            "config_error",
        ):
            if extra in v:
                out[extra] = v[extra]
        out["engine_dead_detail"] = self._dead
        out["last_phase"] = self._last_phase
        out["http_500_count"] = self._http_500
        # counted only when this boot's log is seen from its start lines (an excerpt, or a rotated log, may
        # have lost the requests served before): None otherwise
        out["requests_served"] = self._served if self._start_lines else None
        out["last_exception"] = self._last_exception
        out["last_exception_where"] = self._exception_where if self._last_exception else None
        out["boots"] = self.boots
        return out
