"""What Docker's answers mean: a docker/requests error translated into :mod:`supervisor.core.errors`
(``ImageMissing``, ``NameConflict``, ``PortInUse``, ``ContainerMissing``, ``EngineUnreachable``, else
``DockerError`` with the engine's message), and the one refusal that passes if asked again (a removal
whose killed main process is not reaped yet: :func:`until_reaped`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import NoReturn

import docker
import docker.errors
import requests
import structlog

from supervisor.core.errors import (
    ContainerMissing,
    DockerError,
    EngineUnreachable,
    ImageMissing,
    NameConflict,
    PortInUse,
)

log = structlog.get_logger(__name__)


def engine_message(exc: docker.errors.APIError) -> str:
    return str(exc.explanation or exc)


#: How long a removal waits for a dead main process to be reaped, and how often it asks again.
ZOMBIE_WAIT_S = 30.0
ZOMBIE_RETRY_S = 0.5


def _is_zombie(exc: BaseException) -> bool:
    """Docker's 500 for a container whose main process died but is not reaped yet."""
    return isinstance(exc, docker.errors.APIError) and "is zombie" in engine_message(exc).lower()


def until_reaped(remove: Callable[[], object]) -> None:
    """Call ``remove`` (a forced container removal); while Docker answers that the main process is a
    zombie, call it again every ``ZOMBIE_RETRY_S`` for at most ``ZOMBIE_WAIT_S``, then let it raise."""
    deadline = time.monotonic() + ZOMBIE_WAIT_S
    while True:
        try:
            remove()
            return
        except docker.errors.APIError as exc:
            if not _is_zombie(exc) or time.monotonic() >= deadline:
                raise
            log.info("docker.container.remove_zombie", error=engine_message(exc)[:200])
            time.sleep(ZOMBIE_RETRY_S)


def translate(exc: BaseException, what: str) -> NoReturn:
    """Raise the project's own error for a docker/requests error ``exc`` raised while doing ``what``."""
    if isinstance(exc, docker.errors.ImageNotFound):
        raise ImageMissing(
            f"{what}: image is not present locally ({engine_message(exc)}); "
            "build or load it first (the supervisor never pulls)"
        ) from exc
    if isinstance(exc, docker.errors.APIError):
        msg = engine_message(exc)
        low = msg.lower()
        if exc.status_code == 404 and ("no such image" in low or "pull access" in low):
            raise ImageMissing(
                f"{what}: image is not present locally ({msg}); build or load it first"
            ) from exc
        if exc.status_code == 404:
            raise ContainerMissing(f"{what}: {msg}") from exc
        if exc.status_code == 409 and "already in use" in low:
            raise NameConflict(f"{what}: {msg}") from exc
        if "port is already allocated" in low or "address already in use" in low:
            raise PortInUse(f"{what}: {msg}") from exc
        raise DockerError(f"{what}: {msg}") from exc
    if isinstance(exc, requests.exceptions.Timeout | requests.exceptions.ConnectionError):
        raise EngineUnreachable(f"{what}: Docker engine did not answer ({type(exc).__name__})") from exc
    if isinstance(exc, docker.errors.DockerException):
        raise EngineUnreachable(f"{what}: {exc}") from exc
    raise DockerError(f"{what}: {exc}") from exc


ERRORS = (docker.errors.DockerException, requests.exceptions.RequestException)
