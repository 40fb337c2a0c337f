"""The machine's auth decisions, key rotation, ready without /health and the probe warm-up (pure)."""

from __future__ import annotations

from supervisor.core.actions import CheckAuth, CheckKeyFile, ProbeHealth, RunFirstGeneration, RunProbeRound
from supervisor.core.events import (
    AuthResult,
    FirstGeneration,
    GenerationDone,
    KeyFileChecked,
    LogReady,
    ProbeRound,
)
from supervisor.core.machine import Policy
from supervisor.core.states import State
from tests.test_machine_driver import OK_HEALTH, Driver, policy

URL = "http://127.0.0.1:8123"


def _running(pol: Policy) -> Driver:
    d = Driver(policy=pol)
    d.to_running()
    assert d.st() == State.RUNNING
    return d


def _healthy_round(d: Driver) -> None:
    """Answer one probe round and its generation as healthy."""
    d.send(ProbeRound(True, 200, None, None, None, 0.0, 0.0, 10.0))
    d.send(GenerationDone(ok=True, latency_ms=20.0, error=None))


def test_no_key_configured_still_checks_and_warns_that_the_port_is_open() -> None:
    """No key in the profile: a keyless request is sent; served -> auth open, a warning naming the URL."""
    d = Driver(policy=policy())
    d.to_starting()
    d.send(LogReady())
    acts = d.send(OK_HEALTH)
    assert any(isinstance(a, CheckAuth) for a in acts)
    acts = d.send(AuthResult("open", URL))
    alerts = d.alerts(acts)
    assert [a.severity for a in alerts] == ["warning"]
    assert "open to anyone" in alerts[0].title
    assert URL in alerts[0].reason
    assert d.s.status_dict(d.now)["auth"] == "open"
    assert d.send(AuthResult("open", URL)) == []  # the same answer again: no second alert


def test_key_configured_and_served_without_it_is_critical() -> None:
    """A configured key that the server does not enforce (lost on re-creation) is a critical alert."""
    d = Driver(policy=policy(api_key_configured=True))
    d.to_starting()
    d.send(LogReady())
    d.send(OK_HEALTH)
    acts = d.send(AuthResult("open", URL))
    assert [a.severity for a in d.alerts(acts)] == ["critical"]
    d.send(AuthResult("enforced", URL))
    assert d.s.auth == "enforced"


def test_auth_check_can_be_switched_off() -> None:
    """probes.unauthorized_check: false -> no keyless request after the start."""
    d = Driver(policy=policy(probes={"unauthorized_check": False}))
    d.to_starting()
    d.send(LogReady())
    assert not any(isinstance(a, CheckAuth) for a in d.send(OK_HEALTH))


def test_rotated_key_file_warns_once_per_change_and_never_degrades() -> None:
    """A changed key file: one warning per new key, the profile stays RUNNING, no emergency, no restart."""
    p = policy(api_key_configured=True, watch_key_file=True, probes={"interval_s": 5.0})
    d = _running(p)
    acts = d.advance(5)
    assert any(isinstance(a, CheckKeyFile) for a in acts)
    assert d.send(KeyFileChecked(False)) == []
    warned = d.alerts(d.send(KeyFileChecked(True, "aaaaaaaaaaaa")))
    assert [a.severity for a in warned] == ["warning"]
    assert "restart needed to apply the new key" in warned[0].title
    for _ in range(5):  # several rounds with the rotated file: nothing new, still serving
        d.advance(5)
        _healthy_round(d)
        assert d.send(KeyFileChecked(True, "aaaaaaaaaaaa")) == []
        assert d.st() == State.RUNNING
    assert d.alerts(d.send(KeyFileChecked(True, "bbbbbbbbbbbb")))  # rotated again: warned again
    assert "emergency.stop" not in d.emits()
    assert "api_key.in_sync" in d.emits(d.send(KeyFileChecked(False)))  # reverted (or restarted)
    assert d.alerts(d.send(KeyFileChecked(True, "aaaaaaaaaaaa")))  # a change after that is new again
    assert d.st() == State.RUNNING


def test_key_file_is_compared_only_when_it_is_the_key_source() -> None:
    """No key file (env key or no key): the probe rounds do not ask for a comparison."""
    d = _running(policy(probes={"interval_s": 5.0}))
    assert not any(isinstance(a, CheckKeyFile) for a in d.advance(12))


def test_ready_on_the_log_line_alone_skips_health() -> None:
    """startup.ready_requires_health: false -> the ready line leads to the first generation at once."""
    d = Driver(policy=policy(startup={"ready_requires_health": False}))
    d.to_starting()
    acts = d.send(LogReady())
    assert not any(isinstance(a, ProbeHealth) for a in acts)
    assert any(isinstance(a, RunFirstGeneration) for a in acts)
    assert any(isinstance(a, CheckAuth) for a in acts)
    assert "start.ready_on_log" in d.emits(acts)
    d.send(FirstGeneration(ok=True, latency_ms=50.0, error=None))
    assert d.st() == State.RUNNING


def test_ready_without_health_retries_the_first_generation_without_health() -> None:
    """A failed first generation is retried after the poll interval, still without /health."""
    d = Driver(policy=policy(startup={"ready_requires_health": False}, probes={"failure_threshold": 3}))
    d.to_starting()
    d.send(LogReady())
    d.send(FirstGeneration(ok=False, latency_ms=None, error="timeout"))
    acts = d.advance(3)
    assert not any(isinstance(a, ProbeHealth) for a in acts)
    assert sum(isinstance(a, RunFirstGeneration) for a in acts) == 1


def test_probe_latencies_of_the_warm_up_are_not_measured() -> None:
    """probes.warmup_s: rounds in the first seconds after ready carry measure=False, later ones True."""
    d = _running(policy(probes={"warmup_s": 30.0, "interval_s": 10.0}))
    rounds: list[RunProbeRound] = []
    for _ in range(5):
        rounds += [a for a in d.advance(10) if isinstance(a, RunProbeRound)]
        _healthy_round(d)
    assert [r.measure for r in rounds] == [False, False, True, True, True]
    d0 = _running(policy(probes={"interval_s": 10.0, "warmup_s": 0.0}))  # 0: measured from the first round
    assert all(a.measure for a in d0.advance(10) if isinstance(a, RunProbeRound))
