"""The root-cause line of a failed start and the rule "the same cause twice stops the retries" (pure).

A load on the target boxes takes 10-26 minutes. Some engine-init failures are deterministic: the same
config dies on the same line at every start (the field's ``ValueError: NvFp4 MoE backend ... does not
support the deployment configuration``, ``AssertionError: QSA ring capacity ...``, ``KeyError: 110``).
Two consecutive failed starts of one config fingerprint whose diagnoses quote the same root-cause line
(numbers, addresses and pids normalised) prove it: the breaker opens at once instead of burning a third
load (docs/state-machine.md "The same root cause twice"). Failures that depend on the host, not on the
config (kernel memory, host memory, the free-memory check, a CUDA out-of-memory), are never "the same
cause": the next start may find more memory.
"""

from __future__ import annotations

import re

from supervisor.core.log_events import RootCause

#: A traceback frame: ``File "/usr/lib/.../nvfp4.py", line 304, in select_backend``.
FRAME = re.compile(r'File "(?P<path>[^"]+)", line (?P<line>\d+), in (?P<func>[\w<>.]+)')
_HEX = re.compile(r"0x[0-9a-fA-F]+")
_NUM = re.compile(r"\d+(?:\.\d+)?")
_PID = re.compile(r"\bpid[= ]\d+", re.IGNORECASE)
#: Outcomes and causes that depend on the host's memory, never on the config alone.
HOST_DEPENDENT_OUTCOMES = frozenset(
    {
        "failed_oom",
        "failed_gpu_mem_util",
        "failed_kv_insufficient",
        "failed_no_kv_memory",
        "failed_oom_killed",
        "failed_memory_guard",
        "failed_kernel_memory",
    }
)
_HOST_CAUSES = ("oom", "gpu_mem_util", "kv_insufficient", "no_kv_memory", "memory")
#: A ``kernel: ...`` cause (the kernel events seen with the failure, core/host/kernel_log.py kernel_summary)
#: is host memory when it names one of these; an Xid alone is not (it may well be the config's bug).
_KERNEL_MEMORY = (
    "NV_ERR_NO_MEMORY",
    "OOM kill",
    "rm_init_failed",
    "nvgpu_info",
    "cma_enomem",
    "nvmap_enomem",
)
#: Words in an exception line that say memory ran out (the host's state, not the config's).
_MEMORY_WORDS = re.compile(
    r"out of memory|OutOfMemory|NV_ERR_NO_MEMORY|Free memory on device|cudaErrorMemoryAllocation|"
    r"Cannot allocate memory|ENOMEM|MemoryError",
    re.IGNORECASE,
)

#: The rule's decisions (the history's ``start.same_cause`` event, field ``decision``).
SAME = "same_cause"  # the breaker opens now
#: The same line twice, but a rollback to the last known good is due: the next start is another config (the
#: machine's refinement of SAME, machine/causes.py).
ROLLBACK = "same_cause_rollback"
FIRST = "first"  # no earlier failed start of this config to compare with: retry
DIFFERENT = "different"  # the earlier failed start died on another line (or of another config): retry
HOST = "host_dependent"  # a memory failure: the next start may find more memory: retry
NO_LINE = "no_line"  # the log quotes no exception line: nothing to compare
NOT_A_CRASH = (
    "not_a_crash"  # the start did not die of an exception (a timeout, a gate): any line is a bystander
)
#: Failed starts that end without the engine raising (the supervisor's own verdicts): the log's last
#: exception line, if any, did not end them, so it is never compared.
_NOT_CRASHES = frozenset(
    {
        "timeout",
        "timeout_silence",
        "failed_first_generation",
        "failed_forbidden_marker",
        "failed_marker_missing",
    }
)


def normalise(line: str) -> str:
    """``line`` with pids, hex addresses and numbers replaced, so two deaths of one cause compare equal."""
    text = _PID.sub("pid=N", line.strip())
    text = _HEX.sub("0xX", text)
    return _NUM.sub("N", text)


def frame_of(text: str) -> str | None:
    """``path:line in func`` of a traceback frame line, else None."""
    m = FRAME.search(text)
    return f"{m.group('path')}:{m.group('line')} in {m.group('func')}" if m else None


def host_dependent(outcome: str, cause: str | None, line: str | None) -> bool:
    """A failure whose cause is the host's memory (kernel or host), not the config."""
    if outcome in HOST_DEPENDENT_OUTCOMES:
        return True
    if cause is not None and any(cause.startswith(c) for c in _HOST_CAUSES):
        return True
    if cause is not None and cause.startswith("kernel:") and any(k in cause for k in _KERNEL_MEMORY):
        return True
    return line is not None and _MEMORY_WORDS.search(line) is not None


def judge(previous: RootCause | None, current: RootCause | None, outcome: str, cause: str | None) -> str:
    """The rule's decision for a failed start (``current``) after the failed start before it."""
    if outcome in _NOT_CRASHES or outcome.startswith("failed_smoke_"):
        return NOT_A_CRASH
    if current is None:
        return NO_LINE
    if host_dependent(outcome, cause, current.line):
        return HOST
    if previous is None or previous.fingerprint is None:
        return FIRST
    same = previous.fingerprint == current.fingerprint and normalise(previous.line) == normalise(current.line)
    return SAME if same else DIFFERENT


def quote(rc: RootCause) -> str:
    """The line and where it came from, for an alert: ``ValueError: ... (raised in nvfp4.py:304 in f)``."""
    return f"{rc.line} (raised in {rc.where})" if rc.where else rc.line
