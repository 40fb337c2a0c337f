"""The KV-pool lottery end to end: the real daemon, simulator containers on the real Docker engine, the
start ledger, a real webhook receiver, and ``supervisorctl history`` over the real socket.

The simulator draws its pool per start from ``VSIM_KV_TOKENS`` in order (``VSIM_KV_SEQUENCE_FILE``, a
counter in a directory mounted into every container of the test), so the field sequence is replayed:
1,013,816 three times, then 557,599.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from supervisor.cli.main import main as cli_main
from tests.conftest import Resources
from tests.daemon_harness import DaemonProc, ProfileSpec, write_daemon_config, write_profile
from tests.harness import WebhookReceiver, unique_name, wait_for
from tools.images import SIM_HASH_LABEL, ensure_sim_image, sim_hash

pytestmark = [pytest.mark.docker, pytest.mark.slow]

BIG, SMALL = 1_013_816, 557_599
LOTTERY = "KV pool lottery: 557,599 tokens, baseline 1,013,816 (-45 %)"
ARGS = ["--model", "/models/sim", "--served-model-name", "sim-model", "--gpu-memory-utilization", "0.73"]


@pytest.fixture
def private_sim_image(base_image: str, docker_client: docker.DockerClient) -> Iterator[str]:
    """The simulator image of THIS checkout under a private tag (the shared tag may be rebuilt by another
    checkout mid-test: a new image id would rightly start a new baseline and spoil the sequence)."""
    tag = f"vllm-supervisor-sim:{unique_name('kv')}"
    for _ in range(3):
        image = docker_client.images.get(ensure_sim_image())
        if image.labels.get(SIM_HASH_LABEL) == sim_hash(base_image):
            image.tag(tag)
            break
    else:
        pytest.fail("the simulator image kept being rebuilt from another checkout")
    try:
        yield tag
    finally:
        # still used by a container being removed: the tag stays (the image is shared anyway)
        with contextlib.suppress(docker.errors.APIError):
            docker_client.images.remove(tag)


def _daemon(
    tmp: Path,
    res: Resources,
    image: str,
    kv: dict[str, Any],
    tokens: str,
    extra: dict[str, Any],
    env: dict[str, str] | None = None,
) -> tuple[DaemonProc, ProfileSpec]:
    seq_dir = tmp / "kvseq"
    seq_dir.mkdir()
    spec = ProfileSpec(
        name="p",
        container=res.name("kv"),
        image=image,
        args=[*ARGS, "--port", "8000"],
        env={"VSIM_KV_TOKENS": tokens, "VSIM_KV_SEQUENCE_FILE": "/kvseq/count", **(env or {})},
        extra_container={"mounts": [f"{seq_dir}:/kvseq"]},
        extra={"kv_pool": kv},
    )
    config = write_daemon_config(tmp, [write_profile(tmp, spec, res.test_id)], extra=extra)
    d = DaemonProc(config, tmp)
    d.start()
    return d, spec


def _alerts(webhook: WebhookReceiver) -> list[dict[str, Any]]:
    return [r.json() for r in webhook.received() if r.path.startswith("/alert/")]


def _history_text(d: DaemonProc) -> str:
    """``supervisorctl history p`` run in this process over the daemon's real socket: its text is what is
    checked here, and a second interpreter's start-up only adds a wait on a loaded box (a CI run once saw
    one take over 30 s)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli_main(["--socket", str(d.socket), "history", "p"])
    assert code == 0
    return out.getvalue()


