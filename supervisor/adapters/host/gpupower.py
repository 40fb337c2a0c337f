"""The GPU's power draw where the box reports it (docs/vllm-facts.md "A hang that burns a core"): a hung
kernel and real work both show ~100 % GPU utilization and a busy host core; only the power differs (an H200:
125 W hung, 690 W working; a public GB10 report: 16-27 W hung, ~45 W healthy). Recorded with the liveness
rounds and in the stuck alert; no decision rests on it until it is measured on a target box.

Two sources, tried in order: a Jetson's power rails (hwmon ``ina3221``/``ina238``-style monitors: a rail whose
label names the GPU, ``in*_input`` mV x ``curr*_input`` mA, or ``power*_input`` uW), then ``nvidia-smi
--query-gpu=power.draw`` (a Spark; summed over GPUs) with a short deadline, run from the round's pool job.
A query that does not answer is given up and not asked again for :data:`RETRY_AFTER_S` (a wedging GB10
host blocked ``nvidia-smi`` for 491-737 s in a public report): the rounds never wait on it twice. A box
with neither (this CPU test box) gets None and loses nothing."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import threading
import time

HWMON = "/sys/class/hwmon"
#: nvidia-smi's deadline per round.
SMI_TIMEOUT_S = 2.0
#: After a failed or timed-out nvidia-smi, not asked again for this long.
RETRY_AFTER_S = 300.0


class Gate:
    """After a failed nvidia-smi, the next ones are not run until a while has passed (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._until = 0.0

    def open(self) -> bool:
        with self._lock:
            return time.monotonic() >= self._until

    def close_for(self, seconds: float) -> None:
        with self._lock:
            self._until = time.monotonic() + seconds


GATE = Gate()


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as fh:
            return fh.read().strip()
    except OSError:
        return None


def rails_w(root: str = HWMON) -> float | None:
    """The GPU rails' power (W) from hwmon power monitors, or None when no rail names the GPU."""
    total, found = 0.0, False
    for label_path in sorted(glob.glob(os.path.join(root, "hwmon*", "*_label"))):
        label = (_read(label_path) or "").upper()
        if "GPU" not in label:
            continue
        base = label_path[: -len("_label")]
        d, name = os.path.split(base)
        idx = name.lstrip("abcdefghijklmnopqrstuvwxyz")
        power = _read(os.path.join(d, f"power{idx}_input"))
        volts, amps = _read(os.path.join(d, f"in{idx}_input")), _read(os.path.join(d, f"curr{idx}_input"))
        try:
            if power is not None:
                total += int(power) / 1e6
            elif volts is not None and amps is not None:
                total += int(volts) * int(amps) / 1e6
            else:
                continue
        except ValueError:
            continue
        found = True
    return round(total, 1) if found else None


def smi_w(exe: str | None = None, timeout_s: float = SMI_TIMEOUT_S, gate: Gate = GATE) -> float | None:
    """The summed ``power.draw`` of nvidia-smi (W), or None (no nvidia-smi, N/A, an error, a timeout)."""
    exe = exe or shutil.which("nvidia-smi")
    if exe is None or not gate.open():
        return None
    query = [exe, "--query-gpu=power.draw", "--format=csv,noheader,nounits"]
    try:
        done = subprocess.run(query, capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired):
        done = None
    values: list[float] = []
    if done is not None and done.returncode == 0:
        for line in done.stdout.splitlines():
            try:
                values.append(float(line.strip()))
            except ValueError:
                continue  # "[N/A]" (a GB10 may not report it)
    if not values:
        gate.close_for(RETRY_AFTER_S)
        return None
    return round(sum(values), 1)


def gpu_power_w() -> float | None:
    """The GPU's power draw now (W): the power rails, else nvidia-smi; None where neither reports it."""
    rails = rails_w()
    return rails if rails is not None else smi_w()
