"""Alert messages and chat payloads, pure: the message model, each platform's documented JSON body,
the Feishu/DingTalk signatures and the dedupe decision. No I/O here (the notifier adapter sends).

Free text (reasons, diagnoses, details) is escaped per platform so it can never break the rendering
or ping a whole channel: Telegram HTML entities, Slack ``& < >`` entities inside ``plain_text``,
Discord backslash escapes with mentions disabled, markdown escapes for DingTalk/WeCom, ``plain_text``
for Feishu cards. See docs/alerts.md for the sources of every format.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import html
import re
import urllib.parse
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from supervisor.core.actions import Alert

SEVERITIES: tuple[str, ...] = ("info", "warning", "critical")
_MARKER = {"critical": "🔴 CRITICAL", "warning": "🟠 WARNING", "info": "🟢 INFO"}
_FEISHU_TEMPLATE = {"critical": "red", "warning": "orange", "info": "green"}
_WECOM_COLOR = {"critical": "warning", "warning": "comment", "info": "info"}
DISCORD_COLOR = {"critical": 0xE01E5A, "warning": 0xF2A900, "info": 0x2EB67D}
_WECOM_MAX_BYTES = 4096  # markdown.content limit
_TELEGRAM_MAX = 4096  # sendMessage text limit (after entity parsing)
_DISCORD_CONTENT_MAX = 2000
_DISCORD_TITLE_MAX = 256
_DISCORD_DESC_MAX = 4096
_SLACK_HEADER_MAX = 150
_SLACK_SECTION_MAX = 3000


@dataclass(frozen=True)
class AlertMessage:
    """One alert as a human should read it: a state flip of one profile on one host."""

    profile: str
    severity: str  # "info" | "warning" | "critical"
    title: str
    old_state: str
    new_state: str
    reason: str
    host: str
    at: float  # epoch seconds
    diagnosis: str | None = None
    details: tuple[tuple[str, str], ...] = ()


def message_from_alert(
    profile: str,
    alert: Alert,
    *,
    host: str,
    at: float,
    diagnosis: str | None = None,
    details: tuple[tuple[str, str], ...] = (),
) -> AlertMessage:
    """The :class:`AlertMessage` for a state machine's ``Alert`` action."""
    return AlertMessage(
        profile=profile,
        severity=alert.severity if alert.severity in SEVERITIES else "warning",
        title=alert.title,
        old_state=alert.old_state,
        new_state=alert.new_state,
        reason=alert.reason,
        host=host,
        at=at,
        diagnosis=diagnosis,
        details=details,
    )


# ---- plain text -------------------------------------------------------------------------------------


def iso_local(at: float) -> str:
    """``at`` as ISO 8601 in the host's local time zone, to the second, with its UTC offset."""
    return datetime.fromtimestamp(at).astimezone().isoformat(timespec="seconds")


def one_line(text: str) -> str:
    """``text`` with every run of whitespace (newlines included) collapsed to one space."""
    return " ".join(text.split())


def _headline(msg: AlertMessage) -> str:
    return f"[{one_line(msg.host)}] {one_line(msg.profile)}: {one_line(msg.title)}"


def _transition(msg: AlertMessage) -> str:
    return f"{msg.old_state} -> {msg.new_state}"


def _body_lines(msg: AlertMessage) -> list[tuple[str, str]]:
    """(label, value) rows shown under the headline, unescaped."""
    rows = [("state", _transition(msg)), ("reason", one_line(msg.reason))]
    if msg.diagnosis:
        rows.append(("diagnosis", one_line(msg.diagnosis)))
    rows.extend((one_line(k), one_line(v)) for k, v in msg.details)
    rows.append(("at", iso_local(msg.at)))
    return rows


def render_text(msg: AlertMessage) -> str:
    """A short human message (no markup): marker, headline, transition, reason, diagnosis, time."""
    lines = [f"{_MARKER.get(msg.severity, msg.severity.upper())} {_headline(msg)}", _transition(msg)]
    lines.append(f"reason: {one_line(msg.reason)}")
    if msg.diagnosis:
        lines.append(f"diagnosis: {one_line(msg.diagnosis)}")
    if msg.details:
        lines.append(" · ".join(f"{one_line(k)}: {one_line(v)}" for k, v in msg.details))
    lines.append(f"at {iso_local(msg.at)}")
    return "\n".join(lines)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _clip_bytes(text: str, limit: int) -> str:
    raw = text.encode("utf-8")
    if len(raw) <= limit:
        return text
    return raw[: limit - 3].decode("utf-8", errors="ignore") + "…"


# ---- escaping ---------------------------------------------------------------------------------------

_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>#|~])")


def escape_markdown(text: str) -> str:
    """Backslash-escape the markdown characters that can start markup (emphasis, code, links, HTML,
    headings, tables, strike) in one line of free text; harmless punctuation (``- . ( ) +``) is left
    alone so that timestamps and paths stay readable where a renderer ignores backslashes."""
    return _MD_SPECIAL.sub(r"\\\1", one_line(text))


