"""The message catalogue, pure: every alert title, "what to do" line and field label in each language.

An ``Alert`` action names its message by ``kind`` (a stable dotted id) and carries the values its
templates fill in (``params``); the renderer (core/alerts/view.py) picks the text for
``alerts.language``. Rules (docs/alerts.md "Language and cards"):

- every kind has a title and a one-line "what to do" in English and Chinese; the English title is the
  alert's ``title`` as the history and the logs keep it (built with ``localize.title_en``);
- ``{name}`` placeholders are filled from the params, plus ``{profile}`` and ``{host}``; a missing one
  shows as ``?`` and a broken template falls back to the English title: rendering never fails;
- a param named in ``Entry.phrased`` is a key of :data:`PHRASES` (a fixed phrase, translated);
- reasons, diagnoses and details are evidence and stay verbatim, except the fixed reasons in
  :data:`REASONS`; state names (RUNNING, FATAL, ...) are the CLI's vocabulary and stay as they are.
"""

from __future__ import annotations

from supervisor.core.alerts.catalog_daemon import CONDITION_MESSAGES, DAEMON_MESSAGES
from supervisor.core.alerts.catalog_types import LANGUAGES as LANGUAGES, Entry as Entry, Text as Text


def _e(title_en: str, title_zh: str, todo: Text, *phrased: str) -> Entry:
    return Entry(Text(title_en, title_zh), todo, phrased)


_T = Text
NOTHING = _T("nothing to do", "无需处理")
_RESET = _T(
    "fix the cause (see the diagnosis), then: supervisorctl reset {profile}",
    "按诊断排除故障后执行：supervisorctl reset {profile}",
)
_SELF_HEALS = _T(
    "it restarts by itself; why: supervisorctl logs {profile} --previous",
    "会自动重启；查看原因：supervisorctl logs {profile} --previous",
)
_REDRAW = _T(
    "a restart often draws the same pool: pin it with vLLM's --kv-cache-memory-bytes "
    "(the draws: supervisorctl history {profile})",
    "重启往往分到同样大小的池：用 vLLM 的 --kv-cache-memory-bytes 固定 KV 缓存"
    "（各次分配：supervisorctl history {profile}）",
)

