"""The Docker adapter: the only module that imports ``docker``.

Every call has an explicit timeout; every docker/requests error is translated at this edge into
:mod:`supervisor.core.errors` (``ImageMissing``, ``NameConflict``, ``PortInUse``, ``ContainerMissing``,
``EngineUnreachable``, else ``DockerError`` with the engine's message). Environment values are never logged.

Create arguments come from :func:`supervisor.config.container_create_kwargs` (pure); the restart
policy is always ``no``. Streams (``logs(follow=True)``, ``events``) use a second client without a
read timeout, because an idle container or a quiet engine is normal there; they end when the caller's
``stop`` event is set (a watcher thread closes the socket) or, for logs, when the container exits.
"""

from __future__ import annotations

import codecs
import contextlib
import math
import struct
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, NoReturn

import docker
import docker.errors
import requests
import structlog
from docker.types.daemon import CancellableStream
from docker.utils import kwargs_from_env

from supervisor.adapters.container_status import (
    LIFECYCLE_ACTIONS,
    ContainerStatus,
    event_dict,
    parse_docker_time,
    status_from_inspect,
)
from supervisor.core.errors import (
    ContainerMissing,
    DockerError,
    EngineUnreachable,
    ImageMissing,
    NameConflict,
    PortInUse,
)
from supervisor.core.spec.model import ContainerSpec
from supervisor.core.spec.shape import container_create_kwargs

log = structlog.get_logger(__name__)

__all__ = ["LIFECYCLE_ACTIONS", "ContainerStatus", "DockerAdapter", "parse_docker_time"]


def _engine_message(exc: docker.errors.APIError) -> str:
    return str(exc.explanation or exc)


#: How long a removal waits for a dead main process to be reaped, and how often it asks again.
ZOMBIE_WAIT_S = 30.0
ZOMBIE_RETRY_S = 0.5


def _is_zombie(exc: BaseException) -> bool:
    """Docker's 500 for a container whose main process died but is not reaped yet."""
    return isinstance(exc, docker.errors.APIError) and "is zombie" in _engine_message(exc).lower()


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
            log.info("docker.container.remove_zombie", error=_engine_message(exc)[:200])
            time.sleep(ZOMBIE_RETRY_S)


def _translate(exc: BaseException, what: str) -> NoReturn:
    """Raise the project's own error for a docker/requests error ``exc`` raised while doing ``what``."""
    if isinstance(exc, docker.errors.ImageNotFound):
        raise ImageMissing(
            f"{what}: image is not present locally ({_engine_message(exc)}); "
            "build or load it first (the supervisor never pulls)"
        ) from exc
    if isinstance(exc, docker.errors.APIError):
        msg = _engine_message(exc)
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


_ERRORS = (docker.errors.DockerException, requests.exceptions.RequestException)


class _Closer:
    """Closes a docker stream when ``stop`` is set (from a small watcher thread).

    ``stop.wait`` returns the moment ``stop`` is set, so the wait's timeout only bounds how long the
    thread outlives a stream that ended on its own (``finish``): ``DONE_POLL_S``, with one wake-up per
    period (it was 0.2 s: 5 wake-ups a second for each open stream, a tenth of the daemon's idle CPU)."""

    def __init__(self, stream: Any, stop: threading.Event) -> None:
        self._stream = stream
        self._done = threading.Event()
        self._thread = threading.Thread(
            target=self._watch, args=(stop,), name="docker-stream-closer", daemon=True
        )
        self._thread.start()

    def _watch(self, stop: threading.Event) -> None:
        while not self._done.is_set():
            if stop.wait(DONE_POLL_S):
                with contextlib.suppress(Exception):
                    self._stream.close()
                return

    def finish(self) -> None:
        """The stream ended (or its reader stopped): close it; the thread ends at its next wake-up."""
        self._done.set()
        with contextlib.suppress(Exception):
            self._stream.close()


#: How long a stream's closer thread may outlive the stream (module docstring of :class:`_Closer`).
DONE_POLL_S = 2.0
#: Docker's multiplexed stream: each frame is an 8-byte header (stream, 3 zero bytes, big-endian length).
_FRAME_HEADER = struct.Struct(">BxxxL")


