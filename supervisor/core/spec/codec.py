"""A :class:`ContainerSpec` as a JSON-safe dict and back (pure), for the last-known-good spec file.

The dict holds the environment's values (secrets): only the store writes it, to a 0600 file. Decoding
is strict: a wrong shape raises :class:`StateError` naming the field, never a half-read spec.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from supervisor.core.errors import StateError
from supervisor.core.spec.model import (
    ContainerSpec,
    DeviceRequest,
    EnvVar,
    LogConfig,
    Mount,
    PortBinding,
    Ulimit,
)


def spec_to_dict(spec: ContainerSpec) -> dict[str, Any]:
    """Every field of ``spec`` (tuples become lists when dumped as JSON; env values included)."""
    return dataclasses.asdict(spec)


def _seq(value: object, where: str) -> list[Any]:
    if not isinstance(value, list | tuple):
        raise StateError(f"{where}: expected a list, got {type(value).__name__}")
    return list(value)


def _strs(value: object, where: str) -> tuple[str, ...]:
    items = _seq(value, where)
    if not all(isinstance(v, str) for v in items):
        raise StateError(f"{where}: expected a list of strings")
    return tuple(items)


def _pairs(value: object, where: str) -> tuple[tuple[str, str], ...]:
    out = []
    for i, item in enumerate(_seq(value, where)):
        pair = _strs(item, f"{where}[{i}]")
        if len(pair) != 2:
            raise StateError(f"{where}[{i}]: expected [name, value]")
        out.append((pair[0], pair[1]))
    return tuple(out)


def _objects(kind: Callable[..., Any], value: object, where: str) -> tuple[Any, ...]:
    out = []
    for i, item in enumerate(_seq(value, where)):
        if not isinstance(item, Mapping):
            raise StateError(f"{where}[{i}]: expected an object")
        try:
            out.append(kind(**item))
        except TypeError as exc:
            raise StateError(f"{where}[{i}]: {exc}") from exc
    return tuple(out)


def _device_request(**raw: Any) -> DeviceRequest:
    return DeviceRequest(
        driver=str(raw.get("driver", "")),
        count=int(raw.get("count", -1)),
        device_ids=_strs(raw.get("device_ids", ()), "device_ids"),
        capabilities=tuple(_strs(c, "capabilities") for c in _seq(raw.get("capabilities", ()), "caps")),
        options=_pairs(raw.get("options", ()), "options"),
    )


def _log_config(value: object, where: str) -> LogConfig | None:
    if value is None:
        return None
    if not isinstance(value, Mapping) or not isinstance(value.get("type"), str):
        raise StateError(f"{where}: expected {{type, config}}")
    return LogConfig(value["type"], _pairs(value.get("config", ()), f"{where}.config"))


_DECODE: dict[str, Callable[[object, str], object]] = {
    "log_config": _log_config,
    "command": _strs,
    "entrypoint": lambda v, w: None if v is None else _strs(v, w),
    "env": lambda v, w: _objects(EnvVar, v, w),
    "mounts": lambda v, w: _objects(Mount, v, w),
    "ulimits": lambda v, w: _objects(Ulimit, v, w),
    "ports": lambda v, w: _objects(PortBinding, v, w),
    "device_requests": lambda v, w: _objects(_device_request, v, w),
    "labels": _pairs,
    "devices": _strs,
    "security_opt": _strs,
    "cap_add": _strs,
    "cap_drop": _strs,
    "extra_hosts": _strs,
    "group_add": _strs,
}


def spec_from_dict(data: object, where: str = "spec") -> ContainerSpec:
    """Inverse of :func:`spec_to_dict`; raises StateError on a wrong shape (unknown keys are ignored)."""
    if not isinstance(data, Mapping):
        raise StateError(f"{where}: expected an object, got {type(data).__name__}")
    if not isinstance(data.get("name"), str) or not isinstance(data.get("image"), str):
        raise StateError(f"{where}: 'name' and 'image' must be strings")
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(ContainerSpec):
        if f.name not in data:
            continue
        decode = _DECODE.get(f.name)
        try:
            kwargs[f.name] = decode(data[f.name], f"{where}.{f.name}") if decode else data[f.name]
        except (TypeError, ValueError) as exc:
            raise StateError(f"{where}.{f.name}: {exc}") from exc
    return ContainerSpec(**kwargs)
