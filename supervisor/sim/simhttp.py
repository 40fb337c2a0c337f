"""The simulator's HTTP side: vLLM's OpenAI-compatible endpoints and auth rules (docs/vllm-facts.md §5, §6).

Stdlib only (copied into the simulator image). One :class:`Handler` per connection thread of a
``ThreadingHTTPServer``; every request is answered (a bad one with 4xx), never crashes the server.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import queue
import secrets
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

try:
    from supervisor.sim import simengine, simgen, simlog
except ImportError:  # running as /opt/vllm-sim/vllm_sim.py: siblings are top-level modules
    import simengine  # type: ignore[no-redef,import-not-found]
    import simgen  # type: ignore[no-redef,import-not-found]
    import simlog  # type: ignore[no-redef,import-not-found]

#: Starlette's JSONResponse is compact: the real server sends exactly these bytes.
UNAUTHORIZED = b'{"error":"Unauthorized"}'
MAX_BODY = 16 * 1024 * 1024
#: The endpoints that generate: while draining, new requests to these are refused (others keep answering).
GENERATE = ("/v1/chat/completions", "/v1/completions")
#: Kinds POST /_sim/fault accepts (docs/simulator.md, "Fault hook").
FAULT_KINDS = ("die", "stuck", "resume", "exit", "alloc", "slow", "spin")


def _spin(engine: simengine.Engine, duty: float) -> None:
    """While the engine is stuck: burn ``duty`` of a core (busy 50 ms x duty in every 50 ms) while no step
    ends; stops at ``resume`` (the engine leaves STUCK) or with the process."""
    x = 0
    while engine.current_state() == simengine.STUCK:
        busy_until = time.monotonic() + 0.05 * duty
        while time.monotonic() < busy_until:
            for _ in range(2_000):
                x = (x * 31 + 7) % 1_000_003
        if duty < 1.0:
            time.sleep(0.05 * (1.0 - duty))


@dataclass
class Ctx:
    """Everything a request handler needs; shared by all handler threads."""

    fmt: simlog.LogFormat
    engine: simengine.Engine
    served: str
    model: str
    max_model_len: int
    api_keys: list[str]
    gen_seconds: float
    max_tokens_cap: int
    cache: simengine.CacheInfo
    emit: Callable[[simlog.Line], None]
    faults: queue.Queue[tuple[str, int]] = field(default_factory=queue.Queue)
    answers: simgen.Answers = field(default_factory=simgen.Answers)
    created: int = field(default_factory=lambda: int(time.time()))
    active: int = 0
    active_cond: threading.Condition = field(default_factory=threading.Condition)
    hog: list[bytes] = field(default_factory=list)  # memory held by the `alloc` fault
    die_on_first_request: bool = False  # VSIM_SCENARIO=die_on_first_request

    def enter(self) -> None:
        with self.active_cond:
            self.active += 1

    def leave(self) -> None:
        with self.active_cond:
            self.active -= 1
            self.active_cond.notify_all()

    def wait_quiet(self, timeout: float) -> bool:
        """Wait until no request is being answered (so a drained response is fully written before exit)."""
        with self.active_cond:
            return self.active_cond.wait_for(lambda: self.active == 0, timeout=timeout)

    def __post_init__(self) -> None:
        self.key_digests = [hashlib.sha256(k.encode()).digest() for k in self.api_keys]

    def authorized(self, header: str | None) -> bool:
        """0.8+ rule: `<scheme> <token>`, scheme bearer (any case), token compared by SHA-256 digest."""
        if not self.key_digests:
            return True
        scheme, _, token = (header or "").partition(" ")
        if scheme.lower() != "bearer":
            return False
        digest = hashlib.sha256(token.encode()).digest()
        ok = False
        for d in self.key_digests:
            ok |= secrets.compare_digest(digest, d)
        return ok


def count_prompt_tokens(body: dict[str, Any]) -> int:
    """A deterministic stand-in for tokenisation: about one token per 4 characters, at least 1."""
    if "messages" in body:
        text = " ".join(str(m.get("content", "")) for m in body["messages"] if isinstance(m, dict))
    elif isinstance(body.get("prompt"), list) and all(isinstance(t, int) for t in body["prompt"]):
        return max(1, len(body["prompt"]))  # token ids, as vLLM's completions accept them
    else:
        text = str(body.get("prompt", ""))
    return max(1, len(text) // 4)


class Handler(BaseHTTPRequestHandler):
    """Routes of the simulated vLLM API server."""

    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""
    ctx: Ctx  # set on a subclass by make_handler()

    # ---------------------------------------------------------------- plumbing
    def log_message(self, format: str, *args: Any) -> None:
        return

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        try:
            num = int(code)
            phrase = HTTPStatus(num).phrase
        except ValueError:
            num, phrase = 0, ""
        peer = f"{self.client_address[0]}:{self.client_address[1]}"
        version = str(getattr(self, "request_version", ""))
        version = version if version.startswith("HTTP/") else "HTTP/1.1"
        self.ctx.emit(
            simlog.access_line(
                self.ctx.fmt,
                peer=peer,
                method=str(getattr(self, "command", None) or "-"),
                path=str(getattr(self, "path", None) or "-"),
                version=version,
                code=num,
                phrase=phrase,
            )
        )

    def _send(self, code: int, body: bytes = b"", ctype: str | None = "application/json") -> None:
        self.send_response(code)
        if ctype is not None:
            self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        if body and self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, code: int, obj: Any) -> None:
        self._send(code, json.dumps(obj, separators=(",", ":")).encode())

    def _body(self) -> bytes:
        length = int(self.headers.get("content-length") or 0)
        if length < 0 or length > MAX_BODY:
            raise ValueError("bad content-length")
        return self.rfile.read(length) if length else b""

    def _dispatch(self) -> None:
        self.ctx.enter()
        try:
            self._route()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as exc:
            self.close_connection = True
            with contextlib.suppress(OSError):
                self._json(500, {"error": {"message": f"simulator error: {type(exc).__name__}", "code": 500}})
        finally:
            self.ctx.leave()

    do_GET = _dispatch  # noqa: N815
    do_POST = _dispatch  # noqa: N815
    do_HEAD = _dispatch  # noqa: N815
    do_PUT = _dispatch  # noqa: N815
    do_DELETE = _dispatch  # noqa: N815
    do_OPTIONS = _dispatch  # noqa: N815

    # ---------------------------------------------------------------- routes
    def _route(self) -> None:
        path = self.path.split("?", 1)[0]
        method = self.command
        try:
            body = self._body() if method in ("POST", "PUT") else b""
        except ValueError:
            self.close_connection = True
            self._json(400, {"detail": "Invalid Content-Length"})
            return
        if path == "/_sim/fault" and method == "POST":
            self._fault(body)
            return
        if (
            path.startswith("/v1")
            and method != "OPTIONS"
            and not self.ctx.authorized(self.headers.get("authorization"))
        ):
            self._send(401, UNAUTHORIZED)
            return
        state = self.ctx.engine.current_state()
        if path in GENERATE and state == simengine.DRAINING:
            self._json(
                503,
                {
                    "error": {
                        "message": "The server is shutting down.",
                        "type": "ServiceUnavailable",
                        "code": 503,
                    }
                },
            )
            return
        routes: dict[str, tuple[tuple[str, ...], Callable[[bytes], None]]] = {
            "/health": (("GET",), lambda _b: self._health(state)),
            "/ping": (("GET", "POST"), lambda _b: self._health(state)),
            "/version": (("GET",), lambda _b: self._json(200, {"version": self.ctx.fmt.flavor.version})),
            "/load": (("GET",), lambda _b: self._json(200, {"server_load": self.ctx.engine.inflight()})),
            "/v1/models": (("GET",), lambda _b: self._json(200, self._models())),
            "/v1/chat/completions": (("POST",), lambda b: self._generate(b, chat=True)),
            "/v1/completions": (("POST",), lambda b: self._generate(b, chat=False)),
        }
        if path in ("/metrics", "/metrics/") and method in ("GET", "HEAD"):
            text = simengine.render_metrics(
                self.ctx.engine, self.ctx.served, self.ctx.cache, self.ctx.fmt.flavor.name == "v0_9"
            )
            self._send(200, text.encode(), "text/plain; version=0.0.4; charset=utf-8")
            return
        if path not in routes:
            self._json(404, {"detail": "Not Found"})
            return
        methods, fn = routes[path]
        if method not in methods:  # FastAPI: a GET route does not answer HEAD (real 0.32: HEAD /health 405)
            body405 = json.dumps({"detail": "Method Not Allowed"}, separators=(",", ":")).encode()
            self.send_response(405)
            self.send_header("allow", ", ".join(methods))
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body405)))
            self.end_headers()
            if method != "HEAD":
                self.wfile.write(body405)
            return
        fn(body)

    def _health(self, state: str) -> None:
        if state == simengine.DEAD:
            self._send(self.ctx.fmt.flavor.dead_health_code, ctype=None)
        else:
            self._send(200, ctype=None)

    def _fault(self, body: bytes) -> None:
        try:
            req = json.loads(body or b"{}")
            kind = str(req["kind"])
            code = int(req.get("code", 0))
            mib = int(req.get("mib", 0))
            ms = float(req.get("ms", 0))
            duty = min(1.0, max(0.01, float(req.get("duty", 1.0))))
        except (ValueError, KeyError, TypeError):
            msg = 'expected JSON {"kind": "die"|"stuck"|"spin"|"resume"|"exit"|"alloc", "code": N, "mib": N}'
            self._json(400, {"error": msg})
            return
        if kind not in FAULT_KINDS:
            self._json(400, {"error": f"unknown fault kind {kind!r}"})
            return
        # stuck/resume act before the answer, so the engine is frozen (or thawed) once the caller hears back
        if kind == "stuck":
            self.ctx.engine.stick()
        elif kind == "spin":  # stuck, and burning CPU: a hung CUDA sync spins its waiting thread
            self.ctx.engine.stick()
            threading.Thread(target=_spin, args=(self.ctx.engine, duty), name="spin", daemon=True).start()
        elif kind == "resume":
            self.ctx.engine.resume()
        elif kind == "slow":  # every decode step takes ``ms`` longer from now on (0: normal again)
            self.ctx.engine.step_delay_s = max(0.0, ms) / 1000.0
        self._json(200, {"accepted": kind})
        self.wfile.flush()
        if kind == "alloc":
            # Touched memory in the server process itself (not a child): past a cgroup memory limit the
            # kernel OOM-kills PID 1 and Docker records OOMKilled, as with a real model server.
            for _ in range(max(0, mib)):
                self.ctx.hog.append(b"\x01" * (1024 * 1024))
        elif kind in ("die", "exit"):
            self.ctx.faults.put((kind, code))

    def _models(self) -> dict[str, Any]:
        c = self.ctx
        perm = {
            "id": f"modelperm-{uuid.uuid4().hex}",
            "object": "model_permission",
            "created": c.created,
            "allow_create_engine": False,
            "allow_sampling": True,
            "allow_logprobs": True,
            "allow_search_indices": False,
            "allow_view": True,
            "allow_fine_tuning": False,
            "organization": "*",
            "group": None,
            "is_blocking": False,
        }
        card = {
            "id": c.served,
            "object": "model",
            "created": c.created,
            "owned_by": "vllm",
            "root": c.model,
            "parent": None,
            "max_model_len": c.max_model_len,
            "permission": [perm],
        }
        return {"object": "list", "data": [card]}

    def _bad_request(self, message: str) -> None:
        self._json(400, {"error": {"message": message, "type": "Bad Request", "param": None, "code": 400}})

    def _unknown_model(self, name: str) -> None:
        """Real vLLM checks `model` against the served names (404), e.g. a probe with a stale model name."""
        msg = f"The model `{name}` does not exist. Valid aliases: {self.ctx.served}."
        err = {"message": msg, "type": "NotFoundError", "param": "model", "code": 404}
        self.ctx.emit(
            self.ctx.fmt.log(simlog.API, "ERROR", "serving.py:274", f"Error with model error={err}")
        )
        self._json(404, {"error": err})

    def _generate(self, raw: bytes, chat: bool) -> None:
        try:
            body = json.loads(raw or b"{}")
            if not isinstance(body, dict):
                raise TypeError("body must be a JSON object")
            if chat and not isinstance(body.get("messages"), list):
                raise TypeError("'messages' must be a list")
            asked = body.get("max_tokens", body.get("max_completion_tokens"))
            max_tokens = int(asked) if asked is not None else None
        except (ValueError, TypeError) as exc:
            self._bad_request(str(exc))
            return
        c = self.ctx
        asked_model = body.get("model")
        if asked_model is not None and asked_model != c.served:
            self._unknown_model(str(asked_model))
            return
        if c.die_on_first_request and c.engine.current_state() != simengine.DEAD:
            c.faults.put(("die_first", 0))  # the serving loop kills the engine and prints its lines
            deadline = time.monotonic() + 5.0
            while c.engine.current_state() != simengine.DEAD and time.monotonic() < deadline:
                time.sleep(0.02)
        state = c.engine.current_state()
        if state == simengine.DEAD:
            self._dead()
            return
        n = c.max_tokens_cap if max_tokens is None else max(0, min(max_tokens, c.max_tokens_cap))
        reason = "length" if max_tokens is not None and max_tokens <= c.max_tokens_cap else "stop"
        prompt = count_prompt_tokens(body)
        if bool(body.get("stream")):
            self._stream(body, chat, n, reason, prompt)
            return
        if not c.engine.admit(prompt):
            self._dead()
            return
        if not c.engine.prefill(prompt):
            c.engine.finish("abort", prompt)
            self._dead()
            return
        done = 0
        per = c.gen_seconds / max(1, n)
        while done < n and c.engine.step(per):
            done += 1
        if done < n:
            c.engine.finish("abort", prompt + done)
            self._dead()
            return
        c.engine.finish(reason, prompt + n)
        usage = {"prompt_tokens": prompt, "total_tokens": prompt + n, "completion_tokens": n}
        rid = uuid.uuid4().hex
        if chat:
            usage.update(c.answers.usage_details(n, body))
            # a tool call comes as vLLM 0.32 sends it: content "", the call in tool_calls,
            # finish_reason "tool_calls" (required, auto) or "stop" (named)
            call = c.answers.tool_call(body)
            message = {
                "role": "assistant",
                **c.answers.message(n, body),
                "tool_calls": [call] if call else [],
            }
            if call is not None:
                message["content"] = ""
                reason = "tool_calls" if body.get("tool_choice") in ("required", "auto") else "stop"
            choice: dict[str, Any] = {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": reason,
                "stop_reason": None,
            }
            obj = {
                "id": f"chatcmpl-{rid}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": c.served,
                "choices": [choice],
                "usage": usage,
                "prompt_logprobs": None,
            }
        else:
            choice = {
                "index": 0,
                "text": c.answers.text(n),
                "logprobs": None,
                "finish_reason": reason,
                "stop_reason": None,
            }
            obj = {
                "id": f"cmpl-{rid}",
                "object": "text_completion",
                "created": int(time.time()),
                "model": c.served,
                "choices": [choice],
                "usage": usage,
            }
        self._json(200, obj)

    def _dead(self) -> None:
        msg = "The server had an error while processing your request."
        if self.ctx.fmt.flavor.name == "v0_32":
            msg = simlog.ENGINE_DEAD_MSG  # the real 0.32's answer (fixture 055)
        self._json(500, {"error": {"message": msg, "type": "InternalServerError", "code": 500}})

    def _stream(self, body: dict[str, Any], chat: bool, n: int, reason: str, prompt: int) -> None:
        c = self.ctx
        rid = f"chatcmpl-{uuid.uuid4().hex}" if chat else f"cmpl-{uuid.uuid4().hex}"
        obj_name = "chat.completion.chunk" if chat else "text_completion"
        created = int(time.time())
        self.close_connection = True
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("connection", "close")
        self.end_headers()

        def chunk(delta: dict[str, Any], finish: str | None) -> None:
            if chat:
                choice: dict[str, Any] = {
                    "index": 0,
                    "delta": delta,
                    "logprobs": None,
                    "finish_reason": finish,
                }
            else:
                text = delta.get("content") or ""
                choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
            obj = {"id": rid, "object": obj_name, "created": created, "model": c.served, "choices": [choice]}
            self._sse(obj)

        if not c.engine.admit(prompt):
            self._sse_error()
            return
        if not c.engine.prefill(prompt):
            c.engine.finish("abort", prompt)
            self._sse_error()
            return
        done = 0
        try:
            if chat:
                chunk({"role": "assistant", "content": ""}, None)
            pieces = c.answers.pieces(n, body) if chat else [(False, c.answers.piece(i)) for i in range(n)]
            per = c.gen_seconds / max(1, n)
            while done < n:
                if not c.engine.step(per):
                    c.engine.finish("abort", prompt + done)
                    self._sse_error()
                    return
                chunk(c.answers.delta(*pieces[done]), None)
                done += 1
        except OSError:
            c.engine.finish("abort", prompt + done)
            raise
        c.engine.finish(reason, prompt + n)
        chunk({"content": ""}, reason)
        opts = body.get("stream_options")
        # vLLM 0.32 sends the usage as its own chunk (choices []) after the finish chunk, before [DONE];
        # VSIM_STREAM_USAGE=0 leaves it out (a server that ignores stream_options)
        if isinstance(opts, dict) and opts.get("include_usage") and c.answers.stream_usage:
            usage = {"prompt_tokens": prompt, "total_tokens": prompt + n, "completion_tokens": n}
            if chat:
                usage.update(c.answers.usage_details(n, body))
            self._sse(
                {
                    "id": rid,
                    "object": obj_name,
                    "created": created,
                    "model": c.served,
                    "choices": [],
                    "usage": usage,
                }
            )
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()

    def _sse(self, obj: dict[str, Any]) -> None:
        self.wfile.write(b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n")
        self.wfile.flush()

    def _sse_error(self) -> None:
        err = {"error": {"message": simlog.ENGINE_DEAD_MSG, "type": "InternalServerError", "code": 500}}
        try:
            self._sse(err)
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
        except OSError:
            pass


class QuietThreadingHTTPServer(ThreadingHTTPServer):
    """A threaded server that never prints socketserver's tracebacks into the vLLM-shaped log."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        return


def make_handler(ctx: Ctx) -> type[Handler]:
    """A Handler subclass bound to one simulator context."""
    return type("BoundHandler", (Handler,), {"ctx": ctx})
