"""NVIDIA / Tegra / Linux-OOM kernel messages (docs/vllm-facts.md §10) classified line by line. Pure, no I/O.

Accepts plain ``dmesg`` (``[  123.456] msg``), ``dmesg -T`` (``[Mon Jul 10 16:36:36 2024] msg``),
``dmesg -r`` (``<3>msg``), journald / syslog (``Jul 10 16:36:36 host kernel: msg``, possibly with an
embedded uptime stamp), ISO journald (``2024-07-10T16:36:36+0000 host kernel: msg``) and the raw
``/dev/kmsg`` record format (``6,1234,5678,-;msg``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Final


class KernelKind(StrEnum):
    """The kinds of kernel message the classifier knows (history events ``kernel.<kind>``)."""

    XID = "xid"  # NVIDIA Xid (dGPU, GB10)
    NV_ERR_NO_MEMORY = "nv_err_no_memory"  # the NVIDIA driver's out of memory
    RM_INIT_FAILED = "rm_init_failed"  # RmInitAdapter failed: the GPU did not initialise
    NVGPU_ERR = "nvgpu_err"  # Tegra nvgpu [ERR] (Thor's Xid)
    NVGPU_INFO = "nvgpu_info"  # Tegra nvgpu [INFO] allocation failure
    NVMAP_ENOMEM = "nvmap_enomem"  # NvMap allocation error (Thor)
    NVRM_NO_GPU = "nvrm_no_gpu"  # NvRmMemInit failed: no GPU visible to the process
    CMA_ENOMEM = "cma_enomem"  # cma_alloc ret -12
    OOM_KILL = "oom_kill"  # the Linux OOM killer


KINDS: Final = tuple(KernelKind)
#: Kinds that alert while a profile serves or drains (``kernel.while_serving``): a GPU fault or a memory
#: failure (Xid / NV_ERR_NO_MEMORY on dGPU and GB10; nvgpu errors and nvmap/CMA ENOMEM are Thor's).
ALERT_KINDS: Final = frozenset(
    {
        KernelKind.XID,
        KernelKind.NV_ERR_NO_MEMORY,
        KernelKind.NVGPU_ERR,
        KernelKind.NVMAP_ENOMEM,
        KernelKind.CMA_ENOMEM,
        KernelKind.OOM_KILL,
    }
)
#: Kinds that say the GPU memory ran out (the diagnosis names them as a memory cause).
MEMORY_KINDS: Final = (
    KernelKind.NV_ERR_NO_MEMORY,
    KernelKind.RM_INIT_FAILED,
    KernelKind.NVGPU_INFO,
    KernelKind.CMA_ENOMEM,
    KernelKind.NVMAP_ENOMEM,
)

#: Kinds that mean memory ran out (the host may wedge seconds later): killed at once by default.
#: An Xid is not one of them (Xid 31 is an MMU fault of one context): it stays a warning.
KILL_KINDS: Final = frozenset(
    {KernelKind.NV_ERR_NO_MEMORY, KernelKind.NVMAP_ENOMEM, KernelKind.CMA_ENOMEM, KernelKind.OOM_KILL}
)

_PREFIXES = re.compile(
    r"(?:"
    r"\d+,\d+,\d+,[^;]*;"  # /dev/kmsg record: prio,seq,usec,flags;
    r"|<\d+>"  # dmesg -r priority
    r"|\[\s*\d+\.\d+\]\s?"  # dmesg uptime stamp
    r"|\[[A-Z][a-z]{2} [A-Z][a-z]{2} +\d+ \d\d:\d\d:\d\d \d{4}\]\s?"  # dmesg -T
    r"|\d{4}-\d\d-\d\dT\S+ \S+ [^\s:]+(?:\[\d+\])?:\s"  # journalctl -o short-iso
    r"|\S+ +\d{1,2} \d\d:\d\d:\d\d \S+ [^\s:]+(?:\[\d+\])?:\s"  # journald / syslog
    r")"
)
_MAX_PREFIXES = 4

_XID = re.compile(
    r"NVRM: Xid \(PCI:(?P<pci>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})(?: GPU-I:(?P<gi>\d+))?"
    r"(?: GPU-CI:(?P<ci>\d+))?\): (?P<xid>\d+),(?: pid=(?P<pid>'?<unknown>'?|\d+),)?"
    r"(?: name=(?P<name>[^,]*),)?"
)
_NOMEM = re.compile(
    r"NVRM: (?:GPU\d+ )?nv(?:Check|Assert)OkFailedNoLog: (?:Check|Assertion) failed: Out of memory "
    r"\[NV_ERR_NO_MEMORY\] \(0x00000051\)"
)
_RM_INIT = re.compile(r"NVRM: GPU (?P<pci>[0-9a-fA-F:.]+): RmInitAdapter failed!")
_NVGPU = re.compile(
    r"nvgpu: (?P<dev>\S+)\s+(?P<fn>\w+):(?P<line>\d+)\s+\[(?P<sev>ERR|WRN|INFO|DBG)\]\s+(?P<msg>.*)"
)
_NVGPU_NOTIFIER = re.compile(r"error notifier set to (?P<code>\d+) for ch \d+ owned by (?P<owner>\S+)")
_NVGPU_ALLOC_FAIL = re.compile(
    r"alloc(?:ation)? FAILED|alloc(?:ation)? failed|ENOMEM|out of memory", re.IGNORECASE
)
_NVMAP = re.compile(r"NvMapMemAllocInternalTagged: \S+ error (?P<errno>\d+)")
_NVRM_NO_GPU = re.compile(r"NvRmMem(?:Mgr)?Init(?:Nvmap)? failed")
_CMA = re.compile(r"(?:cma: )?cma_alloc: .*alloc failed, req-size: (?P<pages>\d+) pages, ret: (?P<ret>-?\d+)")
_OOM_KILL = re.compile(
    r"(?:Out of memory|Memory cgroup out of memory): Kill(?:ed)? process (?P<pid>\d+) \((?P<comm>[^)]+)\)"
)
#: The OOM killer's summary line (Linux >= 4.19, mm/oom_kill.c dump_oom_summary), printed just before
#: "Out of memory: Killed process":
#: ``oom-kill:constraint=...,task_memcg=/docker/<id>,task=python3,pid=N,uid=0``.
_OOM_CONTEXT = re.compile(r"oom-kill:.*,pid=(?P<pid>\d+),uid=\d+$")
_OOM_MEMCG = re.compile(r",task_memcg=(?P<memcg>[^,]*),task=")
#: A victim's cgroup that could not be read unambiguously (a path or command name with commas): no container.
UNREADABLE_MEMCG = "?"
_VLLM_NAMES = re.compile(r"python[\w.]*|pt_main_thread|VLLM::.*")


@dataclass(frozen=True)
class KernelEvent:
    """One kernel message that matters for a GPU model server."""

    kind: KernelKind
    xid: int | None
    pci: str | None
    pid: int | None
    proc_name: str | None
    line: str


_UPTIME = re.compile(r"^\s*(?:<\d+>)?\[\s*(?P<s>\d+\.\d+)\]|^\d+,\d+,(?P<us>\d+),")


def uptime_of(raw: str) -> float | None:
    """Seconds since boot of a ``dmesg`` (``[  12.345678]``) or ``/dev/kmsg`` (``6,seq,usec,-;``) line."""
    m = _UPTIME.match(raw)
    if m is None:
        return None
    return float(m.group("s")) if m.group("s") is not None else int(m.group("us")) / 1e6


def strip_kernel_prefix(raw: str) -> str:
    """The message without timestamps, priority, journald/syslog or /dev/kmsg record prefixes."""
    s = raw.rstrip("\r\n")
    if "\n" in s:  # a /dev/kmsg record: continuation (dictionary) lines follow the first line
        s = s.split("\n", 1)[0]
    for _ in range(_MAX_PREFIXES):
        m = _PREFIXES.match(s)
        if m is None or m.end() == 0:
            break
        s = s[m.end() :]
    return s.strip()


def _event(kind: KernelKind, line: str, **kw: str | int | None) -> KernelEvent:
    xid = kw.get("xid")
    pid = kw.get("pid")
    pci = kw.get("pci")
    name = kw.get("proc_name")
    return KernelEvent(
        kind=kind,
        xid=xid if isinstance(xid, int) else None,
        pci=pci if isinstance(pci, str) else None,
        pid=pid if isinstance(pid, int) else None,
        proc_name=name if isinstance(name, str) else None,
        line=line,
    )


def _nvrm(msg: str) -> KernelEvent | None:
    m = _XID.match(msg)
    if m is not None:
        pid_s = m.group("pid")
        name = m.group("name")
        return _event(
            KernelKind.XID,
            msg,
            xid=int(m.group("xid")),
            pci=m.group("pci"),
            pid=int(pid_s) if pid_s and pid_s.isdigit() else None,
            proc_name=name.strip() if name and "<unknown>" not in name else None,
        )
    if _NOMEM.match(msg):
        return _event(KernelKind.NV_ERR_NO_MEMORY, msg)
    r = _RM_INIT.match(msg)
    if r is not None:
        return _event(KernelKind.RM_INIT_FAILED, msg, pci=r.group("pci"))
    return None


def _nvgpu(msg: str) -> KernelEvent | None:
    m = _NVGPU.match(msg)
    if m is None:
        return None
    sev, text, dev = m.group("sev"), m.group("msg"), m.group("dev")
    n = _NVGPU_NOTIFIER.search(text)
    xid = int(n.group("code")) if n else None
    owner = n.group("owner") if n else None
    if sev == "ERR":
        return _event(KernelKind.NVGPU_ERR, msg, pci=dev, xid=xid, proc_name=owner)
    if sev == "INFO" and _NVGPU_ALLOC_FAIL.search(text):
        return _event(KernelKind.NVGPU_INFO, msg, pci=dev)
    return None  # plain INFO (railgate ...), WRN, DBG


def classify_kernel_line(raw: str) -> KernelEvent | None:
    """The kernel event in one line of ``dmesg`` / ``journalctl -k`` / ``/dev/kmsg`` output, or None.

    Every pattern is anchored at the start of the message (after the record prefixes): the kernel prints
    these lines with a fixed prefix (``NVRM: ``, ``nvgpu: ``, ``cma: cma_alloc: ``, ``Out of memory: ``),
    while a name another user chose (a cgroup path in an OOM report's ``Memory cgroup stats for ...``, a
    command name) appears inside other lines: it must never read as a driver's line."""
    msg = strip_kernel_prefix(raw)
    if not msg:
        return None
    if msg.startswith("NVRM: "):
        return _nvrm(msg)
    if msg.startswith("nvgpu: "):
        return _nvgpu(msg)
    c = _CMA.match(msg)
    if c is not None:
        return _event(KernelKind.CMA_ENOMEM, msg) if int(c.group("ret")) == -12 else None
    if _NVMAP.match(msg):
        return _event(KernelKind.NVMAP_ENOMEM, msg)
    if _NVRM_NO_GPU.match(msg):
        return _event(KernelKind.NVRM_NO_GPU, msg)
    if msg.startswith(("Out of memory", "Memory cgroup out of memory")):
        o = _OOM_KILL.match(msg)
        if o is not None:
            return _event(KernelKind.OOM_KILL, msg, pid=int(o.group("pid")), proc_name=o.group("comm"))
    return None


