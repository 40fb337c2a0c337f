"""Ask the Docker engine whether it answers, every few seconds, on a thread of its own.

A hung engine (it accepts connections and never replies) shows up in ``status`` as "not answering
since ..." within one ping timeout, while every real Docker call waits on the executor's pool.
"""

from __future__ import annotations

from collections.abc import Callable

from supervisor.adapters.docker.adapter import DockerAdapter
from supervisor.adapters.threads import Periodic
from supervisor.core.errors import SupervisorError
from supervisor.core.fleet.events import DockerPinged

PING_EVERY_S = 5.0
PING_TIMEOUT_S = 3.0


class DockerPinger:
    """Posts a :class:`DockerPinged` after every ping."""

    def __init__(
        self, docker: DockerAdapter, post: Callable[[DockerPinged], None], every_s: float = PING_EVERY_S
    ) -> None:
        self._docker = docker
        self._post = post
        self._thread = Periodic("docker-ping", every_s, self._ping)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._thread.stop()

    def _ping(self) -> None:
        try:
            self._docker.ping()
            self._post(DockerPinged(True))
        except SupervisorError as exc:
            self._post(DockerPinged(False, str(exc)))
