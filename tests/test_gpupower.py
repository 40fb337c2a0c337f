"""The GPU's power draw (adapters/host/gpupower.py) from a Jetson-style hwmon tree and from an nvidia-smi that
answers, reports N/A or hangs; and what the stuck verdict says with it (core/machine/liveness.gpu_note).
Recorded only: no decision rests on it. This box has neither source: None, and nothing is lost."""

from __future__ import annotations

import stat
from pathlib import Path

from supervisor.adapters.host import gpupower
from supervisor.core.machine.liveness import gpu_note
from supervisor.core.profile_state import Stall


def _rail(root: Path, hw: str, idx: int, label: str, mv: int, ma: int) -> None:
    d = root / hw
    d.mkdir(parents=True, exist_ok=True)
    (d / f"in{idx}_label").write_text(label + "\n")
    (d / f"in{idx}_input").write_text(f"{mv}\n")
    (d / f"curr{idx}_input").write_text(f"{ma}\n")


def test_the_gpu_rails_of_a_jetson_hwmon_tree_are_summed(tmp_path: Path) -> None:
    _rail(tmp_path, "hwmon1", 1, "VDD_GPU_SOC", 5000, 3000)  # 15 W
    _rail(tmp_path, "hwmon1", 2, "VDD_CPU_CV", 5000, 1000)  # not the GPU
    _rail(tmp_path, "hwmon2", 1, "VDD_GPU", 1000, 2500)  # 2.5 W
    assert gpupower.rails_w(str(tmp_path)) == 17.5
    assert gpupower.rails_w(str(tmp_path / "none")) is None


def _smi(tmp_path: Path, body: str) -> str:
    exe = tmp_path / "nvidia-smi"
    exe.write_text("#!/bin/sh\n" + body + "\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return str(exe)


def test_nvidia_smi_power_is_summed_over_gpus(tmp_path: Path) -> None:
    assert gpupower.smi_w(_smi(tmp_path, "echo 124.80; echo 30.2"), gate=gpupower.Gate()) == 155.0


def test_an_nvidia_smi_that_says_na_or_hangs_gives_none_and_is_not_asked_again_soon(tmp_path: Path) -> None:
    gate = gpupower.Gate()
    assert gpupower.smi_w(_smi(tmp_path, "echo '[N/A]'"), gate=gate) is None
    ok = tmp_path / "ok"
    ok.mkdir()
    assert gpupower.smi_w(_smi(ok, "echo 100"), gate=gate) is None  # not asked for RETRY_AFTER_S after N/A
    assert gpupower.smi_w(_smi(ok, "echo 100"), gate=gpupower.Gate()) == 100.0
    hung = tmp_path / "hung"
    hung.mkdir()
    gate = gpupower.Gate()
    assert gpupower.smi_w(_smi(hung, "sleep 5"), timeout_s=0.3, gate=gate) is None
    assert not gate.open()


def test_the_stuck_verdict_says_whether_the_gpu_drew_idle_or_work_level_power() -> None:
    assert gpu_note(Stall(), None) == ""
    assert gpu_note(Stall(), 125.0) == "; GPU power 125 W"
    known = Stall(gpu_idle_w=124.5, gpu_busy_w=690.0)
    assert "idle-level" in gpu_note(known, 124.8)
    assert "work-level" in gpu_note(known, 650.0)