def escape_slack(text: str) -> str:
    """Slack's control characters ``& < >`` as the HTML entities Slack documents."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def escape_html(text: str) -> str:
    """``& < >`` as entities (what Telegram's HTML parse mode requires outside tags)."""
    return html.escape(text, quote=False)


# ---- signatures -------------------------------------------------------------------------------------


def feishu_sign(timestamp_s: int, secret: str) -> str:
    """Feishu custom bot: base64(HMAC-SHA256(key=f"{timestamp}\\n{secret}", msg=b""))."""
    key = f"{timestamp_s}\n{secret}".encode()
    return base64.b64encode(hmac.new(key, b"", hashlib.sha256).digest()).decode("ascii")


def dingtalk_sign(timestamp_ms: int, secret: str) -> str:
    """DingTalk robot: urlencode(base64(HMAC-SHA256(key=secret, msg=f"{timestamp}\\n{secret}")))."""
    digest = hmac.new(secret.encode(), f"{timestamp_ms}\n{secret}".encode(), hashlib.sha256).digest()
    return urllib.parse.quote_plus(base64.b64encode(digest))


def dingtalk_signed_url(url: str, secret: str, timestamp_ms: int) -> str:
    """``url`` with ``timestamp`` and ``sign`` query parameters appended."""
    sep = "&" if "?" in url else "?"
    return f"{url}{sep}timestamp={timestamp_ms}&sign={dingtalk_sign(timestamp_ms, secret)}"


# ---- payloads ---------------------------------------------------------------------------------------


def feishu_payload(msg: AlertMessage) -> dict[str, Any]:
    """Feishu custom bot interactive card; all free text as ``plain_text`` (nothing to escape)."""
    body = "\n".join(f"{label}: {value}" for label, value in _body_lines(msg))
    return {
        "msg_type": "interactive",
        "card": {
            "config": {"wide_screen_mode": True},
            "header": {
                "template": _FEISHU_TEMPLATE.get(msg.severity, "orange"),
                "title": {"tag": "plain_text", "content": _headline(msg)},
            },
            "elements": [{"tag": "div", "text": {"tag": "plain_text", "content": body}}],
        },
    }


def _markdown_rows(msg: AlertMessage) -> list[str]:
    return [f"**{escape_markdown(label)}**: {escape_markdown(value)}" for label, value in _body_lines(msg)]


def dingtalk_payload(msg: AlertMessage) -> dict[str, Any]:
    """DingTalk robot ``markdown`` message (title shows in the notification, text in the chat)."""
    head = f"### {escape_markdown(_MARKER.get(msg.severity, msg.severity))} {escape_markdown(_headline(msg))}"
    text = "\n\n".join([head, *_markdown_rows(msg)])
    return {"msgtype": "markdown", "markdown": {"title": _clip(_headline(msg), 64), "text": text}}


def wecom_payload(msg: AlertMessage) -> dict[str, Any]:
    """WeCom group robot ``markdown`` message, severity in one of its three font colours."""
    color = _WECOM_COLOR.get(msg.severity, "warning")
    marker = escape_markdown(_MARKER.get(msg.severity, msg.severity))
    head = f'### <font color="{color}">{marker}</font> {escape_markdown(_headline(msg))}'
    content = "\n".join([head, *(f"> {row}" for row in _markdown_rows(msg))])
    return {"msgtype": "markdown", "markdown": {"content": _clip_bytes(content, _WECOM_MAX_BYTES)}}


def slack_payload(msg: AlertMessage) -> dict[str, Any]:
    """Slack incoming webhook: ``text`` (notification fallback) plus header/section/context blocks.

    The header is ``plain_text`` (never parsed); the section is ``mrkdwn`` with ``& < >`` escaped and
    ``verbatim`` (no auto-linking), so a reason cannot ping ``<!channel>`` or forge a link.
    """
    body = "\n".join(f"{label}: {value}" for label, value in _body_lines(msg)[:-1])
    head = f"{_MARKER.get(msg.severity, msg.severity)} {_headline(msg)}"
    return {
        "text": escape_slack(head),
        "blocks": [
            {
                "type": "header",
                "text": {"type": "plain_text", "text": _clip(head, _SLACK_HEADER_MAX)},
            },
            {
                "type": "section",
                "text": {
                    "type": "mrkdwn",
                    "text": _clip(escape_slack(body), _SLACK_SECTION_MAX),
                    "verbatim": True,
                },
            },
            {"type": "context", "elements": [{"type": "plain_text", "text": iso_local(msg.at)}]},
        ],
    }


def discord_payload(msg: AlertMessage) -> dict[str, Any]:
    """Discord webhook: ``content`` line plus one embed coloured by severity; mentions disabled."""
    rows = _body_lines(msg)[:-1]
    return {
        "content": _clip(
            escape_markdown(f"{_MARKER.get(msg.severity, msg.severity)} {_headline(msg)}"),
            _DISCORD_CONTENT_MAX,
        ),
        "embeds": [
            {
                "title": _clip(escape_markdown(_headline(msg)), _DISCORD_TITLE_MAX),
                "description": _clip(
                    "\n".join(f"**{label}**: {escape_markdown(value)}" for label, value in rows),
                    _DISCORD_DESC_MAX,
                ),
                "color": DISCORD_COLOR.get(msg.severity, DISCORD_COLOR["warning"]),
                "timestamp": datetime.fromtimestamp(msg.at).astimezone().isoformat(),
            }
        ],
        "allowed_mentions": {"parse": []},
    }


def telegram_payload(msg: AlertMessage, chat_id: str) -> dict[str, Any]:
    """Telegram Bot API ``sendMessage`` with ``parse_mode: HTML`` (free text entity-escaped)."""
    marker = escape_html(_MARKER.get(msg.severity, msg.severity))
    lines = [f"<b>{marker} {escape_html(_headline(msg))}</b>"]
    lines += [f"<b>{escape_html(label)}</b>: {escape_html(value)}" for label, value in _body_lines(msg)]
    text = "\n".join(lines)
    if len(text) > _TELEGRAM_MAX:  # never cut inside an entity: fall back to the escaped plain text
        text = escape_html(_clip(render_text(msg), _TELEGRAM_MAX // 2))
    return {"chat_id": chat_id, "text": text, "parse_mode": "HTML", "disable_web_page_preview": True}


def generic_payload(msg: AlertMessage) -> dict[str, Any]:
    """Every field as JSON plus the rendered ``text``: for custom receivers and scripts."""
    return {
        "profile": msg.profile,
        "severity": msg.severity,
        "title": msg.title,
        "old_state": msg.old_state,
        "new_state": msg.new_state,
        "reason": msg.reason,
        "diagnosis": msg.diagnosis,
        "host": msg.host,
        "at": msg.at,
        "at_iso": iso_local(msg.at),
        "details": dict(msg.details),
        "text": render_text(msg),
    }


def build_request(
    channel_kind: str,
    url: str,
    secret: str | None,
    chat_id: str | None,
    msg: AlertMessage,
    now: float,
) -> tuple[str, dict[str, Any]]:
    """The (URL, JSON body) to POST for one channel; signs Feishu/DingTalk when a secret is set."""
    match channel_kind:
        case "feishu":
            body = feishu_payload(msg)
            if secret:
                ts = int(now)
                body = {"timestamp": str(ts), "sign": feishu_sign(ts, secret), **body}
            return url, body
        case "dingtalk":
            signed = dingtalk_signed_url(url, secret, int(now * 1000)) if secret else url
            return signed, dingtalk_payload(msg)
        case "wecom":
            return url, wecom_payload(msg)
        case "slack":
            return url, slack_payload(msg)
        case "discord":
            return url, discord_payload(msg)
        case "telegram":
            if not chat_id:
                raise ValueError("a telegram channel needs chat_id")
            return url, telegram_payload(msg, chat_id)
        case "generic":
            return url, generic_payload(msg)
    raise ValueError(f"unknown alert channel kind {channel_kind!r}")


# ---- dedupe -----------------------------------------------------------------------------------------


def dedupe_key(msg: AlertMessage) -> tuple[str, str, str, str, str]:
    """What makes two alerts "identical": profile, severity, title, target state and reason."""
    return (msg.profile, msg.severity, msg.title, msg.new_state, msg.reason)


@dataclass(frozen=True)
class _Last:
    key: tuple[str, str, str, str, str]
    sent_at: float
    suppressed: int = 0


@dataclass(frozen=True)
class DedupeDecision:
    """Whether to send, and how many identical alerts were suppressed before this one."""

    send: bool
    suppressed_before: int = 0


@dataclass(frozen=True)
class Deduper:
    """Drops an alert identical to the *last one sent for the same profile* within ``window_s``.

    So the latest message in the chat always tells the profile's current state (a flip back and
    forth is never swallowed), an identical repeat is delivered at least once per window, and a
    delivered repeat says how many copies were dropped. ``now`` is monotonic seconds.
    """

    window_s: float
    last: tuple[tuple[str, _Last], ...] = field(default=())

    def _get(self, profile: str) -> _Last | None:
        return next((v for p, v in self.last if p == profile), None)

    def _put(self, profile: str, value: _Last) -> Deduper:
        rest = tuple((p, v) for p, v in self.last if p != profile)
        return replace(self, last=(*rest, (profile, value)))

    def decide(self, msg: AlertMessage, now: float) -> tuple[DedupeDecision, Deduper]:
        """The decision for ``msg`` at ``now`` and the deduper that remembers it."""
        key = dedupe_key(msg)
        prev = self._get(msg.profile)
        if prev is not None and prev.key == key and now - prev.sent_at < self.window_s:
            counted = replace(prev, suppressed=prev.suppressed + 1)
            return DedupeDecision(False), self._put(msg.profile, counted)
        before = prev.suppressed if prev is not None and prev.key == key else 0
        return DedupeDecision(True, before), self._put(msg.profile, _Last(key, now))
