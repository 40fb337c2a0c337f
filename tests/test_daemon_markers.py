"""Log markers end to end: the real daemon (a subprocess), simulator containers on the real Docker engine.

The simulator prints one tqdm line per checkpoint shard (0/N .. N/N: N+1 lines), so a counted marker on
"checkpoint shards" is proved by exactly N+1 lines; a request to an unknown path prints an access line
with that path, a line that appears only when the test asks for it.
"""

from __future__ import annotations

from typing import Any

import pytest
import requests

from tests.daemon_harness import DaemonProc, write_profile
from tests.harness import wait_for
from tests.sim_world import World

pytestmark = [pytest.mark.docker, pytest.mark.slow]

SHARDS = 3
SHARD_LINE = r"Loading safetensors checkpoint shards: +\d+% Completed"


def _events(d: DaemonProc, name: str) -> list[dict[str, Any]]:
    return [e for e in d.events("p", n=2000) if e["name"] == name]


def _alerts(d: DaemonProc, kind: str) -> list[dict[str, Any]]:
    return [
        e for e in d.events("p", n=2000) if e["name"] == "alert.raised" and e["fields"].get("kind") == kind
    ]


def test_a_short_counted_marker_fails_the_start(world: World) -> None:
    """`{pattern, count}` one more than the log prints: the start fails (failed_marker_missing) naming it."""
    world.profile(
        env={"VSIM_SHARDS": str(SHARDS)},
        extra={"markers": {"expected": [{"pattern": SHARD_LINE, "count": SHARDS + 2}]}},
    )
    d = world.daemon()
    wait_for(
        lambda: any(
            r["outcome"] == "failed_marker_missing"
            for r in d.call("history", name="p", n=10)["data"]["starts"]
        ),
        60,
        message="a failed_marker_missing start in the ledger",
    )
    wait_for(lambda: _events(d, "start.failed"), 20, message="the start.failed event")
    failed = _events(d, "start.failed")[0]["fields"]
    assert failed["outcome"] == "failed_marker_missing"
    assert failed["detail"] == f"{SHARD_LINE} x{SHARDS + 2}"
    assert "RUNNING" not in [e["fields"]["new"] for e in _events(d, "state.changed")]


def test_a_counted_marker_the_log_proves_lets_the_start_serve(world: World) -> None:
    """The same marker with count N+1 (every shard line, the 0 % one too) is proved; the server runs."""
    world.profile(
        env={"VSIM_SHARDS": str(SHARDS)},
        extra={
            "markers": {
                "expected": ["Available KV cache memory", {"pattern": SHARD_LINE, "count": SHARDS + 1}]
            }
        },
    )
    d = world.daemon()
    d.wait_state("p", "RUNNING", 60)
    seen = [e["fields"]["marker"] for e in _events(d, "log.marker_seen")]
    assert seen == [f"{SHARD_LINE} x{SHARDS + 1}", "Available KV cache memory"]  # in log order


def test_a_forbidden_marker_while_serving_alerts_once(world: World) -> None:
    """A forbidden line printed while RUNNING is a warning alert (once per run); the server keeps serving."""
    world.profile(extra={"markers": {"forbidden": ["GET /forbidden-marker-probe"]}})
    d = world.daemon()
    cid = d.wait_state("p", "RUNNING", 60)["container_id"]
    for _ in range(2):
        requests.get(world.url() + "/forbidden-marker-probe", timeout=5)
    wait_for(lambda: _alerts(d, "log.forbidden_marker"), 20, message="the forbidden-marker alert")
    alert = _alerts(d, "log.forbidden_marker")[0]["fields"]
    assert alert["severity"] == "warning"
    assert alert["reason"] == "GET /forbidden-marker-probe"
    st = d.status("p")
    assert (st["state"], st["container_id"]) == ("RUNNING", cid)
    assert len(_alerts(d, "log.forbidden_marker")) == 1


def test_an_adopted_container_is_judged_on_its_start_up_log(world: World) -> None:
    """The next daemon adopts the running container under a profile with stricter markers: it reads the
    start-up log back from StartedAt and warns (missing counted marker with its tally, forbidden line); the
    container is kept."""
    spec = world.profile(env={"VSIM_SHARDS": str(SHARDS)})
    d = world.daemon()
    cid = d.wait_state("p", "RUNNING", 60)["container_id"]
    assert d.terminate() == 0
    spec.extra = {
        "markers": {
            "expected": [{"pattern": SHARD_LINE, "count": 16}],
            "forbidden": ["Available KV cache memory"],
        }
    }
    write_profile(world.tmp, spec, world.res.test_id)
    d.start()
    st = d.wait_state("p", "RUNNING", 30)
    assert (st["container_id"], st["adopted"]) == (cid, True)
    wait_for(lambda: _alerts(d, "log.marker_missing"), 20, message="the marker_missing alert")
    assert _alerts(d, "log.marker_missing")[0]["fields"]["reason"] == f"{SHARD_LINE} {SHARDS + 1}/16"
    forbidden = _alerts(d, "log.forbidden_marker")
    assert [a["fields"]["reason"] for a in forbidden] == [
        "Available KV cache memory (start-up log of the adopted container)"
    ]
    judged = _events(d, "log.adopted_markers")[-1]["fields"]
    assert judged["complete"] is True
    assert judged["lines"] > SHARDS
    assert world.container().id == cid
