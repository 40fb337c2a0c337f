"""The message catalogue: every kind in both languages on every platform's payload, the catalogue's own
consistency, safe rendering, and that the code uses exactly the kinds the catalogue has."""

from __future__ import annotations

import ast
import html
import json
import re
import string
from pathlib import Path
from typing import Any

import pytest

from supervisor.core.alerts import localize
from supervisor.core.alerts.catalog import LABELS, LANGUAGES, MESSAGES, PHRASES, REASONS, SEVERITY
from supervisor.core.alerts.message import AlertMessage
from supervisor.core.alerts.payloads import (
    DISCORD_COLOR,
    HEX_COLOR,
    build_request,
    escape_html,
    escape_markdown,
    escape_slack,
)
from supervisor.core.alerts.view import HEADLINE_MAX, ROW_MAX, card, render_text

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "supervisor"
PLATFORMS = ("feishu", "dingtalk", "wecom", "slack", "discord", "telegram", "generic")
AT = 1_790_000_000.0
#: Kinds the other branches of issue 13 use once they land (conditions, lifecycle, undelivered alerts):
#: remove a kind from here when its first use is merged (test_every_catalogue_kind_is_used says which).
NEW_KINDS_PENDING: frozenset[str] = frozenset()
#: Kinds the code passes as a value, not a literal: where that value comes from.
DYNAMIC_KINDS = {
    "kv_pool.lottery": PKG / "core" / "vllm" / "kv_pool.py",  # machine/lottery.py: kind = the verdict's event
    "kv_pool.below_floor": PKG / "core" / "vllm" / "kv_pool.py",
    "state_dir.low": PKG / "core" / "fleet" / "step.py",  # state_dir_space: kind = low or ok
    "state_dir.ok": PKG / "core" / "fleet" / "step.py",
}
#: Sample values of the ``phrased`` params (each a key of PHRASES).
PHRASE_SAMPLES = {"what": "Docker unreachable", "action": "hold", "before": "unknown", "after": "unknown"}
#: Platform limits (docs/alerts.md "Platform formats").
DINGTALK_TITLE_MAX = 64
WECOM_MAX_BYTES = 4096
SLACK_TEXT_MAX, SLACK_SECTION_MAX = 150, 3000
DISCORD_CONTENT_MAX, DISCORD_TITLE_MAX, DISCORD_DESC_MAX = 2000, 256, 4096
TELEGRAM_MAX = 4096
#: A phone screen: the plain text of a card with the longest inputs stays under this.
PHONE_MAX = 1000
#: English labels that must not show up in a Chinese card ("label:" at a line start or after " · ").
ENGLISH_LABEL = re.compile(
    r"(^|[\s>*·(])(state|reason|diagnosis|container|restarts|breaker|kv pool|at|what to do|"
    r"repeats suppressed|result|exit code|exit status)(\*\*|</b>)?\s*[:：]",
    re.IGNORECASE | re.MULTILINE,
)
CJK = re.compile(r"[\u4e00-\u9fff]")


def placeholders(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name}


def sample_params(kind: str) -> tuple[tuple[str, str], ...]:
    entry = MESSAGES[kind]
    names = set().union(
        *(placeholders(t) for t in (entry.title.en, entry.title.zh, entry.todo.en, entry.todo.zh))
    )
    names -= {"profile", "host"}
    return tuple((n, PHRASE_SAMPLES[n] if n in entry.phrased else f"v{n}") for n in sorted(names))


def message(kind: str, severity: str = "critical", **kw: Any) -> AlertMessage:
    params = sample_params(kind) if kind in MESSAGES else ()
    base: dict[str, Any] = {
        "profile": "qwen",
        "severity": severity,
        "title": localize.title_en(kind, params),
        "old_state": "BACKOFF",
        "new_state": "FATAL",
        "reason": "r-1",
        "host": "thor",
        "at": AT,
        "diagnosis": "d-1",
        "details": (("container", "vllm-qwen"), ("restarts", "3"), ("breaker", "3/3"), ("kv pool", "-")),
        "kind": kind,
        "params": params,
    }
    base.update(kw)
    return AlertMessage(**base)


