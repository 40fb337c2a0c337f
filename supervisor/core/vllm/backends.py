"""The kernel backends vLLM logged at load (docs/sentinel.md "Backends"). Pure, no I/O.

vLLM 0.32 names the attention backend and the kernels it picked in INFO lines of the forms (from its
source: ``platforms/cuda.py``, ``platforms/cpu.py``, ``model_executor/kernels/linear``, the quantisation
schemes)::

    Using FLASH_ATTN backend.
    Using Triton MLA backend on V1 engine.
    Using backend TORCH_SDPA for vit attention
    Using MarlinLinearKernel for CompressedTensorsWNA16
    Using the fused XPU kernel for top-p & top-k sampling.

The same config picking another backend on the next start (a driver, an image, an env var changed)
is a common cause of a silent speed loss; the sentinel compares these lines per config fingerprint.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from supervisor.core.vllm.envelope import split_line

#: At most this many distinct backend lines are kept per start (every loop bounded).
MAX_BACKENDS = 32

_BACKEND = re.compile(
    r"^Using (?:.+? (?:backend|kernel)\b.*|backend \S+ for .+|\w+(?:Kernel|Linear\w*) for \w+)$",
    re.IGNORECASE,
)
_NOT_BACKENDS = ("sleep-mode backend", "custom backend", "OOT custom backend")


def backend_line(raw: str) -> str | None:
    """The backend statement of one raw log line (the message, its trailing period dropped), or None."""
    _proc, _pid, _level, msg = split_line(raw)
    msg = msg.strip()
    if not msg.startswith("Using ") or _BACKEND.match(msg) is None:
        return None
    if any(n in msg for n in _NOT_BACKENDS):
        return None
    return msg.removesuffix(".")


def backend_lines(lines: Iterable[str]) -> tuple[str, ...]:
    """The distinct backend statements of one start's log, in the order first logged."""
    out: list[str] = []
    for raw in lines:
        line = backend_line(raw)
        if line is not None and line not in out:
            out.append(line)
            if len(out) >= MAX_BACKENDS:
                break
    return tuple(out)
