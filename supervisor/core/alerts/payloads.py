"""Each chat platform's documented JSON body for an alert card, and the Feishu/DingTalk signatures;
pure (the sender adapter does the I/O). Sources of every format: docs/alerts.md.

Every card carries its severity colour where the platform has one (Feishu header template, DingTalk and
WeCom ``<font color>``, a Slack attachment's colour bar, a Discord embed colour; Telegram and the plain
text have the marker emoji) and the one-line "what to do". Free text (reasons, diagnoses, details) is
escaped per platform so it can never break the rendering or ping a whole channel: Telegram HTML
entities, Slack ``& < >`` entities, Discord backslash escapes with mentions disabled, markdown escapes
for DingTalk/WeCom, ``plain_text`` for Feishu cards.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import html
import re
import urllib.parse
from datetime import datetime
from typing import Any

from supervisor.core.alerts.message import AlertMessage, iso_local, one_line
from supervisor.core.alerts.view import Card, card, clip, render_text, title, todo

_FEISHU_TEMPLATE = {"critical": "red", "warning": "orange", "info": "green"}
_WECOM_COLOR = {"critical": "warning", "warning": "comment", "info": "info"}  # WeCom's three colours
HEX_COLOR = {"critical": "#E01E5A", "warning": "#F2A900", "info": "#2EB67D"}
DISCORD_COLOR = {k: int(v[1:], 16) for k, v in HEX_COLOR.items()}
_WECOM_MAX_BYTES = 4096  # markdown.content limit
_TELEGRAM_MAX = 4096  # sendMessage text limit (after entity parsing)
_DISCORD_CONTENT_MAX = 2000
_DISCORD_TITLE_MAX = 256
_DISCORD_DESC_MAX = 4096
_DINGTALK_TITLE_MAX = 64
_SLACK_TEXT_MAX = 150
_SLACK_SECTION_MAX = 3000
TODO_MARK = "👉"


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


def feishu_payload(msg: AlertMessage, language: str = "en") -> dict[str, Any]:
    """Feishu custom bot interactive card: header in the severity's colour, then ``plain_text`` divs
    (nothing to escape): the rows, the "what to do", the time."""
    c = card(msg, language)
    texts = ["\n".join(c.lines()), f"{TODO_MARK} {c.todo_line()}" if c.todo else "", c.at_line()]
    return {
        "msg_type": "interactive",
        "card": {
            "config": {"wide_screen_mode": True},
            "header": {
                "template": _FEISHU_TEMPLATE.get(msg.severity, "orange"),
                "title": {"tag": "plain_text", "content": c.headline},
            },
            "elements": [{"tag": "div", "text": {"tag": "plain_text", "content": t}} for t in texts if t],
        },
    }


def _markdown_lines(c: Card) -> list[str]:
    """Rows, what to do and time as markdown lines (values escaped; labels are ours)."""
    rows = [
        f"**{escape_markdown(label)}**{c.sep()}{escape_markdown(value)}" if label else escape_markdown(value)
        for label, value in c.rows
    ]
    if c.todo:
        rows.append(
            f"{TODO_MARK} **{escape_markdown(c.label('what to do'))}**{c.sep()}{escape_markdown(c.todo)}"
        )
    rows.append(f"**{escape_markdown(c.label('at'))}**{c.sep()}{escape_markdown(c.at)}")
    return rows


def dingtalk_payload(msg: AlertMessage, language: str = "en") -> dict[str, Any]:
    """DingTalk robot ``markdown``: the title shows in the notification, the text in the chat, the
    marker in the severity's colour (``<font color=#RRGGBB>``, unquoted: the mobile client needs that)."""
    c = card(msg, language)
    color = HEX_COLOR.get(msg.severity, HEX_COLOR["warning"])
    head = f"### <font color={color}>{escape_markdown(c.marker)}</font> {escape_markdown(c.headline)}"
    text = "\n\n".join([head, *_markdown_lines(c)])
    return {
        "msgtype": "markdown",
        "markdown": {"title": clip(f"{c.marker} {c.headline}", _DINGTALK_TITLE_MAX), "text": text},
    }


def wecom_payload(msg: AlertMessage, language: str = "en") -> dict[str, Any]:
    """WeCom group robot ``markdown``, the marker in one of its three font colours, rows quoted."""
    c = card(msg, language)
    color = _WECOM_COLOR.get(msg.severity, "warning")
    head = f'### <font color="{color}">{escape_markdown(c.marker)}</font> {escape_markdown(c.headline)}'
    content = "\n".join([head, *(f"> {row}" for row in _markdown_lines(c))])
    return {"msgtype": "markdown", "markdown": {"content": _clip_bytes(content, _WECOM_MAX_BYTES)}}


