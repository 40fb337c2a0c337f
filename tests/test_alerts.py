"""Pure tests of supervisor.core.alerts.message: payload shapes, signatures, escaping, dedupe."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import urllib.parse
from datetime import datetime

import pytest

from supervisor.core.actions import Alert
from supervisor.core.alerts.message import AlertMessage, Deduper, iso_local, message_from_alert
from supervisor.core.alerts.payloads import (
    DISCORD_COLOR,
    build_request,
    dingtalk_sign,
    dingtalk_signed_url,
    escape_markdown,
    feishu_sign,
)
from supervisor.core.alerts.view import render_text
from supervisor.core.clock import FakeClock

AT = 1_790_000_000.0
NASTY = "KV <b>pool</b> & *stars* _under_ [x](http://evil) <!channel> @everyone `tick` #h\nsecond line"


def _msg(**kw: object) -> AlertMessage:
    base: dict[str, object] = {
        "profile": "qwen",
        "severity": "critical",
        "title": "circuit breaker open",
        "old_state": "BACKOFF",
        "new_state": "FATAL",
        "reason": "3 emergencies in 7200 s",
        "host": "thor",
        "at": AT,
        "diagnosis": "driver out of memory at start (NV_ERR_NO_MEMORY)",
        "details": (("container", "vllm-qwen"), ("restarts", "3")),
    }
    base.update(kw)
    return AlertMessage(**base)  # type: ignore[arg-type]


# ---- text -------------------------------------------------------------------------------------------


def test_render_text_has_marker_headline_transition_reason_diagnosis_time() -> None:
    """The plain text carries every part a human needs, one per line."""
    text = render_text(_msg())
    lines = text.splitlines()
    assert lines[0] == "🔴 CRITICAL [thor] qwen: circuit breaker open"
    assert lines[1] == "state: BACKOFF -> FATAL"
    assert lines[2] == "reason: 3 emergencies in 7200 s"
    assert lines[3] == "diagnosis: driver out of memory at start (NV_ERR_NO_MEMORY)"
    assert lines[4] == "container: vllm-qwen · restarts: 3"
    assert lines[5] == "at: " + datetime.fromtimestamp(AT).astimezone().isoformat(timespec="seconds")
    assert len(lines) == 6  # no catalogue kind: no "what to do"


def test_render_text_omits_missing_diagnosis_and_flattens_newlines() -> None:
    """No diagnosis line when there is none; a multi-line reason stays on its line."""
    text = render_text(_msg(diagnosis=None, details=(), reason="a\nb\n\nc", severity="info"))
    assert text.splitlines()[0].startswith("🟢 INFO ")
    assert "diagnosis" not in text
    assert "reason: a b c" in text.splitlines()


def test_iso_local_carries_offset() -> None:
    """The time is ISO 8601 with the local UTC offset, parseable back to the same instant."""
    assert datetime.fromisoformat(iso_local(AT)).timestamp() == AT


def test_message_from_alert_copies_the_transition() -> None:
    """An Alert action becomes a message with host, time and diagnosis filled in."""
    alert = Alert("warning", "probe failing", "RUNNING", "DEGRADED", "2/5 probes failed")
    msg = message_from_alert("p", alert, host="h", at=AT, diagnosis="d", details=(("k", "v"),))
    assert msg == AlertMessage("p", "warning", "probe failing", "RUNNING", "DEGRADED", "2/5 probes failed",
                               "h", AT, "d", (("k", "v"),))  # fmt: skip
    kinded = Alert("warning", "t", "RUNNING", "RUNNING", "r", kind="smoke.failed", params=(("gate", "g"),))
    msg = message_from_alert("p", kinded, host="h", at=AT)
    assert (msg.kind, msg.params) == ("smoke.failed", (("gate", "g"),))


# ---- signatures -------------------------------------------------------------------------------------


def test_feishu_sign_matches_openssl_vector() -> None:
    """Feishu: key = "<ts>\\n<secret>", empty message; vector from `openssl dgst -sha256 -hmac`."""
    # printf '' | openssl dgst -sha256 -hmac $'1599360473\ntest-secret' -binary | base64
    assert feishu_sign(1599360473, "test-secret") == "wSds2BzzFIIGf/WrhUO+NI1q/9j+FRJd3JNHKAq0NZY="


def test_dingtalk_sign_matches_openssl_vector_urlencoded() -> None:
    """DingTalk: key = secret, message = "<ts_ms>\\n<secret>", base64 then URL-encoded."""
    # printf '%s' $'1577262236757\nthis is secret' \
    #   | openssl dgst -sha256 -hmac 'this is secret' -binary | base64
    expected = "hmPWwU+7lVdm3ZZz0r9tSfx0L4Q26jWOZr9+Gs6EZQM="
    assert dingtalk_sign(1577262236757, "this is secret") == urllib.parse.quote_plus(expected)
    assert (
        dingtalk_sign(1577262236757, "this is secret") == "hmPWwU%2B7lVdm3ZZz0r9tSfx0L4Q26jWOZr9%2BGs6EZQM%3D"
    )


def test_dingtalk_signed_url_appends_query_parameters() -> None:
    """timestamp (ms) and sign are appended with & to a URL that already has ?access_token=."""
    url = dingtalk_signed_url("http://127.0.0.1:9/robot/send?access_token=T", "S", 1700000000123)
    parsed = urllib.parse.urlsplit(url)
    query = urllib.parse.parse_qs(parsed.query)
    assert query["access_token"] == ["T"]
    assert query["timestamp"] == ["1700000000123"]
    mac = hmac.new(b"S", b"1700000000123\nS", hashlib.sha256).digest()
    assert query["sign"] == [base64.b64encode(mac).decode()]  # parse_qs undoes the URL encoding


# ---- payloads ---------------------------------------------------------------------------------------


def test_feishu_payload_signed_card() -> None:
    """Feishu: interactive card, red header for critical, plain_text body, timestamp+sign when signed."""
    url, body = build_request("feishu", "http://127.0.0.1:1/hook/x", "sec", None, _msg(), now=1_700_000_000.7)
    assert url == "http://127.0.0.1:1/hook/x"
    assert body["timestamp"] == "1700000000"
    assert body["sign"] == feishu_sign(1_700_000_000, "sec")
    assert body["msg_type"] == "interactive"
    card = body["card"]
    assert card["header"] == {
        "template": "red",
        "title": {"tag": "plain_text", "content": "[thor] qwen: circuit breaker open"},
    }
    rows, at = card["elements"]  # no catalogue kind: no "what to do" div
    assert {rows["tag"], at["tag"]} == {"div"}
    assert {rows["text"]["tag"], at["text"]["tag"]} == {"plain_text"}
    assert "state: BACKOFF -> FATAL" in rows["text"]["content"]
    assert "diagnosis: driver out of memory" in rows["text"]["content"]
    assert at["text"]["content"] == f"at: {iso_local(AT)}"
    _, body = build_request("feishu", "http://127.0.0.1:1/", None, None, _msg(kind="breaker.open"), AT)
    todo = body["card"]["elements"][1]["text"]["content"]
    assert todo == "👉 what to do: fix the cause (see the diagnosis), then: supervisorctl reset qwen"


def test_feishu_payload_unsigned_has_no_sign() -> None:
    """Without a secret no timestamp/sign keys are sent."""
    _, body = build_request("feishu", "http://127.0.0.1:1/h", None, None, _msg(severity="info"), now=AT)
    assert "sign" not in body
    assert "timestamp" not in body
    assert body["card"]["header"]["template"] == "green"


def test_dingtalk_payload_markdown_and_signed_url() -> None:
    """DingTalk: markdown msgtype with title and text; signature in the URL only."""
    url, body = build_request(
        "dingtalk", "http://127.0.0.1:1/robot/send?access_token=t", "s", None, _msg(), AT
    )
    assert url.startswith("http://127.0.0.1:1/robot/send?access_token=t&timestamp=1790000000000&sign=")
    assert set(body) == {"msgtype", "markdown"}
    assert body["msgtype"] == "markdown"
    assert body["markdown"]["title"] == "🔴 CRITICAL [thor] qwen: circuit breaker open"
    head = "### <font color=#E01E5A>🔴 CRITICAL</font> \\[thor\\] qwen: circuit breaker open"
    assert body["markdown"]["text"].startswith(head)
    assert "**reason**: 3 emergencies in 7200 s" in body["markdown"]["text"]


def test_dingtalk_unsigned_url_unchanged() -> None:
    """Without a secret the URL is used as given."""
    url, _ = build_request("dingtalk", "http://127.0.0.1:1/r?access_token=t", None, None, _msg(), AT)
    assert url == "http://127.0.0.1:1/r?access_token=t"


def test_wecom_payload_markdown_with_colour() -> None:
    """WeCom: markdown.content with a <font color> marker and quoted rows."""
    _, body = build_request(
        "wecom", "http://127.0.0.1:1/send?key=k", None, None, _msg(severity="warning"), AT
    )
    assert body["msgtype"] == "markdown"
    content = body["markdown"]["content"]
    assert content.startswith('### <font color="comment">🟠 WARNING</font> ')
    assert "> **state**: BACKOFF -\\> FATAL" in content
    assert "> container: vllm-qwen · restarts: 3" in content  # the details: one line


def test_wecom_content_bounded_to_4096_bytes() -> None:
    """A huge reason is cut so that markdown.content stays within WeCom's 4096-byte limit."""
    _, body = build_request("wecom", "http://127.0.0.1:1/", None, None, _msg(reason="界" * 5000), AT)
    assert len(body["markdown"]["content"].encode("utf-8")) <= 4096


