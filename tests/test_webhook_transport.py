"""The webhook transport (adapters/alerts/webhook.py) against real HTTP servers on 127.0.0.1: a redirect is
never
followed (it would re-POST the alert, tokens and all, elsewhere) and the environment's proxy is ignored."""

from __future__ import annotations

import contextlib
import http.server
import threading
from collections.abc import Iterator

import pytest

from supervisor.adapters.alerts.webhook import attempt
from tests.harness import free_port


class _Hits:
    def __init__(self) -> None:
        self.paths: list[str] = []


@contextlib.contextmanager
def _server(status: int, location: str | None = None) -> Iterator[tuple[str, _Hits]]:
    hits = _Hits()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            hits.paths.append(self.path)
            self.send_response(status)
            if location:
                self.send_header("Location", location)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args: object) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}", hits
    finally:
        srv.shutdown()
        srv.server_close()


@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_a_redirect_is_not_followed(status: int) -> None:
    """The hook answers a redirect to another server: nothing reaches that server; the failure is
    permanent (not retried) and says why."""
    with _server(200) as (elsewhere, stolen):
        with _server(status, f"{elsewhere}/steal") as (hook, hits):
            out = attempt("POST", f"{hook}/hook", kind="generic", timeout=5, json_body={"text": "key sk-1"})
        assert hits.paths == ["/hook"]
        assert stolen.paths == []
    assert (out.ok, out.transient, out.status) == (False, False, status)
    assert "redirect not followed" in out.detail


def test_the_environment_proxy_is_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    """HTTP_PROXY points at a dead port: the alert goes straight to the hook anyway."""
    dead = f"http://127.0.0.1:{free_port()}"
    monkeypatch.setenv("HTTP_PROXY", dead)
    monkeypatch.setenv("http_proxy", dead)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    with _server(200) as (hook, hits):
        out = attempt("POST", f"{hook}/hook", kind="generic", timeout=5, json_body={"text": "x"})
    assert out.ok, out.detail
    assert hits.paths == ["/hook"]


def test_a_configured_proxy_is_used() -> None:
    """An explicit proxy (channel key `proxy:`) carries the request: the proxy server sees the full URL."""
    with _server(200) as (proxy, seen):
        out = attempt(
            "POST", "http://hook.invalid/x", kind="generic", timeout=5, json_body={"t": 1}, proxy=proxy
        )
    assert out.ok, out.detail
    assert seen.paths == ["http://hook.invalid/x"]