def visible(platform: str, body: dict[str, Any]) -> list[str]:
    """The texts a platform shows (unescaped markup stays: the checks escape what they look for)."""
    match platform:
        case "feishu":
            card_ = body["card"]
            return [card_["header"]["title"]["content"], *(e["text"]["content"] for e in card_["elements"])]
        case "dingtalk":
            return [body["markdown"]["title"], body["markdown"]["text"]]
        case "wecom":
            return [body["markdown"]["content"]]
        case "slack":
            blocks = body["attachments"][0]["blocks"]
            return [body["text"], blocks[0]["text"]["text"], blocks[1]["elements"][0]["text"]]
        case "discord":
            embed = body["embeds"][0]
            return [body["content"], embed["title"], embed["description"]]
        case "telegram":
            return [body["text"]]
    return [body["text"]]


def escaped(platform: str, text: str) -> str:
    """``text`` as the platform's payload carries it."""
    if platform in ("dingtalk", "wecom", "discord"):
        return escape_markdown(text)
    if platform == "slack":
        return escape_slack(text)
    if platform == "telegram":
        return escape_html(text)
    return text


def check_limits(platform: str, body: dict[str, Any]) -> None:
    match platform:
        case "dingtalk":
            assert len(body["markdown"]["title"]) <= DINGTALK_TITLE_MAX
        case "wecom":
            assert len(body["markdown"]["content"].encode()) <= WECOM_MAX_BYTES
        case "slack":
            assert len(html.unescape(body["text"])) <= SLACK_TEXT_MAX  # a phone line (no platform limit)
            assert len(body["attachments"][0]["blocks"][0]["text"]["text"]) <= SLACK_SECTION_MAX
        case "discord":
            embed = body["embeds"][0]
            assert len(body["content"]) <= DISCORD_CONTENT_MAX
            assert len(embed["title"]) <= DISCORD_TITLE_MAX
            assert len(embed["description"]) <= DISCORD_DESC_MAX
        case "telegram":
            assert len(body["text"]) <= TELEGRAM_MAX


def check_colour(platform: str, severity: str, body: dict[str, Any]) -> None:
    """The severity's colour is in the payload where the platform has colours."""
    match platform:
        case "feishu":
            assert (
                body["card"]["header"]["template"]
                == {"critical": "red", "warning": "orange", "info": "green"}[severity]
            )
        case "dingtalk":
            assert f"<font color={HEX_COLOR[severity]}>" in body["markdown"]["text"]
        case "wecom":
            colour = {"critical": "warning", "warning": "comment", "info": "info"}[severity]
            assert body["markdown"]["content"].startswith(f'### <font color="{colour}">')
        case "slack":
            assert body["attachments"][0]["color"] == HEX_COLOR[severity]
        case "discord":
            assert body["embeds"][0]["color"] == DISCORD_COLOR[severity]


# ---- every kind x language x platform ---------------------------------------------------------------


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("language", LANGUAGES)
@pytest.mark.parametrize("kind", sorted(MESSAGES))
def test_every_kind_renders_in_every_language_on_every_platform(
    kind: str, language: str, platform: str
) -> None:
    """The title and the "what to do" in the language, labels in the language, colour, limits, JSON."""
    severity = ("critical", "warning", "info")[sorted(MESSAGES).index(kind) % 3]
    msg = message(kind, severity)
    expected_title = localize.title(kind, msg.params, language, msg.title, profile="qwen", host="thor")
    todo = localize.todo(kind, msg.params, language, profile="qwen", host="thor")
    assert "?" not in expected_title + todo  # every placeholder had its param
    _, body = build_request(platform, "http://127.0.0.1:1/x", None, "-100", msg, AT, language)
    assert json.loads(json.dumps(body, ensure_ascii=False)) == body
    texts = "\n".join(visible(platform, body))
    assert escaped(platform, expected_title) in texts
    assert escaped(platform, todo) in texts
    assert escaped(platform, localize.severity_word(severity, language)) in texts or platform in (
        "feishu",  # the header's colour says it
        "generic",
    )
    if platform == "generic":
        assert (body["display_title"], body["todo"], body["language"]) == (expected_title, todo, language)
        assert body["title"] == msg.title  # English, as the history keeps it
    for label in ("state", "reason", "diagnosis", "container", "restarts", "what to do"):
        assert escaped(platform, localize.label(label, language)) in texts
    if language == "zh":
        assert ENGLISH_LABEL.search(texts) is None, ENGLISH_LABEL.findall(texts)
        assert "FATAL（已熔断）" in texts  # the state name stays, glossed
    check_limits(platform, body)
    check_colour(platform, severity, body)


