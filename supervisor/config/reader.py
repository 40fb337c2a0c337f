"""A small validating reader over parsed YAML that collects every problem instead of stopping at the first.

Each :class:`Section` wraps one mapping at a dotted key path. Accessors record the keys they read; ``done()``
reports every key nobody read as unknown, with a "did you mean" suggestion. Secret values are masked.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterator
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

from supervisor.config.bounds import UNLISTED_MAX, describe, upper_bound
from supervisor.core.errors import ConfigProblem
from supervisor.core.spec.secrets import MASK as SECRET_MASK

T = TypeVar("T")
#: How a secret bad value is shown in a problem (the one mask, quoted like the other values).
MASK = repr(SECRET_MASK)
_MAX_VALUE_LEN = 80


def default_of(cls: type[Any], name: str) -> Any:
    """The declared default of field ``name`` of config dataclass ``cls`` (the one home of defaults)."""
    for f in fields(cls):
        if f.name == name:
            if f.default is not MISSING:
                return f.default
            if f.default_factory is not MISSING:
                return f.default_factory()
    raise KeyError(f"{cls.__name__}.{name} has no default")


def show(value: object) -> str:
    """A short, quoted rendering of a bad value for a message."""
    text = repr(value)
    return text if len(text) <= _MAX_VALUE_LEN else text[: _MAX_VALUE_LEN - 3] + "..."


def type_name(value: object) -> str:
    """The YAML-ish name of a value's type."""
    return {
        bool: "boolean",
        int: "integer",
        float: "number",
        str: "string",
        list: "list",
        dict: "mapping",
        type(None): "null",
    }.get(type(value), type(value).__name__)


def join(path: str, key: str | int) -> str:
    """`a.b` + `c` -> `a.b.c`; `a.b` + 2 -> `a.b[2]`."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


@dataclass
class Ctx:
    """Where problems go while one file is parsed."""

    file: str
    base_dir: Path
    problems: list[ConfigProblem] = field(default_factory=list)
    #: Key paths read as numbers with no bound named at the call (each must have a row in config.bounds).
    numbers: set[str] = field(default_factory=set)

    def add(self, key_path: str, message: str, value: object = None, *, secret: bool = False) -> None:
        """Record one problem (the value is masked when `secret`)."""
        shown = None if value is None else (MASK if secret else show(value))
        self.problems.append(ConfigProblem(self.file, key_path, message, shown))

    def path(self, raw: str) -> Path:
        """A path from the file, relative ones resolved against the file's directory."""
        p = Path(raw).expanduser()
        return p if p.is_absolute() else (self.base_dir / p)


