"""The Docker adapter: with its two parts, docker_errors.py (what Docker's answers mean) and
docker_stream.py (its streams: ``logs``, ``events``), the only modules that import ``docker``.

Every call has an explicit timeout; every docker/requests error is translated at this edge into
:mod:`supervisor.core.errors` (docker_errors.py). Environment values are never logged.

Create arguments come from :func:`supervisor.config.container_create_kwargs` (pure); the restart
policy is always ``no``.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping
from typing import Any

import docker
import docker.errors
import requests
import structlog
from docker.transport import UnixHTTPAdapter
from docker.utils import kwargs_from_env

from supervisor.adapters.docker.errors import ERRORS, engine_message, translate, until_reaped
from supervisor.adapters.docker.status import (
    LIFECYCLE_ACTIONS,
    ContainerStatus,
    parse_docker_time,
    status_from_inspect,
)
from supervisor.adapters.docker.stream import StreamReads
from supervisor.core.errors import (
    ContainerMissing,
    DockerError,
    ImageMissing,
)
from supervisor.core.spec.model import ContainerSpec
from supervisor.core.spec.shape import container_create_kwargs

log = structlog.get_logger(__name__)

__all__ = ["LIFECYCLE_ACTIONS", "ContainerStatus", "DockerAdapter", "parse_docker_time"]


class OnePoolUnixAdapter(UnixHTTPAdapter):
    """docker-py's unix-socket transport with one connection pool for the socket.

    docker-py keys its pools by the whole request URL (path and query), so every container id, every
    ``events?since=`` window and every log request opens a new socket and a new pool, and evicts another
    (25 pools at most): a daemon that inspects new containers all night opens a socket for most calls.
    Every request here goes to the same socket, so one pool (up to ``max_pool_size`` idle connections)
    serves them all.
    """

    def get_connection(self, url: str | bytes, proxies: Any = None) -> Any:
        return super().get_connection("http+docker://localhost", proxies)


def _one_pool(client: docker.APIClient) -> docker.APIClient:
    """Mount :class:`OnePoolUnixAdapter` on a unix-socket client (a TCP or SSH one is left as it is)."""
    current = getattr(client, "_custom_adapter", None)
    if type(current) is UnixHTTPAdapter:
        adapter = OnePoolUnixAdapter(
            current.socket_path, current.timeout, pool_connections=1, max_pool_size=current.max_pool_size
        )
        client._custom_adapter = adapter  # type: ignore[attr-defined]
        client.mount("http+docker://", adapter)
        current.close()
    return client


class DockerAdapter(StreamReads):
    """Thin, typed, timeout-bounded access to the Docker engine through the low-level API (its streams,
    ``logs`` and ``events``: :class:`~supervisor.adapters.docker.stream.StreamReads`)."""

    def __init__(self, base_url: str | None = None, timeout: float = 30.0) -> None:
        """Never talks to the engine (the API version is negotiated on the first call, off any loop): a
        Docker engine that is down or hung when the daemon starts must not delay its start-up."""
        self.timeout = timeout
        self._params: dict[str, Any] = dict(kwargs_from_env()) if base_url is None else {"base_url": base_url}
        self._connect_lock = threading.Lock()
        self._clients: tuple[docker.APIClient, docker.APIClient] | None = None

    def with_timeout(self, timeout: float) -> DockerAdapter:
        """Another adapter on the same engine with another per-call timeout (the pinger's short one)."""
        other = DockerAdapter(timeout=timeout)
        other._params = dict(self._params)
        return other

    def _connect(self) -> tuple[docker.APIClient, docker.APIClient]:
        """The (timed, streaming) API clients, made on first use with the engine's API version."""
        with self._connect_lock:
            if self._clients is not None:
                return self._clients
            try:
                try:
                    api = _one_pool(
                        docker.APIClient(timeout=math.ceil(self.timeout), version="auto", **self._params)
                    )
                except ERRORS as exc:
                    # the engine did not answer the version question: fail this call; the next one asks again
                    translate(exc, "connect to Docker")
                stream = _one_pool(docker.APIClient(timeout=None, version=api.api_version, **self._params))  # type: ignore[arg-type]
            except ERRORS as exc:
                translate(exc, "connect to Docker")
            self._clients = (api, stream)
            return self._clients

    @property
    def _api(self) -> docker.APIClient:
        return self._connect()[0]

    @property
    def _stream_api(self) -> docker.APIClient:
        return self._connect()[1]

    def close(self) -> None:
        """Release the HTTP connections (if any were made); the adapter stays usable (it connects again)."""
        for client in self._clients or ():
            client.close()

    def reconnect(self) -> None:
        """Drop every kept-alive connection: the next request opens a fresh one. For when Docker was seen
        going down: dockerd stops listening at once but keeps serving the connections it has until it
        exits, so a kept connection still reaches the dockerd that is shutting down, which creates a
        container and then fails to start it (seen here: tests/test_daemon_dockerd_restart.py)."""
        self.close()

    # -- lifecycle -----------------------------------------------------------------------------------
    def ping(self) -> bool:
        """True if the engine answers; raises EngineUnreachable otherwise."""
        try:
            return bool(self._api.ping())
        except ERRORS as exc:
            translate(exc, "ping")

    def create(self, spec: ContainerSpec, extra_labels: Mapping[str, str] | None = None) -> str:
        """Create (not start) the container described by ``spec``; returns its id."""
        kw = container_create_kwargs(spec)
        kw["labels"] = {**(kw.get("labels") or {}), **(extra_labels or {})}
        kw["use_config_proxy"] = False  # never add proxy variables from ~/.docker/config.json
        if spec.network_mode == "host":  # published ports mean nothing with the host's network
            kw.pop("ports", None)
            kw["host_config"].pop("PortBindings", None)
        try:
            res = self._api.create_container(**kw)
        except ERRORS as exc:
            translate(exc, f"create container {spec.name}")
        cid = str(res["Id"])
        log.info("docker.container.created", name=spec.name, id=cid[:12], image=spec.image)
        return cid

    def start(self, ref: str) -> None:
        """Start a created or stopped container."""
        try:
            self._api.start(ref)
        except ERRORS as exc:
            translate(exc, f"start container {ref}")
        log.info("docker.container.started", ref=ref)

    def stop(self, ref: str, grace_s: float) -> None:
        """SIGTERM (or the container's stop signal), wait ``grace_s``, then SIGKILL."""
        grace = max(0, round(grace_s))
        try:
            self._api.stop(ref, timeout=grace)  # docker-py adds ``grace`` to the HTTP timeout
        except ERRORS as exc:
            translate(exc, f"stop container {ref}")
        log.info("docker.container.stopped", ref=ref, grace_s=grace)

    def kill(self, ref: str, signal: str | int = "SIGKILL") -> None:
        """Send ``signal`` to the container's main process."""
        try:
            self._api.kill(ref, signal=signal)
        except ERRORS as exc:
            translate(exc, f"kill container {ref}")
        log.info("docker.container.killed", ref=ref, signal=str(signal))

    def remove(self, ref: str, force: bool = False) -> None:
        """Remove the container (and its anonymous volumes).

        A forced removal kills the main process and waits 10 s for the container to stop; if by then
        the process has died but is not reaped (its PID namespace still being torn down, e.g. a big
        engine process unmapping its memory), Docker answers 500 "PID ... is zombie and can not be
        killed". That passes once the kernel finishes, so the removal is asked again (``until_reaped``;
        seen in CI on the real vLLM CPU server right after a 10k-token prefill)."""
        try:
            until_reaped(lambda: self._api.remove_container(ref, force=force, v=True))
        except ERRORS as exc:
            translate(exc, f"remove container {ref}")
        log.info("docker.container.removed", ref=ref, force=force)

    def clear_restart_policy(self, ref: str) -> None:
        """``docker update --restart no``: only the supervisor restarts the container (init, adoption)."""
        try:
            policy: Any = {"Name": "no", "MaximumRetryCount": 0}  # the stubs do not list "no"
            self._api.update_container(ref, restart_policy=policy)
        except ERRORS as exc:
            translate(exc, f"update the restart policy of container {ref}")
        log.info("docker.container.restart_policy", ref=ref, policy="no")

    def wait(self, ref: str, timeout: float) -> int:
        """Block until the container exits (at most ``timeout`` s; DockerError after); its exit code."""
        try:
            res = self._api.wait(ref, timeout=math.ceil(timeout))
        except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError) as exc:
            # a read timeout on the wait call surfaces as either, depending on where urllib3 noticed it
            if isinstance(exc, requests.exceptions.ReadTimeout) or "timed out" in str(exc).lower():
                raise DockerError(f"container {ref} did not exit within {timeout:.0f}s") from exc
            translate(exc, f"wait for container {ref}")
        except ERRORS as exc:
            translate(exc, f"wait for container {ref}")
        return int(res.get("StatusCode", -1))

    # -- reading -------------------------------------------------------------------------------------
    def inspect(self, ref: str) -> dict[str, Any]:
        """The full ``docker inspect`` of a container; ContainerMissing if there is none."""
        try:
            return dict(self._api.inspect_container(ref))
        except ERRORS as exc:
            translate(exc, f"inspect container {ref}")

    def running_ids(self) -> list[str]:
        """Full ids of every running container on the engine (whoever made them)."""
        try:
            return [str(c["Id"]) for c in self._api.containers(quiet=True)]
        except ERRORS as exc:
            translate(exc, "list running containers")

    def find(self, name: str) -> dict[str, Any] | None:
        """The inspect of the container with exactly this name, or None."""
        try:
            info = self.inspect(name)
        except ContainerMissing:
            return None
        return info if str(info.get("Name", "")).lstrip("/") == name else None

    def status(self, ref: str) -> ContainerStatus | None:
        """What the daemon needs to know of a container (by id or exact name); None if there is none."""
        try:
            info = self.inspect(ref)
        except ContainerMissing:
            return None
        name = str(info.get("Name", "")).lstrip("/")
        if ref != info.get("Id") and not str(info.get("Id", "")).startswith(ref) and name != ref:
            return None
        return status_from_inspect(info)

    def image_info(self, image: str) -> dict[str, Any]:
        """The image's ``docker image inspect`` (``Id``, ``Config``, ...); ImageMissing if absent."""
        try:
            return dict(self._api.inspect_image(image))  # type: ignore[no-untyped-call]
        except docker.errors.NotFound as exc:
            raise ImageMissing(f"image {image} is not present locally ({engine_message(exc)})") from exc
        except ERRORS as exc:
            translate(exc, f"inspect image {image}")

    def path_exists(self, ref: str, path: str) -> bool:
        """Whether ``path`` exists in container ``ref`` (a created one too: nothing has to run)."""
        try:
            stream, _ = self._api.get_archive(ref, path)
            stream.close()  # the stat header answered; the content is not read
            return True
        except docker.errors.NotFound:
            return False
        except ERRORS as exc:
            translate(exc, f"look for {path} in container {ref[:12]}")

    def image_config(self, image: str) -> dict[str, Any]:
        """The image's ``Config`` (Env, Entrypoint, Cmd, Labels, ...); ImageMissing if absent."""
        return dict(self.image_info(image).get("Config") or {})
