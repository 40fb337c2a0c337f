"""The READMEs (English and Chinese) stay true to the code: what they tell an operator to type exists.

Read from the text, checked against the code itself (pure, no daemon, no Docker):
- every ``supervisorctl SUBCOMMAND`` in a code span or block is a subcommand of the real parser
  (``supervisor.cli.main.build_parser``), and every ``--flag`` after it is an option of that subcommand (or a
  global one); a flag of ``vllm-supervisor`` is one of the daemon's parser, a flag of ``scripts/demo`` one of
  the demo's; a flag standing alone in a code span is an option of one of them;
- every configuration key named (a backticked dotted key such as ``maintenance.cron``, a backticked
  top-level key such as ``seat:``, and every key of a ``yaml`` block) is read by the configuration parser
  (``supervisor/config/``) of the daemon config or of a profile: a key it would call unknown fails;
- every repository path named (a link target, or a backticked path under one of the repository's folders)
  exists, or is one a run makes (git ignores it);
- README.md is at most 250 lines, and both name the two commands (``bash scripts/demo``,
  ``bash scripts/test``; ``.ci/run`` calls the second).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
import yaml

from supervisor.cli.main import build_parser
from supervisor.config.daemon import parse_daemon
from supervisor.config.profile import parse_profile
from supervisor.config.reader import Ctx

ROOT = Path(__file__).resolve().parent.parent
READMES = ("README.md", "README.zh-CN.md")
MAX_README_LINES = 250
TWO_COMMANDS = ("bash scripts/demo", "bash scripts/test")
#: Top-level folders of the repository: a backticked token starting with one of them is a repository path.
REPO_DIRS = (
    "bench/",
    "docs/",
    "images/",
    "monitoring/",
    "profiles/",
    "restore/",
    "scripts/",
    "supervisor/",
    "systemd/",
    "tests/",
    "tools/",
    ".ci/",
)
#: A dotted token ending so is a file name, not a configuration key.
FILE_SUFFIXES = frozenset(
    {"yaml", "yml", "md", "py", "json", "jsonl", "service", "env", "key", "url", "log", "sock", "whl", "toml"}
)
#: A dotted token starting so is a Python module, not a configuration key.
MODULE_ROOTS = frozenset({"supervisor", "bench", "tools", "tests"})
#: `seat:`, `maintenance.enabled: true`: a key written as YAML (with or without its value).
KEY_WITH_VALUE = re.compile(r"^([a-z][a-z0-9_]*(?:\.[a-z][a-z0-9_]*)*):(?: .*)?$")
#: `maintenance.cron`: a dotted key path.
DOTTED_KEY = re.compile(r"^([a-z][a-z0-9_]*(?:\.[a-z][a-z0-9_]*)+)$")
#: Where a command line ends inside a code span or line.
SEGMENT_SPLIT = re.compile(r"\s(?:;|&&|\|\||\||#)\s|;\s|`")


# ---- reading a README ------------------------------------------------------------------------------


def _text(name: str) -> str:
    return (ROOT / name).read_text(encoding="utf-8")


def _fenced(text: str) -> Iterator[tuple[str, str]]:
    """(language, body) of every fenced code block."""
    for m in re.finditer(r"^```(\w*)\n(.*?)^```", text, flags=re.M | re.S):
        yield m.group(1), m.group(2)


def _inline(text: str) -> list[str]:
    """Every inline code span outside fenced blocks."""
    prose = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    return re.findall(r"`([^`\n]+)`", prose)


def code_lines(text: str) -> list[str]:
    """Every inline code span and every line of a non-YAML fenced block: where commands are written."""
    lines = list(_inline(text))
    for lang, body in _fenced(text):
        if lang not in ("yaml", "yml"):
            lines.extend(body.splitlines())
    return lines


# ---- the parsers -----------------------------------------------------------------------------------


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {s for a in parser._actions for s in a.option_strings}  # argparse has no public API for this


def cli_commands() -> tuple[set[str], dict[str, set[str]]]:
    """supervisorctl's global options and, per subcommand, its options."""
    parser = build_parser()
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return _options(parser), {name: _options(p) for name, p in subs.choices.items()}


def daemon_options() -> set[str]:
    from supervisor.daemon.main import _parser

    return _options(_parser())


def demo_options() -> set[str]:
    """The demo's options, as its ``--help`` lists them (its parser is built inside ``main``)."""
    from supervisor import demo

    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        demo.main(["--help"])
    return set(re.findall(r"(?<![\w-])(--?[a-z][a-z-]*)", out.getvalue()))


