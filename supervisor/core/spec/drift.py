"""Drift: how a running container differs from the container its profile describes now (pure).

The daemon never bounces a container because its profile changed; it reports the difference instead
(``status`` shows ``drift``, ``supervisorctl diff`` prints it). Both sides are :class:`ContainerSpec`
values: ``want`` is the profile's spec with its secrets resolved, ``have`` is what ``docker inspect``
says, read back through the same parser as ``supervisorctl snapshot``. Secret values never leave this
module unmasked: environment variables named like a key, token, secret or password (and the profile's
API key variable) show only whether they changed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace

from supervisor.core.spec.model import ContainerSpec, EnvVar

#: Environment names whose values are never shown (case-insensitive substring match).
SECRET_ENV = re.compile(r"KEY|TOKEN|SECRET|PASSWORD", re.IGNORECASE)
MASK = "***"
#: Fields reported under their own name; every other differing field is reported too (as "resources"
#: for the ones that size or place the container, else under the field name).
RESOURCE_FIELDS = frozenset(
    {"shm_size", "ulimits", "runtime", "device_requests", "devices", "ipc_mode", "pid_mode", "network_mode"}
)
_NOT_COMPARED = frozenset({"name", "env", "labels"})


@dataclass(frozen=True)
class DriftItem:
    """One difference: ``field`` (image, command, env, mounts, ports, resources, ...), what the profile
    wants and what the container has, already rendered (secret values masked)."""

    field: str
    key: str  # the env name, the spec field, "" when the field itself is the key
    want: str
    have: str

    def line(self) -> str:
        """``field key: profile X, container Y``."""
        where = f"{self.field} {self.key}" if self.key and self.key != self.field else self.field
        return f"{where}: profile {self.want}, container {self.have}"


def is_secret(name: str, secret_names: frozenset[str] = frozenset()) -> bool:
    """Whether the value of environment variable ``name`` must be masked."""
    return name in secret_names or SECRET_ENV.search(name) is not None


def _effective_env(env: tuple[EnvVar, ...], base: Mapping[str, str]) -> dict[str, str]:
    return {**base, **{e.name: e.value for e in env}}


def _env_drift(
    want: ContainerSpec, have: ContainerSpec, image_env: Mapping[str, str], secret_names: frozenset[str]
) -> list[DriftItem]:
    w = _effective_env(want.env, image_env)
    h = _effective_env(have.env, image_env)
    out = []
    for name in sorted(set(w) | set(h)):
        if w.get(name) == h.get(name):
            continue
        masked = is_secret(name, secret_names)

        def show(value: str | None, masked: bool = masked) -> str:
            if value is None:
                return "(unset)"
            return MASK if masked else repr(value)

        out.append(DriftItem("env", name, show(w.get(name)), show(h.get(name))))
    return out


def _show(value: object) -> str:
    if isinstance(value, tuple):
        return "[" + ", ".join(_show(v) for v in value) + "]" if value else "[]"
    if hasattr(value, "__dataclass_fields__"):
        parts = (f"{f.name}={_show(getattr(value, f.name))}" for f in fields(value))  # type: ignore[arg-type]
        return "(" + " ".join(parts) + ")"
    return repr(value)


def _normalised(spec: ContainerSpec) -> ContainerSpec:
    """What Docker makes of ``spec``: with the host's network, published ports and hostname mean nothing."""
    if spec.network_mode == "host":
        return replace(spec, ports=(), hostname=None)
    return spec


def spec_drift(
    want: ContainerSpec,
    have: ContainerSpec,
    *,
    image_env: Mapping[str, str] | None = None,
    secret_names: frozenset[str] = frozenset(),
    ignore_labels: frozenset[str] = frozenset(),
) -> tuple[DriftItem, ...]:
    """Every difference between the profile's spec ``want`` and the container's ``have`` (empty: none).

    ``image_env`` is the image's own environment (a variable the profile sets to the image's value is not
    drift); ``ignore_labels`` are labels the daemon adds itself; ``secret_names`` are masked like any
    name matching :data:`SECRET_ENV`.
    """
    want, have = _normalised(want), _normalised(have)
    out: list[DriftItem] = []
    for f in fields(ContainerSpec):
        if f.name in _NOT_COMPARED:
            continue
        w, h = getattr(want, f.name), getattr(have, f.name)
        if f.name in ("mounts", "ports", "ulimits", "devices", "cap_add", "cap_drop", "security_opt"):
            w, h = tuple(sorted(w, key=repr)), tuple(sorted(h, key=repr))
        if w != h:
            group = "resources" if f.name in RESOURCE_FIELDS else f.name
            out.append(DriftItem(group, f.name, _show(w), _show(h)))
    out += _env_drift(want, have, dict(image_env or {}), secret_names)
    wl = {k: v for k, v in want.labels if k not in ignore_labels}
    hl = {k: v for k, v in have.labels if k not in ignore_labels}
    for k in sorted(set(wl) | set(hl)):
        if wl.get(k) != hl.get(k):
            out.append(DriftItem("labels", k, _show(wl.get(k)), _show(hl.get(k))))
    return tuple(out)


def drift_fields(items: tuple[DriftItem, ...]) -> tuple[str, ...]:
    """The differing fields, each once, in report order (what ``status`` shows as ``drift``)."""
    return tuple(dict.fromkeys(i.field for i in items))
