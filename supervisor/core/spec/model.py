"""What a model-server container is: a pure, frozen description the Docker adapter realises.

The profile's ``container:`` section maps one-to-one onto :class:`ContainerSpec` (same key names),
``snapshot`` produces one from ``docker inspect``, and the Docker adapter turns one into a create call.
Secret values (environment) never appear in ``repr``.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class EnvVar:
    """One environment variable; the value is never shown in repr/logs."""

    name: str
    value: str = field(repr=False)


@dataclass(frozen=True)
class Mount:
    """A bind mount (or named volume / tmpfs) as ``docker run -v/--mount`` would make it."""

    source: str
    target: str
    read_only: bool = False
    type: str = "bind"  # bind | volume | tmpfs
    propagation: str | None = None  # rprivate, rshared, ... (bind only; None = Docker's default)
    rw_explicit: bool = False  # ``:rw`` written out (Docker then records Mode "rw", not "")


@dataclass(frozen=True)
class Ulimit:
    """``--ulimit name=soft:hard`` (-1 means unlimited)."""

    name: str
    soft: int
    hard: int


@dataclass(frozen=True)
class PortBinding:
    """``-p [host_ip:]host_port:container_port/protocol``."""

    container_port: int
    host_port: int
    protocol: str = "tcp"
    host_ip: str = ""


@dataclass(frozen=True)
class DeviceRequest:
    """``--gpus``: a device request (driver '' lets Docker pick nvidia)."""

    driver: str = ""
    count: int = -1  # -1 = all
    device_ids: tuple[str, ...] = ()
    capabilities: tuple[tuple[str, ...], ...] = (("gpu",),)
    options: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class LogConfig:
    """The container's log driver and its options (``docker run --log-driver/--log-opt``): a 7x24
    container needs rotation (json-file ``max-size``/``max-file``) or its log grows for months."""

    type: str = "json-file"
    config: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class ContainerSpec:
    """Everything the supervisor sets when it creates the container. Restart policy is always ``no``."""

    name: str
    image: str
    command: tuple[str, ...] = ()
    entrypoint: tuple[str, ...] | None = None  # None = the image's entrypoint
    env: tuple[EnvVar, ...] = ()
    mounts: tuple[Mount, ...] = ()
    network_mode: str | None = None  # host | bridge | none | container:<id> | <network name>
    ipc_mode: str | None = None  # host | private | shareable | ...
    pid_mode: str | None = None
    shm_size: int | None = None  # bytes
    ulimits: tuple[Ulimit, ...] = ()
    runtime: str | None = None  # e.g. "nvidia"
    device_requests: tuple[DeviceRequest, ...] = ()
    devices: tuple[str, ...] = ()  # "/dev/x:/dev/x:rwm"
    ports: tuple[PortBinding, ...] = ()
    labels: tuple[tuple[str, str], ...] = ()
    security_opt: tuple[str, ...] = ()
    cap_add: tuple[str, ...] = ()
    cap_drop: tuple[str, ...] = ()
    privileged: bool = False
    user: str | None = None
    working_dir: str | None = None
    hostname: str | None = None
    extra_hosts: tuple[str, ...] = ()  # "host:ip"
    group_add: tuple[str, ...] = ()
    init: bool | None = None
    stop_signal: str | None = None
    stop_timeout: int | None = 120  # seconds between SIGTERM and SIGKILL; None = not set (Docker's default)
    log_config: LogConfig | None = None  # None: Docker's default (json-file, no rotation)

    def env_dict(self) -> dict[str, str]:
        """The environment as a dict (last definition wins, as with ``docker run -e``)."""
        return {e.name: e.value for e in self.env}