# ---- the checks (pure functions of a text, so that a test can feed them a wrong one) ---------------


def _words(segment: str) -> list[str]:
    return [w.strip("[]|,.()\"'") for w in segment.split()]


def _flag(word: str) -> str | None:
    if re.fullmatch(r"--?[a-zA-Z][a-zA-Z0-9-]*(=.*)?", word):
        return word.split("=", 1)[0]
    return None


def wrong_commands(text: str) -> list[str]:
    """Every supervisorctl subcommand or flag, daemon flag or demo flag the text names that does not exist."""
    global_opts, subs = cli_commands()
    daemon, demo = daemon_options(), demo_options()
    everything = global_opts | daemon | demo | set().union(*subs.values())
    wrong: list[str] = []
    for line in code_lines(text):
        for segment in SEGMENT_SPLIT.split(line):
            words = [w for w in _words(segment) if w]
            if not words:
                continue
            at = next(
                (
                    i
                    for i, w in enumerate(words)
                    if w.rsplit("/", 1)[-1] in ("supervisorctl", "vllm-supervisor") or w == "scripts/demo"
                ),
                None,
            )
            if at is None:
                if _flag(words[0]) is not None:  # a flag on its own: it must exist somewhere
                    wrong.extend(
                        f"{f}: no such option" for w in words if (f := _flag(w)) and f not in everything
                    )
                continue
            prog, rest = words[at].rsplit("/", 1)[-1], words[at + 1 :]
            if prog == "vllm-supervisor":
                allowed = daemon
            elif prog == "demo":
                allowed = demo
            else:
                while rest and rest[0] in ("--socket", "--timeout"):
                    rest = rest[2:]
                sub = next((w for w in rest if _flag(w) is None), None)
                if sub is None or sub in ("--help", "--version") or not re.fullmatch(r"[a-z][a-z-]*", sub):
                    allowed = global_opts
                elif sub not in subs:
                    wrong.append(f"supervisorctl {sub}: no such subcommand")
                    continue
                else:
                    allowed = global_opts | subs[sub]
            wrong.extend(
                f"{prog} {f}: no such option"
                for w in rest
                if (f := _flag(w)) is not None and f not in allowed
            )
    return wrong


def config_keys(text: str) -> set[str]:
    """Every configuration key the text names, as a dotted path."""
    keys: set[str] = set()
    for span in _inline(text):
        m = KEY_WITH_VALUE.match(span.strip()) or DOTTED_KEY.match(span.strip())
        if m is None:
            continue
        key = m.group(1)
        parts = key.split(".")
        if parts[-1] in FILE_SUFFIXES or parts[0] in MODULE_ROOTS:
            continue
        keys.add(key)
    for lang, body in _fenced(text):
        if lang in ("yaml", "yml"):
            keys.update(_flatten(yaml.safe_load(body)))
    return keys


def _flatten(data: object, prefix: str = "") -> Iterator[str]:
    if isinstance(data, dict):
        for k, v in data.items():
            path = f"{prefix}.{k}" if prefix else str(k)
            yield path
            yield from _flatten(v, path)


def unknown_keys(keys: set[str]) -> list[str]:
    """The keys that neither the daemon config's nor a profile's parser reads."""

    def problems(parse: object, data: Mapping[str, object]) -> list[str]:
        ctx = Ctx(file="readme.yaml", base_dir=ROOT)
        parse(ctx, data, ROOT / "readme.yaml")  # type: ignore[operator]
        return [p.key_path for p in ctx.problems if p.message.startswith("unknown key")]

    def nested(key: str) -> dict[str, object]:
        out: object = None
        for part in reversed(key.split(".")):
            out = {part: out}
        assert isinstance(out, dict)
        return out

    container: dict[str, object] = {"container": {"name": "readme", "image": "readme"}}
    wrong = []
    for key in sorted(keys):
        as_daemon = problems(parse_daemon, {"profiles": [], **nested(key)})
        as_profile = problems(
            parse_profile, {**container, **nested(key)} if key != "container" else container
        )
        if as_daemon and as_profile:
            wrong.append(key)
    return wrong


