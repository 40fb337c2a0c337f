"""Counted log markers, pure: the matcher, the `markers:` config forms, an adopted container's judgement."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from supervisor.config import check_config, load_profile
from supervisor.core.events import AdoptedMarkers, ContainerObserved, DaemonStarted, LogMarker
from supervisor.core.states import State
from supervisor.core.vllm.markers import marker_matcher
from tests.test_config import MINIMAL, find, profile
from tests.test_machine_driver import Driver

MADV = "(Worker_TP{i} pid=1{i}) INFO 01-01 00:00:0{i} [madvise.py:7] MADV_HUGEPAGE applied to the KV cache"


def test_a_counted_marker_is_proved_by_at_least_n_lines() -> None:
    """count 3: two lines leave it missing (2/3), the third proves it once, a fourth changes nothing."""
    m = marker_matcher(["MADV_HUGEPAGE applied"], [], [3])
    assert m.names == ("MADV_HUGEPAGE applied x3",)
    assert m.feed(MADV.format(i=0)).expected == ()
    assert m.feed(MADV.format(i=1)).expected == ()
    assert m.missing == ("MADV_HUGEPAGE applied x3",)
    assert [t.text() for t in m.tally()] == ["MADV_HUGEPAGE applied 2/3"]
    assert m.feed(MADV.format(i=2)).expected == ("MADV_HUGEPAGE applied x3",)
    assert m.all_expected_seen
    assert m.feed(MADV.format(i=3)).expected == ()  # proved once per boot
    assert [t.text() for t in m.tally()] == ["MADV_HUGEPAGE applied 4/3"]
    m.reset()
    assert m.missing == ("MADV_HUGEPAGE applied x3",)


def test_plain_markers_keep_their_name_and_count_one() -> None:
    """A marker without a count is proved by its first line and named by its pattern alone."""
    m = marker_matcher(["patch applied", "MADV"], ["errno=22"], [1])
    assert m.names == ("patch applied", "MADV")
    r = m.feed("INFO 01-01 00:00:02 [patch.py:10] patch applied; errno=22 seen earlier")
    assert r.expected == ("patch applied",)
    assert r.forbidden == ("errno=22",)
    assert m.missing == ("MADV",)


def test_markers_config_accepts_strings_and_counted_mappings(tmp_path: Path) -> None:
    """`expected` mixes plain regexes and {pattern, count}; the policy names counted ones `pattern xN`."""
    body = MINIMAL + (
        "markers:\n  expected:\n    - patch applied\n    - {pattern: 'MADV \\d+', count: 16}\n"
        "  forbidden: [errno=22]\n"
    )
    prof = load_profile(profile(tmp_path, body))
    assert prof.markers.expected == ("patch applied", r"MADV \d+")
    assert prof.markers.expected_counts == (1, 16)
    assert prof.markers.expected_names() == ("patch applied", r"MADV \d+ x16")
    assert prof.markers.forbidden == ("errno=22",)
    plain = load_profile(profile(tmp_path, MINIMAL + "markers:\n  expected: [a, b]\n", "plain.yaml"))
    assert plain.markers.expected_counts == ()
    assert plain.markers.expected_names() == ("a", "b")


def test_markers_config_errors_name_file_key_and_value(tmp_path: Path) -> None:
    """A zero count, a missing pattern, a bad regex, an unknown key and a number item are each reported."""
    body = MINIMAL + (
        "markers:\n  expected:\n    - {pattern: MADV, count: 0}\n    - {count: 2}\n"
        "    - {pattern: '(open', count: 2}\n    - {pattern: ok, cuont: 2}\n    - 7\n"
    )
    f = profile(tmp_path, body)
    problems = check_config(f)
    assert str(find(problems, "markers.expected[0].count")) == (
        f"{f}: markers.expected[0].count: must be >= 1 (got 0)"
    )
    assert find(problems, "markers.expected[1].pattern").message == "required key is missing"
    assert "not a valid regular expression" in find(problems, "markers.expected[2].pattern").message
    assert "did you mean 'count'" in find(problems, "markers.expected[3].cuont").message
    assert find(problems, "markers.expected[4]").message == (
        "must be a regex string or a mapping {pattern, count}, not a integer"
    )
    assert len(problems) == 5


def _adopted(tmp_path: Path) -> Driver:
    """A daemon that adopted running container c9 (profile with one counted expected marker)."""
    prof = load_profile(profile(tmp_path, MINIMAL + "markers:\n  expected: [{pattern: MADV, count: 4}]\n"))
    d = Driver()
    d.policy = replace(d.policy, markers=prof.markers)
    d.send(DaemonStarted(boot_changed=False))
    d.send(ContainerObserved(container_id="c9", running=True, exit_code=None))
    assert d.st() == State.STARTING
    assert d.s.adopted
    return d


def test_adopted_start_up_log_warns_about_missing_and_forbidden_markers(tmp_path: Path) -> None:
    """The read-back log of an adopted container: a missing counted marker and a forbidden one each alert
    (a warning: the daemon did not start it); the container is kept."""
    d = _adopted(tmp_path)
    acts = d.send(AdoptedMarkers("c9", ("MADV 3/4",), ("errno=22",), complete=True, lines=120))
    assert d.emits(acts) == ["log.adopted_markers", "log.forbidden_marker", "log.marker_missing"]
    kinds = [(a.kind, a.severity, a.reason) for a in d.alerts(acts)]
    assert kinds == [
        ("log.forbidden_marker", "warning", "errno=22 (start-up log of the adopted container)"),
        ("log.marker_missing", "warning", "MADV 3/4"),
    ]
    assert d.st() == State.STARTING  # not stopped
    # the live stream then repeats the forbidden one: reported once per run
    again = d.send(AdoptedMarkers("c9", (), ("errno=22",), complete=True, lines=1))
    assert d.alerts(again) == []


def test_adopted_log_without_ready_line_does_not_judge_missing(tmp_path: Path) -> None:
    """A log read back mid-load (no ready line yet) proves nothing missing; another container's is late."""
    d = _adopted(tmp_path)
    assert d.alerts(d.send(AdoptedMarkers("c9", ("MADV 0/4",), (), complete=False, lines=10))) == []
    assert d.send(AdoptedMarkers("other", ("MADV 0/4",), (), complete=True, lines=10)) == []


def test_own_start_fails_when_a_counted_marker_is_short(tmp_path: Path) -> None:
    """Our own start: the counted name must be proved before ready (the matcher posts it at the Nth line)."""
    d = _adopted(tmp_path)
    assert d.policy.markers.expected_names() == ("MADV x4",)
    d2 = Driver(policy=d.policy)
    d2.to_starting()
    d2.send(LogMarker("MADV x4", False))
    assert "MADV x4" in d2.s.load.markers_seen
