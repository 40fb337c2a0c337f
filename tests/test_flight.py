"""The flight recorder on the real filesystem: torn writes, the 1 MiB bound over an hour, the fsync pace,
and the recorder thread reading the real /proc/meminfo. Time is a fake clock (no timing asserts)."""

from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path

from supervisor.adapters.store.flight_recorder import NAMES, FlightFiles, read_records
from supervisor.core.clock import FakeClock, SystemClock
from supervisor.core.events import ProbeRound
from supervisor.core.host.flight import decode, encode
from supervisor.core.profile_state import ProfileState
from supervisor.core.states import State
from supervisor.daemon.executor.flight import FlightDuty
from tests.harness import wait_for

LINE = "NVRM: nvCheckOkFailedNoLog: Check failed: Out of memory [NV_ERR_NO_MEMORY] (0x00000051)"


def _sample(t: float) -> dict[str, object]:
    return {
        "t": t,
        "k": "s",
        "ma": 14.2,
        "mf": 3.1,
        "su": 0.0,
        "ps": [0.0, 0.0],
        "p": {"thor": ["RUNNING", 3, 0]},
    }


def test_a_record_is_one_checksummed_line() -> None:
    """encode/decode round-trip; a flipped byte or a cut line decodes to None."""
    line = encode(_sample(1.0))
    assert line.endswith(b"\n")
    assert decode(line) == _sample(1.0)
    assert decode(line[: len(line) // 2]) is None
    assert decode(line.replace(b"14.2", b"14.3")) is None
    assert decode(b"") is None


def test_a_torn_write_loses_only_the_torn_line(tmp_path: Path) -> None:
    """100 records, then half a record written (a power cut mid-write), then a restart and 5 records:
    the 100 older and the 5 newer are all read back, in order."""
    clock = FakeClock()
    files = FlightFiles(tmp_path, clock.monotonic)
    for i in range(100):
        files.append(_sample(1000.0 + i))
    files.close()
    active = max((tmp_path / n for n in NAMES if (tmp_path / n).exists()), key=lambda p: p.stat().st_size)
    torn = encode(_sample(2000.0))
    with active.open("ab") as fh:
        fh.write(torn[: len(torn) // 2])
    files = FlightFiles(tmp_path, clock.monotonic)
    for i in range(5):
        files.append(_sample(3000.0 + i))
    files.close()
    times = [r["t"] for r in read_records(tmp_path)]
    assert times == [1000.0 + i for i in range(100)] + [3000.0 + i for i in range(5)]


def test_an_hour_stays_under_one_mib_and_keeps_the_last_minutes(tmp_path: Path) -> None:
    """An hour of samples (one a second) plus a kernel line every 10 s: both segments together <= 1 MiB,
    the newest record is the last written and at least the last 5 minutes are kept (at most ~10)."""
    clock = FakeClock()
    files = FlightFiles(tmp_path, clock.monotonic)
    t0 = clock.now()
    for i in range(3600):
        clock.advance(1.0)
        files.append(_sample(clock.now()))
        if i % 10 == 0:
            files.append({"t": clock.now(), "k": "kernel", "kind": "nv_err_no_memory", "line": LINE * 3})
        files.sync()
        assert files.size() <= 1 << 20
    files.close()
    recs = read_records(tmp_path)
    assert recs[-1]["t"] == t0 + 3600
    span = recs[-1]["t"] - recs[0]["t"]
    assert 300 <= span <= 600
    assert sum((tmp_path / n).stat().st_size for n in NAMES) <= 1 << 20


def test_at_most_one_fsync_every_two_seconds(tmp_path: Path) -> None:
    """Records every 0.1 s for 60 s (fake clock), sync after each: at most 31 fsyncs; nothing written,
    no fsync."""
    clock = FakeClock()
    files = FlightFiles(tmp_path, clock.monotonic)
    for _ in range(600):
        clock.advance(0.1)
        files.append(_sample(clock.now()))
        files.sync()
    assert 1 <= files.fsyncs <= 31
    before = files.fsyncs
    clock.advance(10)
    files.sync()
    assert files.fsyncs == before + 1
    clock.advance(10)
    files.sync()
    assert files.fsyncs == before + 1  # nothing new: no fsync
    files.close()


def test_the_recorder_thread_samples_the_real_host_and_keeps_kernel_lines(tmp_path: Path) -> None:
    """FlightDuty with the real /proc: ticks become samples with MemAvailable/MemFree/swap/PSI and the
    profiles' states with the last probe round's request counts and GPU power (a profile never probed:
    nulls); a kernel history event and an emergency are records too; other events are not."""
    duty = FlightDuty(tmp_path / "flight", SystemClock())
    duty.start()
    try:
        states = {"thor": ProfileState("thor", state=State.RUNNING)}
        duty.sample({n: st.state.value for n, st in states.items()})
        duty.saw("thor", replace(ProbeRound(True, 200, None, None, None, 2.0, None, 7.0), gpu_power_w=125.04))
        duty.observe_event("", "kernel.nv_err_no_memory", {"line": LINE, "whose": {"thor": "nobody"}})
        duty.observe_event("thor", "emergency.kill", {"reason": f"kernel: {LINE}", "cause": "kernel"})
        duty.observe_event("thor", "probe.ok", {"latency_ms": 3})
        duty.sample({n: st.state.value for n, st in states.items()})
        wait_for(lambda: duty.written >= 4, 10, message="records written")
    finally:
        duty.stop()
    recs = read_records(tmp_path / "flight")
    kinds = [r["k"] for r in recs]
    assert kinds.count("s") == 2
    assert kinds.count("kernel") == 1
    assert kinds.count("ev") == 1
    sample, probed = (r for r in recs if r["k"] == "s")
    assert sample["ma"] > 0
    assert sample["p"] == {"thor": ["RUNNING", None, None, None]}
    assert probed["p"] == {"thor": ["RUNNING", 2.0, None, 125.0]}
    assert set(sample) >= {"ma", "mf", "su", "ps"}
    assert os.stat(tmp_path / "flight" / NAMES[0]).st_mode & 0o777 == 0o600
    assert time.time() - sample["t"] < 3600  # wall time, not monotonic