def test_slack_payload_text_and_coloured_attachment() -> None:
    """Slack: the headline as text, then one attachment in the severity's colour holding a mrkdwn
    section (verbatim) and a context block with the time."""
    _, body = build_request("slack", "http://127.0.0.1:1/services/x", None, None, _msg(), AT)
    assert body["text"] == "🔴 CRITICAL [thor] qwen: circuit breaker open"
    assert "blocks" not in body  # the headline is said once
    (attachment,) = body["attachments"]
    assert attachment["color"] == "#E01E5A"
    section, context = attachment["blocks"]
    assert section["type"] == "section"
    assert section["text"]["type"] == "mrkdwn"
    assert section["text"]["verbatim"] is True
    assert section["text"]["text"].splitlines()[0] == "state: BACKOFF -&gt; FATAL"
    assert context == {"type": "context", "elements": [{"type": "plain_text", "text": iso_local(AT)}]}


def test_slack_headline_limited_to_150_chars() -> None:
    """A long title is clipped to 150 characters on a phone's line."""
    _, body = build_request("slack", "http://127.0.0.1:1/", None, None, _msg(title="t" * 400), AT)
    assert len(body["text"]) == 150


def test_discord_payload_embed_coloured_no_mentions() -> None:
    """Discord: content line, one embed with severity colour and ISO timestamp, mentions disabled."""
    _, body = build_request("discord", "http://127.0.0.1:1/api/webhooks/1/x", None, None, _msg(), AT)
    assert body["allowed_mentions"] == {"parse": []}
    assert body["content"] == "🔴 CRITICAL \\[thor\\] qwen: circuit breaker open"
    (embed,) = body["embeds"]
    assert embed["color"] == DISCORD_COLOR["critical"] == 0xE01E5A
    assert embed["title"] == "\\[thor\\] qwen: circuit breaker open"
    assert datetime.fromisoformat(embed["timestamp"]).timestamp() == AT
    assert "**reason**: 3 emergencies in 7200 s" in embed["description"]
    warn = build_request("discord", "http://127.0.0.1:1/", None, None, _msg(severity="warning"), AT)[1]
    assert warn["embeds"][0]["color"] == DISCORD_COLOR["warning"] != DISCORD_COLOR["critical"]