#: kind -> entry.
MESSAGES: dict[str, Entry] = {
    # --- a profile's starts, failures and breaker
    "start.failed": _e(
        "start failed",
        "启动失败",
        _T(
            "it retries after a backoff; if it keeps failing, see the diagnosis",
            "退避后自动重试；若持续失败请查看诊断",
        ),
    ),
    "start.postponed": _e(
        "{what}: start postponed",
        "{what}：推迟启动",
        _T("it retries by itself; if this persists, see the reason", "会自动重试；若持续出现请按原因排查"),
        "what",
    ),
    "container.died": _e("container died", "容器意外退出", _SELF_HEALS),
    "adopt.restart_policy": _e(
        "adopted container has Docker restart policy {policy}",
        "接管的容器设置了 Docker 重启策略 {policy}",
        _T("docker update --restart no {container}", "执行 docker update --restart no {container}"),
    ),
    "emergency.stop": _e("emergency stop", "紧急停止", _SELF_HEALS),
    "breaker.open": _e("circuit breaker open: not restarting", "熔断器已打开：不再自动重启", _RESET),
    "breaker.config_error": _e(
        "configuration error: not retrying",
        "配置错误：不再重试",
        _T(
            "retrying cannot help: fix the profile, then `supervisorctl reset {profile}`",
            "重试无济于事：修正 profile 后执行 `supervisorctl reset {profile}`",
        ),
    ),
    "breaker.same_cause": _e(
        "the same error twice: not retrying",
        "同一错误连续两次：不再重试",
        _T(
            "retrying cannot help: change what raises it (in {where}: the patched file, the flag or the "
            "image), then `supervisorctl reset {profile}`",
            "重试无济于事：修改引发该错误的部分（位于 {where}：补丁文件、参数或镜像），"
            "然后执行 `supervisorctl reset {profile}`",
        ),
    ),
    "engine.death_cause": _e(
        "engine died of: {line}",
        "引擎因此错误退出：{line}",
        _T(
            "raised in {where}; if the same request kills it again, find and stop that request "
            "(supervisorctl history {profile})",
            "位于 {where}；若同一请求再次使其退出，请找出并停止该请求（supervisorctl history {profile}）",
        ),
    ),
    "drift.found": _e(
        "container differs from its profile: {fields}",
        "容器与 profile 不一致：{fields}",
        _T(
            "the next restart applies the profile; if the change was made by hand, put it in the profile",
            "下次重启时按 profile 重建；若为手动修改，请写入 profile",
        ),
    ),
    "drift.cleared": _e("container matches its profile again", "容器已与 profile 一致", NOTHING),
    "breaker.open_at_start": _e(
        "circuit breaker still open after daemon start", "守护进程启动后熔断器仍处于打开状态", _RESET
    ),
    "breaker.still_open": _e("circuit breaker still open", "熔断器仍处于打开状态", _RESET),
    "recovered": _e("recovered: serving again", "模型服务已恢复", NOTHING),
    "smoke.failed": _e(
        "smoke gate {gate} failed (warn): serving anyway",
        "冒烟检查 {gate} 未通过（仅告警）：继续服务",
        _T("check the answers of {profile}; it keeps serving", "检查 {profile} 的回答是否正常；服务仍在运行"),
    ),
    "log.forbidden_marker": _e(
        "forbidden log marker while serving",
        "服务期间日志出现禁止标记",
        _T(
            "read the log around it: supervisorctl logs {profile}",
            "查看前后日志：supervisorctl logs {profile}",
        ),
    ),
    "kernel.while_serving": _e(
        "kernel: {summary} while serving",
        "服务期间内核报错：{summary}",
        _T(
            "if it repeats, check the GPU and host memory (dmesg)",
            "若反复出现，请检查 GPU 与主机内存（dmesg）",
        ),
    ),
    # --- outside stops, Docker
    "container.stopped_externally": _e(
        "container stopped outside the supervisor: now a manual stop",
        "容器被外部停止：按手动停止处理",
        _T(
            "if not intended: supervisorctl start {profile}",
            "如非有意为之，执行：supervisorctl start {profile}",
        ),
    ),
    "docker.restarted": _e(
        "Docker engine restarted: starting the model server again",
        "Docker 引擎已重启：正在重新启动模型服务",
        _T("nothing to do unless it does not come back", "无需处理，除非服务未能恢复"),
    ),
    # --- KV pool
    "kv_pool.lottery": _e("KV pool lottery", "KV 缓存池比往常小", _REDRAW),
    "kv_pool.below_floor": _e("KV pool below floor", "KV 缓存池低于下限", _REDRAW),
    "kv_pool.below_min": _e(
        "KV pool below kv_pool.min_tokens",
        "KV 缓存池低于 kv_pool.min_tokens",
        _T(
            "free host memory or lower kv_pool.min_tokens, then restart {profile}",
            "释放主机内存或调低 kv_pool.min_tokens，然后重启 {profile}",
        ),
    ),
    # --- the host
    "contiguity.start": _e(
        "starting with the host low on contiguous memory",
        "启动时主机连续内存不足",
        _T(
            "schedule a host reboot: restarting {profile} does not give the blocks back, a reboot does",
            "请安排重启主机：重启 {profile} 无法收回这些内存块，只有重启主机可以",
        ),
    ),
    "reserve.low": _e(
        "host memory reserve too small after load",
        "加载后主机内存余量不足",
        _T(
            "free host memory or lower the model's memory share, then restart {profile}",
            "释放主机内存或降低模型的显存占比，然后重启 {profile}",
        ),
    ),
    "state_dir.low": _e(
        "little free space on the state directory",
        "状态目录所在磁盘剩余空间不足",
        _T(
            "free space on the state directory's file system (history, ledgers, flight recorder)",
            "清理状态目录所在文件系统的空间（历史、台账、飞行记录）",
        ),
    ),
    "state_dir.ok": _e("state directory has free space again", "状态目录剩余空间已恢复", NOTHING),
    "host.not_clean": _e(
        "the host is not clean after the container stopped",
        "容器停止后主机未清理干净",
        _T(
            "kill the stale processes listed; the next start waits for memory",
            "结束列出的残留进程；下次启动会等待内存释放",
        ),
    ),
    # --- the API key
    "auth.open": _e(
        "API served without the key (open to the network)",
        "API 未校验密钥即响应（对网络开放）",
        _T(
            "block the port now, then check the api_key setting and restart {profile}",
            "立即封闭端口，检查 api_key 配置后重启 {profile}",
        ),
    ),
    "auth.no_key": _e(
        "no API key configured: the port is open to anyone who can reach it",
        "未配置 API 密钥：任何能访问该端口的人都可调用",
        _T(
            "set api_key in the profile, supervisorctl reload, then restart {profile}",
            "在 profile 中设置 api_key，执行 supervisorctl reload 后重启 {profile}",
        ),
    ),
    "api_key.rotated": _e(
        "API key file changed: restart needed to apply the new key",
        "API 密钥文件已变更：需重启才能生效",
        _T(
            "when convenient: supervisorctl restart {profile} (clients need the new key)",
            "方便时执行 supervisorctl restart {profile}（客户端需改用新密钥）",
        ),
    ),
    # --- config changes, maintenance
    "config.change_failed": _e(
        "the new config failed {failures} times{action}",
        "新配置已连续启动失败 {failures} 次{action}",
        _T(
            "fix or revert the change listed, then: supervisorctl reload",
            "修正或撤回下列配置改动，然后执行：supervisorctl reload",
        ),
        "action",
    ),
    "maintenance.done": _e(
        "maintenance done: KV pool {before} -> {after} tokens",
        "维护完成：KV 缓存池 {before} -> {after} tokens",
        NOTHING,
        "before",
        "after",
    ),
    "maintenance.failed": _e(
        "maintenance restart failed",
        "维护重启失败",
        _T(
            "see the diagnosis; supervisorctl status {profile} tells whether it retries",
            "请查看诊断；supervisorctl status {profile} 可确认是否在重试",
        ),
    ),
    "maintenance.missed": _e(
        "maintenance of {when} missed",
        "错过了 {when} 的维护",
        _T(
            "the next round runs as scheduled; to run one now: supervisorctl maintenance {profile} --now",
            "下一次计划维护照常进行；如需立即维护：supervisorctl maintenance {profile} --now",
        ),
    ),
    "maintenance.skipped": _e(
        "maintenance skipped: not serving",
        "跳过维护：服务未运行",
        _T(
            "if it should run: supervisorctl status {profile}",
            "若应在运行，请查看：supervisorctl status {profile}",
        ),
    ),
    # --- companions
    "companion.failing": _e(
        "companion {name} failing",
        "关联服务 {name} 异常",
        _T(
            "check {name} yourself: the supervisor never restarts it", "请人工检查 {name}：监管程序不会重启它"
        ),
    ),
    "companion.back": _e("companion {name} back", "关联服务 {name} 已恢复", NOTHING),
    # --- the daemon and the alert channels
    "unit.failed": _e(
        "supervisor daemon down: systemd gave up restarting it",
        "监管守护进程宕机：systemd 已放弃重启",
        _T(
            "journalctl -u {unit}; fix it, then systemctl restart {unit}",
            "查看 journalctl -u {unit}；修复后执行 systemctl restart {unit}",
        ),
    ),
    "test": _e("test alert", "测试告警", _T("nothing to do: this channel works", "无需处理：此通道工作正常")),
    # --- a load slower than its config's median (core/machine/loads.py)
    "start.slow_load": _e(
        "load slow: {elapsed} so far, median {median} over {starts} starts",
        "加载偏慢：已用 {elapsed}，中位数 {median}（共 {starts} 次启动）",
        _T(
            "nothing to do yet: a hung load is stopped by itself; watch: supervisorctl logs {profile}",
            "暂无需处理：卡住的加载会被自动停止；查看：supervisorctl logs {profile}",
        ),
    ),
    # --- markers of an adopted container (its start-up log read back)
    "log.marker_missing": _e(
        "expected log marker missing (adopted container)",
        "接管的容器日志缺少预期标记",
        _T(
            "a setting may have done nothing; check, then: supervisorctl restart {profile}",
            "某项设置可能未生效；检查后执行：supervisorctl restart {profile}",
        ),
    ),
    # --- the performance sentinel (docs/sentinel.md)
    "sentinel.slow": _e(
        "SLOW: {message}",
        "变慢（SLOW）：{message}",
        _T(
            "compare the backends and the host's load (supervisorctl history {profile}); "
            "a restart often restores the speed",
            "对比后端与主机负载（supervisorctl history {profile}）；重启往往能恢复速度",
        ),
    ),
    "sentinel.back": _e("speed back: {message}", "速度已恢复：{message}", NOTHING),
    "sentinel.backend_changed": _e(
        "kernel backend changed for the same config: {changes}",
        "同一配置的内核后端发生变化：{changes}",
        _T(
            "check what changed (image, driver, env); the speed: supervisorctl history {profile}",
            "检查镜像、驱动或环境变量的变化；速度见 supervisorctl history {profile}",
        ),
    ),
}

