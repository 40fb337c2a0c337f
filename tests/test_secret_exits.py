"""The secret book and the exits it guards: what the daemon learns from its config, and the store, the
log processor and the alert sender (a real HTTP receiver on 127.0.0.1) masking with it."""

from __future__ import annotations

import json
from pathlib import Path

from supervisor.adapters.alerts.sender import AlertSender
from supervisor.adapters.secrets import SecretBook
from supervisor.adapters.store.state import Store
from supervisor.config.model import (
    AlertChannel,
    AlertsConfig,
    ApiKeySource,
    CompanionConfig,
    DaemonConfig,
    HeartbeatConfig,
    Profile,
)
from supervisor.core.alerts.message import AlertMessage
from supervisor.core.clock import FakeClock
from supervisor.core.spec.model import ContainerSpec, EnvVar
from supervisor.core.spec.secrets import MASK
from supervisor.daemon.main import masking
from tests.harness import WebhookReceiver

KEY = "key-file-value-8c7b6a"
DB = "db-passwd-value-1f2e3d"
FLAG = "flag-token-value-4a5b6c"
HOOK = "HookTokenPathSegment0123"
SIGN = "signing-secret-9z8y7x"
BEAT = "heartbeat-token-abcdef123456"
COMPANION = "companion-q-token-55"
ALL = (KEY, DB, FLAG, HOOK, SIGN, BEAT, COMPANION)


def _config(tmp: Path) -> DaemonConfig:
    key = tmp / "p.key"
    key.write_text(KEY + "\n", encoding="utf-8")
    profile = Profile(
        name="p",
        source=tmp / "p.yaml",
        container=ContainerSpec(
            name="c",
            image="vllm:1",
            command=("--model", "/m", "--hf-token", FLAG),
            env=(EnvVar("DB_PASSWD", DB), EnvVar("MODEL_PATH", "/models/plain-path")),
        ),
        api_key=ApiKeySource(file=key, inject_env="VLLM_API_KEY"),
        companions=(CompanionConfig("gw", f"http://127.0.0.1:1/ready?access_token={COMPANION}"),),
    )
    channel = AlertChannel(kind="feishu", name="ops", url=f"https://open.example/hook/{HOOK}", secret=SIGN)
    return DaemonConfig(
        path=tmp / "daemon.yaml",
        state_dir=tmp / "state",
        socket_path=tmp / "s.sock",
        restore_dir=tmp / "restore",
        profiles=(profile,),
        alerts=AlertsConfig(channels=(channel,)),
        heartbeat=HeartbeatConfig(url=f"https://hc.example/ping/{BEAT}"),
    )


def _book(tmp: Path) -> SecretBook:
    book = SecretBook()
    book.learn_config(_config(tmp))
    return book


def test_the_book_learns_every_secret_of_the_config(tmp_path: Path) -> None:
    """Env and flag secrets, the key file's content, webhook/heartbeat tokens, the signing secret, a
    companion's token: each is masked in any text; plain values are not."""
    book = _book(tmp_path)
    text = " | ".join(f"crashed near {v}!" for v in ALL) + " | /models/plain-path"
    masked = book.text(text)
    assert [v for v in ALL if v in masked] == []
    assert masked.count(MASK) == len(ALL)
    assert masked.endswith("/models/plain-path")


def test_store_appends_are_masked(tmp_path: Path) -> None:
    """events.jsonl and starts.jsonl never hold a known value, whatever field carries it."""
    book = _book(tmp_path)
    store = Store(tmp_path / "state", FakeClock(), redact=book.data)
    store.append_event({"name": "x", "profile": "p", "fields": {"error": f"docker: bad env DB_PASSWD={DB}"}})
    store.append_start({"profile": "p", "outcome": "failed", "cause": f"engine said {KEY}", "n": 3})
    written = (tmp_path / "state" / "events.jsonl").read_text() + (
        tmp_path / "state" / "starts.jsonl"
    ).read_text()
    assert DB not in written
    assert KEY not in written
    assert store.read_starts("p")[0]["n"] == 3
    assert json.loads((tmp_path / "state" / "events.jsonl").read_text())["fields"]["error"].endswith(MASK)


def test_log_lines_are_masked_with_their_traceback(tmp_path: Path) -> None:
    """The structlog processor masks every value, the formatted exception included."""
    mask = masking(_book(tmp_path).data)
    line = mask(
        None, "error", {"event": "effect.crashed", "error": f"401 for {KEY}", "exception": f"Trace\n{FLAG}"}
    )
    assert line == {"event": "effect.crashed", "error": f"401 for {MASK}", "exception": f"Trace\n{MASK}"}


def test_an_alert_payload_carries_no_known_secret(tmp_path: Path, webhook: WebhookReceiver) -> None:
    """A crash text with the key, a diff line with the flag value: masked before the POST."""
    book = _book(tmp_path)
    channel = AlertChannel(kind="generic", name="hook", url=f"{webhook.url}/generic/x")
    sender = AlertSender((channel,), 0.0, FakeClock(), 5.0, host="thor", backoff_s=(0.01,), redact=book.data)
    msg = AlertMessage(
        "p",
        "critical",
        "daemon crashed",
        "RUNNING",
        "FAILED",
        f"RuntimeError: bad key {KEY}",
        "thor",
        1.79e9,
        details=(
            ("command", f"new ['--hf-token', '{FLAG}'], last known good ['--hf-token', 'old-flag-value']"),
        ),
    )
    assert sender.send(msg)
    assert sender.close(10)
    body = webhook.wait_for_count(1)[0].body.decode("utf-8")
    assert "daemon crashed" in body
    assert [v for v in (KEY, FLAG, "old-flag-value") if v in body] == []