class Section:
    """One mapping in the file, read key by key."""

    def __init__(self, ctx: Ctx, data: object, path: str, *, secret_keys: frozenset[str] = frozenset()):
        self.ctx = ctx
        self.path = path
        self.secret_keys = secret_keys
        self.seen: set[str] = set()
        self.ok = isinstance(data, dict) or data is None
        if not self.ok:
            # never the value: a secret file matched by a profile glob, or `api_key: sk-...`, would show
            ctx.add(path or "(top level)", f"must be a mapping, not a {type_name(data)}")
        self.data: dict[Any, Any] = data if isinstance(data, dict) else {}

    def key(self, key: str) -> str:
        """The dotted path of a key in this section."""
        return join(self.path, key)

    def has(self, key: str) -> bool:
        """Whether the key is present (and marks it as known)."""
        self.seen.add(key)
        return key in self.data

    def raw(self, key: str) -> object:
        """The raw value of a key (None if absent); marks the key as known."""
        self.seen.add(key)
        return self.data.get(key)

    def bad(self, key: str, message: str, value: object) -> None:
        """Record a problem with this section's key."""
        self.ctx.add(self.key(key), message, value, secret=key in self.secret_keys)

    def required(self, key: str) -> bool:
        """Report a missing required key; True when present."""
        if not self.has(key) or self.data.get(key) is None:
            self.ctx.add(self.key(key), "required key is missing")
            return False
        return True

    def str_(self, key: str, default: T, *, choices: tuple[str, ...] = (), nonempty: bool = True) -> str | T:
        """A string value (or the default when absent/null)."""
        v = self.raw(key)
        if v is None:
            return default
        if not isinstance(v, str):
            self.bad(key, f"must be a string, not a {type_name(v)}", v)
            return default
        if nonempty and not v.strip():
            self.bad(key, "must not be empty", v)
            return default
        if choices and v not in choices:
            self.bad(key, f"must be one of {', '.join(choices)}", v)
            return default
        return v

    def bool_(self, key: str, default: T) -> bool | T:
        """A boolean value (true/false only)."""
        v = self.raw(key)
        if v is None:
            return default
        if not isinstance(v, bool):
            self.bad(key, f"must be true or false, not a {type_name(v)}", v)
            return default
        return v

    def int_(self, key: str, default: T, *, lo: int | None = None, hi: int | None = None) -> int | T:
        """An integer within [lo, hi] (no ``hi``: the key's row in config.bounds)."""
        if hi is None:
            self.ctx.numbers.add(self.key(key))
        v = self.raw(key)
        if v is None:
            return default
        if isinstance(v, bool) or not isinstance(v, int):
            self.bad(key, f"must be an integer, not a {type_name(v)}", v)
            return default
        checked: int | T = self._range(key, v, default, lo, hi)
        return checked

    def float_(
        self, key: str, default: T, *, lo: float | None = 0.0, hi: float | None = None, positive: bool = False
    ) -> float | T:
        """A number (int or float) within [lo, hi]; by default not negative; `positive` excludes 0; no ``hi``:
        the key's row in config.bounds."""
        if hi is None:
            self.ctx.numbers.add(self.key(key))
        v = self.raw(key)
        if v is None:
            return default
        if isinstance(v, bool) or not isinstance(v, int | float):
            self.bad(key, f"must be a number, not a {type_name(v)}", v)
            return default
        if isinstance(v, float) and not math.isfinite(v):
            self.bad(key, "must be a finite number (not .nan or .inf)", v)
            return default
        if positive and v <= 0:
            self.bad(key, "must be greater than 0", v)
            return default
        return float(self._range(key, v, default, lo, hi))

    def _range(self, key: str, v: Any, default: Any, lo: float | None, hi: float | None) -> Any:
        """``v`` within [lo, hi]; with no ``hi`` named, the bound of the key in config.bounds' table."""
        if hi is None:
            hi = upper_bound(self.key(key))
            hi = UNLISTED_MAX if hi is None else hi
        if lo is not None and v < lo:
            self.bad(key, "must not be negative" if lo == 0 else f"must be >= {lo}", v)
            return default
        if v > hi:
            self.bad(key, f"must be <= {describe(hi, self.key(key))}", v)
            return default
        return v

    def str_list(self, key: str) -> tuple[str, ...]:
        """A list of strings (absent -> empty)."""
        v = self.raw(key)
        if v is None:
            return ()
        if not isinstance(v, list):
            self.bad(key, f"must be a list of strings, not a {type_name(v)}", v)
            return ()
        out: list[str] = []
        for i, item in enumerate(v):
            if isinstance(item, str):
                out.append(item)
            else:
                self.ctx.add(join(self.key(key), i), f"must be a string, not a {type_name(item)}", item)
        return tuple(out)

    def items(self, key: str) -> Iterator[tuple[str, object]]:
        """(key path, item) for each element of a list value."""
        v = self.raw(key)
        if v is None:
            return
        if not isinstance(v, list):
            self.bad(key, f"must be a list, not a {type_name(v)}", v)
            return
        for i, item in enumerate(v):
            yield join(self.key(key), i), item

    def sub(self, key: str, *, secret_keys: frozenset[str] = frozenset()) -> Section:
        """The nested mapping under `key` (empty when absent)."""
        return Section(self.ctx, self.raw(key), self.key(key), secret_keys=secret_keys)

    def done(self) -> None:
        """Report every key that no accessor read, suggesting the closest known key."""
        for k in self.data:
            if isinstance(k, str) and k in self.seen:
                continue
            msg = "unknown key"
            if isinstance(k, str):
                close = difflib.get_close_matches(k, sorted(self.seen), n=1, cutoff=0.6)
                if close:
                    msg += f" (did you mean {close[0]!r}?)"
            self.ctx.add(join(self.path, str(k)), msg)
