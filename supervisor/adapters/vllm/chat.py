"""The smoke gates' requests (``requests``): a chat completion (optionally offering a tool) and a streamed
one, read as vLLM answers them, thinking included. A failed request is a result with ``ok=False`` and a
short ``error``, never an exception; API keys are sent, never logged or put into results.
"""

from __future__ import annotations

import time
from contextlib import closing
from dataclasses import dataclass
from typing import Any

from supervisor.adapters.vllm.lighthttp import StreamFailed
from supervisor.adapters.vllm.probes import auth_headers, send, sse_chunks


def texts(part: dict[str, Any]) -> tuple[str, str]:
    """(content, reasoning) of a chat ``message`` or streamed ``delta``: vLLM's reasoning parser puts the
    thinking in ``reasoning`` (0.32), ``reasoning_content`` (before), or both (docs/vllm-facts.md
    "Reasoning output")."""
    content = part.get("content") or ""
    reasoning = part.get("reasoning") or part.get("reasoning_content") or ""
    return str(content), str(reasoning)


@dataclass(frozen=True)
class ChatAnswer:
    """One chat completion as a smoke gate sees it (``ok``: HTTP 200 with a parsable answer)."""

    ok: bool
    status: int | None
    latency_ms: float
    error: str | None = None
    text: str = ""  # message.content
    tool_calls: tuple[str, ...] = ()  # the names of the functions called
    completion_tokens: int | None = None
    reasoning: str = ""  # message.reasoning (or reasoning_content): what a reasoning parser took out


@dataclass(frozen=True)
class StreamAnswer:
    """One streamed chat completion: its text, and what its LAST data chunk (before ``[DONE]``) said."""

    ok: bool
    status: int | None
    latency_ms: float
    error: str | None = None
    text: str = ""  # the deltas' content
    chunks: int = 0
    done: bool = False  # ``data: [DONE]`` arrived
    last_usage_tokens: int | None = None  # usage.completion_tokens of the last chunk (None: no usage there)
    reasoning: str = ""  # the deltas' reasoning (or reasoning_content)
    first_token_ms: float | None = None  # since the request: the first chunk carrying text
    last_token_ms: float | None = None  # since the request: the last chunk carrying text


def chat_body(
    model: str, prompt: str, max_tokens: int, enable_thinking: bool | None = None
) -> dict[str, Any]:
    """A chat request at temperature 0 (the gates' and the performance canary's one shape)."""
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
    }
    if enable_thinking is not None:
        # read by the chat templates of thinking models (Qwen3, DeepSeek-V3.1, ...); others ignore it
        body["chat_template_kwargs"] = {"enable_thinking": enable_thinking}
    return body


def chat(
    base_url: str,
    api_key: str | None,
    model: str,
    *,
    prompt: str,
    max_tokens: int,
    timeout: float,
    tool: str | None = None,
    tool_choice: str = "required",
    enable_thinking: bool | None = None,
) -> ChatAnswer:
    """A chat completion; with ``tool``, the request offers that function with ``tool_choice``;
    ``enable_thinking`` (None: not sent) goes to the chat template."""
    body = chat_body(model, prompt, max_tokens, enable_thinking)
    if tool is not None:
        params = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
        body["tools"] = [{"type": "function", "function": {"name": tool, "parameters": params}}]
        body["tool_choice"] = tool_choice
    url = base_url.rstrip("/") + "/v1/chat/completions"
    resp, ms, err = send("POST", url, timeout, json=body, headers=auth_headers(api_key))
    if resp is None:
        return ChatAnswer(False, None, ms, err)
    if resp.status_code != 200:
        return ChatAnswer(False, resp.status_code, ms, f"HTTP {resp.status_code}")
    try:
        data = resp.json()
        message = data["choices"][0]["message"]
        calls = tuple(str(c["function"]["name"]) for c in message.get("tool_calls") or [])
        tokens = (data.get("usage") or {}).get("completion_tokens")
        text, reasoning = texts(message)
    except (ValueError, TypeError, KeyError, IndexError, AttributeError):
        return ChatAnswer(False, 200, ms, "answer is not the expected JSON")
    count = int(tokens) if isinstance(tokens, int) else None
    return ChatAnswer(True, 200, ms, None, text, calls, count, reasoning)


def stream_chat(
    base_url: str,
    api_key: str | None,
    model: str,
    *,
    prompt: str,
    max_tokens: int,
    timeout: float,
    enable_thinking: bool | None = None,
) -> StreamAnswer:
    """A streamed chat completion asking for ``stream_options.include_usage``; read until ``[DONE]`` or
    ``timeout`` (the whole stream, not one read). Notes when the first and the last text arrived."""
    body = {
        **chat_body(model, prompt, max_tokens, enable_thinking),
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    start = time.monotonic()
    text: list[str] = []
    thought: list[str] = []
    chunks = 0
    last: dict[str, Any] = {}
    seen: dict[str, float] = {}  # "first" and "last" chunk carrying text: ms since start

    def answer(ok: bool, status: int | None, error: str | None, done: bool = False) -> StreamAnswer:
        usage = last.get("usage") if isinstance(last.get("usage"), dict) else None
        tokens = usage.get("completion_tokens") if usage is not None else None
        return StreamAnswer(
            ok,
            status,
            (time.monotonic() - start) * 1000.0,
            error,
            "".join(text),
            chunks,
            done,
            tokens if isinstance(tokens, int) else None,
            "".join(thought),
            seen.get("first"),
            seen.get("last"),
        )

    url = base_url.rstrip("/") + "/v1/chat/completions"
    try:
        with closing(sse_chunks(url, body, api_key, timeout, start)) as stream:
            for chunk in stream:
                if chunk is None:
                    return answer(True, 200, None, done=True)
                last = chunk
                chunks += 1
                if "error" in last:
                    return answer(False, 200, f"error chunk: {str(last['error'])[:200]}")
                for choice in last.get("choices") or []:
                    content, reasoning = texts(choice.get("delta") or {})
                    text.append(content)
                    thought.append(reasoning)
                    if content or reasoning:
                        seen["last"] = (time.monotonic() - start) * 1000.0
                        seen.setdefault("first", seen["last"])
    except StreamFailed as exc:
        return answer(False, exc.status, exc.error)
    except (TypeError, AttributeError):
        return answer(False, 200, "a chunk is not the expected JSON")
    return answer(False, 200, "stream ended without [DONE]")