@pytest.mark.parametrize("language", LANGUAGES)
def test_english_card_title_is_the_history_title(language: str) -> None:
    """Built with title_en, an alert's ``title`` is the catalogue's English title: en cards say exactly
    what the history says."""
    for kind in MESSAGES:
        msg = message(kind)
        if language == "en":
            assert card(msg, language).headline == f"[thor] qwen: {msg.title}"
        else:
            assert msg.title not in card(msg, language).headline, kind


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("language", LANGUAGES)
def test_huge_inputs_stay_within_limits_and_a_phone_screen(language: str, platform: str) -> None:
    """Kilobytes of reason, diagnosis, details and params: every platform limit holds, the card is cut."""
    big = "界x<>&*_" * 800
    params = tuple((n, big) for n, _ in sample_params("kernel.while_serving"))
    msg = message(
        "kernel.while_serving",
        reason=big,
        diagnosis=big,
        details=tuple((f"k{i}", big) for i in range(20)),
        params=params,
    )
    _, body = build_request(platform, "http://127.0.0.1:1/x", None, "-100", msg, AT, language)
    check_limits(platform, body)
    assert len(render_text(msg, language)) <= PHONE_MAX
    c = card(msg, language)
    assert len(c.headline) <= HEADLINE_MAX
    assert all(len(value) <= ROW_MAX for _, value in c.rows)
    if platform == "generic":
        assert body["reason"] == big  # the evidence stays whole where a script reads it


def test_typical_critical_alert_is_a_few_short_lines() -> None:
    """The docs' example: seven lines, none wider than a kernel line on a card."""
    for language in LANGUAGES:
        text = render_text(message("breaker.open"), language)
        assert len(text.splitlines()) == 7
        assert len(text) < 400


# ---- the catalogue itself ---------------------------------------------------------------------------


def test_both_languages_use_the_same_placeholders_and_are_translated() -> None:
    """zh and en of every text name the same params; every zh text is Chinese, every en text is not."""
    for kind, entry in MESSAGES.items():
        for text in (entry.title, entry.todo):
            assert placeholders(text.en) == placeholders(text.zh), kind
            assert text.en.strip(), kind
            assert CJK.search(text.zh), (kind, text.zh)
            assert not CJK.search(text.en), (kind, text.en)
            assert localize.try_fill(text.en, {}) is not None, kind  # well-formed
        assert entry.title.en == entry.title.en.strip()
        assert set(entry.phrased) <= placeholders(entry.title.en) | placeholders(entry.todo.en), kind
        assert set(entry.phrased) <= set(PHRASE_SAMPLES), f"{kind}: add a sample of its phrased param"
    for table in (LABELS, SEVERITY, PHRASES, REASONS):
        for key, text in table.items():
            assert CJK.search(text.zh), key
            assert not CJK.search(text.en), key
    assert all(key == text.en for key, text in LABELS.items())
    assert all(key == text.en for key, text in REASONS.items())


