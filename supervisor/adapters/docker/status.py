"""What the daemon needs to know of one container, as the Docker adapter answers it (a typed value)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

#: Docker event actions that change a container's life (the watcher's events; ``docker events``).
LIFECYCLE_ACTIONS = frozenset({"create", "start", "restart", "die", "stop", "kill", "oom", "destroy"})


@dataclass(frozen=True)
class ContainerStatus:
    """One container as the daemon sees it (from ``docker inspect``)."""

    id: str
    name: str
    running: bool
    status: str  # created | running | paused | restarting | removing | exited | dead
    exit_code: int | None
    oom_killed: bool
    started_at: float | None  # epoch seconds; None if it never started
    env: tuple[str, ...] = field(default=(), repr=False)  # KEY=value lines: may hold secrets
    image_id: str | None = None  # the image it was created from ("sha256:...")
    argv: tuple[str, ...] = field(default=(), repr=False)  # what runs (Path + Args): may hold a key
    restart_policy: str = "no"  # Docker's own (HostConfig.RestartPolicy.Name): "no" unless set by hand

    @property
    def dead(self) -> bool:
        """It has stopped for good (exited or dead), as opposed to not yet started."""
        return not self.running and self.status in ("exited", "dead")

    def env_value(self, name: str) -> str | None:
        """The value of one environment variable of the container (None if unset). Secret!"""
        prefix = name + "="
        return next((e[len(prefix) :] for e in self.env if e.startswith(prefix)), None)


def argv_of(info: Mapping[str, Any]) -> tuple[str, ...]:
    """What a container runs, from its ``docker inspect`` (``Path`` + ``Args``). Secret: may hold a key."""
    path = [str(info["Path"])] if info.get("Path") else []
    return (*path, *(str(a) for a in info.get("Args") or ()))


def parse_docker_time(text: str) -> float | None:
    """Docker's RFC 3339 nanosecond timestamps -> epoch seconds (None for the zero time)."""
    if not text or text.startswith("0001-"):
        return None
    head, _, frac = text.rstrip("Z").partition(".")
    try:
        base = datetime.fromisoformat(head + "+00:00").timestamp()
    except ValueError:
        return None
    digits = "".join(ch for ch in frac if ch.isdigit())[:6]
    return base + (int(digits) / 10 ** len(digits) if digits else 0.0)


def event_dict(raw: Mapping[str, Any]) -> dict[str, Any] | None:
    """A lifecycle event of ``docker events`` as a flat dict (None for any other event)."""
    action = str(raw.get("Action") or raw.get("status") or "")
    if action not in LIFECYCLE_ACTIONS:
        return None
    attrs = dict((raw.get("Actor") or {}).get("Attributes") or {})
    code = attrs.get("exitCode")
    nanos = raw.get("timeNano")
    return {
        "action": action,
        "id": str((raw.get("Actor") or {}).get("ID") or raw.get("id") or ""),
        "name": str(attrs.get("name", "")),
        "exit_code": int(code) if code not in (None, "") else None,
        "signal": attrs.get("signal"),
        "time": int(nanos) / 1e9 if nanos else float(raw.get("time") or 0),
    }


def status_from_inspect(info: Mapping[str, Any]) -> ContainerStatus:
    """The :class:`ContainerStatus` of one ``docker inspect`` answer."""
    st, host = info.get("State") or {}, info.get("HostConfig") or {}
    code = st.get("ExitCode")
    return ContainerStatus(
        id=str(info.get("Id")),
        name=str(info.get("Name", "")).lstrip("/"),
        running=bool(st.get("Running")),
        status=str(st.get("Status") or ""),
        exit_code=code if isinstance(code, int) else None,
        oom_killed=bool(st.get("OOMKilled")),
        started_at=parse_docker_time(str(st.get("StartedAt") or "")),
        env=tuple(str(e) for e in ((info.get("Config") or {}).get("Env") or ())),
        image_id=str(info["Image"]) if info.get("Image") else None,
        argv=argv_of(info),
        restart_policy=str((host.get("RestartPolicy") or {}).get("Name") or "no"),
    )