def test_fourth_start_draws_the_small_pool_and_alerts(
    tmp_path: Path, resources: Resources, private_sim_image: str, webhook: WebhookReceiver
) -> None:
    """1,013,816 x3 then 557,599: the 4th start alerts against the median of the 3 earlier ones."""
    channels = [{"kind": "generic", "name": "ops", "url": f"{webhook.url}/alert/x"}]
    d, _ = _daemon(
        tmp_path,
        resources,
        private_sim_image,
        {"warn_drop_pct": 20},
        f"{BIG},{BIG},{BIG},{SMALL}",
        {"alerts": {"channels": channels}},
    )
    try:
        st = d.wait_state("p", "RUNNING", 60)
        for _ in range(3):
            assert d.call("restart", name="p")["ok"]
            st = d.wait_recovered("p", st["container_id"], 60)
        assert st["kv_pool"]["tokens"] == SMALL
        assert st["kv_pool"]["baseline_tokens"] == BIG  # the earlier starts only
        assert st["breaker"]["emergencies"] == 0
        got = wait_for(
            lambda: [a for a in _alerts(webhook) if a["reason"] == LOTTERY], 20, message="lottery alert"
        )
        assert got[0]["severity"] == "warning"
        assert got[0]["title"] == "KV pool lottery"
        assert LOTTERY in got[0]["text"]
        lottery = [e for e in d.events("p") if e["name"] == "kv_pool.lottery"]
        assert [e["fields"]["message"] for e in lottery] == [LOTTERY]
        assert len([a for a in _alerts(webhook) if "KV pool" in a["title"]]) == 1

        rows = d.call("history", name="p", n=10)["data"]["starts"]
        assert [(r["outcome"], r["kv_tokens"]) for r in rows] == [("ready", BIG)] * 3 + [("ready", SMALL)]
        image_id = str(resources.client.images.get(private_sim_image).id)
        for r in rows:
            assert r["image_id"] == image_id
            assert r["gmu"] == 0.73
            assert r["model_gib"] == 15.27
            assert r["kv_gib"] == round(r["kv_tokens"] * 16384 / 2**30, 2)
            assert r["max_concurrency"] == round(r["kv_tokens"] / 32768, 2)
            assert r["load_s"] > 0
            assert r["mem_available_gib"] > 0
        assert len({r["fingerprint"] for r in rows}) == 1
        assert rows[0]["fingerprint"]
        print("\n".join(str(r) for r in rows))
        text = _history_text(d)
        print(text)
        assert "KV pool  ███▅" in text
        assert image_id.removeprefix("sha256:")[:12] in text
        assert rows[0]["fingerprint"] in text
    finally:
        d.close()


def test_a_small_pool_is_redrawn_once_then_served(
    tmp_path: Path, resources: Resources, private_sim_image: str
) -> None:
    """min_tokens: the first (small) start is stopped and drawn again, outside the breaker; then it serves."""
    d, _ = _daemon(
        tmp_path,
        resources,
        private_sim_image,
        {"min_tokens": 900_000, "max_redraws": 2},
        f"{SMALL},{BIG}",
        {},
    )
    try:
        st = d.wait_state("p", "RUNNING", 90)  # the first start never serves: it is redrawn while loading
        assert st["kv_pool"]["tokens"] == BIG
        assert st["breaker"] == {**st["breaker"], "state": "closed", "emergencies": 0}
        assert st["kv_pool"]["redraws"] == 0
        rows = d.call("history", name="p", n=10)["data"]["starts"]
        print("\n".join(str(r) for r in rows))
        assert [(r["outcome"], r["kv_tokens"]) for r in rows] == [("redrawn", SMALL), ("ready", BIG)]
        assert rows[0]["max_concurrency"] == round(SMALL / 32768, 2)
        assert rows[0]["fingerprint"] == rows[1]["fingerprint"]
        names = d.event_names("p")
        assert names.count("kv_pool.redraw") == 1
        assert "breaker.opened" not in names
        assert "start.failed" not in names
        assert "start.diagnosed" not in names
    finally:
        d.close()


