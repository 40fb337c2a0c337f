"""The one secret rule (pure): which values never leave the process, and how they are masked.

Everything the daemon shows or sends (drift lines, ``supervisorctl diff``, status, events, history,
alerts, log lines, the KV-pool fingerprint's input) masks with these functions; docs/security.md
"Secrets" says where. The rule is default-deny for names that look secret:

* an **environment name** is secret when one of its parts (split at ``_``, ``-``, ``.`` and camelCase,
  case-insensitive) is a secret word (KEY, TOKEN, SECRET, PASSWORD, PASSWD, PASS, PWD, CREDENTIAL(S),
  AUTH, PRIVATE, COOKIE, SESSION, CERT, SIGNATURE, ... :data:`SECRET_WORDS`), contains a strong one
  (``DBPASSWORD``, ``MYSECRET``: :data:`SECRET_INFIXES`) or ends with KEY/TOKEN (``APIKEY``, ``HFTOKEN``);
  the profile's declared ``api_key`` names count too. ``KEYBOARD``, ``TOKENIZERS_PARALLELISM``,
  ``VLLM_MAX_TOKENS``, ``MODEL_PATH`` stay clear;
* a **command-line flag** is secret when its last part is (``--api-key``, ``--hf-token``,
  ``--client-secret``) or it contains a strong word (``--db-password-file``); its value is masked in both
  spellings (``--api-key V``, ``--api-key=V``), and every value of ``--api-key`` (vLLM takes several);
* in a **URL** the userinfo (``https://user:pass@host``) and the values of query or fragment parameters
  whose name is secret (``token``, ``access_token``, ``key``, ``sig``, ``X-Amz-Signature``, ...);
* in **free text** every value the daemon knows to be secret (:class:`Redactor`, at least
  :data:`MIN_KNOWN_LEN` characters: shorter ones would mask common words), plus the shapes above where
  they appear in prose: URLs, ``--flag value``, ``NAME=value``, ``'name': 'value'``, ``Bearer TOKEN``.

One mask string, :data:`MASK`, everywhere (also the placeholder the fingerprint hashes, so rotating a
secret never starts a new KV baseline).
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, is_dataclass, replace
from functools import cached_property
from typing import Any, TypeVar

from supervisor.core.spec.model import ContainerSpec

T = TypeVar("T")

#: What every secret value becomes.
MASK = "<secret>"
#: Name parts that make a name secret when a part equals one of them.
SECRET_WORDS = frozenset(
    {
        *("KEY", "KEYS", "APIKEY", "TOKEN", "SECRET", "SECRETS", "PASSWORD", "PASSWORDS", "PASSWD"),
        *("PASS", "PWD", "PASSPHRASE", "CREDENTIAL", "CREDENTIALS", "CREDS", "AUTH", "AUTHORIZATION"),
        *("PRIVATE", "COOKIE", "COOKIES", "SESSION", "CERT", "CERTS", "CERTIFICATE", "SIG", "SIGNATURE"),
        *("SALT", "DSN", "WEBHOOK", "BEARER", "JWT", "OTP"),
    }
)
#: Strong words that make a name secret wherever they appear in a part (``DBPASSWORD``).
SECRET_INFIXES = ("PASSWORD", "PASSWD", "SECRET", "CREDENTIAL", "PASSPHRASE", "APIKEY", "PRIVATE")
#: Suffixes of a part that make it secret (``APIKEY``, ``HFTOKEN``; ``KEYBOARD`` is clear).
SECRET_SUFFIXES = ("KEY", "KEYS", "TOKEN")
#: Query parameter names that are secret besides the name rule (``?sign=``, OAuth ``?code=``).
SECRET_QUERY_WORDS = frozenset({"SIGN", "CODE"})
#: Flags that take several values (vLLM's ``--api-key k1 k2``): every following non-option is masked.
MULTI_VALUE_FLAGS = frozenset({"--api-key"})
#: What is plausibly one of vLLM's short options (``-tp``, ``-dph``, ``-O``, ``-O3``, ``-O.mode=x``,
#: ``-O{...}``): after a multi-value secret flag, a single-dash argument of another shape is taken for a key
#: that begins with ``-`` (docs/vllm-facts.md "A key that begins with '-'": vLLM refuses it and prints it
#: back, or reads ``-OKEY`` as its -O option and prints KEY in its `non-default args` line).
SHORT_OPTION = re.compile(r"-(?:[a-z]{1,3}|O(?:[0-3]|[.{].*)?)")
#: A known secret value shorter than this is masked only where its shape shows it (never in prose).
MIN_KNOWN_LEN = 6

_CAMEL = re.compile(r"([a-z0-9])([A-Z])")
_SPLIT = re.compile(r"[^A-Za-z0-9]+")
_URL = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]{0,31}://[^\s'\"<>`]+")
_PARAM = re.compile(r"(^|[&;])([^=&;]+)=([^&;]*)")
# free-text shapes: (pattern, group of the name, group of the value)
_FLAG_TEXT = re.compile(r"(?<![\w-])(--[A-Za-z0-9][\w-]*)(=|['\"]?,?\s+['\"]?)([^\s'\",\])]+)")
_ASSIGN_TEXT = re.compile(r"(?<![\w.-])([A-Za-z_][\w-]*)=(['\"]?)([^\s'\",;&)}\]]+)")
_QUOTED_TEXT = re.compile(r"(['\"])([A-Za-z_][\w-]*)\1\s*:\s*(\[?\s*)(['\"]?)([^\s'\",;&)}\]]+)")
_BEARER_TEXT = re.compile(r"\b(Bearer|Basic|Token)(\s+)([A-Za-z0-9._~+/=-]{8,})")


def name_parts(name: str) -> list[str]:
    """``dbPassword-file`` -> ``["DB", "PASSWORD", "FILE"]``."""
    return [p for p in _SPLIT.split(_CAMEL.sub(r"\1_\2", name).upper()) if p]


def _secret_part(part: str) -> bool:
    return (
        part in SECRET_WORDS
        or any(w in part for w in SECRET_INFIXES)
        or any(part.endswith(s) and part != s for s in SECRET_SUFFIXES)
    )


def is_secret_env(name: str, declared: Collection[str] = ()) -> bool:
    """Whether the value of environment variable ``name`` is secret (``declared``: the profile's
    api_key names, secret whatever they are called)."""
    return name in declared or any(_secret_part(p) for p in name_parts(name))


def secret_env_names(env: Iterable[str], declared: Collection[str] = ()) -> frozenset[str]:
    """The names of ``env`` (names, or a mapping's keys) whose values are secret."""
    return frozenset(declared) | {n for n in env if is_secret_env(n, declared)}


def mask_env(env: Mapping[str, str], declared: Collection[str] = ()) -> dict[str, str]:
    """``env`` with secret values replaced by :data:`MASK` (other values masked as free text)."""
    return {k: MASK if is_secret_env(k, declared) else mask_text(v) for k, v in env.items()}


def is_secret_flag(flag: str) -> bool:
    """Whether option ``flag`` (``--api-key``, ``--hf-token``; ``=value`` ignored) carries a secret."""
    name = flag.partition("=")[0]
    if not name.startswith("-"):
        return False
    parts = name_parts(name)
    if not parts:
        return False
    return _secret_part(parts[-1]) or any(w in p for p in parts for w in SECRET_INFIXES)


def _flag_values(argv: Sequence[str]) -> list[tuple[int, str]]:
    """(index, value) of every secret flag value in ``argv`` (``--flag=V`` gives V's own index)."""
    out: list[tuple[int, str]] = []
    pending = 0  # 0: none, 1: the next argument, -1: every next non-option (MULTI_VALUE_FLAGS)
    for i, arg in enumerate(argv):
        if pending and not arg.startswith("--") and not (pending < 0 and SHORT_OPTION.fullmatch(arg)):
            out.append((i, arg))
            pending = pending if pending < 0 else 0
            continue
        pending = 0
        flag, eq, value = arg.partition("=")
        if is_secret_flag(flag):
            if eq:
                out.append((i, value))
            else:
                pending = -1 if flag in MULTI_VALUE_FLAGS else 1
    return out


def mask_command(argv: Sequence[str]) -> list[str]:
    """``argv`` with every secret flag value masked, and each argument masked as free text (a
    ``bash -c "... --api-key K"`` or a URL with a token)."""
    hidden = {i for i, _v in _flag_values(argv)}
    out: list[str] = []
    for i, arg in enumerate(argv):
        if i not in hidden:
            out.append(mask_text(arg))
        elif arg.startswith("-") and "=" in arg:
            out.append(f"{arg.partition('=')[0]}={MASK}")
        else:
            out.append(MASK)
    return out


def _secret_param(name: str) -> bool:
    plain = urllib.parse.unquote_plus(name)
    return is_secret_env(plain) or any(p in SECRET_QUERY_WORDS for p in name_parts(plain))


def _params(text: str) -> list[tuple[str, str]]:
    return [(m.group(2), m.group(3)) for m in _PARAM.finditer(text)]


def mask_url(url: str) -> str:
    """``url`` with its userinfo and the values of secret query/fragment parameters masked."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return mask_text_shapes(url)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{MASK}@{netloc.rpartition('@')[2]}"

    def params(text: str) -> str:
        return _PARAM.sub(
            lambda m: f"{m.group(1)}{m.group(2)}={MASK}" if _secret_param(m.group(2)) else m.group(0), text
        )

    return urllib.parse.urlunsplit(
        (parts.scheme, netloc, parts.path, params(parts.query), params(parts.fragment))
    )


def url_secret_values(url: str) -> list[str]:
    """The secret pieces of ``url`` as they are written: its userinfo (and password) and secret parameters."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return []
    out: list[str] = []
    if "@" in parts.netloc:
        info = parts.netloc.rpartition("@")[0]
        out += [info, info.partition(":")[2]]
    for text in (parts.query, parts.fragment):
        out += [v for k, v in _params(text) if _secret_param(k)]
    return [v for v in out if v and v != MASK]


def _sub_value(m: re.Match[str], group: int) -> str:
    """The match with its group ``group`` (the value) replaced by MASK."""
    start, end = m.span(group)
    whole = m.group(0)
    return whole[: start - m.start()] + MASK + whole[end - m.start() :]


def mask_text_shapes(text: str) -> str:
    """``text`` with secrets masked where their shape shows them: URLs, ``--secret-flag V``,
    ``SECRET_NAME=V``, ``'secret_name': 'V'``, ``Bearer TOKEN`` (no known values needed)."""
    if not text:
        return text
    out = _URL.sub(lambda m: mask_url(m.group(0)), text)
    out = _FLAG_TEXT.sub(
        lambda m: (
            _sub_value(m, 3) if is_secret_flag(m.group(1)) and not m.group(3).startswith("-") else m.group(0)
        ),
        out,
    )
    out = _ASSIGN_TEXT.sub(lambda m: _sub_value(m, 3) if is_secret_env(m.group(1)) else m.group(0), out)
    out = _QUOTED_TEXT.sub(lambda m: _sub_value(m, 5) if is_secret_env(m.group(2)) else m.group(0), out)
    return _BEARER_TEXT.sub(lambda m: _sub_value(m, 3), out)


def _metavar(flag: str) -> str:
    """argparse's placeholder for a flag's value in a usage text (``--api-key API_KEY``): not a secret."""
    return flag.lstrip("-").replace("-", "_").upper()


def text_secret_values(text: str) -> list[str]:
    """The values :func:`mask_text_shapes` would mask in ``text`` (to learn them as known secrets)."""
    out = [v for m in _URL.finditer(text) for v in url_secret_values(m.group(0))]
    out += [
        m.group(3)
        for m in _FLAG_TEXT.finditer(text)
        if is_secret_flag(m.group(1)) and m.group(3) != _metavar(m.group(1))
    ]
    out += [m.group(3) for m in _ASSIGN_TEXT.finditer(text) if is_secret_env(m.group(1))]
    out += [m.group(5) for m in _QUOTED_TEXT.finditer(text) if is_secret_env(m.group(2))]
    out += [m.group(3) for m in _BEARER_TEXT.finditer(text)]
    return [v for v in out if v and v != MASK and not v.startswith("-")]


def spec_secret_values(spec: ContainerSpec, declared: Collection[str] = ()) -> frozenset[str]:
    """Every secret value a container spec holds: secret env values, secret flag values (entrypoint and
    command), and the secret pieces of URLs or ``--flag V`` inside any env value or argument."""
    argv = [*(spec.entrypoint or ()), *spec.command]
    values = {e.value for e in spec.env if is_secret_env(e.name, declared)}
    values |= {v for _i, v in _flag_values(argv)}
    for text in (*argv, *(e.value for e in spec.env)):
        values |= set(text_secret_values(text))
    return frozenset(v for v in values if v and v != MASK)


@dataclass(frozen=True)
class Redactor:
    """Masks free text and whole records with the secret values the daemon knows (plus the shapes)."""

    known: frozenset[str] = field(default=frozenset(), repr=False)
    min_len: int = MIN_KNOWN_LEN

    @cached_property
    def _pattern(self) -> re.Pattern[str] | None:
        values = sorted((v for v in self.known if len(v) >= self.min_len), key=len, reverse=True)
        return re.compile("|".join(re.escape(v) for v in values)) if values else None

    def text(self, text: str) -> str:
        """``text`` with every known value and every secret shape masked."""
        if self._pattern is not None:
            text = self._pattern.sub(MASK, text)
        return mask_text_shapes(text)

    def data(self, value: T) -> T:
        """``value`` (str, dict, list, tuple, frozen dataclass, nested) with every string masked."""
        return self._data(value, 0)  # type: ignore[no-any-return]

    def _data(self, value: Any, depth: int) -> Any:
        if depth > 32:  # deeper than anything the daemon writes: do not follow (no recursion error)
            return MASK
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            return {self._data(k, depth + 1): self._data(v, depth + 1) for k, v in value.items()}
        if isinstance(value, list | tuple):
            items = [self._data(v, depth + 1) for v in value]
            return items if isinstance(value, list) else tuple(items)
        if is_dataclass(value) and not isinstance(value, type):
            changes = {f.name: self._data(getattr(value, f.name), depth + 1) for f in fields(value) if f.init}
            return replace(value, **changes)
        return value


def mask_text(text: str, known: Iterable[str] = ()) -> str:
    """``text`` with any of the ``known`` secret values (at least MIN_KNOWN_LEN long) and every secret
    shape masked."""
    return Redactor(frozenset(known)).text(text)
