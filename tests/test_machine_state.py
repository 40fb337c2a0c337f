"""ProfileState persistence and status shape."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from supervisor.adapters.store.state import Store
from supervisor.core.errors import StateError
from supervisor.core.events import LogProgress
from supervisor.core.profile_state import KernelRecord, KvDraw, ProfileState
from supervisor.core.states import State
from tests.test_machine_driver import Driver, fresh_boot

FIXTURES = Path(__file__).parent / "fixtures" / "state"


def test_round_trip_of_a_running_profile() -> None:
    """A RUNNING snapshot survives JSON persistence unchanged."""
    d = Driver()
    fresh_boot(d)
    d.to_running()
    s = d.s
    assert ProfileState.from_dict(json.loads(json.dumps(s.to_dict()))) == s


def test_from_dict_tolerates_missing_keys() -> None:
    """An old file with only a few keys loads with defaults."""
    s = ProfileState.from_dict({"name": "p", "state": "BACKOFF", "load": {"pct": 3}})
    assert s.state == State.BACKOFF
    assert s.load.pct == 3.0
    assert s.intent == "run"
    assert s.breaker.failures == ()


def test_a_state_file_with_the_flat_kv_and_kernel_keys_still_loads(tmp_path: Path) -> None:
    """A snapshot written by the code before the KV draw and the kernel record became values (its flat
    ``kv_*`` / ``kernel_*`` keys, written by that code into tests/fixtures/state/) loads through the store
    into those values; saved again, it is written nested and reads back the same."""
    store = Store(tmp_path)
    old = json.loads((FIXTURES / "profile-flat-kv-kernel.json").read_text(encoding="utf-8"))
    store.save_profile_state("qwen", old)
    s = ProfileState.from_dict(store.load_profile_state("qwen"))
    assert s.kv == KvDraw(
        tokens=557_599,
        max_concurrency=2.13,
        gib=26.3,
        model_gib=17.3,
        usage=(("consumed", 19.84), ("torch_peak", 1.5)),
        fingerprint="a1b2c3d4e5f6",
        image_id="sha256:feed",
        gmu=0.73,
        judged=True,
        baseline_tokens=1_013_816,
        baseline_for="a1b2c3d4e5f6",
        recent=(557_599, 1_013_816),
        best_usage=(("consumed", 18.2),),
        best_gib=48.1,
        redraws=1,
        pin_bytes=51_539_607_552,
        pin_running=True,
    )
    assert s.kernel == KernelRecord(
        recent=("Xid 31 (pid 42 VLLM::EngineCor)",),
        recent_at=1_700_000_090.0,
        quiet_kinds=("oom_kill", "xid"),
        quiet_at=(1_700_000_050.0, 1_700_000_060.0),
        quiet_held=(1, 0),
    )
    assert (s.state, s.container_id, s.restarts, s.maintenance_kv_before) == (
        State.RUNNING,
        "c0ffee",
        2,
        1_013_816,
    )
    assert s.smoke[0].name == "stream"
    new = s.to_dict()
    assert not [k for k in new if k.startswith(("kv_", "kernel_"))]
    assert new["kv"]["tokens"] == 557_599
    assert new["kernel"]["quiet_held"] == [1, 0]
    assert ProfileState.from_dict(json.loads(json.dumps(new))) == s


def test_a_bad_value_under_an_old_flat_key_names_its_field() -> None:
    """A wrong type under a flat key of an older file is a StateError naming the record's field."""
    with pytest.raises(StateError, match=r"p\.kv\.tokens"):
        ProfileState.from_dict({"name": "p", "kv_tokens": "many"})


@pytest.mark.parametrize(
    "bad",
    [
        {"name": "p", "state": "NAPPING"},
        {"name": "p", "restarts": "3"},
        {"name": "p", "adopted": 1},
        {"name": "p", "container_id": 5},
        {"name": "p", "intent": "maybe"},
        {"name": "p", "load": {"markers_seen": [1]}},
        {"name": "p", "last_probe": []},
        {"name": "p", "since": None},
        {"state": "RUNNING"},
        [],
    ],
)
def test_from_dict_rejects_bad_types(bad: object) -> None:
    """Wrong types raise StateError naming the field."""
    with pytest.raises(StateError):
        ProfileState.from_dict(bad)


def test_status_dict_has_design_keys() -> None:
    """status_dict carries the docs/contract.md per-profile keys with the right shapes."""
    d = Driver()
    fresh_boot(d)
    d.to_starting()
    d.send(LogProgress(pct=45.0, phase="weights"))
    st = d.s.status_dict(d.now)
    assert st["state"] == "STARTING"
    assert st["load_progress"]["pct"] == 45.0
    assert st["container_id"] == "c1"
    assert st["breaker"] == {"state": "closed", "emergencies": 0, "window_s": 7200.0, "limit": 3}
    assert set(st["last_probe"]) == {"ok", "latency_ms", "at"}
    json.dumps(st)