def test_redraws_give_up_after_max_redraws_and_serve(
    tmp_path: Path, resources: Resources, private_sim_image: str, webhook: WebhookReceiver
) -> None:
    """A minimum never met: one redraw (max_redraws 1), then the pool is served with a warning."""
    channels = [{"kind": "generic", "name": "ops", "url": f"{webhook.url}/alert/x"}]
    d, _ = _daemon(
        tmp_path,
        resources,
        private_sim_image,
        {"min_tokens": 900_000, "max_redraws": 1},
        f"{SMALL},{SMALL}",
        {"alerts": {"channels": channels}},
    )
    try:
        wait_for(lambda: "kv_pool.redraw_gave_up" in d.event_names("p"), 90, message="give-up event")
        st = d.wait_state("p", "RUNNING", 60)
        assert st["breaker"]["emergencies"] == 0
        assert st["kv_pool"]["tokens"] == SMALL
        want = (
            "KV pool below kv_pool.min_tokens after 1 redraws: 557,599 tokens, minimum 900,000; "
            "serving anyway"
        )
        got = wait_for(lambda: [a for a in _alerts(webhook) if a["reason"] == want], 20, message="alert")
        assert got[0]["severity"] == "warning"
        rows = d.call("history", name="p", n=10)["data"]["starts"]
        assert [r["outcome"] for r in rows] == ["redrawn", "ready"]
    finally:
        d.close()


def test_pin_apply_pins_the_next_start_at_the_best_draw(
    tmp_path: Path, resources: Resources, private_sim_image: str
) -> None:
    """vLLM 0.32 shape: 200,000 then 100,000 tokens; the bad draw's alert names the part that grew (none
    here: the simulator's breakdown is the same) and the pin; the restart runs with --kv-cache-memory-bytes
    (status PIN), the simulator sizes its pool from it; history shows each start's breakdown."""
    best, bad = 200_000, 100_000
    env = {"VSIM_FLAVOR": "v0_32", "VSIM_WEIGHTS_GIB": "0.5"}  # small non-KV memory: the reserve cap is real
    d, _ = _daemon(tmp_path, resources, private_sim_image, {"pin": "apply"}, f"{best},{bad}", {}, env)
    try:
        st = d.wait_state("p", "RUNNING", 60)
        assert st["kv_pool"]["usage"]["consumed"] == round(0.5 + 0.57, 2)
        assert d.call("restart", name="p")["ok"]
        st = d.wait_recovered("p", st["container_id"], 60)
        lottery = wait_for(
            lambda: [e for e in d.events("p") if e["name"] == "kv_pool.lottery"], 20, message="lottery event"
        )
        fields = lottery[0]["fields"]
        pin = fields["pin_bytes"]
        assert fields["message"].startswith(
            "KV pool lottery: 100,000 tokens, baseline 200,000 (-50 %); next starts use"
        )
        assert f"--kv-cache-memory-bytes {pin} " in fields["message"]
        assert fields["grew"] is None
        assert st["kv_pool"]["pin"] == {"bytes": pin, "running": False}
        per_token = (
            round(bad * 16384 / 2**30, 2) * 2**30 / bad
        )  # from vLLM's rounded "Available KV cache memory"
        assert pin == int(best * per_token // 2**20) * 2**20
        assert d.call("restart", name="p")["ok"]
        st = d.wait_recovered("p", st["container_id"], 60)
        assert st["kv_pool"]["pin"] == {"bytes": pin, "running": True}
        assert st["kv_pool"]["tokens"] == pin // 16384 // 16 * 16 >= best
        assert "kv_pool.pin_applied" in d.event_names("p")
        cmd = resources.client.containers.get(st["container_id"]).attrs["Config"]["Cmd"]
        assert cmd[-2:] == ["--kv-cache-memory-bytes", str(pin)]
        rows = d.call("history", name="p", n=10)["data"]["starts"]
        assert [r["kv_tokens"] for r in rows[:2]] == [best, bad]
        assert rows[0]["usage"]["activation"] == 3.1
        assert (
            "usage" not in rows[2] or "consumed" not in rows[2]["usage"]
        )  # pinned: vLLM prints no breakdown
        text = _history_text(d)
        assert "ACTUAL USAGE" in text
        assert "consumed 1.07 / activation 3.1 / graphs 0.95 GiB" in text
    finally:
        d.close()
