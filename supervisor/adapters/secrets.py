"""Secrets at run time: the files the config points at (API key, webhook URLs, signing secrets; read at
use time) and the :class:`SecretBook` of every secret value the daemon knows, which masks what leaves.

The config only says *where* a secret is (a file, an env var of the container); this adapter reads and
creates those files. Values are never logged. A generated key file is 0600 from its first byte. The rule
deciding what is secret is :mod:`supervisor.core.spec.secrets`; docs/security.md "Secrets" says where
the book's mask is applied.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import string
import threading
import urllib.parse
from collections.abc import Collection, Iterable
from pathlib import Path
from typing import TypeVar

import structlog

from supervisor.config.model import ApiKeySource, DaemonConfig, Profile
from supervisor.core.spec.model import ContainerSpec, EnvVar
from supervisor.core.spec.secrets import MASK, Redactor, spec_secret_values, url_secret_values
from supervisor.core.vllm.cmdline import canonical

T = TypeVar("T")
log = structlog.get_logger("supervisor.secrets")

#: The most secret values a book keeps (far more than a host's config holds).
MAX_KNOWN = 4096
#: A path segment of a secret URL this long is taken for a token (``/hook/<uuid>``, Slack's ``/XXXX``).
MIN_TOKEN_SEGMENT = 16


def read_secret_file(path: Path) -> str:
    """The content of a secret file with surrounding whitespace (the trailing newline) removed."""
    return path.read_text(encoding="utf-8").strip()


def inline_or_file(value: str | None, path: Path | None) -> str | None:
    """``value`` if set, else the content of ``path`` read now (None if neither, or the file is empty)."""
    if value is not None:
        return value
    if path is not None:
        return read_secret_file(path) or None
    return None


def new_key() -> str:
    """A fresh API key (43 URL-safe characters) that never begins with ``-``: vLLM's argparse reads such a
    value after ``--api-key`` as an option and refuses to start (docs/vllm-facts.md)."""
    key = secrets.token_urlsafe(32)
    if key.startswith("-"):  # one time in 64: another random first character
        key = secrets.choice(string.ascii_letters + string.digits) + key[1:]
    return key


def ensure_key_file(src: ApiKeySource) -> bool:
    """With ``generate``, create a missing key file (0600 from the first byte); True if created."""
    if src.file is None or not src.generate:
        return False
    src.file.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(src.file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(new_key() + "\n")
    return True


def resolve_api_key(src: ApiKeySource, spec: ContainerSpec) -> str | None:
    """The key value (never log it): from the file if set, else from the spec's environment."""
    if src.file is not None:
        try:
            return read_secret_file(src.file) or None
        except OSError:
            return None
    if src.env is not None:
        return spec.env_dict().get(src.env) or None
    return None


def command_with_key(command: tuple[str, ...], flag: str, key: str) -> tuple[str, ...]:
    """``command`` with the value of ``flag`` (``--flag VALUE`` or ``--flag=VALUE``) replaced by ``key``;
    a key that begins with ``-`` is written ``--flag=KEY`` (argparse would read ``--flag -K`` as two
    options and vLLM would refuse to start)."""
    out: list[str] = []
    skip = False
    want = canonical(flag)
    for i, arg in enumerate(command):
        name, eq, _value = arg.partition("=")
        if skip:
            skip = False
        elif canonical(name) != want:
            out.append(arg)
        elif eq:
            out.append(f"{name}={key}")
        elif i + 1 < len(command):
            out += [f"{arg}={key}"] if key.startswith("-") else [arg, key]
            skip = True
        else:
            out.append(arg)
    return tuple(out)


def spec_with_key(src: ApiKeySource | None, spec: ContainerSpec) -> ContainerSpec:
    """``spec`` with the key from ``src.file`` injected as env ``src.inject_env`` and/or as the value of
    the command flag ``src.inject_arg`` (unchanged otherwise)."""
    if src is None or src.file is None or not (src.inject_env or src.inject_arg):
        return spec
    key = resolve_api_key(src, spec)
    if key is None:
        return spec
    if src.inject_arg:
        spec = dataclasses.replace(spec, command=command_with_key(spec.command, src.inject_arg, key))
    if not src.inject_env:
        return spec
    env = (*(e for e in spec.env if e.name != src.inject_env), EnvVar(src.inject_env, key))
    return dataclasses.replace(spec, env=env)