def _log_payloads(response: Any, tty: bool) -> Iterator[bytes]:
    """The log bytes of a followed ``/containers/{id}/logs`` response, as they arrive.

    A follower wakes for every log line (a serving vLLM logs each request), so this is the daemon's
    busiest path. docker-py reads each multiplexed frame with two reads through urllib3 and http.client's
    chunk state machine: 270 us of thread CPU per followed line, where the wake-up itself (one ``recv``)
    costs 34 us (bench/bench_logfollow.py). Here each wake-up takes what the socket has with one
    buffered ``read1``, undoes HTTP's chunked encoding and Docker's 8-byte frame headers on the bytes, and
    hands on every complete frame at once; a piece split across reads waits for its rest. A TTY
    container's log is not multiplexed."""
    fp = response.raw._fp  # http.client's response: its headers are read, its body is not
    reader = fp.fp  # the buffered socket reader (it may already hold the first bytes of the body)
    body: Iterator[bytes] = _dechunked(reader) if fp.chunked else iter(lambda: reader.read1(65536), b"")
    if tty:
        yield from body
        return
    buf = bytearray()
    for piece in body:
        buf += piece
        out: list[bytes] = []
        at = 0
        while len(buf) - at >= _FRAME_HEADER.size:
            _, length = _FRAME_HEADER.unpack_from(buf, at)
            end = at + _FRAME_HEADER.size + length
            if end > len(buf):
                break
            out.append(bytes(buf[at + _FRAME_HEADER.size : end]))
            at = end
        del buf[:at]
        if out:
            yield b"".join(out)


def _dechunked(reader: Any) -> Iterator[bytes]:
    """HTTP/1.1 chunked transfer encoding undone over ``reader.read1``: per read, the data of every
    complete chunk in it; ends at the last chunk (size 0) or when the connection closes."""
    buf = bytearray()
    while True:
        data = reader.read1(65536)
        if not data:
            return
        buf += data
        out: list[bytes] = []
        at = 0
        while True:
            eol = buf.find(b"\r\n", at)
            if eol < 0:
                break
            try:
                size = int(bytes(buf[at:eol]).split(b";", 1)[0], 16)
            except ValueError:
                return  # not chunked HTTP: end the stream (the follower attaches again)
            if size == 0:
                if out:
                    yield b"".join(out)
                return
            end = eol + 2 + size + 2  # the data, then its CRLF
            if end > len(buf):
                break
            out.append(bytes(buf[eol + 2 : eol + 2 + size]))
            at = end
        del buf[:at]
        if out:
            yield b"".join(out)