MESSAGES.update(CONDITION_MESSAGES)
MESSAGES.update(DAEMON_MESSAGES)

#: Fixed phrases a message's ``phrased`` params refer to (the key is the value the code passes).
PHRASES: dict[str, Text] = {
    "preflight failed": _T("preflight failed", "预检未通过"),
    "host memory did not settle": _T("host memory did not settle", "主机内存未稳定"),
    "Docker unreachable": _T("Docker unreachable", "Docker 无法连接"),
    "rollback": _T(": rolling back to the last known good", "：回滚到上一个可用配置"),
    "hold": _T("; holding it (on_failed_change: hold)", "；保持新配置（on_failed_change: hold）"),
    "unknown": _T("unknown", "未知"),
}

#: Field labels (lower case, as the code names them).
LABELS: dict[str, Text] = {
    "state": _T("state", "状态"),
    "reason": _T("reason", "原因"),
    "diagnosis": _T("diagnosis", "诊断"),
    "container": _T("container", "容器"),
    "restarts": _T("restarts", "重启次数"),
    "breaker": _T("breaker", "熔断计数"),
    "kv pool": _T("kv pool", "KV 缓存池"),
    "at": _T("at", "时间"),
    "repeats suppressed": _T("repeats suppressed", "已抑制重复"),
    "what to do": _T("what to do", "处理建议"),
    "more": _T("more", "更多"),
    "result": _T("result", "结果"),
    "exit code": _T("exit code", "退出码"),
    "exit status": _T("exit status", "退出状态"),
    "invocation": _T("invocation", "调用 ID"),
}

