"""Kernel-log classifier: NVIDIA/Tegra/OOM messages, every prefix format, fixtures, and the real /dev/kmsg."""

# ruff: noqa: E501  -- verbatim log/exposition lines read better unsplit

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from supervisor.adapters.host.system import _read_kmsg, read_kernel_log
from supervisor.core.host.kernel_log import (
    KernelEvent,
    KernelKind,
    classify_kernel_line,
    is_vllm_process,
    oom_context,
    strip_kernel_prefix,
)

NOMEM = (
    "NVRM: nvCheckOkFailedNoLog: Check failed: Out of memory [NV_ERR_NO_MEMORY] (0x00000051) returned from "
    "_memdescAllocInternal(pMemDesc) @ mem_desc.c:1359"
)


def fixtures_root() -> Path | None:
    """tests/fixtures in the checkout, else $VSUP_FIXTURES."""
    cands = [Path(__file__).parent / "fixtures", Path(os.environ.get("VSUP_FIXTURES", "/nonexistent"))]
    return next((c for c in cands if (c / "dmesg").is_dir()), None)


@pytest.mark.parametrize(
    "raw",
    [
        f"[52595.758098] {NOMEM}",
        f"[    3.000001]{NOMEM}",
        f"[Mon Jul 10 16:36:36 2024] {NOMEM}",
        f"<3>{NOMEM}",
        f"3,1234,52595758098,-;{NOMEM}\n SUBSYSTEM=pci\n",
        f"Jul 10 16:36:36 spark kernel: {NOMEM}",
        f"Jul  1 16:36:36 spark kernel: [52595.758098] {NOMEM}",
        f"2024-07-10T16:36:36+0000 spark kernel: {NOMEM}",
        NOMEM,
    ],
)
def test_prefixes_are_stripped(raw: str) -> None:
    """dmesg, dmesg -T, dmesg -r, /dev/kmsg records, journald/syslog and ISO journald all reduce to the message."""
    assert strip_kernel_prefix(raw) == NOMEM
    ev = classify_kernel_line(raw)
    assert ev is not None
    assert ev.kind == "nv_err_no_memory"
    assert ev.line == NOMEM


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        (
            "[ 100.1] NVRM: Xid (PCI:0000:01:00): 31, pid=4242, name=VLLM::EngineCor, Ch 00000030, intr 0. MMU "
            "Fault: ENGINE HOST0 faulted @ 0x10_00200000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ",
            ("xid", 31, "0000:01:00", 4242, "VLLM::EngineCor"),
        ),
        (
            "NVRM: Xid (PCI:0000:41:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
            ("xid", 79, "0000:41:00", None, None),
        ),
        (
            "NVRM: Xid (PCI:0000:01:00 GPU-I:02 GPU-CI:01): 45, pid=77, name=python3, Ch 0x1, preemptive cleanup",
            ("xid", 45, "0000:01:00", 77, "python3"),
        ),
        (
            "NVRM: Xid (PCI:0000:c1:00): 149, NETIR_LINK_EVT Fatal error",
            ("xid", 149, "0000:c1:00", None, None),
        ),
        (
            "NVRM: GPU0 nvAssertOkFailedNoLog: Assertion failed: Out of memory [NV_ERR_NO_MEMORY] (0x00000051) "
            "returned from x @ y.c:1",
            ("nv_err_no_memory", None, None, None, None),
        ),
        (
            "NVRM: GPU 0000:01:00.0: RmInitAdapter failed! (0x62:0x51:1941)",
            ("rm_init_failed", None, "0000:01:00.0", None, None),
        ),
        (
            "nvgpu: 17000000.gpu  gk20a_fifo_set_ctx_mmu_error_tsg:1  [ERR]  error notifier set to 31 for ch 505 "
            "owned by pt_main_thread",
            ("nvgpu_err", 31, "17000000.gpu", None, "pt_main_thread"),
        ),
        (
            "nvgpu: 17000000.gpu  nvgpu_dma_print_err:101  [INFO]  DMA alloc FAILED: [sysmem] size=4096",
            ("nvgpu_info", None, "17000000.gpu", None, None),
        ),
        (
            "NvMapMemAllocInternalTagged: 1075072515 error 12",
            ("nvmap_enomem", None, None, None, None),
        ),
        ("NvRmMemInitNvmap failed with Permission denied", ("nvrm_no_gpu", None, None, None, None)),
        (
            "[ 9.1] cma: cma_alloc: linux,cma: alloc failed, req-size: 62864 pages, ret: -12",
            ("cma_enomem", None, None, None, None),
        ),
        (
            "[ 9.1] Out of memory: Killed process 4242 (python3) total-vm:1000kB, anon-rss:10kB",
            ("oom_kill", None, None, 4242, "python3"),
        ),
        (
            "Memory cgroup out of memory: Killed process 99 (pt_main_thread) total-vm:1kB",
            ("oom_kill", None, None, 99, "pt_main_thread"),
        ),
    ],
)
def test_kinds(raw: str, want: tuple[str, int | None, str | None, int | None, str | None]) -> None:
    """Each docs/vllm-facts.md §10 message maps to its kind with xid/pci/pid/name parsed."""
    ev = classify_kernel_line(raw)
    assert ev is not None
    assert (ev.kind, ev.xid, ev.pci, ev.pid, ev.proc_name) == want