def test_telegram_payload_html() -> None:
    """Telegram: chat_id, HTML text with bold headline, parse_mode HTML."""
    url, body = build_request("telegram", "http://127.0.0.1:1/botT/sendMessage", None, "-100123", _msg(), AT)
    assert url == "http://127.0.0.1:1/botT/sendMessage"
    assert body["chat_id"] == "-100123"
    assert body["parse_mode"] == "HTML"
    assert body["text"].splitlines()[0] == "<b>🔴 CRITICAL [thor] qwen: circuit breaker open</b>"
    assert "<b>state</b>: BACKOFF -&gt; FATAL" in body["text"]


def test_telegram_needs_chat_id() -> None:
    """A telegram channel without chat_id cannot build a request."""
    with pytest.raises(ValueError, match="chat_id"):
        build_request("telegram", "http://127.0.0.1:1/", None, None, _msg(), AT)


def test_generic_payload_has_every_field() -> None:
    """Generic: every field as JSON plus the rendered text."""
    _, body = build_request("generic", "http://127.0.0.1:1/", None, None, _msg(), AT)
    assert body == {
        "profile": "qwen",
        "severity": "critical",
        "title": "circuit breaker open",
        "old_state": "BACKOFF",
        "new_state": "FATAL",
        "reason": "3 emergencies in 7200 s",
        "diagnosis": "driver out of memory at start (NV_ERR_NO_MEMORY)",
        "host": "thor",
        "at": AT,
        "at_iso": iso_local(AT),
        "details": {"container": "vllm-qwen", "restarts": "3"},
        "kind": "",
        "params": {},
        "language": "en",
        "display_title": "circuit breaker open",
        "todo": "",
        "text": render_text(_msg()),
    }
    json.dumps(body)  # serialisable as is
    msg = _msg(kind="smoke.failed", params=(("gate", "math"),))
    _, body = build_request("generic", "http://127.0.0.1:1/", None, None, msg, AT, "zh")
    assert body["title"] == "circuit breaker open"  # the English title, as the history keeps it
    assert (body["kind"], body["params"], body["language"]) == ("smoke.failed", {"gate": "math"}, "zh")
    assert body["display_title"] == "冒烟检查 math 未通过（仅告警）：继续服务"
    assert body["todo"] == "检查 qwen 的回答是否正常；服务仍在运行"
    assert body["text"] == render_text(msg, "zh")


