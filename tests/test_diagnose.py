"""Offline diagnose: report shape, cause sentences, kernel ranking, text rendering, the CLI entry."""

# ruff: noqa: E501  -- verbatim log lines read better unsplit

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest

from supervisor.core.vllm.analyzer import REPORT_KEYS
from supervisor.core.vllm.diagnosis import diagnose
from supervisor.offline.diagnose import render_text, run_diagnose

E = "(EngineCore_DP0 pid=20) ERROR 06-30 13:53:19 [core.py:515] "
INIT_FAILED = (
    "(APIServer pid=1) ERROR 06-30 13:53:20 [api_server.py:1] RuntimeError: Engine core initialization failed. "
    "See root cause above. Failed core proc(s): {}"
)
FREE = E + (
    "ValueError: Free memory on device (115.17/122.86 GiB) on startup is less than desired GPU memory "
    "utilization (0.95, 116.72 GiB). Decrease GPU memory utilization"
)
NOMEM = (
    "[ 812.1] NVRM: nvCheckOkFailedNoLog: Check failed: Out of memory [NV_ERR_NO_MEMORY] (0x00000051) returned "
    "from _memdescAllocInternal(pMemDesc) @ mem_desc.c:1359"
)
XID31 = "[ 900.5] NVRM: Xid (PCI:0000:0a:00): 31, pid=4242, name=VLLM::EngineCor, channel 0x2. MMU Fault"
READY = [
    "(EngineCore_DP0 pid=20) INFO 10-21 09:11:57 [kv_cache_utils.py:1087] GPU KV cache size: 425,424 tokens",
    "(APIServer pid=1) INFO:     Application startup complete.",
]
KV = E + (
    "ValueError: To serve at least one request with the model's max seq len (262144), (24.00 GiB KV cache is "
    "needed, which is larger than the available KV cache memory (10.50 GiB). Based on the available memory, "
    "the estimated maximum model length is 114688."
)


def test_shape_is_design_contract() -> None:
    """Exactly vllm/kernel/diagnosis at the top; every docs/contract.md key in vllm; JSON-serialisable."""
    report = diagnose([FREE, INIT_FAILED], [NOMEM, "[ 1.0] unrelated"])
    assert set(report) == {"vllm", "kernel", "diagnosis"}
    assert set(REPORT_KEYS) <= set(report["vllm"])
    assert report["kernel"]["events"] == [
        {
            "kind": "nv_err_no_memory",
            "xid": None,
            "pci": None,
            "pid": None,
            "proc_name": None,
            "line": NOMEM.split("] ", 1)[1],
        }
    ]
    json.dumps(report)


def test_nv_err_no_memory_outranks_engine_init_failure() -> None:
    """Generic init failure + NV_ERR_NO_MEMORY in the kernel: the advice is to keep a host reserve."""
    report = diagnose([INIT_FAILED], [NOMEM])
    assert report["vllm"]["outcome"] == "failed_engine_init"
    assert "NV_ERR_NO_MEMORY" in report["diagnosis"]
    assert "lower --gpu-memory-utilization so the host keeps >= 15 GiB free" in report["diagnosis"]


def test_free_memory_at_start_advises_drop_caches() -> None:
    """Free-memory-at-start names the numbers and says to drop the page cache or lower gmu."""
    text = diagnose([FREE, INIT_FAILED], None)["diagnosis"]
    assert "115.17/122.86 GiB" in text
    assert "0.95" in text
    assert "sync; echo 1 > /proc/sys/vm/drop_caches" in text
    assert "counts reclaimable cache as used" in text


def test_xid_on_vllm_process() -> None:
    """An Xid 31 on VLLM::EngineCor is the headline even when vLLM's own log shows only engine death."""
    log = [*READY, "(APIServer pid=1) ERROR 10-21 10:00:00 [async_llm.py:1] AsyncLLM output_handler failed."]
    report = diagnose(log, [NOMEM, XID31])
    assert report["vllm"]["outcome"] == "engine_dead"
    assert "Xid 31" in report["diagnosis"]
    assert "VLLM::EngineCor" in report["diagnosis"]
    assert "MMU" in report["diagnosis"]


def test_kv_insufficient_advises_max_model_len() -> None:
    """KV insufficient: the sentence gives the estimated max model length to set."""
    text = diagnose([KV, INIT_FAILED], [])["diagnosis"]
    assert "--max-model-len <= 114,688" in text


def test_ready_with_old_kernel_errors_is_a_note() -> None:
    """A ready server keeps 'ready' as headline; older kernel errors are only noted."""
    text = diagnose(READY, [NOMEM])["diagnosis"]
    assert text.startswith("vLLM started and is ready (KV pool 425,424 tokens")
    assert "note: the kernel log holds earlier errors" in text