def oom_context(raw: str) -> tuple[int, str] | None:
    """``(pid, task_memcg path)`` of the OOM killer's ``oom-kill:`` summary line, or None for any other
    line. The path names the victim's cgroup (its container) even once the victim has been reaped;
    :data:`UNREADABLE_MEMCG` when it cannot be read unambiguously."""
    msg = strip_kernel_prefix(raw)
    if not msg.startswith("oom-kill:"):
        return None
    m = _OOM_CONTEXT.match(msg)
    if m is None:
        return None
    # the pid and uid end the line (the kernel prints them last); the cgroup paths and the command name
    # before them are chosen by users and may hold commas or "task_memcg=": read the path only when
    # the line has exactly one, else it names no container (``other``, never ours and never nobody)
    memcg = _OOM_MEMCG.findall(msg)
    clear = len(memcg) == 1 and msg.count("task_memcg=") == 1
    return int(m.group("pid")), memcg[0] if clear else UNREADABLE_MEMCG


def is_vllm_process(event: KernelEvent) -> bool:
    """Whether the event names a process vLLM runs as (python*, pt_main_thread, VLLM::*)."""
    return event.proc_name is not None and _VLLM_NAMES.fullmatch(event.proc_name) is not None


def kernel_summary(kind: str, xid: int | None, pid: int | None, proc_name: str | None) -> str:
    """A short name of a kernel event for alerts and failure causes, e.g. ``Xid 31 (pid 42 VLLM::X)``."""
    who = " ".join(p for p in (f"pid {pid}" if pid is not None else "", proc_name or "") if p)
    if kind == KernelKind.XID:
        head = f"Xid {xid}" if xid is not None else "Xid"
    elif kind == KernelKind.NV_ERR_NO_MEMORY:
        head = "NV_ERR_NO_MEMORY"
    elif kind == KernelKind.OOM_KILL:
        head = "OOM kill"
    else:
        head = kind
    return f"{head} ({who})" if who else head
