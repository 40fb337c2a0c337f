"""HTTP probes against real HTTP servers on 127.0.0.1: a scripted threaded server and the simulator."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import docker
import pytest
import structlog.testing

from supervisor.adapters.vllm.probes import (
    canary,
    check_auth,
    check_health,
    fetch_metrics,
    generate,
    wait_until_healthy,
)
from supervisor.sim.launch import sim_run_kwargs
from tests.conftest import Resources
from tests.harness import free_port, wait_for

SECRET = "sk-probe-SECRET-7f3a9c"


@dataclass
class Script:
    """What the scripted server answers per path: a list of (status, body) consumed in order, last repeats."""

    answers: dict[str, list[tuple[int, bytes]]] = field(default_factory=dict)
    seen: list[tuple[str, str, dict[str, str], bytes]] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)

    def answer(self, path: str) -> tuple[int, bytes]:
        queue = self.answers.get(path) or [(404, b'{"detail":"Not Found"}')]
        return queue.pop(0) if len(queue) > 1 else queue[0]


@pytest.fixture
def server() -> Iterator[tuple[str, Script]]:
    """A real threaded HTTP server on 127.0.0.1 answering from a script; '/hang' blocks until released."""
    script = Script()

    class Handler(BaseHTTPRequestHandler):
        def _handle(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            script.seen.append((self.command, self.path, dict(self.headers.items()), body))
            if self.path == "/hang":
                script.release.wait(10)
            status, out = script.answer(self.path)
            with contextlib.suppress(OSError):  # the client may have given up (timeout test)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

        do_GET = _handle  # noqa: N815
        do_POST = _handle  # noqa: N815

        def log_message(self, format: str, *args: Any) -> None:
            return

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", script
    finally:
        script.release.set()
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


def _chat(tokens: int) -> bytes:
    return json.dumps({"choices": [], "usage": {"completion_tokens": tokens, "prompt_tokens": 3}}).encode()


def test_health_ok_and_failure(server: tuple[str, Script]) -> None:
    """200 is ok with a latency; 503 is a failed result carrying the status."""
    url, script = server
    script.answers["/health"] = [(200, b""), (503, b"")]
    first, second = check_health(url, 30.0), check_health(url, 30.0)  # 30 s: only to stop a hang
    assert first.ok
    assert first.status == 200
    assert first.latency_ms >= 0
    assert not second.ok
    assert second.status == 503
    assert second.error == "HTTP 503"


def test_connection_refused_is_a_result_not_an_exception() -> None:
    """Nothing listening: ok=False, no status, error says refused."""
    res = check_health(f"http://127.0.0.1:{free_port()}", 2.0)
    assert not res.ok
    assert res.status is None
    assert res.error == "connection refused"


def test_timeout_is_a_result(server: tuple[str, Script]) -> None:
    """A server that does not answer within the timeout gives ok=False, error 'timeout'."""
    url, script = server
    script.answers["/hang"] = [(200, b"")]
    res = check_health(url, 0.3, path="/hang")
    script.release.set()
    assert not res.ok
    assert res.error == "timeout"


def test_generate_sends_key_and_requires_tokens(server: tuple[str, Script]) -> None:
    """The key goes in the Authorization header; ok needs completion_tokens > 0; the key is never logged."""
    url, script = server
    script.answers["/v1/chat/completions"] = [
        (200, _chat(5)),
        (200, _chat(0)),
        (401, b'{"error": "Unauthorized"}'),
    ]
    with structlog.testing.capture_logs() as logs:
        good = generate(url, SECRET, "m", prompt="hi", max_tokens=4, timeout=2.0)
        empty = generate(url, SECRET, "m", timeout=2.0)
        denied = generate(url, None, "m", timeout=2.0)
    assert good.ok
    assert good.completion_tokens == 5
    assert not empty.ok
    assert empty.completion_tokens == 0
    assert empty.error == "no completion tokens"
    assert not denied.ok
    assert denied.status == 401
    method, path, headers, body = script.seen[0]
    assert (method, path) == ("POST", "/v1/chat/completions")
    assert headers["Authorization"] == f"Bearer {SECRET}"
    sent = json.loads(body)
    assert sent["model"] == "m"
    assert sent["max_tokens"] == 4
    assert sent["messages"][0]["content"] == "hi"
    assert "Authorization" not in script.seen[2][2]
    assert SECRET not in repr(logs) + repr(good) + repr(empty)


def test_generate_completion_kind(server: tuple[str, Script]) -> None:
    """kind='completion' posts a prompt to /v1/completions."""
    url, script = server
    script.answers["/v1/completions"] = [(200, _chat(2))]
    res = generate(url, None, "m", kind="completion", prompt="p", timeout=2.0)
    assert res.ok
    assert res.completion_tokens == 2
    assert script.seen[0][1] == "/v1/completions"
    assert json.loads(script.seen[0][3])["prompt"] == "p"


def test_generate_non_json_answer(server: tuple[str, Script]) -> None:
    """A 200 with a body that is not JSON is a failed probe, not an exception."""
    url, script = server
    script.answers["/v1/chat/completions"] = [(200, b"<html>")]
    res = generate(url, None, "m", timeout=2.0)
    assert not res.ok
    assert res.error == "answer is not the expected JSON"


def test_check_auth_statuses(server: tuple[str, Script]) -> None:
    """401 -> enforced, 200 -> open, 500 -> unknown; no Authorization header is sent."""
    url, script = server
    script.answers["/v1/models"] = [(401, b'{"error": "Unauthorized"}'), (200, b"{}"), (500, b"")]
    assert check_auth(url, 2.0).status == "enforced"
    assert check_auth(url, 2.0).status == "open"
    assert check_auth(url, 2.0).http_status == 500
    assert all("Authorization" not in headers for _m, _p, headers, _b in script.seen)
    assert check_auth(f"http://127.0.0.1:{free_port()}", 1.0).status == "unknown"


def test_fetch_metrics(server: tuple[str, Script]) -> None:
    """200 gives the text; an error gives an empty text."""
    url, script = server
    script.answers["/metrics"] = [(200, b"vllm:num_requests_running 0.0\n"), (500, b"")]
    res, text = fetch_metrics(url, 2.0)
    assert res.ok
    assert "vllm:num_requests_running" in text
    res2, text2 = fetch_metrics(url, 2.0)
    assert not res2.ok
    assert res2.status == 500
    assert text2 == ""


def test_wait_until_healthy_polls_until_200(server: tuple[str, Script]) -> None:
    """503, 503, then 200: returns ok after three probes."""
    url, script = server
    script.answers["/health"] = [(503, b""), (503, b""), (200, b"")]
    res = wait_until_healthy(url, 10.0, interval_s=0.05)
    assert res.ok
    assert len([s for s in script.seen if s[1] == "/health"]) == 3


def test_wait_until_healthy_is_bounded() -> None:
    """A server that never comes up: returns not ok once the (fake) deadline has passed."""
    now = [0.0]
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    res = wait_until_healthy(
        f"http://127.0.0.1:{free_port()}", 5.0, interval_s=1.0, monotonic=lambda: now[0], sleep=sleep
    )
    assert not res.ok
    assert res.error == "connection refused"
    assert sum(slept) == pytest.approx(5.0)
    assert len(slept) <= 7


def test_wait_until_healthy_stops_when_server_gone() -> None:
    """alive() returning False ends the wait at once."""
    res = wait_until_healthy(f"http://127.0.0.1:{free_port()}", 60.0, alive=lambda: False)
    assert not res.ok
    assert res.error == "server exited while waiting"


@pytest.mark.docker
def test_probes_against_simulator(
    docker_client: docker.DockerClient,
    resources: Resources,
    sim_image: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The simulator: health 200, metrics served, auth enforced, generation ok only with the key."""
    port = free_port()
    kw = sim_run_kwargs(resources.name("probe-sim"), port, resources.labels, env={"VLLM_API_KEY": SECRET})
    docker_client.containers.run(**kw)
    url = f"http://127.0.0.1:{port}"
    with structlog.testing.capture_logs() as logs:
        assert wait_until_healthy(url, 60.0, interval_s=0.2).ok
        assert check_auth(url, 5.0).status == "enforced"
        ok = generate(url, SECRET, "sim-model", timeout=10.0)
        denied = generate(url, None, "sim-model", timeout=10.0)
        first = canary(url, SECRET, "sim-model", kind="chat", timeout=10.0)
        first_completion = canary(url, SECRET, "sim-model", kind="completion", timeout=10.0)
        canary_denied = canary(url, None, "sim-model", timeout=10.0)
        res, text = fetch_metrics(url, 5.0)
    assert ok.ok
    assert (ok.completion_tokens or 0) > 0
    assert not denied.ok
    assert denied.status == 401
    assert first.ok, first  # the canary: one streamed token, answered at its first chunk
    assert first_completion.ok, first_completion
    assert not canary_denied.ok
    assert canary_denied.status == 401
    assert res.ok
    assert "vllm:" in text
    out = capsys.readouterr()
    assert SECRET not in out.out + out.err + repr(logs)
    assert wait_for(lambda: check_health(url, 30.0).ok, 60.0)


def test_canary_without_a_token_is_not_ok(server: tuple[str, Script]) -> None:
    """A stream that ends before any chunk with choices, or an error answer, is a failed canary."""
    url, script = server
    script.answers["/v1/chat/completions"] = [(200, b"data: [DONE]\n\n"), (503, b"{}")]
    assert canary(url, SECRET, "m", timeout=5.0).error == "no token before [DONE]"
    bad = canary(url, SECRET, "m", timeout=5.0)
    assert (bad.ok, bad.status) == (False, 503)
    body = json.loads(script.seen[0][3])
    assert (body["max_tokens"], body["stream"]) == (1, True)
