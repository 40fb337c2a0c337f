"""The real daemon and simulator containers: a configuration error goes FATAL after one start, diagnosed."""

from __future__ import annotations

from typing import Any

import pytest

from tests.daemon_harness import sim_args
from tests.harness import WebhookReceiver, wait_for
from tests.sim_world import World

pytestmark = [pytest.mark.docker, pytest.mark.slow]
ARGS = sim_args()


def _alerts_to(webhook: WebhookReceiver) -> dict[str, Any]:
    return {"alerts": {"channels": [{"kind": "generic", "name": "ops", "url": f"{webhook.url}/alert/x"}]}}


def test_a_refused_max_model_len_is_fatal_after_one_start(world: World, webhook: WebhookReceiver) -> None:
    """--max-model-len above the model's positions: one start, FATAL, the fix and vLLM's reason alerted."""
    world.profile(
        env={"VSIM_MAX_POSITIONS": "1024", "VSIM_FLAVOR": "v0_32"}, args=[*ARGS, "--max-model-len", "100000"]
    )
    d = world.daemon(extra=_alerts_to(webhook), breaker_limit=5)
    st = d.wait_state("p", "FATAL", 60)
    assert st["breaker"]["state"] == "open"
    assert st["breaker"]["emergencies"] == 1, [(e["name"], e["fields"]) for e in d.events("p")]
    # the ledger row follows the state once the failed start is diagnosed (the kernel ring is read first)
    starts = wait_for(lambda: d.call("history", name="p", n=10)["data"]["starts"], 30, message="the row")
    assert [s["outcome"] for s in starts] == ["failed_config"]  # one start, no retries burnt
    names = [e["name"] for e in d.events("p")]
    assert names.count("container.started") == 1
    assert "backoff.scheduled" not in names

    def fatal_alert() -> dict[str, Any] | None:
        bodies = [r.json() for r in webhook.received() if r.path.startswith("/alert/")]
        return next((b for b in bodies if b.get("title", "").startswith("configuration error")), None)

    alert = wait_for(fatal_alert, 20, message="the configuration error alert")
    text = str(alert.get("text"))
    assert "User-specified max_model_len (100000) is greater than the derived max_model_len" in text
    assert "fix the profile, then `supervisorctl reset" in text


def test_docker_default_dev_shm_is_diagnosed_with_the_remedy(world: World) -> None:
    """An engine that needs more than Docker's 64 MB /dev/shm: class shm, --shm-size / --ipc host named."""
    world.profile(env={"VSIM_SHM_REQUIRED_MIB": "160", "VSIM_FLAVOR": "v0_32"}, args=ARGS)
    d = world.daemon(breaker_limit=5, backoff_initial_s=30.0, backoff_max_s=30.0)

    def diagnosed() -> dict[str, Any] | None:
        return next((e for e in d.events("p") if e["name"] == "start.diagnosed"), None)

    ev = wait_for(diagnosed, 60, message="the failed start diagnosed")["fields"]
    assert ev["outcome"] == "failed_shm"
    assert ev["cause"] == "shm"
    assert "--shm-size" in ev["diagnosis"]
    assert "--ipc host" in ev["diagnosis"]
    # not a configuration error: BACKOFF, a retry may follow a fix (the retry itself may have begun by now
    # on a loaded box: the history of states, not the state of this moment)
    states = [e["fields"]["new"] for e in d.events("p") if e["name"] == "state.changed"]
    assert "BACKOFF" in states, states
    assert "FATAL" not in states, states


def test_an_engine_that_dies_on_its_first_request_is_diagnosed_with_the_lines_after_its_death(
    world: World,
) -> None:
    """The simulator dies on the daemon's first generation as the real 0.32 did (fixture 055). The start
    fails on the engine's first death line; the access log's 500 comes a few lines later, and the
    diagnosis, made once the container's last lines are read, says "on its first request"."""
    world.profile(env={"VSIM_SCENARIO": "die_on_first_request", "VSIM_FLAVOR": "v0_32"}, args=ARGS)
    d = world.daemon(breaker_limit=1)
    d.wait_state("p", "FATAL", 60)
    starts = wait_for(lambda: d.call("history", name="p", n=10)["data"]["starts"], 30, message="the row")
    assert [s["outcome"] for s in starts] == ["engine_dead"]
    assert "on its first request" in starts[0]["diagnosis"]
    assert "VllmWorker-0 died unexpectedly" in starts[0]["diagnosis"]