def test_unknown_kind_refused() -> None:
    """An unknown channel kind is a programming error, not a silent no-op."""
    with pytest.raises(ValueError, match="unknown"):
        build_request("pager", "http://127.0.0.1:1/", None, None, _msg(), AT)


# ---- escaping ---------------------------------------------------------------------------------------


def test_escape_markdown_neutralises_markup() -> None:
    """Markdown punctuation is backslash-escaped and newlines flattened."""
    assert escape_markdown("*a* _b_ [c](d) #e\nf") == "\\*a\\* \\_b\\_ \\[c\\](d) \\#e f"


def test_nasty_reason_cannot_break_any_platform() -> None:
    """A reason full of markup stays literal: no raw tag, ping, link or extra line in any payload."""
    msg = _msg(reason=NASTY, diagnosis=None, details=())
    tg = build_request("telegram", "http://127.0.0.1:1/", None, "1", msg, AT)[1]["text"]
    assert "<b>pool</b>" not in tg
    assert "&lt;b&gt;pool&lt;/b&gt; &amp; *stars*" in tg
    assert "<!channel>" not in tg
    slack = build_request("slack", "http://127.0.0.1:1/", None, None, msg, AT)[1]
    section = slack["attachments"][0]["blocks"][0]["text"]["text"]
    assert "<!channel>" not in section
    assert "&lt;!channel&gt;" in section
    assert "&amp; *stars*" in section
    assert "reason: KV" in section  # the newline in the reason did not start a new row
    assert "\nsecond line" not in section
    disc = build_request("discord", "http://127.0.0.1:1/", None, None, msg, AT)[1]
    desc = disc["embeds"][0]["description"]
    assert "\\*stars\\*" in desc
    assert "\\[x\\](http://evil)" in desc
    assert "\\<!channel\\>" in desc
    assert disc["allowed_mentions"] == {"parse": []}
    for kind in ("dingtalk", "wecom"):
        body = build_request(kind, "http://127.0.0.1:1/", None, None, msg, AT)[1]["markdown"]
        text = body.get("text", body.get("content"))
        assert "\\<b\\>pool\\</b\\>" in text
        assert "\\_under\\_" in text
        assert "\\#h second line" in text
    feishu = build_request("feishu", "http://127.0.0.1:1/", None, None, msg, AT)[1]
    assert feishu["card"]["elements"][0]["text"]["tag"] == "plain_text"  # shown literally
    assert NASTY.replace("\n", " ") in feishu["card"]["elements"][0]["text"]["content"]


# ---- dedupe -----------------------------------------------------------------------------------------


def test_identical_alert_dropped_within_window_then_sent_with_count() -> None:
    """A repeat within the window is dropped; after it the repeat goes out saying how many were dropped."""
    clock = FakeClock()
    d = Deduper(900.0)
    first, d = d.decide(_msg(), clock.monotonic())
    assert first.send
    clock.advance(100)
    second, d = d.decide(_msg(), clock.monotonic())
    clock.advance(100)
    third, d = d.decide(_msg(), clock.monotonic())
    assert not second.send
    assert not third.send
    clock.advance(700)  # 900 s after the first send
    fourth, d = d.decide(_msg(), clock.monotonic())
    assert fourth.send
    assert fourth.suppressed_before == 2
    clock.advance(1)
    fifth, _ = d.decide(_msg(), clock.monotonic())
    assert not fifth.send


def test_state_flip_back_and_forth_never_dropped() -> None:
    """The chat's latest message always matches the current state: A, B, A, B all go out."""
    clock = FakeClock()
    d = Deduper(900.0)
    down = _msg(severity="warning", title="degraded", old_state="RUNNING", new_state="DEGRADED", reason="r")
    up = _msg(severity="info", title="recovered", old_state="DEGRADED", new_state="RUNNING", reason="r")
    sent = []
    for m in (down, up, down, up):
        decision, d = d.decide(m, clock.monotonic())
        sent.append(decision.send)
        clock.advance(10)
    assert sent == [True, True, True, True]


def test_dedupe_is_per_profile_and_per_reason() -> None:
    """Another profile, or another reason, is a different alert."""
    d = Deduper(900.0)
    a, d = d.decide(_msg(), 0.0)
    b, d = d.decide(_msg(profile="other"), 1.0)
    c, d = d.decide(_msg(reason="4 emergencies"), 2.0)
    e, _ = d.decide(_msg(profile="other"), 3.0)
    assert (a.send, b.send, c.send, e.send) == (True, True, True, False)


def test_zero_window_never_drops() -> None:
    """dedupe_s 0 disables dedupe."""
    d = Deduper(0.0)
    a, d = d.decide(_msg(), 5.0)
    b, _ = d.decide(_msg(), 5.0)
    assert a.send
    assert b.send