def declared_names(src: ApiKeySource | None) -> frozenset[str]:
    """The env names a profile's API key uses (secret whatever they are called)."""
    return frozenset(n for n in ((src.env, src.inject_env) if src else ()) if n)


def secret_url_values(url: str) -> list[str]:
    """Every piece of a URL that is itself a secret (an alert webhook, a heartbeat): the URL, its
    userinfo, query values and the path segments long enough to be a token."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:  # a url_file's content no parser checked: the whole of it is the secret
        return [url]
    segments = [s for s in parts.path.split("/") if len(s) >= MIN_TOKEN_SEGMENT]
    values = [v for _k, v in urllib.parse.parse_qsl(parts.query, keep_blank_values=True)]
    return [url, *url_secret_values(url), *segments, *values]


class SecretBook:
    """The secret values this daemon knows, and the mask applied wherever text leaves the process.

    It learns from the config at start and on reload (secret env values, secret flag values, the API
    key files, alert and heartbeat URLs and signing secrets, the secret parts of companion URLs) and from
    every spec the daemon creates or inspects. It only grows (an old key may still be in a log), up to
    MAX_KNOWN values. :meth:`text` and :meth:`data` mask with :class:`Redactor` (any thread).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._redactor = Redactor()

    @property
    def redactor(self) -> Redactor:
        """The current mask (an immutable value: safe to use on any thread)."""
        return self._redactor

    def learn(self, values: Iterable[str | None]) -> None:
        """Remember ``values`` as secret (empty ones and the mask itself are ignored)."""
        new = {v.strip() for v in values if v and v.strip() and v != MASK}
        with self._lock:
            known = self._redactor.known
            if new <= known:
                return
            merged = known | new
            if len(merged) > MAX_KNOWN:
                log.warning("secrets.book_full", known=len(known), dropped=len(merged) - MAX_KNOWN)
                merged = known | set(
                    sorted(new - known, key=len, reverse=True)[: max(0, MAX_KNOWN - len(known))]
                )
            self._redactor = Redactor(frozenset(merged))

    def learn_spec(self, spec: ContainerSpec, declared: Collection[str] = ()) -> None:
        """The secret values of a container spec (the profile's, or one read back from Docker)."""
        self.learn(spec_secret_values(spec, declared))

    def learn_profile(self, profile: Profile) -> None:
        """A profile's secrets: its spec with the API key (the key file read now), companion URL parts."""
        declared = declared_names(profile.api_key)
        try:
            spec = spec_with_key(profile.api_key, profile.container)
        except (OSError, UnicodeDecodeError):
            spec = profile.container  # an unreadable key file: learnt when a container is created
        self.learn_spec(spec, declared)
        for companion in profile.companions:
            self.learn(url_secret_values(companion.url))

    def learn_config(self, config: DaemonConfig) -> None:
        """Every secret of a daemon config: the profiles', the alert channels', the heartbeat's."""
        for profile in config.profiles:
            self.learn_profile(profile)
        hb = config.heartbeat
        sources = [(c.url, c.url_file) for c in config.alerts.channels]
        sources += [(hb.url, hb.url_file), (hb.fail_url, hb.fail_url_file)]
        for value, path in sources:
            url = _readable(value, path)
            if url:
                self.learn(secret_url_values(url))
        self.learn(_readable(c.secret, c.secret_file) for c in config.alerts.channels)

    def text(self, text: str) -> str:
        """``text`` masked (known values and secret shapes)."""
        return self._redactor.text(text)

    def data(self, value: T) -> T:
        """``value`` (a record, a reply, an alert message) with every string in it masked."""
        return self._redactor.data(value)


def _readable(value: str | None, path: Path | None) -> str | None:
    """:func:`inline_or_file`, None when the file cannot be read (the sender reports that itself)."""
    try:
        return inline_or_file(value, path)
    except (OSError, UnicodeDecodeError):
        return None