def slack_payload(msg: AlertMessage, language: str = "en") -> dict[str, Any]:
    """Slack incoming webhook: ``text`` (the headline, also the notification) and one attachment in the
    severity's colour holding a ``mrkdwn`` section (rows, what to do) and a context block (time).

    ``& < >`` are escaped everywhere and the section is ``verbatim`` (no auto-linking), so a reason cannot
    ping ``<!channel>`` or forge a link.
    """
    c = card(msg, language)
    body = [*c.lines(), f"{TODO_MARK} {c.todo_line()}" if c.todo else ""]
    return {
        "text": escape_slack(clip(f"{c.marker} {c.headline}", _SLACK_TEXT_MAX)),
        "attachments": [
            {
                "color": HEX_COLOR.get(msg.severity, HEX_COLOR["warning"]),
                "blocks": [
                    {
                        "type": "section",
                        "text": {
                            "type": "mrkdwn",
                            "text": clip(escape_slack("\n".join(b for b in body if b)), _SLACK_SECTION_MAX),
                            "verbatim": True,
                        },
                    },
                    {"type": "context", "elements": [{"type": "plain_text", "text": c.at}]},
                ],
            }
        ],
    }


def discord_payload(msg: AlertMessage, language: str = "en") -> dict[str, Any]:
    """Discord webhook: ``content`` line plus one embed coloured by severity; mentions disabled."""
    c = card(msg, language)
    rows = [
        f"**{label}**{c.sep()}{escape_markdown(value)}" if label else escape_markdown(value)
        for label, value in c.rows
    ]
    if c.todo:
        rows.append(f"{TODO_MARK} **{c.label('what to do')}**{c.sep()}{escape_markdown(c.todo)}")
    return {
        "content": clip(escape_markdown(f"{c.marker} {c.headline}"), _DISCORD_CONTENT_MAX),
        "embeds": [
            {
                "title": clip(escape_markdown(c.headline), _DISCORD_TITLE_MAX),
                "description": clip("\n".join(rows), _DISCORD_DESC_MAX),
                "color": DISCORD_COLOR.get(msg.severity, DISCORD_COLOR["warning"]),
                "timestamp": datetime.fromtimestamp(msg.at).astimezone().isoformat(),
            }
        ],
        "allowed_mentions": {"parse": []},
    }


def telegram_payload(msg: AlertMessage, chat_id: str, language: str = "en") -> dict[str, Any]:
    """Telegram Bot API ``sendMessage`` with ``parse_mode: HTML`` (free text entity-escaped)."""
    c = card(msg, language)
    lines = [f"<b>{escape_html(c.marker)} {escape_html(c.headline)}</b>"]
    lines += [
        f"<b>{escape_html(label)}</b>{c.sep()}{escape_html(value)}" if label else escape_html(value)
        for label, value in c.rows
    ]
    if c.todo:
        lines.append(f"{TODO_MARK} <b>{escape_html(c.label('what to do'))}</b>{c.sep()}{escape_html(c.todo)}")
    lines.append(escape_html(c.at_line()))
    text = "\n".join(lines)
    if len(text) > _TELEGRAM_MAX:  # never cut inside an entity: fall back to the escaped plain text
        text = escape_html(clip(render_text(msg, language), _TELEGRAM_MAX // 2))
    return {"chat_id": chat_id, "text": text, "parse_mode": "HTML", "disable_web_page_preview": True}


def generic_payload(msg: AlertMessage, language: str = "en") -> dict[str, Any]:
    """Every field as JSON (``title`` the English one, reason and details whole), the catalogue kind
    and params, and the card in ``language``: ``display_title``, ``todo`` and the plain ``text``."""
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
        "kind": msg.kind,
        "params": dict(msg.params),
        "language": language,
        "display_title": title(msg, language),
        "todo": todo(msg, language),
        "text": render_text(msg, language),
    }


def build_request(
    channel_kind: str,
    url: str,
    secret: str | None,
    chat_id: str | None,
    msg: AlertMessage,
    now: float,
    language: str = "en",
) -> tuple[str, dict[str, Any]]:
    """The (URL, JSON body) to POST for one channel, in ``language``; signs Feishu/DingTalk when a
    secret is set."""
    match channel_kind:
        case "feishu":
            body = feishu_payload(msg, language)
            if secret:
                ts = int(now)
                body = {"timestamp": str(ts), "sign": feishu_sign(ts, secret), **body}
            return url, body
        case "dingtalk":
            signed = dingtalk_signed_url(url, secret, int(now * 1000)) if secret else url
            return signed, dingtalk_payload(msg, language)
        case "wecom":
            return url, wecom_payload(msg, language)
        case "slack":
            return url, slack_payload(msg, language)
        case "discord":
            return url, discord_payload(msg, language)
        case "telegram":
            if not chat_id:
                raise ValueError("a telegram channel needs chat_id")
            return url, telegram_payload(msg, chat_id, language)
        case "generic":
            return url, generic_payload(msg, language)
    raise ValueError(f"unknown alert channel kind {channel_kind!r}")
