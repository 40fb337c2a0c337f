"""Issue 13's walk, end to end: the real daemon (a subprocess) on the simulator, alerts to real receivers
on 127.0.0.1, one channel in English (generic JSON) and one in Chinese (a Feishu card), plus a channel
whose receiver is down.

fail -> FATAL (breaker limit 1) -> `reset` -> RUNNING, then a maintenance restart: each raised message
reaches both channels, and so does exactly one resolved message per raised one, in each language; the
dead channel leaves `alert.undelivered` events that `events supervisor` shows."""

from __future__ import annotations

from typing import Any

from supervisor.core.alerts.catalog import MESSAGES
from tests.harness import WaitTimeout, WebhookReceiver, free_port, wait_for, webhook_receiver
from tests.sim_world import World

#: (raised kind, the kind resolving it) for each condition the walk goes through.
PAIRS = (
    ("container.died", "recovered"),  # serving: down -> serving again (or emergency.stop: the test says)
    ("breaker.open", "breaker.reset"),  # breaker: open -> reset by the operator
    ("maintenance.started", "maintenance.done"),
)


def _generic(recv: WebhookReceiver) -> list[dict[str, Any]]:
    return [r.json() for r in recv.received() if r.path.startswith("/en/")]


def _feishu_titles(recv: WebhookReceiver) -> list[str]:
    return [r.json()["card"]["header"]["title"]["content"] for r in recv.received()]


def _zh_head(kind: str) -> str:
    """The fixed start of a kind's Chinese title (before its first placeholder; never empty)."""
    head = MESSAGES[kind].title.zh.split("{")[0].strip()
    assert head, kind
    return head


def _kinds(recv: WebhookReceiver, profile: str) -> list[str]:
    return [b["kind"] for b in _generic(recv) if b["profile"] == profile]


def test_fail_fatal_reset_running_and_maintenance_are_told_raised_and_resolved(world: World) -> None:
    with webhook_receiver() as en, webhook_receiver() as zh:
        zh.response_body = b'{"code": 0, "msg": "success"}'  # what Feishu answers
        dead = f"http://127.0.0.1:{free_port()}/dead/TOKEN-d1"
        world.profile()
        d = world.daemon(
            breaker_limit=1,
            extra={
                "alerts": {
                    "language": "en",
                    "channels": [
                        {"kind": "generic", "name": "ops-en", "url": f"{en.url}/en/TOKEN-e1"},
                        {
                            "kind": "feishu",
                            "name": "ops-zh",
                            "url": f"{zh.url}/zh/TOKEN-z1",
                            "language": "zh",
                        },
                        {"kind": "generic", "name": "dead", "url": dead},
                    ],
                }
            },
        )
        first = d.wait_state("p", "RUNNING", 60)["container_id"]

        world.container().kill()  # SIGKILL from outside: a crash; one failure opens the breaker (limit 1)
        st = d.wait_state("p", "FATAL", 60)
        assert st["breaker"]["state"] == "open"
        # the daemon's judgement of the crash: Docker's die event (container.died), or, on a loaded box
        # whose dockerd is slow to tell, the probe rounds that met the refused port (emergency.stop; seen in
        # a whole-suite run): either is the serving condition that "recovered" resolves
        judged = [e["name"] for e in d.events("p") if e["name"] in ("container.exited", "emergency.stop")]
        assert judged, "neither a container exit nor an emergency stop was recorded"
        died = "emergency.stop" if judged[0] == "emergency.stop" else "container.died"
        reply = d.call("reset", name="p")
        assert reply["ok"], reply
        d.wait_recovered("p", first, 60)
        second = d.status("p")["container_id"]
        reply = d.call("maintenance", name="p")
        assert reply["ok"], reply
        d.wait_recovered("p", second, 90)

        pairs = ((died, PAIRS[0][1]), *PAIRS[1:])
        wanted = [k for pair in pairs for k in pair]
        try:
            wait_for(lambda: set(wanted) <= set(_kinds(en, "p")), 90, message=f"every kind of {wanted}")
        except WaitTimeout as exc:
            raise AssertionError(f"{exc}; received in English: {_kinds(en, 'p')}") from exc
        kinds = _kinds(en, "p")
        for raised, resolved in pairs:
            assert kinds.count(resolved) == 1, (resolved, kinds)  # one resolved per raised
            assert kinds.index(raised) < kinds.index(resolved), kinds
        reset = next(b for b in _generic(en) if b["kind"] == "breaker.reset")
        assert "root (uid 0)" in reset["title"]  # who reset it: the control socket's peer credentials
        assert reset["language"] == "en"
        recovered = next(b for b in _generic(en) if b["kind"] == "recovered")
        assert "down for" in recovered["text"]  # the resolved message says how long it lasted

        def zh_titles_complete() -> bool:
            titles = _feishu_titles(zh)
            return all(any(_zh_head(k) in t for t in titles) for k in wanted)

        wait_for(zh_titles_complete, 90, message="every kind in Chinese on the Feishu card")
        titles = _feishu_titles(zh)
        assert sum(_zh_head("breaker.reset") in t for t in titles) == 1
        assert not any(MESSAGES["breaker.reset"].title.en.split("{")[0] in t for t in titles)  # not English

        def undelivered() -> list[dict[str, Any]]:
            return [e for e in d.events("supervisor") if e["name"] == "alert.undelivered"]

        lost = wait_for(
            lambda: [e for e in undelivered() if e["fields"]["channel"] == "dead"],
            120,
            message="alert.undelivered for the dead channel",
        )
        assert lost[0]["fields"]["reason"] == "retries_exhausted"
        assert "TOKEN-d1" not in str(lost)
