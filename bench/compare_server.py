"""The model server every tool of ``bench.compare`` runs: image, command, environment, container options.

One :class:`Server` value is rendered three ways, so every tool runs exactly the same container: docker SDK
keywords (the Docker restart-policy tools), ``docker run`` flags (supervisord) and profile keys (the daemon).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import docker

SERVED = "sim-model"
ARGS = ("--model", "/models/sim", "--served-model-name", SERVED, "--port", "8000")


@dataclass(frozen=True)
class Server:
    """The model server every tool runs: image, command, environment, container options (same for all)."""

    profile: str  # the daemon's profile name
    image: str
    command: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    served: str  # the served model name the clients ask for
    shm_size: str | None = None
    binds: tuple[tuple[str, str], ...] = ()  # read-only bind mounts (host path, container path)
    memlock: int | None = None  # ulimit memlock (soft = hard), bytes
    #: Keys of the daemon profile's ``probes`` section: what the operator tells the daemon about this box
    #: (its prefill rate, as the shipped Spark example does); no other tool has such a setting.
    probes: tuple[tuple[str, float], ...] = ()

    def docker_kwargs(self) -> dict[str, Any]:
        """The container options as docker SDK ``containers.run`` keywords."""
        kw: dict[str, Any] = {}
        if self.shm_size:
            kw["shm_size"] = self.shm_size
        if self.binds:
            kw["volumes"] = {src: {"bind": dst, "mode": "ro"} for src, dst in self.binds}
        if self.memlock is not None:
            kw["ulimits"] = [docker.types.Ulimit(name="memlock", soft=self.memlock, hard=self.memlock)]
        return kw

    def cli_flags(self) -> list[str]:
        """The container options as ``docker run`` flags."""
        flags = [f"--shm-size={self.shm_size}"] if self.shm_size else []
        flags += [f"--volume={src}:{dst}:ro" for src, dst in self.binds]
        if self.memlock is not None:
            flags.append(f"--ulimit=memlock={self.memlock}")
        return flags

    def profile_container(self) -> dict[str, Any]:
        """The container options as profile keys."""
        out: dict[str, Any] = {}
        if self.shm_size:
            out["shm_size"] = self.shm_size
        if self.binds:
            out["mounts"] = [f"{src}:{dst}:ro" for src, dst in self.binds]
        if self.memlock is not None:
            out["ulimits"] = [f"memlock={self.memlock}"]
        return out


def sim_server(image: str, load_s: float) -> Server:
    """The simulator with a fixed load time (``VSIM_LOAD_SECONDS``)."""
    env = (("VSIM_LOAD_SECONDS", f"{load_s:g}"), ("VSIM_SHARDS", "4"))
    return Server("sim", image, ARGS, env, SERVED)
