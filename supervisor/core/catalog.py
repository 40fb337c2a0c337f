"""The message catalogue, pure: every alert title, "what to do" line and field label in each language.

An ``Alert`` action names its message by ``kind`` (a stable dotted id) and carries the values its
templates fill in (``params``); the renderer (core/alerts.py) picks the text for ``alerts.language``.
"""

from __future__ import annotations

from dataclasses import dataclass

LANGUAGES: tuple[str, ...] = ("en", "zh")


@dataclass(frozen=True)
class Text:
    """One text in every language; ``{name}`` placeholders are filled from the alert's params."""

    en: str
    zh: str

    def get(self, language: str) -> str:
        """The text in ``language`` (English for an unknown one)."""
        return self.zh if language == "zh" else self.en


@dataclass(frozen=True)
class Entry:
    """A message kind: its title and the one-line "what to do" for the operator."""

    title: Text
    todo: Text


#: kind -> entry.
MESSAGES: dict[str, Entry] = {
    # alert delivery (supervisor/core/alert_channels.py): condition alerts:<channel>
    "alerts.failing": Entry(
        title=Text("alert channel {channel} failing: {why}", "告警通道 {channel} 发送失败：{why}"),
        todo=Text(
            "Check the channel's webhook URL, token and the receiving service; every alert it lost is "
            "listed by `supervisorctl events supervisor` (alert.undelivered).",
            "检查该通道的 webhook 地址、令牌和接收服务；丢失的每条告警见 "
            "`supervisorctl events supervisor`（alert.undelivered）。",
        ),
    ),
    "alerts.delivering": Entry(
        title=Text(
            "alert channel {channel} delivering again; {lost} messages were lost meanwhile",
            "告警通道 {channel} 已恢复发送；期间丢失 {lost} 条消息",
        ),
        todo=Text(
            "Read what was lost with `supervisorctl events supervisor` (alert.undelivered).",
            "用 `supervisorctl events supervisor` 查看丢失的告警（alert.undelivered）。",
        ),
    ),
}
#: Field labels (state, reason, diagnosis, container, restarts, breaker, kv pool, at, ...).
LABELS: dict[str, Text] = {}