@pytest.mark.parametrize(
    "raw",
    [
        "nvgpu: 17000000.gpu  gk20a_railgate:1  [INFO]  railgate enabled",
        "nvgpu: 17000000.gpu  some_fn:1  [WRN]  something odd",
        "NVRM: GPU at PCI:0000:01:00: GPU-12345678-1234-1234-1234-123456789abc",
        "NVRM: sysmemConstruct_IMPL: *** Cannot allocate sysmem through fb heap",
        "cma: cma_alloc: linux,cma: alloc failed, req-size: 1 pages, ret: -16",
        "[ 1.0] EXT4-fs (vda): mounted filesystem",
        "",
    ],
)
def test_benign_lines_are_none(raw: str) -> None:
    """Plain INFO, headers, context lines, other errnos and unrelated lines are not events."""
    assert classify_kernel_line(raw) is None


CID = "3f" * 32


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        (
            f"[ 5.1] oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=docker-{CID}.scope,mems_allowed=0,global_oom,task_memcg=/system.slice/docker-{CID}.scope,task=python3,pid=4242,uid=0",
            (4242, f"/system.slice/docker-{CID}.scope"),
        ),
        (
            "6,77,123,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/user.slice,task_memcg=/user.slice/user-1000.slice/session-3.scope,task=python3.12,pid=17,uid=1000",
            (17, "/user.slice/user-1000.slice/session-3.scope"),
        ),
        ("[ 5.2] Out of memory: Killed process 4242 (python3) total-vm:1kB", None),
        ("[ 5.3] oom-kill: something else entirely", None),
    ],
)
def test_the_oom_killers_summary_line_names_the_victims_cgroup(raw: str, want: object) -> None:
    assert oom_context(raw) == want


def test_a_cgroup_path_names_its_container_or_none() -> None:
    from supervisor.core.host.attribution import container_id_in

    assert container_id_in(f"/system.slice/docker-{CID}.scope") == CID
    assert container_id_in(f"0::/docker/{CID}\n") == CID
    assert container_id_in("/user.slice/user-1000.slice/session-3.scope") is None


def test_is_vllm_process() -> None:
    """python*, pt_main_thread and VLLM::* (15-char comm) are vLLM; others and unknown are not."""

    def ev(name: str | None) -> KernelEvent:
        return KernelEvent(KernelKind.XID, 31, "0000:01:00", None, name, "x")

    assert all(
        is_vllm_process(ev(n))
        for n in ("python", "python3", "python3.12", "pt_main_thread", "VLLM::EngineCor")
    )
    assert not any(is_vllm_process(ev(n)) for n in ("Xorg", "nvidia-smi", None, "mypython"))