def test_every_chinese_text_has_its_traditional_chinese_line() -> None:
    """zh-TW (issue 38): every zh text of every message, label, severity, phrase, reason and state gloss
    has its line in catalog_tw.py, with the same placeholders, in Traditional characters (no common
    Simplified-only character left), and rendering in zh-TW uses it."""
    from supervisor.core.alerts.catalog import STATE_GLOSS_ZH
    from supervisor.core.alerts.catalog_tw import ZH_TW

    texts = [t for e in MESSAGES.values() for t in (e.title, e.todo)]
    texts += [t for table in (LABELS, SEVERITY, PHRASES, REASONS) for t in table.values()]
    chinese = [t.zh for t in texts] + list(STATE_GLOSS_ZH.values())
    simplified_only = set("启动状态诊断无处设备时间请检该说这会网络连续测试")
    for zh in chinese:
        assert zh in ZH_TW, f"add the zh-TW line of {zh!r} to supervisor/core/alerts/catalog_tw.py"
        tw = ZH_TW[zh]
        assert placeholders(tw) == placeholders(zh), zh
        assert not set(tw) & simplified_only, (zh, tw)
    for t in texts:
        assert t.get("zh-TW") == ZH_TW[t.zh]
    assert localize.state("FATAL", "zh-TW") == "FATAL（已熔斷）"
    assert set(ZH_TW) <= set(chinese), "catalog_tw.py has lines no catalogue text uses"


def test_missing_params_and_broken_templates_never_fail() -> None:
    """A missing param shows as ?; a malformed template falls back to the English title; unknown kinds
    render their title as it is and have no "what to do"."""
    for kind in MESSAGES:
        for language in LANGUAGES:
            msg = message(kind, params=())
            assert render_text(msg, language)
            for platform in PLATFORMS:
                build_request(platform, "http://127.0.0.1:1/", None, "1", msg, AT, language)
    assert localize.title("smoke.failed", (), "en", "x") == "smoke gate ? failed (warn): serving anyway"
    assert localize.try_fill("{a", {}) is None
    assert localize.try_fill("{a.__class__} {a[0]} {0} {b:>3}", {"a": "v", "b": "z"}) == "? ? ?   z"
    assert localize.title("no.such.kind", (), "zh", "the title") == "the title"
    assert localize.todo("no.such.kind", (), "zh") == ""
    unknown = message("no.such.kind", title="some title", params=())
    assert card(unknown, "zh").headline == "[thor] qwen: some title"
    assert card(unknown, "zh").todo == ""


def test_fixed_reasons_and_phrases_are_translated_evidence_is_not() -> None:
    """A reason of the catalogue's REASONS is translated; any other reason is shown verbatim."""
    msg = message("breaker.still_open", reason="circuit breaker open: run reset")
    assert "原因：熔断器已打开：需执行 reset" in render_text(msg, "zh")
    assert "reason: circuit breaker open: run reset" in render_text(msg, "en")
    assert "原因：r-1" in render_text(message("breaker.open"), "zh")
    postponed = message("start.postponed", params=(("what", "Docker unreachable"),))
    assert card(postponed, "zh").headline == "[thor] qwen: Docker 无法连接：推迟启动"
    assert postponed.title == "Docker unreachable: start postponed"
    odd = message("start.postponed", params=(("what", "something new"),))
    assert card(odd, "zh").headline == "[thor] qwen: something new：推迟启动"  # unknown phrase: as it is


def test_states_keep_their_names_with_a_gloss_in_chinese() -> None:
    """State names are the CLI's; zh adds a gloss to the new state; an unchanged state is shown once."""
    assert localize.transition("RUNNING", "DEGRADED", "zh") == "RUNNING -> DEGRADED（降级）"
    assert localize.transition("RUNNING", "DEGRADED", "en") == "RUNNING -> DEGRADED"
    assert localize.transition("RUNNING", "RUNNING", "en") == "RUNNING"
    assert localize.transition("-", "-", "zh") == ""
    assert localize.transition("a", "b", "zh") == "a -> b"


# ---- the code uses exactly the catalogue's kinds ----------------------------------------------------


