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
MESSAGES: dict[str, Entry] = {}
#: Field labels (state, reason, diagnosis, container, restarts, breaker, kv pool, at, ...).
LABELS: dict[str, Text] = {}

# ---- the daemon's own life and the daily digest (daemon-wide: profile "supervisor") ------------------
MESSAGES.update(
    {
        "daemon.started": Entry(
            title=Text("supervisor started: {summary}", "监控守护进程已启动：{summary}"),
            todo=Text(
                "nothing to do; each line says what the supervisor found and does for a profile",
                "无需处理；每行说明守护进程对该配置的接管或启动情况",
            ),
        ),
        "daemon.stopped": Entry(
            title=Text(
                "supervisor stopping; the model servers keep running",
                "监控守护进程正在停止；模型服务继续运行",
            ),
            todo=Text(
                "start it again (systemctl start vllm-supervisor): until then nothing watches the servers",
                "请重新启动（systemctl start vllm-supervisor）：在此之前无人监控模型服务",
            ),
        ),
        "daemon.crashed": Entry(
            title=Text(
                "the supervisor was down from {down_from} to {down_to} ({down_for})",
                "监控守护进程在 {down_from} 至 {down_to} 期间未运行（{down_for}）",
            ),
            todo=Text(
                "find out why it died: journalctl -u vllm-supervisor, around {down_from}",
                "排查退出原因：journalctl -u vllm-supervisor，查看 {down_from} 前后的日志",
            ),
        ),
        "digest": Entry(
            title=Text("daily digest: {summary}", "每日摘要：{summary}"),
            todo=Text(
                "nothing to do; a line that is not RUNNING deserves a look",
                "无需处理；不是 RUNNING 的行值得查看",
            ),
        ),
    }
)
