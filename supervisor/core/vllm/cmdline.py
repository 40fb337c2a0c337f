"""The one reader of a vLLM command line (pure): flag values in every spelling, and the facts built on them.

vLLM parses its argv with ``FlexibleArgumentParser`` (0.32 ``utils/argparse_utils.py``): an option's name
may be written with underscores (``--gpu_memory_utilization``: the name before ``=`` is rewritten to
dashes), as ``--flag value`` or ``--flag=value``, and argparse keeps the LAST occurrence of a flag given
twice. Some options have aliases (``--device-memory-utilization`` for ``--gpu-memory-utilization``). Every
part of the supervisor that needs a fact from a vLLM command line asks this module: gmu, port, the API
key flag and its env name, the served model name, the reasoning parser, and the engine shape the liveness
rule needs (docs/vllm-facts.md "The command line").

``argv`` is always the whole command (the container's entrypoint, when it sets one, plus its command):
:func:`argv_of` builds it from a spec.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from supervisor.core.spec.model import ContainerSpec
from supervisor.core.vllm.progress import EngineShape

#: vLLM's API key option (one or several values: ``--api-key a b``) and the env var it falls back to.
API_KEY_FLAG = "--api-key"
API_KEY_ENV = "VLLM_API_KEY"
#: The port vLLM's OpenAI server listens on when ``--port`` is not given.
DEFAULT_PORT = 8000
GMU_FLAG = "--gpu-memory-utilization"
#: Other names argparse accepts for an option (vLLM 0.32), each mapped to the canonical name.
ALIASES = {"--device-memory-utilization": GMU_FLAG}
#: Options whose value is a list (``--flag a b`` up to the next option).
MULTI_VALUE = frozenset({API_KEY_FLAG, "--served-model-name"})
_NEGATIVE = re.compile(r"^-\d+(\.\d*)?$")


def argv_of(spec: ContainerSpec) -> tuple[str, ...]:
    """The whole command a container made from ``spec`` runs: its entrypoint (when set) plus its command."""
    return (*(spec.entrypoint or ()), *spec.command)


def canonical(name: str) -> str:
    """An option name as vLLM's parser sees it: underscores made dashes, an alias made its option."""
    if not name.startswith("--"):
        return name
    dashed = "--" + name[2:].replace("_", "-")
    return ALIASES.get(dashed, dashed)


def _is_option(arg: str) -> bool:
    return arg.startswith("-") and not _NEGATIVE.match(arg)


def flag_values(argv: Sequence[str], flag: str) -> list[str] | None:
    """The values of the LAST occurrence of ``flag`` in any spelling (None: the flag is absent).

    ``--flag=v`` is one value; ``--flag v`` takes the next argument (every next non-option for the list
    options in :data:`MULTI_VALUE`); ``--flag`` followed by an option or nothing gives ``[]``.
    """
    want = canonical(flag)
    found: list[str] | None = None
    for i, arg in enumerate(argv):
        name, eq, inline = arg.partition("=")
        if canonical(name) != want:
            continue
        if eq:
            found = [inline]
            continue
        vals: list[str] = []
        for nxt in argv[i + 1 :]:
            if _is_option(nxt):
                break
            vals.append(nxt)
            if want not in MULTI_VALUE:
                break
        found = vals
    return found


def flag_value(argv: Sequence[str], flag: str) -> str | None:
    """The one value of ``flag`` (its last occurrence; None when absent or given without a value)."""
    vals = flag_values(argv, flag)
    return vals[0] if vals else None


def has_flag(argv: Sequence[str], flag: str) -> bool:
    """Whether ``flag`` is given in any spelling (with or without a value)."""
    return flag_values(argv, flag) is not None


def gpu_memory_utilization(argv: Sequence[str]) -> float | None:
    """``--gpu-memory-utilization`` (or its alias; any spelling; the last wins). None: absent or not a
    finite number (vLLM's default then applies: :data:`DEFAULT_GMU`)."""
    value = flag_value(argv, GMU_FLAG)
    try:
        gmu = float(value) if value is not None else None
    except ValueError:
        return None
    return gmu if gmu is not None and math.isfinite(gmu) else None


#: vLLM's ``--gpu-memory-utilization`` when the command line sets none.
DEFAULT_GMU = 0.9


def port(argv: Sequence[str]) -> int:
    """The port vLLM listens on: ``--port`` (a number), else :data:`DEFAULT_PORT`."""
    value = flag_value(argv, "--port")
    return int(value) if value is not None and value.isdigit() else DEFAULT_PORT


def api_keys(argv: Sequence[str]) -> tuple[str, ...]:
    """The keys ``--api-key`` gives the server (empty values dropped; empty: none on the command line).
    Keys are secrets: never log what this returns."""
    return tuple(v for v in flag_values(argv, API_KEY_FLAG) or () if v)


def served_model_name(argv: Sequence[str]) -> str | None:
    """``--served-model-name`` (first value), else ``--model``, else the positional after ``serve``."""
    for flag in ("--served-model-name", "--model"):
        vals = flag_values(argv, flag)
        if vals:
            return vals[0]
    if "serve" in argv:
        i = list(argv).index("serve")
        if i + 1 < len(argv) and not argv[i + 1].startswith("-"):
            return argv[i + 1]
    return None


def reasoning_parser(argv: Sequence[str]) -> str | None:
    """``--reasoning-parser`` (None: the server returns reasoning inside ``content``, if the model thinks)."""
    return flag_value(argv, "--reasoning-parser")


def engine_shape(argv: Sequence[str]) -> EngineShape:
    """What bounds one engine step: chunked prefill (on unless ``--no-enable-chunked-prefill`` or
    ``--enable-chunked-prefill=false``), ``--max-num-batched-tokens``, ``--max-model-len`` (``32k``/``1M``
    accepted as vLLM does). The last occurrence of each wins."""
    chunked = True
    for arg in argv:
        name, eq, inline = arg.partition("=")
        name = canonical(name)
        if name == "--no-enable-chunked-prefill":
            chunked = False
        elif name == "--enable-chunked-prefill":
            chunked = not eq or inline.strip().lower() not in ("false", "0", "no")
    return EngineShape(
        chunked,
        _size(flag_value(argv, "--max-num-batched-tokens")),
        _size(flag_value(argv, "--max-model-len")),
    )


def _size(text: str | None) -> int | None:
    """``32768``, ``32k`` or ``1M`` (vLLM accepts the suffixes for --max-model-len); None if not a size."""
    if text is None:
        return None
    t = text.strip().lower()
    scale = {"k": 1000, "m": 1000_000}.get(t[-1:], 1)
    t = t[:-1] if scale > 1 else t
    try:
        n = int(float(t) * scale)
    except ValueError:
        return None
    return n if n > 0 else None
