"""Reading a config file into plain data, safely: every way a file can be bad becomes a problem.

Bounded before anything walks the data: the size (1 MiB), YAML aliases and anchors (refused while the
document is composed, so an alias bomb is never expanded), the nesting depth, and every string (no NUL, no
lone surrogate, bounded length). Files that hold secrets or define a privileged container must be root's.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import yaml

from supervisor.config.bounds import string_problem
from supervisor.config.reader import Ctx, join
from supervisor.core.errors import ConfigProblem

#: A config or profile is a few KiB; anything this large is not one (and would cost time to parse).
MAX_FILE_BYTES = 256 * 1024
#: YAML events (scalars, mapping and list starts/ends) in one file: the largest example profile has about
#: 220. Counted by libyaml's C parser (1 MiB in about 0.2 s) before PyYAML's Python constructor, which
#: costs about 30 us an event, builds anything: a reload parses on the loop thread, so this bounds it.
MAX_YAML_EVENTS = 5000
#: Deeper nesting than any config needs (the deepest key path is about 5): refused before anything walks it.
MAX_DEPTH = 32
#: The environment variable that lets tests (or an operator who knows why) skip the owner/mode check.
TRUST_ENV = "VLLM_SUPERVISOR_TRUST_CONFIG_FILES"
_NO_ALIAS = "YAML aliases and anchors (*name, &name) are not allowed in a config: write the value out"


class _UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a mapping with the same key twice (PyYAML silently keeps the last)
    and any alias or anchor (a config never needs one; a 425-byte alias bomb took 9 s to expand)."""

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise yaml.composer.ComposerError(None, None, _NO_ALIAS, event.start_mark)
        return super().compose_node(parent, index)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, yaml.Node] = {}
        for key_node, _value in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key: let the base class report it
                continue
            if first is not None:
                raise yaml.constructor.ConstructorError(
                    f"while constructing a mapping (first {key!r} on line {first.start_mark.line + 1})",
                    node.start_mark,
                    f"found duplicate key {key!r}",
                    key_node.start_mark,
                )
            seen[key] = key_node
        return super().construct_mapping(node, deep=deep)


class _TooMany(yaml.MarkedYAMLError):
    pass


def _mark(event: yaml.Event) -> yaml.error.Mark | None:
    """Where ``event`` starts, as the Python parser's mark (libyaml's has the same line and column)."""
    start = event.start_mark
    if start is None:
        return None
    return yaml.error.Mark("<config>", 0, start.line, start.column, "", 0)


