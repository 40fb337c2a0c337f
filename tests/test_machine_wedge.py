"""The no-grace path of the machine: kernel memory errors and the hard memory floor SIGKILL at once.

Plain values, no I/O (the real /dev/kmsg and Docker: tests/test_daemon_wedge.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from supervisor.adapters.kernel_log.prev_boot import previous_boot_kernel
from supervisor.core.actions import KillContainer, StopContainer
from supervisor.core.events import ContainerObserved, ContainerStopped, DaemonStarted, StopRequested
from supervisor.core.fleet.night import night_story, previous_boot_note
from supervisor.core.host.attribution import NOBODY, OTHER, OURS, PidLookup, attribute
from supervisor.core.host.kernel_log import classify_kernel_line
from supervisor.core.host.memguard import hard_floor
from supervisor.core.host_events import HardFloor, KernelReport
from supervisor.core.states import State
from tests.test_machine_driver import Driver, fresh_boot, policy

LINE = "NVRM: nvCheckOkFailedNoLog: Check failed: Out of memory [NV_ERR_NO_MEMORY] (0x00000051)"


def _report(kind: str = "nv_err_no_memory", whose: str = NOBODY, mem: float | None = None) -> KernelReport:
    summary = "NV_ERR_NO_MEMORY" if kind == "nv_err_no_memory" else kind
    return KernelReport(kind, summary, LINE, 1.0, whose, mem_available_gib=mem)


def _kills(acts: Sequence[object]) -> list[KillContainer]:
    return [a for a in acts if isinstance(a, KillContainer)]


def test_nv_err_no_memory_while_serving_kills_at_once_as_an_emergency() -> None:
    """RUNNING + NV_ERR_NO_MEMORY (names nobody): one KillContainer, no graceful stop, an emergency whose
    reason is the line; the stop completes to BACKOFF with a breaker record and an 'emergency' ledger row."""
    d = Driver()
    fresh_boot(d)
    d.to_running()
    acts = d.send(_report())
    assert d.st() == State.STOPPING
    assert [k.container_id for k in _kills(acts)] == ["c1"]
    assert not [a for a in acts if isinstance(a, StopContainer)]
    assert LINE in _kills(acts)[0].reason
    assert "emergency.kill" in d.emits(acts)
    assert "emergency.stop" in d.emits(acts)
    em = [a for a in d.alerts(acts) if a.title == "emergency stop"]
    assert em
    assert em[0].severity == "critical"
    assert LINE in em[0].reason
    assert d.s.stop_deadline == d.now + d.policy.stop_overdue_s  # no grace in the deadline
    d.send(ContainerStopped())
    assert d.st() == State.BACKOFF
    assert len(d.s.breaker.failures) == 1
    assert d.records()[-1].outcome == "emergency"


def test_memory_error_while_loading_near_the_floor_is_a_failed_start_killed_at_once() -> None:
    """STARTING + nvmap ENOMEM with MemAvailable under the near floor: killed at once, a failed start
    (failed_kernel_memory) once it is down (with the memory fine it is tolerated: test_kernel_rule.py)."""
    d = Driver()
    fresh_boot(d)
    d.to_starting()
    assert not _kills(d.send(_report("nvmap_enomem", mem=50.0)))
    acts = d.send(_report("nvmap_enomem", mem=d.policy.host.memory_guard.mem_available_min_gib - 0.5))
    assert d.st() == State.STOPPING
    assert d.s.pending == "failed_start"
    em = [a for a in d.alerts(acts) if a.title == "emergency stop"]
    assert [a.severity for a in em] == ["critical"]
    assert LINE in em[0].reason
    assert _kills(acts)
    assert not [a for a in acts if isinstance(a, StopContainer)]
    d.send(ContainerStopped())
    assert d.st() == State.BACKOFF
    assert d.records()[-1].outcome == "failed_kernel_memory"


def test_attribution_decides_who_is_killed() -> None:
    """An OOM kill of another process warns nobody; of ours kills; policy warn only warns; Xid warns."""
    d = Driver()
    fresh_boot(d)
    d.to_running()
    assert _kills(d.send(_report("oom_kill", OTHER))) == []
    assert d.st() == State.RUNNING
    assert _kills(d.send(KernelReport("xid", "Xid 31", "NVRM: Xid ...", 1.0, NOBODY))) == []
    assert d.st() == State.RUNNING
    assert _kills(d.send(_report("oom_kill", OURS)))
    assert d.st() == State.STOPPING
    w = Driver(policy=policy(host={"kernel_memory_error": "warn"}))
    fresh_boot(w)
    w.to_running()
    acts = w.send(_report())
    assert (w.st(), _kills(acts)) == (State.RUNNING, [])
    assert [a.severity for a in w.alerts(acts)] == ["warning"]


def test_a_graceful_stop_under_way_becomes_a_kill_for_a_line_of_ours_only() -> None:
    """STOPPING (operator stop, 120 s grace): a line naming nobody changes nothing; one naming our process
    kills now, and the stop stays an operator stop (STOPPED, no breaker record)."""
    d = Driver()
    fresh_boot(d)
    d.to_running()
    d.send(StopRequested())
    assert d.st() == State.STOPPING
    assert _kills(d.send(_report())) == []
    assert _kills(d.send(_report("oom_kill", OURS)))
    d.send(ContainerStopped())
    assert d.st() == State.STOPPED
    assert d.s.breaker.failures == ()


def test_hard_floor_kills_in_any_state_with_a_container() -> None:
    """HardFloor: RUNNING and STARTING are killed at once; STOPPED ignores it."""
    for to in ("to_running", "to_starting"):
        d = Driver()
        fresh_boot(d)
        getattr(d, to)()
        acts = d.send(HardFloor("MemAvailable 2.00 GiB < hard floor 3 GiB"))
        assert d.st() == State.STOPPING, to
        assert _kills(acts)
        assert "memory.hard_floor" in d.emits(acts)
        assert "memory hard floor" in _kills(acts)[0].reason
    s = Driver()
    s.send(StopRequested())
    assert s.send(HardFloor("x")) == []


def test_hard_floor_values() -> None:
    """MemAvailable under the floor trips; low MemFree only while MemAvailable is low too; 0 is off."""
    kw = {"mem_available_min_gib": 3.0, "memfree_min_gib": 1.0, "memavailable_below_gib": 10.0}
    assert hard_floor(2.9, 50.0, **kw) is not None
    assert hard_floor(3.1, 2.0, **kw) is None
    assert hard_floor(40.0, 0.2, **kw) is None  # the page cache at work
    assert hard_floor(8.0, 0.5, **kw) is not None
    assert hard_floor(0.1, 0.1, mem_available_min_gib=0, memfree_min_gib=0, memavailable_below_gib=10) is None


def test_attribute_values() -> None:
    """pid in a container: ours for it, other for the rest; a gone vLLM pid or no pid: nobody."""
    cid = "a" * 64
    containers = {"p": cid, "q": "b" * 64, "r": None}
    assert attribute(7, True, PidLookup(True, cid), containers) == {"p": OURS, "q": OTHER, "r": OTHER}
    assert attribute(7, True, PidLookup(True, None), containers) == dict.fromkeys(containers, OTHER)
    assert attribute(7, True, PidLookup(False, None), containers) == dict.fromkeys(containers, NOBODY)
    assert attribute(7, False, PidLookup(False, None), containers) == dict.fromkeys(containers, OTHER)
    assert attribute(None, None, None, containers) == dict.fromkeys(containers, NOBODY)
    assert attribute(None, False, None, containers) == dict.fromkeys(containers, OTHER)
    assert attribute(7, True, PidLookup(True, cid), {"p": cid[:12]}) == {"p": OURS}


def test_a_run_up_when_the_host_went_down_ends_wedged_and_counts_in_the_breaker() -> None:
    """Daemon start after a hard reboot (boot changed, wedged_at): a persisted RUNNING run gets a
    'wedged' ledger row and a breaker record after the reboot re-arm; its gone container starts over."""
    d = Driver(policy=policy(reboot_rearms_breaker=True))
    fresh_boot(d)
    d.to_running()
    at = d.now
    d.advance(400)
    acts = d.send(DaemonStarted(boot_changed=True, wedged_at=at))
    assert "run.wedged" in d.emits(acts)
    assert d.records()[-1].outcome == "wedged"
    assert d.records()[-1].container_id == "c1"
    assert d.s.breaker.failures == (at,)
    d.send(ContainerObserved(container_id="c1", running=False, exit_code=137))
    assert d.st() == State.PREFLIGHT
    s = Driver()
    fresh_boot(s)
    assert "run.wedged" not in d.emits(s.send(DaemonStarted(boot_changed=True, wedged_at=at)))
    assert s.records() == []  # nothing was up: no row


def test_the_night_story_from_flight_records() -> None:
    """The last records: when, who was up with how many requests, memory over the last 30 s, the last
    kernel line and the kill."""
    recs: list[dict[str, object]] = []
    for i in range(40):
        ma = 14.2 - i * (13.1 / 39)
        recs.append({"t": 100.0 + i, "k": "s", "ma": ma, "mf": 0.4, "p": {"thor": ["RUNNING", 2.0, 1.0]}})
    recs.insert(35, {"t": 135.0, "k": "kernel", "kind": "nv_err_no_memory", "line": LINE, "kt": 134.5})
    recs.insert(36, {"t": 136.0, "k": "ev", "p": "thor", "n": "emergency.kill", "f": {}})
    night = night_story(recs, rebooted=True, back_at=560.0, fmt=lambda t: f"T{t:.1f}")
    assert night is not None
    assert night.text.startswith("the host went down at about T139.0 (rebooted, back T560.) while thor was")
    assert "thor was RUNNING (3 requests)" in night.text
    assert "in its last 30 s MemAvailable fell 11.2 -> 1.1 GiB (MemFree 0.4 GiB)" in night.text
    assert f"kernel: NV_ERR_NO_MEMORY at T134.5 ({LINE[:240]})" in night.text
    assert night.text.endswith("the daemon killed the container of thor at T136.0")
    assert night.up == ("thor",)
    quiet = night_story([*recs[:10], recs[35]], rebooted=True, back_at=560.0, fmt=str)
    assert quiet is not None
    assert quiet.text.endswith("the daemon could not act (no kill recorded)")
    assert night_story([], rebooted=True, back_at=1.0) is None


def test_the_previous_boots_kernel_log_adds_its_last_lines_of_interest() -> None:
    """A real subprocess in place of journalctl printing a fixture of real NVIDIA lines: the note names
    the last lines of interest; a command that fails (or prints nothing of interest) adds nothing."""
    fixture = Path(__file__).parent / "fixtures" / "dmesg" / "005-nv-err-no-memory-sysmem-fb-heap-5060ti.log"
    lines = previous_boot_kernel(("sh", "-c", 'cat "$0"', str(fixture)))
    assert lines
    note = previous_boot_note(lines, classify_kernel_line)
    assert note is not None
    assert note.startswith("previous boot's kernel log: NV_ERR_NO_MEMORY (NVRM: ")
    assert previous_boot_kernel(("sh", "-c", "exit 1")) == []
    assert previous_boot_kernel(("/nonexistent/journalctl",)) == []
    assert previous_boot_note(["[1.0] usb 1-1: new device"], classify_kernel_line) is None
