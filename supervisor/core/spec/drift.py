"""Drift: how a running container differs from the container its profile describes now (pure).

The daemon never bounces a container because its profile changed; it reports the difference instead
(``status`` shows ``drift``, ``supervisorctl diff`` prints it). Both sides are :class:`ContainerSpec`
values: ``want`` is the profile's spec with its secrets resolved, ``have`` is what ``docker inspect``
says, read back through the same parser as ``supervisorctl snapshot``; both are compared in Docker's
normal form (:func:`~supervisor.core.spec.normal.normalised`: a default written out is no drift).
Secret values never leave this module unmasked (:mod:`supervisor.core.spec.secrets`, the one rule):
secret environment variables (and the profile's API key variable) show only whether they changed,
secret flag values in the command and secrets inside URLs or other values are masked.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from supervisor.core.spec.model import ContainerSpec, EnvVar
from supervisor.core.spec.normal import image_normalised, normalised
from supervisor.core.spec.secrets import MASK, is_secret_env, mask_command, mask_text

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
        masked = is_secret_env(name, secret_names)

        def show(value: str | None, masked: bool = masked) -> str:
            if value is None:
                return "(unset)"
            return MASK if masked else mask_text(repr(value))

        out.append(DriftItem("env", name, show(w.get(name)), show(h.get(name))))
    return out


def _show(value: object) -> str:
    """A value as the drift line shows it, secrets inside it masked (URLs, ``--flag V`` in a string)."""
    if isinstance(value, tuple):
        return "[" + ", ".join(_show(v) for v in value) + "]" if value else "[]"
    if hasattr(value, "__dataclass_fields__"):
        parts = (f"{f.name}={_show(getattr(value, f.name))}" for f in fields(value))  # type: ignore[arg-type]
        return "(" + " ".join(parts) + ")"
    return mask_text(repr(value))


def _argv(value: tuple[str, ...] | None) -> tuple[str, ...] | None:
    """A command or entrypoint with its secret flag values masked (compared unmasked)."""
    return None if value is None else tuple(mask_command(value))


def spec_drift(
    want: ContainerSpec,
    have: ContainerSpec,
    *,
    image_env: Mapping[str, str] | None = None,
    secret_names: frozenset[str] = frozenset(),
    ignore_labels: frozenset[str] = frozenset(),
    image_config: Mapping[str, Any] | None = None,
) -> tuple[DriftItem, ...]:
    """Every difference between the profile's spec ``want`` and the container's ``have`` (empty: none).

    ``image_env`` is the image's own environment (a variable the profile sets to the image's value is not
    drift); ``ignore_labels`` are labels the daemon adds itself; ``secret_names`` are masked like any
    name the secret rule calls secret (:func:`~supervisor.core.spec.secrets.is_secret_env`);
    ``image_config`` is the image's own config (what the profile may repeat: Cmd, Entrypoint, labels...).
    Both sides pass the same normalisers (Docker's defaults, the image's values).
    """
    want, have = (normalised(image_normalised(s, image_config)) for s in (want, have))
    out: list[DriftItem] = []
    for f in fields(ContainerSpec):
        if f.name in _NOT_COMPARED:
            continue
        w, h = getattr(want, f.name), getattr(have, f.name)
        if f.name in ("mounts", "ports", "ulimits", "devices", "cap_add", "cap_drop", "security_opt"):
            w, h = tuple(sorted(w, key=repr)), tuple(sorted(h, key=repr))
        if w != h:
            group = "resources" if f.name in RESOURCE_FIELDS else f.name
            if f.name in ("command", "entrypoint"):
                w, h = _argv(w), _argv(h)
            want_s, have_s = _show(w), _show(h)
            if want_s == have_s:  # only a masked value differs
                want_s = f"{want_s} (a secret value differs)"
            out.append(DriftItem(group, f.name, want_s, have_s))
    out += _env_drift(want, have, dict(image_env or {}), secret_names)
    wl = {k: v for k, v in want.labels if k not in ignore_labels}
    hl = {k: v for k, v in have.labels if k not in ignore_labels}
    for k in sorted(set(wl) | set(hl)):
        if wl.get(k) != hl.get(k):
            masked = is_secret_env(k)
            want_s, have_s = (MASK if masked and v is not None else _show(v) for v in (wl.get(k), hl.get(k)))
            out.append(DriftItem("labels", k, want_s, have_s))
    return tuple(out)


def drift_fields(items: tuple[DriftItem, ...]) -> tuple[str, ...]:
    """The differing fields, each once, in report order (what ``status`` shows as ``drift``)."""
    return tuple(dict.fromkeys(i.field for i in items))