#: Severity words after the marker emoji.
SEVERITY: dict[str, Text] = {
    "critical": _T("CRITICAL", "严重"),
    "warning": _T("WARNING", "警告"),
    "info": _T("INFO", "信息"),
}

#: Chinese gloss shown after a state name (the name itself stays: it is what `supervisorctl` shows).
STATE_GLOSS_ZH: dict[str, str] = {
    "STOPPED": "已停止",
    "PREFLIGHT": "预检",
    "WAITING": "等待加载",
    "STARTING": "启动中",
    "RUNNING": "运行中",
    "DEGRADED": "降级",
    "DRAINING": "排空中",
    "STOPPING": "停止中",
    "BACKOFF": "退避重试",
    "FATAL": "已熔断",
    "MAINTENANCE": "维护中",
    "ok": "正常",
    "failing": "异常",
    "failed": "失败",
}

#: Reasons the machine writes as fixed phrases (exact match): translated; every other reason is verbatim.
REASONS: dict[str, Text] = {
    t.en: t
    for t in (
        _T("auth open", "不带密钥的请求也被受理"),
        _T("first generation ok", "首次生成正常"),
        _T("smoke gates passed", "冒烟检查通过"),
        _T("smoke gates passed (warnings)", "冒烟检查通过（有告警）"),
        _T("circuit breaker open: run reset", "熔断器已打开：需执行 reset"),
        _T("the last known good spec could not be read", "无法读取上一个可用配置"),
        _T(
            "external docker stop; `supervisorctl start` resumes",
            "外部执行了 docker stop；`supervisorctl start` 可恢复",
        ),
        _T("dockerd stopped the container while shutting down", "dockerd 关闭时停止了该容器"),
        _T(
            "the running server keeps the key it was created with (the probes use it); "
            "`supervisorctl restart` applies the new one",
            "运行中的服务仍使用创建时的密钥（探测也用它）；`supervisorctl restart` 后改用新密钥",
        ),
        _T(
            "supervisorctl test-alert: this channel receives vllm-supervisor alerts",
            "supervisorctl test-alert：此通道可接收 vllm-supervisor 告警",
        ),
    )
}
