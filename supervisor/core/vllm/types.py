"""vLLM log signals: the value objects one log line can mean. Pure (the ranking is in core.vocab)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

DEFAULT_BLOCK_SIZE = 16

Fields = dict[str, Any]


@dataclass(frozen=True)
class ShardProgress:
    """tqdm ``Loading safetensors checkpoint shards: NN% Completed | i/n``."""

    pct: int
    done: int
    total: int


@dataclass(frozen=True)
class Phase:
    """A line proving the load moves on (``weights_loaded``, ``kv_cache``, ``graph_capture``, ...)."""

    name: str


@dataclass(frozen=True)
class KvPool:
    """KV cache capacity: tokens and/or max model length and concurrency (one or two lines)."""

    tokens: int | None
    max_model_len: int | None
    max_concurrency: float | None
    device: str | None


@dataclass(frozen=True)
class Ready:
    """uvicorn ``Application startup complete.``"""


@dataclass(frozen=True)
class StartupFailure:
    """A startup failure; ``outcome`` is one of the ``failed_*`` outcomes, ``detail`` its numbers."""

    outcome: str
    detail: dict[str, Any]


@dataclass(frozen=True)
class EngineDead:
    """The engine core died (EngineDeadError, died unexpectedly, fatal error)."""

    detail: str


@dataclass(frozen=True)
class Shutdown:
    """The server is shutting down (signal, uvicorn shutdown, ``[shutdown]`` family)."""

    detail: str


@dataclass(frozen=True)
class HangHint:
    """``No available shared memory broadcast block found in N seconds``: a worker is slow or stuck."""

    seconds: int


Signal = ShardProgress | Phase | KvPool | Ready | StartupFailure | EngineDead | Shutdown | HangHint

BOOT_START_PHASES = frozenset({"api_server_starting", "engine_starting"})