def test_fixtures_parse_as_indexed() -> None:
    """fixtures/dmesg excerpts give the kinds and fields their INDEX.md lists."""
    root = fixtures_root()
    if root is None:
        pytest.skip("fixtures/dmesg not found (set VSUP_FIXTURES)")

    def events(name: str) -> list[KernelEvent]:
        lines = (root / "dmesg" / name).read_text(encoding="utf-8").splitlines()[2:]
        return [e for e in map(classify_kernel_line, lines) if e is not None]

    nomem = events("005-nv-err-no-memory-sysmem-fb-heap-5060ti.log")
    assert [e.kind for e in nomem] == ["nv_err_no_memory"] * 3
    assert [e.line.rsplit("@ ", 1)[1] for e in nomem] == [
        "mem_desc.c:1353",
        "nv_gpu_ops.c:4647",
        "mem_desc.c:1353",
    ]
    xid = events("011-xid31-vllm-enginecore-process-name.log")
    assert [(e.kind, e.xid, e.pci, e.pid, e.proc_name) for e in xid] == [
        ("xid", 31, "0000:0a:00", None, "VLLM::EngineCor")
    ]
    assert is_vllm_process(xid[0])
    jetson = events("013-jetson-orin-nvgpu-dma-alloc-failed-cma-enomem.log")
    assert [e.kind for e in jetson] == ["nvgpu_info", "nvgpu_err", "nvgpu_err", "cma_enomem"]
    assert "size=257490944" in jetson[0].line


def _write_kmsg(text: str) -> None:
    try:
        fd = os.open("/dev/kmsg", os.O_WRONLY)
    except OSError as exc:
        pytest.skip(f"/dev/kmsg is not writable here ({exc.strerror}); the real-kernel-log test needs root")
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


@pytest.mark.kmsg  # a memory-error line in the shared kernel log: every daemon's diagnosis reads it
def test_real_kernel_log_roundtrip() -> None:
    """A unique NV_ERR_NO_MEMORY line written to /dev/kmsg is found by read_kernel_log() and classified."""
    token = f"vsup_test_{uuid.uuid4().hex}"
    _write_kmsg(
        "<3>NVRM: nvCheckOkFailedNoLog: Check failed: Out of memory [NV_ERR_NO_MEMORY] (0x00000051) returned "
        f"from {token}(pMemDesc) @ mem_desc.c:1359\n"
    )
    for reader in (read_kernel_log, _read_kmsg):
        hits = [e for e in map(classify_kernel_line, reader()) if e is not None and token in e.line]
        assert len(hits) == 1, reader.__name__
        assert hits[0].kind == "nv_err_no_memory"
        assert hits[0].line.startswith("NVRM: nvCheckOkFailedNoLog")


def test_forged_lines_name_no_driver_and_no_container_of_ours() -> None:
    """A local user's names inside other kernel lines: a memory cgroup named after the NV_ERR message (the
    OOM report's ``Memory cgroup stats for`` line) is no NV_ERR line; a session cgroup ending in our container
    id is not our container; an oom-kill summary whose paths or command hold a second ``task_memcg=`` names
    no container (``?``)."""
    from supervisor.core.host.attribution import container_id_in, docker_container_id

    nv = "NVRM: nvCheckOkFailedNoLog: Check failed: Out of memory [NV_ERR_NO_MEMORY] (0x00000051)"
    for raw in (
        f"6,9,123,-;Memory cgroup stats for /user.slice/user-1000.slice/{nv}:",
        f"[ 3.0] Tasks state (memory values in pages): {nv}",
        "[ 3.1] python3 invoked oom-killer: Out of memory: Killed process 77 (python3)",
        "[ 3.2] audit: comm=nvgpu: 17000000.gpu  f:1 [ERR]  x",
    ):
        assert classify_kernel_line(raw) is None, raw
    assert container_id_in(f"0::/user.slice/user-1000.slice/session-3.scope/{CID}\n") is None
    assert container_id_in(f"4:memory:/user.slice/docker-{CID}.scope\n") is None
    assert container_id_in(f"4:memory:/docker/{CID}\n1:name=systemd:/\n") == CID
    assert docker_container_id(f"/mine/docker-{CID}.scope", ("/mine",)) == CID
    assert docker_container_id(f"/mine/{CID}", ("/mine",)) == CID
    assert docker_container_id(f"/mine/x/{CID}", ("/mine",)) is None
    forged = (
        "6,80,123,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,"
        f"oom_memcg=/user.slice/a,task_memcg=/user.slice/a,task=x,task_memcg=/system.slice/docker-{CID}.scope,"
        "task=python3,pid=18,uid=1000"
    )
    assert oom_context(forged) == (18, "?")
    assert container_id_in("?") is None