def _count_events(text: str) -> None:
    """Raise (a YAML error with its line) at the first alias or anchor, or past :data:`MAX_YAML_EVENTS`
    events: the fast C parser's pass before the slow Python one (the pure Python parser without libyaml)."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    events = yaml.parse(text, Loader=loader)
    n = 0
    while True:
        try:
            event = next(events)
        except StopIteration:
            return
        except yaml.YAMLError:
            return  # a syntax error after fewer events than the bound: the Python parser says it its way
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise yaml.composer.ComposerError(None, None, _NO_ALIAS, _mark(event))
        n += 1
        if n > MAX_YAML_EVENTS:
            too_many = f"more than {MAX_YAML_EVENTS} YAML values: not a config"
            raise _TooMany(None, None, too_many, _mark(event))


def nesting_exceeds(data: object, limit: int) -> bool:
    """Whether ``data`` nests lists/mappings deeper than ``limit`` (iterative: no recursion to exhaust)."""
    stack: list[tuple[object, int]] = [(data, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
    return False


def string_problems(data: object) -> list[tuple[str, str]]:
    """(key path, why) for every key or value string no config may hold (:func:`bounds.string_problem`).
    Call after the depth check. The value is never shown: it may be a secret."""
    out: list[tuple[str, str]] = []
    stack: list[tuple[object, str]] = [(data, "")]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str):
            why = string_problem(item)
            if why is not None:
                out.append((path or "(top level)", why))
        elif isinstance(item, dict):
            for k, v in item.items():
                key = k if isinstance(k, str) else str(k)
                why = string_problem(key) if isinstance(k, str) else None
                if why is not None:
                    out.append((join(path, "(a key)"), f"a key {why}"))
                    continue
                stack.append((v, join(path, key)))
        elif isinstance(item, list):
            stack.extend((v, join(path, i)) for i, v in enumerate(item))
    return sorted(out)


def _root_only() -> bool:
    return os.geteuid() == 0 and os.environ.get(TRUST_ENV) != "1"


def check_trusted_file(ctx: Ctx, path: Path, st: os.stat_result) -> None:
    """Run as root, a config file must be root's and writable by root alone: it defines a privileged
    container, so whoever may edit it may become root. Set ``$VLLM_SUPERVISOR_TRUST_CONFIG_FILES=1`` to skip
    the check (tests that write configs as another user; never on a production box)."""
    if not _root_only():
        return
    if st.st_uid != 0:
        ctx.add(
            "",
            f"is owned by uid {st.st_uid}, not root: whoever may edit it may become root (chown root {path})",
        )
    elif st.st_mode & 0o022:
        ctx.add(
            "",
            f"is writable by group or others (mode {stat.S_IMODE(st.st_mode):04o}): whoever may edit it may "
            f"become root (chmod go-w {path})",
        )


def load_yaml(path: Path, ctx: Ctx) -> object:
    """Read and `yaml.safe_load` a file. Every way a file can be bad becomes a problem naming the file (and
    line:column for syntax errors): unreadable, too large, not UTF-8, not YAML, an alias or anchor, nested
    too deeply, a string no config may hold, or (run as root) editable by someone other than root. Never an
    exception."""
    try:
        with path.open("rb") as fh:
            st = os.fstat(fh.fileno())
            if not stat.S_ISREG(st.st_mode):
                ctx.add("", "is not a regular file")
                return None
            raw = fh.read(MAX_FILE_BYTES + 1)
    except (OSError, ValueError) as exc:
        ctx.add("", f"cannot read file: {getattr(exc, 'strerror', None) or exc}")
        return None
    if len(raw) > MAX_FILE_BYTES:
        ctx.add("", f"is larger than {MAX_FILE_BYTES // 1024} KiB: not a config file")
        return None
    check_trusted_file(ctx, path, st)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        ctx.add("", f"is not valid UTF-8 (byte 0x{raw[exc.start]:02x} on line {line}, offset {exc.start})")
        return None
    try:
        _count_events(text)
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader subclass)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{ctx.file}:{mark.line + 1}:{mark.column + 1}" if mark is not None else ctx.file
        what = " ".join(s for s in (exc.context, exc.problem) if s)
        ctx.problems.append(ConfigProblem(where, "", f"YAML syntax error: {what}"))
        return None
    except yaml.YAMLError as exc:
        ctx.add("", f"YAML error: {exc}")
        return None
    except RecursionError:
        ctx.add("", f"is nested too deeply (more than {MAX_DEPTH} levels)")
        return None
    if nesting_exceeds(data, MAX_DEPTH):
        ctx.add("", f"is nested too deeply (more than {MAX_DEPTH} levels)")
        return None
    bad = string_problems(data)
    for key_path, why in bad:
        ctx.add(key_path, why)
    return None if bad else data


def check_private_file(ctx: Ctx, key_path: str, path: Path, what: str) -> bool:
    """A secret-bearing file (a key, an env file, a URL file) must exist, be a regular file, not be readable
    by group or others (0600 or stricter) and, run as root, be root's: a user's env file could set the
    container's ``LD_PRELOAD``, a user's key file could be swapped under the daemon."""
    try:
        st = path.stat()
    except (OSError, ValueError) as exc:
        ctx.add(key_path, f"{what} {str(path)!r} cannot be read: {getattr(exc, 'strerror', None) or exc}")
        return False
    if not stat.S_ISREG(st.st_mode):
        ctx.add(key_path, f"{what} {str(path)!r} is not a regular file")
        return False
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o077:
        ctx.add(
            key_path,
            f"{what} {str(path)!r} has mode {mode:04o}: it holds secrets and must be 0600 or stricter "
            f"(chmod 600 {path})",
        )
        return False
    if _root_only() and st.st_uid != 0:
        ctx.add(
            key_path,
            f"{what} {str(path)!r} is owned by uid {st.st_uid}, not root: whoever owns it decides what the "
            f"container runs with (chown root {path})",
        )
        return False
    if not os.access(path, os.R_OK):
        ctx.add(key_path, f"{what} {str(path)!r} is not readable by this user")
        return False
    return True