def test_oom_kill_of_vllm_and_jetson_cma() -> None:
    """OOM killer on a python process and Tegra CMA exhaustion each get their own sentence."""
    kill = diagnose([INIT_FAILED], ["[ 5.0] Out of memory: Killed process 4242 (python3) total-vm:1kB"])
    assert "OOM killer killed python3 (pid 4242)" in kill["diagnosis"]
    cma = diagnose([], ["[ 5.0] cma: cma_alloc: linux,cma: alloc failed, req-size: 62864 pages, ret: -12"])
    assert "cma_alloc" in cma["diagnosis"]
    assert ">= 15 GiB" in cma["diagnosis"]


def test_render_text_is_readable() -> None:
    """The text rendering leads with the diagnosis and lists outcome, numbers and kernel events."""
    text = render_text(diagnose([FREE, INIT_FAILED], [NOMEM]))
    first = text.splitlines()[0]
    assert first.startswith("diagnosis: ")
    assert "outcome failed_gpu_mem_util (cause: gpu_mem_util)" in text
    assert "free 115.17 GiB" in text
    assert "nv_err_no_memory" in text


def test_run_diagnose_files_json_and_exit_codes(tmp_path: Path) -> None:
    """Files in, JSON out; 1 when a failure is diagnosed, 0 when ready, 2 when a file is missing."""
    log = tmp_path / "vllm.log"
    log.write_text("\n".join([FREE, INIT_FAILED]) + "\n", encoding="utf-8")
    kern = tmp_path / "dmesg.txt"
    kern.write_text(NOMEM + "\n", encoding="utf-8")
    code, out = run_diagnose(str(log), str(kern), use_kernel=False, as_json=True)
    assert code == 1
    parsed = json.loads(out)
    assert parsed["vllm"]["outcome"] == "failed_gpu_mem_util"
    assert parsed["vllm"]["free_gib"] == 115.17
    assert [e["kind"] for e in parsed["kernel"]["events"]] == ["nv_err_no_memory"]
    code, out = run_diagnose(None, None, use_kernel=False, as_json=False, log_lines=READY)
    assert code == 0
    assert out.startswith("diagnosis: vLLM started and is ready")
    code, out = run_diagnose(str(tmp_path / "missing.log"), None, use_kernel=False, as_json=False)
    assert code == 2
    assert "missing.log" in out


@pytest.mark.kmsg  # a memory-error line in the shared kernel log: every daemon's diagnosis reads it
def test_run_diagnose_finds_a_line_written_to_the_real_kernel_log() -> None:
    """--kernel reads this host's kernel log: a labelled NV_ERR_NO_MEMORY line written to /dev/kmsg is
    among its events, and a healthy vLLM log with it is a diagnosed problem (exit 1)."""
    token = f"vsup_diag_{uuid.uuid4().hex}"
    try:
        fd = os.open("/dev/kmsg", os.O_WRONLY)
    except OSError as exc:
        pytest.skip(f"/dev/kmsg is not writable here ({exc.strerror}); this test needs root")
    try:
        line = (
            "<3>NVRM: nvCheckOkFailedNoLog: Check failed: Out of memory [NV_ERR_NO_MEMORY] (0x00000051) "
            f"returned from _memdescAllocInternal({token}) @ mem_desc.c:1353\n"
        )
        os.write(fd, line.encode())
    finally:
        os.close(fd)
    code, out = run_diagnose(None, None, use_kernel=True, as_json=True, log_lines=READY)
    parsed = json.loads(out)
    assert "error" not in parsed["kernel"], parsed["kernel"]
    mine = [e for e in parsed["kernel"]["events"] if token in json.dumps(e)]
    assert [e["kind"] for e in mine] == ["nv_err_no_memory"]
    assert code == 1


@pytest.mark.parametrize(
    ("lines", "needle"),
    [
        ([E + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 64.00 MiB.", INIT_FAILED],
         "CUDA ran out of memory during startup (tried to allocate 64 MiB"),
        ([E + "ValueError: No available memory for the cache blocks.", INIT_FAILED], "No memory was left for the KV"),
        ([INIT_FAILED], "supervisorctl diagnose --kernel"),
        (["KeyboardInterrupt: terminated"], "shut down by SIGTERM"),
        (["Loading safetensors checkpoint shards:  26% Completed | 22/85 [09:23<29:54, 28.49s/it]"],
         "still starting (shards 22/85"),
        (["nothing here"], "No vLLM startup or failure lines"),
    ],
)  # fmt: skip
def test_sentences_per_outcome(lines: list[str], needle: str) -> None:
    """Each outcome gets its own actionable sentence."""
    assert needle in diagnose(lines, None)["diagnosis"]
