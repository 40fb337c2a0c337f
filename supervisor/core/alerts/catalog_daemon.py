"""The catalogue's entries for raised/resolved conditions and the daemon's own messages (daemon-wide:
profile "supervisor"): docs/alerts.md "Raised and resolved", "The daemon's own life"."""

from __future__ import annotations

from supervisor.core.alerts.catalog_types import Entry, Text

#: kind -> entry (merged into catalog.MESSAGES).
CONDITION_MESSAGES: dict[str, Entry] = {
    # ---- raised/resolved conditions (core/alerts/conditions.py; docs/alerts.md "Raised and resolved") ----
    "breaker.reset": Entry(
        title=Text("circuit breaker reset by {by}", "熔断器已由 {by} 复位"),
        todo=Text(
            "nothing: the profile starts again if it should run; watch that it stays up",
            "无需操作：应运行的配置会重新启动；请留意它能否持续运行",
        ),
    ),
    "auth.enforced": Entry(
        title=Text("API key enforced again", "API 密钥已重新生效"),
        todo=Text("nothing: requests without the key are refused", "无需操作：不带密钥的请求已被拒绝"),
    ),
    "reserve.ok": Entry(
        title=Text("host memory reserve ok again", "主机内存余量已恢复正常"),
        todo=Text("nothing: the host keeps its memory reserve", "无需操作：主机保有足够的内存余量"),
    ),
    "maintenance.started": Entry(
        title=Text(
            "maintenance restart begun: KV pool {kv_before} tokens", "维护重启开始：KV 池 {kv_before} tokens"
        ),
        todo=Text(
            "nothing: requests drain, the server restarts and is smoke-tested; "
            "a done or failed message follows",
            "无需操作：请求排空后服务重启并冒烟测试；随后会发送完成或失败消息",
        ),
    ),
    "maintenance.cancelled": Entry(
        title=Text("maintenance restart cancelled: {why}", "维护重启已取消：{why}"),
        todo=Text(
            "check why it was stopped; run `supervisorctl maintenance --now` to retry",
            "确认停止的原因；如需重试请运行 `supervisorctl maintenance --now`",
        ),
    ),
    "degraded": Entry(
        title=Text("degraded: a probe failed", "服务降级：探测失败"),
        todo=Text(
            "nothing yet: the probes continue; more failures in a row stop and restart the server",
            "暂无需操作：探测继续进行；连续失败达到阈值会停止并重启服务",
        ),
    ),
    "docker.down": Entry(
        title=Text("Docker not answering", "Docker 无响应"),
        todo=Text(
            "check the engine: `systemctl status docker`, `journalctl -u docker`; "
            "nothing can be started or stopped meanwhile",
            "检查 Docker 引擎：`systemctl status docker`、`journalctl -u docker`；期间无法启动或停止任何容器",
        ),
    ),
    "contiguity.low": Entry(
        title=Text("host low on contiguous memory", "主机连续内存不足"),
        todo=Text(
            "schedule a reboot of the host: a restart of the model does not give the blocks back, a reboot "
            "does (GB10 hosts wedged with none left)",
            "请安排重启主机：重启模型无法收回这些内存块，只有重启主机可以（GB10 主机曾在耗尽时卡死）",
        ),
    ),
    "contiguity.ok": Entry(
        title=Text("host contiguous memory ok again", "主机连续内存已恢复正常"),
        todo=Text(
            "nothing: the host has free contiguous memory again", "无需操作：主机已重新有可用的连续内存"
        ),
    ),
    "docker.up": Entry(
        title=Text("Docker answering again", "Docker 已恢复响应"),
        todo=Text("nothing: supervision goes on", "无需操作：监管继续进行"),
    ),
    # alert delivery (supervisor/core/alerts/channels.py): condition alerts:<channel>
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
DAEMON_MESSAGES: dict[str, Entry] = {
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
    "daemon.internal_error": Entry(
        title=Text(
            "internal error in the supervisor's {where}: {error}", "监控守护进程内部错误（{where}）：{error}"
        ),
        todo=Text(
            "supervision goes on; report it with the traceback: journalctl -u vllm-supervisor | grep -A30 "
            "daemon.internal_error",
            "监控仍在继续；请附上回溯信息报告此问题：journalctl -u vllm-supervisor | grep -A30 "
            "daemon.internal_error",
        ),
    ),
    "metrics.port_taken": Entry(
        title=Text("metrics port {listen} is taken by another process", "指标端口 {listen} 被其他进程占用"),
        todo=Text(
            "find it (ss -ltnp | grep {listen}) and stop it: a scraper may be reading its numbers, not ours; "
            "the supervisor binds as soon as the port is free",
            "找到并停止该进程（ss -ltnp | grep {listen}）：抓取端读到的可能不是本守护进程的指标；"
            "端口释放后会自动绑定",
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