def missing_paths(text: str) -> list[str]:
    """Repository paths the text names (link targets, backticked paths) that do not exist."""
    named = {t for t in re.findall(r"\]\(([^)#\s]+)", text) if not re.match(r"[a-z]+:", t)}
    for line in code_lines(text):
        for word in _words(line):
            path = word.rstrip(":;")
            if path.startswith(REPO_DIRS):
                named.add(path)
    return sorted(p for p in named if not any(ROOT.glob(p.rstrip("/"))) and not _made_at_run_time(p))


def _made_at_run_time(path: str) -> bool:
    """A path git ignores is one a run makes (the demo config's socket under ``profiles/var/``)."""
    out = subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT, check=False, capture_output=True)
    return out.returncode == 0


# ---- the tests ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", READMES)
def test_commands_and_flags_exist(name: str) -> None:
    """Every supervisorctl subcommand and flag (and the daemon's, the demo's) the README names exists."""
    assert wrong_commands(_text(name)) == []


@pytest.mark.parametrize("name", READMES)
def test_config_keys_exist(name: str) -> None:
    """Every configuration key the README names is one the parser reads."""
    keys = config_keys(_text(name))
    assert {"kv_pool.warn_drop_pct", "alerts.language"} <= keys  # the extraction finds what it should
    assert unknown_keys(keys) == []


@pytest.mark.parametrize("name", READMES)
def test_paths_exist(name: str) -> None:
    """Every repository path the README names (links, backticked paths) exists."""
    assert missing_paths(_text(name)) == []


@pytest.mark.parametrize("name", READMES)
def test_names_the_two_commands(name: str) -> None:
    """Both READMEs give the demo and the test command; CI's entry point calls the test command."""
    text = _text(name)
    assert [c for c in TWO_COMMANDS if c not in text] == []
    assert "scripts/test" in _text(".ci/run")


def test_readme_is_short() -> None:
    """The README is the operators' first page: at most 250 lines (figures in bench/results, code in docs)."""
    assert len(_text("README.md").splitlines()) <= MAX_README_LINES


def test_the_readmes_link_each_other() -> None:
    assert "README.zh-CN.md" in _text("README.md")
    assert "README.md" in _text("README.zh-CN.md")


def test_a_wrong_name_is_caught() -> None:
    """The checks fail on a subcommand, a flag, a key or a path that does not exist."""
    text = (
        "Run `supervisorctl frobnicate NAME` or `supervisorctl status --colour`, "
        "then `bash scripts/demo --real`.\n"
        "Set `maintenance.crontab` and `seats:`; read [x](docs/nowhere.md).\n"
        "```\nsupervisorctl restart NAME --wait --no-drain\n```\n"
    )
    assert wrong_commands(text) == [
        "supervisorctl frobnicate: no such subcommand",
        "supervisorctl --colour: no such option",
        "demo --real: no such option",
        "supervisorctl --no-drain: no such option",
    ]
    assert unknown_keys(config_keys(text)) == ["maintenance.crontab", "seats"]
    assert missing_paths(text) == ["docs/nowhere.md"]


def _code_map() -> set[str]:
    """The modules docs/ARCHITECTURE.md's code map names: ``### `supervisor/x/``` then ``- `m.py`: ...``."""
    text = _text("docs/ARCHITECTURE.md").split("## Code map", 1)[1]
    named: set[str] = set()
    folder = ""
    for line in text.splitlines():
        if m := re.match(r"^### `([\w/]+)/`$", line):
            folder = m.group(1)
        elif m := re.match(r"^- `([\w.]+\.py)`:", line):
            named.add(f"{folder}/{m.group(1)}")
    return named


def test_the_code_map_names_every_module() -> None:
    """docs/ARCHITECTURE.md's code map has one line for every module of supervisor/ (empty package markers
    aside) and none for a module that is gone: a new module gets its line there."""
    modules = {
        str(p.relative_to(ROOT))
        for p in (ROOT / "supervisor").rglob("*.py")
        if p.read_text(encoding="utf-8").strip()
    }
    named = _code_map()
    assert (sorted(modules - named), sorted(named - modules)) == ([], [])


def test_the_code_map_tool_changes_nothing_on_a_map_in_step() -> None:
    """``python -m tools.codemap`` on the committed document changes nothing (it once added blank lines at
    every run), and brings a map that lost a module's line back to the committed text."""
    from tools.codemap import render

    text = _text("docs/ARCHITECTURE.md")
    assert render(text) == text
    line = next(x for x in text.splitlines() if x.startswith("- `threads.py`:"))
    assert render(text.replace(line + "\n", "", 1)) != text.replace(line + "\n", "", 1)