def _split_lines(chunks: Iterable[bytes]) -> Iterator[str]:
    """Decode byte chunks into lines: split on ``\\n``; a ``\\r`` (progress bars) also ends a line."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    buf = ""
    for chunk in chunks:
        buf += decoder.decode(chunk)
        *complete, buf = buf.split("\n")
        for line in complete:
            yield from (seg for seg in line.split("\r") if seg)
    buf += decoder.decode(b"", final=True)
    yield from (seg for seg in buf.split("\r") if seg)


class DockerAdapter:
    """Thin, typed, timeout-bounded access to the Docker engine through the low-level API."""

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
                    api = docker.APIClient(timeout=math.ceil(self.timeout), version="auto", **self._params)
                except _ERRORS as exc:
                    # the engine did not answer the version question: fail this call; the next one asks again
                    _translate(exc, "connect to Docker")
                stream = docker.APIClient(timeout=None, version=api.api_version, **self._params)  # type: ignore[arg-type]
            except _ERRORS as exc:
                _translate(exc, "connect to Docker")
            self._clients = (api, stream)
            return self._clients

    @property
    def _api(self) -> docker.APIClient:
        return self._connect()[0]

    @property
    def _stream_api(self) -> docker.APIClient:
        return self._connect()[1]

    def close(self) -> None:
        """Release the HTTP connections (if any were made)."""
        for client in self._clients or ():
            client.close()

    # -- lifecycle -----------------------------------------------------------------------------------
    def ping(self) -> bool:
        """True if the engine answers; raises EngineUnreachable otherwise."""
        try:
            return bool(self._api.ping())
        except _ERRORS as exc:
            _translate(exc, "ping")

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
        except _ERRORS as exc:
            _translate(exc, f"create container {spec.name}")
        cid = str(res["Id"])
        log.info("docker.container.created", name=spec.name, id=cid[:12], image=spec.image)
        return cid

    def start(self, ref: str) -> None:
        """Start a created or stopped container."""
        try:
            self._api.start(ref)
        except _ERRORS as exc:
            _translate(exc, f"start container {ref}")
        log.info("docker.container.started", ref=ref)

    def stop(self, ref: str, grace_s: float) -> None:
        """SIGTERM (or the container's stop signal), wait ``grace_s``, then SIGKILL."""
        grace = max(0, round(grace_s))
        try:
            self._api.stop(ref, timeout=grace)  # docker-py adds ``grace`` to the HTTP timeout
        except _ERRORS as exc:
            _translate(exc, f"stop container {ref}")
        log.info("docker.container.stopped", ref=ref, grace_s=grace)

    def kill(self, ref: str, signal: str | int = "SIGKILL") -> None:
        """Send ``signal`` to the container's main process."""
        try:
            self._api.kill(ref, signal=signal)
        except _ERRORS as exc:
            _translate(exc, f"kill container {ref}")
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
        except _ERRORS as exc:
            _translate(exc, f"remove container {ref}")
        log.info("docker.container.removed", ref=ref, force=force)

    def clear_restart_policy(self, ref: str) -> None:
        """``docker update --restart no``: only the supervisor restarts the container (init, adoption)."""
        try:
            policy: Any = {"Name": "no", "MaximumRetryCount": 0}  # the stubs do not list "no"
            self._api.update_container(ref, restart_policy=policy)
        except _ERRORS as exc:
            _translate(exc, f"update the restart policy of container {ref}")
        log.info("docker.container.restart_policy", ref=ref, policy="no")

    def wait(self, ref: str, timeout: float) -> int:
        """Block until the container exits (at most ``timeout`` s; DockerError after); its exit code."""
        try:
            res = self._api.wait(ref, timeout=math.ceil(timeout))
        except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError) as exc:
            # a read timeout on the wait call surfaces as either, depending on where urllib3 noticed it
            if isinstance(exc, requests.exceptions.ReadTimeout) or "timed out" in str(exc).lower():
                raise DockerError(f"container {ref} did not exit within {timeout:.0f}s") from exc
            _translate(exc, f"wait for container {ref}")
        except _ERRORS as exc:
            _translate(exc, f"wait for container {ref}")
        return int(res.get("StatusCode", -1))

    # -- reading -------------------------------------------------------------------------------------
    def inspect(self, ref: str) -> dict[str, Any]:
        """The full ``docker inspect`` of a container; ContainerMissing if there is none."""
        try:
            return dict(self._api.inspect_container(ref))
        except _ERRORS as exc:
            _translate(exc, f"inspect container {ref}")

    def running_ids(self) -> list[str]:
        """Full ids of every running container on the engine (whoever made them)."""
        try:
            return [str(c["Id"]) for c in self._api.containers(quiet=True)]
        except _ERRORS as exc:
            _translate(exc, "list running containers")

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
            raise ImageMissing(f"image {image} is not present locally ({_engine_message(exc)})") from exc
        except _ERRORS as exc:
            _translate(exc, f"inspect image {image}")

    def path_exists(self, ref: str, path: str) -> bool:
        """Whether ``path`` exists in container ``ref`` (a created one too: nothing has to run)."""
        try:
            stream, _ = self._api.get_archive(ref, path)
            stream.close()  # the stat header answered; the content is not read
            return True
        except docker.errors.NotFound:
            return False
        except _ERRORS as exc:
            _translate(exc, f"look for {path} in container {ref[:12]}")

    def image_config(self, image: str) -> dict[str, Any]:
        """The image's ``Config`` (Env, Entrypoint, Cmd, Labels, ...); ImageMissing if absent."""
        return dict(self.image_info(image).get("Config") or {})

    def logs(
        self,
        ref: str,
        since: float | None = None,
        follow: bool = False,
        stop: threading.Event | None = None,
        *,
        tail: int | None = None,
        timestamps: bool = False,
    ) -> Iterator[str]:
        """Lines of stdout+stderr (since ``since`` epoch seconds, the last ``tail`` only, each prefixed
        with Docker's RFC 3339 time when ``timestamps``); with ``follow`` until exit or ``stop``."""
        try:
            # bounded check first: the stream client has no timeout
            info = self._api.inspect_container(ref)
            if follow:
                stream: Any = self._follow_logs(
                    ref, since, tail, timestamps, bool((info.get("Config") or {}).get("Tty"))
                )
            else:
                stream = self._api.logs(
                    ref,
                    stdout=True,
                    stderr=True,
                    stream=True,
                    follow=False,
                    since=since if since else None,
                    tail="all" if tail is None else tail,
                    timestamps=timestamps,
                )
        except _ERRORS as exc:
            _translate(exc, f"logs of container {ref}")
        closer = _Closer(stream, stop) if stop is not None else None
        try:
            yield from _split_lines(stream)
        except _ERRORS as exc:
            if not (stop is not None and stop.is_set()):
                _translate(exc, f"logs of container {ref}")
        except (OSError, ValueError, AttributeError):
            if not (stop is not None and stop.is_set()):
                raise
        finally:
            if closer is not None:
                closer.finish()
            else:
                with contextlib.suppress(Exception):
                    stream.close()

    def _follow_logs(
        self, ref: str, since: float | None, tail: int | None, timestamps: bool, tty: bool
    ) -> CancellableStream[bytes]:
        """The followed log stream, read by :func:`_log_payloads` (docker-py's parameters, its
        ``CancellableStream``: a closed or broken connection ends the iteration)."""
        api: Any = self._stream_api  # docker-py's own request helpers (not in its type stubs)
        params: dict[str, Any] = {
            "stdout": 1,
            "stderr": 1,
            "follow": 1,
            "timestamps": int(timestamps),
            "tail": "all" if tail is None else tail,
        }
        if since:
            params["since"] = since
        response = api._get(api._url("/containers/{0}/logs", ref), params=params, stream=True)
        api._raise_for_status(response)
        return CancellableStream(_log_payloads(response, tty), response)

    def events(
        self, name: str, stop: threading.Event, since: float | None = None
    ) -> Iterator[dict[str, Any]]:
        """Lifecycle events of the container ``name`` until ``stop`` is set; reconnects if the stream drops.

        Each event: ``{"action", "id", "name", "exit_code" (int|None), "signal", "time" (epoch s)}``.
        Returns within ~0.2 s of ``stop`` being set.
        """
        last = since if since is not None else time.time()
        seen: set[tuple[int, str, str]] = set()
        failures = 0
        while not stop.is_set():
            try:
                stream = self._stream_api.events(
                    since=int(last), filters={"type": "container", "container": name}, decode=True
                )
            except _ERRORS as exc:
                failures += 1
                log.warning(
                    "docker.events.reconnect", container=name, error=type(exc).__name__, attempt=failures
                )
                stop.wait(min(5.0, 0.2 * 2**failures))
                continue
            closer = _Closer(stream, stop)
            try:
                for raw in stream:
                    failures = 0
                    event = event_dict(raw)
                    if event is None:
                        continue
                    key = (int(raw.get("timeNano") or 0), event["action"], event["id"])
                    if key in seen:
                        continue
                    seen.add(key)
                    if len(seen) > 1000:
                        seen.clear()
                        seen.add(key)
                    last = max(last, event["time"])
                    yield event
            except (*_ERRORS, OSError, ValueError, AttributeError) as exc:
                if not stop.is_set():
                    failures += 1
                    log.warning("docker.events.dropped", container=name, error=type(exc).__name__)
                    stop.wait(min(5.0, 0.2 * 2**failures))
            finally:
                closer.finish()
            if not stop.is_set():
                stop.wait(0.2)  # the engine closed the stream: reconnect (with ``since``), but never spin
