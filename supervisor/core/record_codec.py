"""The persisted JSON form of the flat frozen records of the state (``LastProbe``, ``Load``, ``Stall``,
``KvDraw``, ``GateRecord``...): fields to a dict, and back with each value checked against its annotation
text, so a state file with a wrong type is a clear :class:`StateError` naming the field, never a crash; the
flat keys of older files gathered into the records they became. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any, TypeVar

from supervisor.core.errors import StateError

T = TypeVar("T")


def flat_to_dict(value: Any) -> dict[str, Any]:
    """A flat frozen dataclass as a JSON-safe dict (tuples as lists)."""
    out: dict[str, Any] = {}
    for f in fields(value):
        v = getattr(value, f.name)
        out[f.name] = list(v) if isinstance(v, tuple) else v
    return out


def flat_from_dict(kind: type[T], data: object, where: str) -> T:
    """Inverse of :func:`flat_to_dict`: missing keys take defaults, wrong types raise StateError."""
    if not isinstance(data, dict):
        raise StateError(f"{where}: expected an object, got {type(data).__name__}")
    kwargs: dict[str, Any] = {}
    for f in fields(kind):  # type: ignore[arg-type]
        if f.name in data:
            kwargs[f.name] = check_field(data[f.name], str(f.type), f"{where}.{f.name}")
    return kind(**kwargs)


def records_from_list(kind: type[T], data: object, where: str) -> tuple[T, ...]:
    """A JSON list of flat records (``GateRecord``...), each checked as :func:`flat_from_dict` does."""
    if not isinstance(data, list):
        raise StateError(f"{where}: expected a list, got {type(data).__name__}")
    return tuple(flat_from_dict(kind, item, f"{where}[{i}]") for i, item in enumerate(data))


def gather_flat(data: Mapping[str, Any], groups: Mapping[str, type]) -> dict[str, Any]:
    """``data`` with the flat ``<key>_<field>`` keys an older file wrote for a record now kept as the nested
    object ``<key>`` (``kv_tokens`` -> ``kv.tokens``) gathered into it; a nested object, when present, wins
    (the flat keys are then dropped)."""
    out = dict(data)
    for key, kind in groups.items():
        prefix = key + "_"
        names = {f.name for f in fields(kind)}
        old = [k for k in out if k.startswith(prefix) and k[len(prefix) :] in names]
        flat = {k[len(prefix) :]: out.pop(k) for k in old}
        if flat and key not in out:
            out[key] = flat
    return out


def check_field(value: object, type_text: str, where: str) -> object:
    """Validate one scalar field against its annotation text (the annotations here are simple)."""
    optional = "None" in type_text
    if value is None:
        if optional:
            return None
        raise StateError(f"{where}: must not be null")
    base = type_text.replace(" | None", "").strip()
    if base == "bool":
        if isinstance(value, bool):
            return value
    elif base == "int":
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif base == "float":
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    elif base == "str":
        if isinstance(value, str):
            return value
    elif base == "tuple[float, ...]":
        if isinstance(value, list | tuple) and all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in value
        ):
            return tuple(float(v) for v in value)
    elif base == "tuple[str, ...]":
        if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
            return tuple(value)
    elif base == "tuple[int, ...]":
        if isinstance(value, list | tuple) and all(
            isinstance(v, int) and not isinstance(v, bool) for v in value
        ):
            return tuple(value)
    elif base == "tuple[tuple[str, float], ...]":
        pairs = value if isinstance(value, list | tuple) else None
        if pairs is not None and all(isinstance(v, list | tuple) and len(v) == 2 for v in pairs):
            return tuple((str(k), float(v)) for k, v in pairs)
    else:  # pragma: no cover - a new field type without a validator is a programming error
        raise StateError(f"{where}: no validator for {type_text}")
    raise StateError(f"{where}: expected {base}, got {type(value).__name__}")