def _kinds_in_source() -> dict[str, list[str]]:
    """Literal kinds the code passes: ``kind=`` of alert/Alert/AlertMessage/alert_kind calls, the kind
    argument of ``alert_kind`` and ``title_en`` -> where."""
    found: dict[str, list[str]] = {}
    names = {"alert", "Alert", "AlertMessage", "alert_kind", "title_en"}
    for path in PKG.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = (
                func.attr
                if isinstance(func, ast.Attribute)
                else func.id
                if isinstance(func, ast.Name)
                else ""
            )
            if name not in names:
                continue
            args: list[ast.expr] = [k.value for k in node.keywords if k.arg == "kind"]
            if name == "alert_kind" and len(node.args) > 1:
                args.append(node.args[1])
            if name == "title_en" and node.args:
                args.append(node.args[0])
            for arg in args:
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value:
                    found.setdefault(arg.value, []).append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_every_kind_the_code_uses_is_in_the_catalogue() -> None:
    """A kind used in supervisor/ without a catalogue entry would render only its English title."""
    used = _kinds_in_source()
    assert {k: where for k, where in used.items() if k not in MESSAGES} == {}


def test_every_catalogue_kind_is_used() -> None:
    """A catalogue entry nothing uses is dead (NEW_KINDS_PENDING: used by branches not merged yet)."""
    used = set(_kinds_in_source())
    for kind, source in DYNAMIC_KINDS.items():
        assert f'"{kind}"' in source.read_text(encoding="utf-8"), kind
        used.add(kind)
    assert set(MESSAGES) - used - NEW_KINDS_PENDING == set()
    assert set(MESSAGES) >= NEW_KINDS_PENDING
    assert NEW_KINDS_PENDING & used == set(), "now used: remove them from NEW_KINDS_PENDING"


def test_literal_titles_match_the_catalogue() -> None:
    """An ``alert(severity, "title", ..., kind="k")`` / ``Alert(...)`` with a literal title must say what
    the catalogue's English title says (better: take it from the catalogue, Step.alert_kind / title_en),
    else the English card and the history would disagree."""
    wrong = []
    for path in PKG.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call) or len(node.args) < 2:
                continue
            func = node.func
            name = (
                func.attr
                if isinstance(func, ast.Attribute)
                else func.id
                if isinstance(func, ast.Name)
                else ""
            )
            kind = next((k.value for k in node.keywords if k.arg == "kind"), None)
            title = node.args[1]
            if name not in ("alert", "Alert") or not isinstance(kind, ast.Constant):
                continue
            if isinstance(title, ast.Constant) and title.value != localize.title_en(str(kind.value)):
                wrong.append(f"{path.relative_to(ROOT)}:{node.lineno}: {title.value!r}")
    assert wrong == []


def _string_constants() -> set[str]:
    """Every string literal of supervisor/ outside the catalogue (implicit concatenations joined)."""
    out: set[str] = set()
    for path in PKG.rglob("*.py"):
        if path.name != "catalog.py":
            tree = ast.parse(path.read_text(encoding="utf-8"))
            out |= {
                n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            }
    return out


def test_fixed_reasons_and_phrases_are_what_the_code_writes() -> None:
    """A translated reason or phrase the code no longer writes would be dead (and a reworded one would
    silently show in English)."""
    literals = _string_constants()
    assert set(REASONS) - literals == set()
    assert set(PHRASES) - literals == set()


# ---- the documented example -------------------------------------------------------------------------


def test_docs_example_is_what_the_code_renders() -> None:
    """docs/alerts.md "Language and cards" shows the plain text of one critical alert in en and zh."""
    doc = (ROOT / "docs" / "alerts.md").read_text(encoding="utf-8")
    section = doc.split("## Language and cards", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```text\n(.*?)```", section, re.DOTALL)
    msg = message(
        "breaker.open",
        reason="failed_oom_killed: container exited during start (code 137)",
        diagnosis="driver out of memory at start (NV_ERR_NO_MEMORY)",
    )
    assert len(blocks) == len(LANGUAGES)
    for block, language in zip(blocks, LANGUAGES, strict=True):
        rendered = render_text(msg, language).splitlines()
        shown = block.splitlines()
        assert shown[:-1] == rendered[:-1]  # the time line depends on the host's zone
        assert shown[-1].split("2026")[0] == rendered[-1].split("2026")[0]
    intro = doc.split("## What an alert says", 1)[1].split("```", 2)[1]
    assert intro.strip().splitlines()[:-1] == render_text(msg, "en").splitlines()[:-1]
