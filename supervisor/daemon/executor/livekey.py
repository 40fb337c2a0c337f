"""The API key the running container was created with: what the probes send (executor-private).

Probes authenticate with the key the server actually has, read from its command line and environment
(``docker inspect``: the watcher's first look, or a pool job's) the way vLLM picks it: ``--api-key``
values (the last occurrence) win over ``VLLM_API_KEY`` (core/vllm/server_keys.py). A profile with
``--api-key`` in its command and no ``api_key:`` section (what a snapshot of such a container gives) is
served with that key. Not the key file as it is now: a key file rotated under a running server must not
turn every probe into a 401, a DEGRADED and an emergency (docs/state-machine.md "Auth"). The key file is
compared with the running key by hash; the machine turns a difference into a "restart needed" warning.
Values are never logged, never persisted, never in repr.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading

import structlog

from supervisor.adapters.docker.adapter import DockerAdapter
from supervisor.adapters.docker.status import ContainerStatus
from supervisor.adapters.secrets import read_secret_file, resolve_api_key, spec_with_key
from supervisor.config import ApiKeySource
from supervisor.core.errors import SupervisorError
from supervisor.core.events import Event, KeyFileChecked
from supervisor.core.spec.model import ContainerSpec
from supervisor.core.vllm.cmdline import API_KEY_ENV, api_keys
from supervisor.core.vllm.server_keys import env_of, server_keys

log = structlog.get_logger("supervisor.livekey")

#: Salt of the key ids of this process: an id tells two keys apart and reveals nothing of either.
_SALT = secrets.token_bytes(16)


def key_id(key: str) -> str:
    """A short id of ``key`` (salted per daemon process: it cannot be looked up in a dictionary)."""
    return hmac.new(_SALT, key.encode("utf-8"), hashlib.sha256).hexdigest()[:12]


def _same(a: str, b: str) -> bool:
    return hmac.compare_digest(hashlib.sha256(a.encode()).digest(), hashlib.sha256(b.encode()).digest())


def spec_argv(spec: ContainerSpec) -> tuple[str, ...]:
    """What the container runs, as far as the spec says (entrypoint + command)."""
    return (*(spec.entrypoint or ()), *spec.command)


def spec_key(source: ApiKeySource | None, spec: ContainerSpec) -> str | None:
    """The key a container made from ``spec`` (with ``source``'s key injected) serves with, or None."""
    made = spec_with_key(source, spec)
    keys = server_keys(spec_argv(made), made.env_dict())
    if keys:
        return keys[0]
    return resolve_api_key(source, spec) if source is not None else None


class LiveKey:
    """The key of one profile's current container (thread-safe: the watcher and pool jobs use it)."""

    def __init__(self, docker: DockerAdapter, source: ApiKeySource | None, spec: ContainerSpec) -> None:
        self._docker = docker
        self._lock = threading.Lock()
        self._source = source
        self._spec = spec
        self._container: str | None = None
        self._known = False  # the current container's command line and environment were read
        self._key: str | None = None
        self._on_argv = False  # the current container's key is on its command line (not the key file's)

    def __repr__(self) -> str:
        return f"LiveKey(container={self._container!r}, known={self._known})"

    @property
    def env_name(self) -> str | None:
        """The container env var the profile puts the key in (None: no ``api_key:``, or not as env)."""
        src = self._source
        if src is None:
            return None
        return src.inject_env if src.file is not None else src.env

    def configure(self, source: ApiKeySource | None, spec: ContainerSpec) -> None:
        """The profile was reloaded: the next container uses this; the running one keeps its key."""
        with self._lock:
            self._source, self._spec = source, spec

    def watching(self, container_id: str) -> None:
        """``container_id`` is the profile's container from now on (its key is not known yet)."""
        with self._lock:
            if container_id != self._container:
                self._container, self._known, self._key, self._on_argv = container_id, False, None, False

    def learn(self, status: ContainerStatus) -> None:
        """An inspect of a container: remember its key if it is the current one (as vLLM picks it)."""
        name = self.env_name
        on_argv = bool(api_keys(status.argv))
        keys = server_keys(status.argv, env_of(status.env))
        key = keys[0] if keys else None
        if key is None and name is not None and name != API_KEY_ENV:
            key = status.env_value(name) or None  # an image that reads the key from another variable
        with self._lock:
            if status.id != self._container:
                return
            self._key, self._on_argv, self._known = key, on_argv, True

    def value(self) -> str | None:
        """The key to send (pool jobs only: may inspect the container). Unknowable: the configured one."""
        with self._lock:
            src, spec, cid, known, key = self._source, self._spec, self._container, self._known, self._key
        if known:
            return key
        if cid is not None:
            try:
                status = self._docker.status(cid)
            except SupervisorError as exc:
                log.warning("api_key.inspect_failed", container_id=cid[:12], error=str(exc))
                status = None
            if status is not None:
                self.learn(status)
                with self._lock:
                    if self._known and self._container == cid:
                        return self._key
        return spec_key(src, spec)  # the container's key is not readable: the profile's

    def check_file(self) -> list[Event]:
        """Pool job: compare the key file with the running container's key (by hash, never by value).

        Nothing is answered when either cannot be read (the file is missing, Docker is silent), or when
        the server takes its key from its command line (the file's key is not the one in force).
        """
        src = self._source
        if src is None or src.file is None or self.env_name is None:
            return []
        if api_keys(spec_argv(self._spec)):
            return []
        try:
            file_key = read_secret_file(src.file)
        except OSError as exc:
            log.warning("api_key.file_unreadable", file=str(src.file), error=type(exc).__name__)
            return []
        running = self.value()
        with self._lock:
            if self._on_argv:
                return []
        if not file_key or running is None:
            return []
        if _same(file_key, running):
            return [KeyFileChecked(False)]
        return [KeyFileChecked(True, key_id(file_key))]
