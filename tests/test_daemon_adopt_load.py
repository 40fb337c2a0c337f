"""The real daemon SIGKILLed while its model loads, then started again: it adopts the same container,
restarts nothing, and that start still gets its ledger row (KV pool and load time)."""

from __future__ import annotations

import pytest

from tests.harness import wait_for
from tests.sim_world import World

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def test_daemon_killed_mid_load_adopts_and_writes_the_start_row(world: World) -> None:
    world.profile(env={"VSIM_LOAD_SECONDS": "12", "VSIM_SHARDS": "6", "VSIM_KV_TOKENS": "557599"})
    d = world.daemon()
    cid = wait_for(
        lambda: (s := d.status("p"))["load_progress"]["pct"] is not None and s["container_id"],
        40,
        message="load progress shown",
    )
    before = d.call("history", name="p", n=50)["data"]["starts"]
    d.kill9()
    assert world.container().status == "running"  # the load goes on without a daemon
    started_at = world.container().attrs["State"]["StartedAt"]
    d.start()
    st = d.wait_state("p", "RUNNING", 60)
    assert (st["container_id"], st["adopted"], st["restarts"]) == (cid, True, 0)
    assert world.container().attrs["State"]["StartedAt"] == started_at  # not restarted by Docker either
    rows = d.call("history", name="p", n=50)["data"]["starts"][len(before) :]
    assert len(rows) == 1, rows
    assert rows[0]["outcome"] == "ready"
    assert rows[0]["kv_tokens"] == 557599
    # timed from the container's own start: the simulator sleeps 12 s in all before ready; counted from
    # the adoption it would be under 10.8 s (the kill came after the first 1.2 s and a shard line)
    assert rows[0]["load_s"] >= 11.9
