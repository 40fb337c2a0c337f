"""The real daemon on the real /dev/kmsg: a flood of OOM kills of someone else's processes (each a new
pid) while a profile serves is one warning per kind, not one per line; the history keeps every line."""

from __future__ import annotations

import random
import uuid
from typing import Any

import pytest

from tests.harness import WebhookReceiver, wait_for
from tests.kmsg_probe import kmsg_writable, write_kmsg
from tests.sim_world import World

pytestmark = [pytest.mark.docker, pytest.mark.slow]

FLOOD = 25
# a process name no vLLM runs as, a pid that is (almost surely) not alive: "other" for every daemon here
OOM = "<3>Out of memory: Killed process {pid} ({comm}) total-vm:1024kB, anon-rss:512kB\n"
XID = "<4>NVRM: Xid (PCI:0000:0a:00): 13, pid={pid}, name={comm}, Graphics Exception {token}\n"


def _alerts(webhook: WebhookReceiver, comm: str) -> list[dict[str, Any]]:
    got = [r for r in webhook.received() if r.path.startswith("/alert/")]
    return [r.json() for r in got if comm in r.body.decode("utf-8", "replace")]


# its OOM-kill and Xid lines name no container: every daemon on the box reads them, and a real failed start's
# diagnosis beside it took them for its kernel cause ("host_dependent": the same-cause test never reached
# FATAL, a run of 2026-12-05 with three real-vLLM groups)
@pytest.mark.kmsg
def test_other_processes_oom_kill_flood_is_one_warning(world: World, webhook: WebhookReceiver) -> None:
    if not kmsg_writable():
        pytest.skip("/dev/kmsg is not writable here; this test needs root")
    comm = f"vq{uuid.uuid4().hex[:10]}"  # the kernel keeps 15 characters of a comm
    token = uuid.uuid4().hex
    world.profile()
    d = world.daemon(
        extra={
            "alerts": {"channels": [{"kind": "generic", "name": "ops", "url": f"{webhook.url}/alert/x"}]},
            "host": {
                "drop_caches": False,
                "load_lock_path": str(world.tmp / "load.lock"),
                "memory_guard": {"enabled": False},
                "kernel_memory_error": "warn",
            },
        }
    )
    d.wait_state("p", "RUNNING", 60)
    wait_for(lambda: [e for e in d.events(n=2000) if e["name"] == "kernel_log.following"], 30, message="kmsg")
    pids = random.sample(range(3_000_000, 4_000_000), FLOOD + 1)  # above pid_max's default: not alive
    for pid in pids[:FLOOD]:
        write_kmsg(OOM.format(pid=pid, comm=comm))
    write_kmsg(XID.format(pid=pids[FLOOD], comm=comm, token=token))  # another kind: its own warning

    def seen() -> list[dict[str, Any]]:
        return [e for e in d.events(n=5000) if comm in str(e["fields"].get("line", ""))]

    wait_for(lambda: len([e for e in seen() if e["name"] == "kernel.xid"]) == 1, 20, message="the xid")
    history = seen()
    assert len([e for e in history if e["name"] == "kernel.oom_kill"]) == FLOOD  # every line recorded
    warned = [e for e in history if e["name"] == "kernel.while_serving"]
    assert sorted(e["fields"]["kind"] for e in warned) == ["oom_kill", "xid"]
    # alerts leave in order on the channel: the xid's is after every oom one that was sent
    wait_for(lambda: any(token in a["reason"] for a in _alerts(webhook, comm)), 20, message="xid alert")
    titles = [a["title"] for a in _alerts(webhook, comm)]
    assert len([t for t in titles if "OOM kill" in t]) == 1
    assert d.status("p")["state"] == "RUNNING"
