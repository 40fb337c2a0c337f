"""Thread CPU per probe request: the probes' light path (``http.client``) against ``requests``.

Run: ``.venv/bin/python -m bench.bench_probe_http [--trials 5] [--calls 300] [--json]``. A threaded server
(HTTP, 127.0.0.1, in this process, off the measured thread) answers ``/health`` (empty 200), ``/metrics`` (a
12 KiB Prometheus text, about a real vLLM 0.32's) and a streamed completion (three ``data:`` chunks, then
``[DONE]``). For each of the three requests the figure is the calling thread's CPU time per call
(``time.thread_time``), median over the trials, taken alternately:

- ``light``: what the daemon runs (supervisor/adapters/vllm/probes.py over
supervisor/adapters/vllm/lighthttp.py);
- ``requests``: the same request through ``requests`` with a new ``Session`` per call, as the probes did
  before (commit 85b14c6).

Also the ratio light / requests. Noisy on a shared box: the ratio is the figure to compare.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Callable
from contextlib import closing
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import requests

from bench.stats import summarize
from supervisor.adapters.vllm import probes

METRICS = "".join(
    f'vllm:request_success_total{{engine="0",finished_reason="stop",model_name="m{i}"}} {i}.0\n'
    for i in range(120)
).encode()
STREAM = (
    b"".join(b'data: {"id":"c","choices":[{"index":0,"delta":{"content":"x"}}]}\n\n' for _ in range(3))
    + b"data: [DONE]\n\n"
)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _send(self, body: bytes, ctype: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self._send(METRICS if self.path == "/metrics" else b"", "text/plain")

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._send(STREAM, "text/event-stream")

    def log_message(self, format: str, *args: Any) -> None:
        return


def _old_get(url: str) -> None:
    with requests.Session() as s:
        s.trust_env = False
        s.get(url, timeout=5).content  # noqa: B018


def _old_stream(url: str) -> None:
    with requests.Session() as s:
        s.trust_env = False
        with s.post(url, json={"stream": True}, timeout=5, stream=True) as r:
            for _line in r.iter_lines():
                pass


def _light_stream(url: str) -> None:
    with closing(probes.sse_chunks(url, {"stream": True}, "k", 5.0, time.monotonic())) as chunks:
        for _chunk in chunks:
            pass


def _cpu_us(call: Callable[[], object], calls: int) -> float:
    t0 = time.thread_time()
    for _ in range(calls):
        call()
    return (time.thread_time() - t0) / calls * 1e6


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{httpd.server_address[1]}"
    cases: dict[str, tuple[Callable[[], object], Callable[[], object]]] = {
        "health": (lambda: probes.check_health(base, 5.0), lambda: _old_get(base + "/health")),
        "metrics": (lambda: probes.fetch_metrics(base, 5.0), lambda: _old_get(base + "/metrics")),
        "stream": (
            lambda: _light_stream(base + "/v1/completions"),
            lambda: _old_stream(base + "/v1/completions"),
        ),
    }
    out: dict[str, Any] = {
        "command": "python -m bench.bench_probe_http",
        "trials": a.trials,
        "calls": a.calls,
    }
    try:
        for name, (light, old) in cases.items():
            got: dict[str, list[float]] = {"light": [], "requests": []}
            for _ in range(a.trials):  # alternated, so drift on a shared box hits both alike
                got["light"].append(_cpu_us(light, a.calls))
                got["requests"].append(_cpu_us(old, a.calls))
            lm, rm = summarize(got["light"], "us", 1), summarize(got["requests"], "us", 1)
            ratio = round(lm.median / rm.median, 3) if lm.median and rm.median else None
            out[name] = {"light": lm.as_dict(), "requests": rm.as_dict(), "ratio": ratio}
            if not a.json:
                print(f"{name:8s} light {lm.median:8.1f} us   requests {rm.median:8.1f} us   ratio {ratio}")
    finally:
        httpd.shutdown()
        httpd.server_close()
    if a.json:
        print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
