"""The performance canary (I/O): one fixed streamed chat completion, timed from its SSE chunks.

Temperature 0, the profile's fixed ``sentinel.prompt``, ``sentinel.max_tokens`` tokens streamed
(``ignore_eos`` so every run decodes the same count), ``stream_options.include_usage`` for the token
count. Time to first token: request sent -> first chunk carrying text; decode tokens/s: the one rule the
decode_floor gate uses too (``core/vllm/smoke.py`` :func:`decode_rate`: the completion tokens over the time
from sending the request to the last text chunk). Bounded by ``timeout`` (the whole stream, not one read).
See docs/sentinel.md "Decode speed: one rule".
"""

from __future__ import annotations

import time
from contextlib import closing
from dataclasses import dataclass
from typing import Any

from supervisor.adapters.vllm.chat import chat_body, texts
from supervisor.adapters.vllm.lighthttp import StreamFailed
from supervisor.adapters.vllm.probes import sse_chunks
from supervisor.core.vllm.smoke import decode_rate


@dataclass(frozen=True)
class CanaryAnswer:
    """One canary run (figures None when it failed)."""

    ok: bool
    error: str | None = None
    ttft_ms: float | None = None
    decode_tps: float | None = None
    tokens: int | None = None  # usage.completion_tokens (None: the server sent no usage)
    total_ms: float = 0.0


def _has_text(chunk: dict[str, Any]) -> bool:
    return any(any(texts(choice.get("delta") or {})) for choice in chunk.get("choices") or [])


def figures(t_first: float | None, t_last: float | None, tokens: int | None, start: float) -> CanaryAnswer:
    """TTFT and decode speed from the chunk times (monotonic s) and the usage count."""
    if t_first is None or t_last is None or tokens is None:
        return CanaryAnswer(
            False, "no text or no usage in the stream", total_ms=(time.monotonic() - start) * 1e3
        )
    ttft = (t_first - start) * 1000.0
    tps = decode_rate(tokens, (t_last - start) * 1000.0) if tokens > 1 else None
    if tps is None:
        return CanaryAnswer(False, f"too few tokens to time ({tokens})", ttft, None, tokens)
    return CanaryAnswer(True, None, round(ttft, 1), round(tps, 2), tokens, round((t_last - start) * 1e3, 1))


def run_canary(
    base_url: str,
    api_key: str | None,
    model: str,
    *,
    prompt: str,
    max_tokens: int,
    timeout: float,
) -> CanaryAnswer:
    """Send the canary and time it."""
    body = {
        **chat_body(model, prompt, max_tokens),
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
        "min_tokens": max_tokens,
    }
    url = base_url.rstrip("/") + "/v1/chat/completions"
    start = time.monotonic()
    t_first: float | None = None
    t_last: float | None = None
    tokens: int | None = None
    try:
        with closing(sse_chunks(url, body, api_key, timeout, start)) as stream:
            for chunk in stream:
                now = time.monotonic()
                if chunk is None:
                    return figures(t_first, t_last, tokens, start)
                if "error" in chunk:
                    return CanaryAnswer(False, f"error chunk: {str(chunk['error'])[:200]}")
                if _has_text(chunk):
                    t_first = now if t_first is None else t_first
                    t_last = now
                usage = chunk.get("usage")
                if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
                    tokens = usage["completion_tokens"]
    except StreamFailed as exc:
        return CanaryAnswer(False, exc.error)
    except (TypeError, AttributeError):
        return CanaryAnswer(False, "a chunk is not the expected JSON")
    return CanaryAnswer(False, "stream ended without [DONE]")
