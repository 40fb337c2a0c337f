"""Every line is cut before a regex sees it, and the secret-shape masker is linear (issue 39 item 5).

The timing figures (a 64 KiB line through the masker, ``diagnose --log`` of a 1 MB line) are in
bench/results/README.md; these tests hold the behaviour: the answer is right and the cutting happened.
"""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from supervisor.adapters.alerts.webhook import attempt
from supervisor.adapters.docker.stream import split_lines
from supervisor.adapters.store.files import capped_lines
from supervisor.core.log_events import LINE_MAX
from supervisor.core.spec.secrets import MASK, mask_text_shapes
from supervisor.offline.diagnose import run_diagnose
from tests.test_diagnose import FREE, INIT_FAILED

SECRET = "hunter2hunter2"
#: Before: 0.58 s for 64 KiB of this in the URL pattern (quadratic: 16x the line, 256x the time).
DOTS = "a." * 32_768


def test_the_url_shape_still_masks_after_a_hostile_run() -> None:
    """The URL pattern's scheme is bounded (32 characters), so a run of ``a.a.a`` costs linear time; the
    URLs after it (and a scheme such as git+ssh) are still found and masked."""
    text = DOTS + f" https://u:{SECRET}@h/x?token=t0k3n git+ssh://me:{SECRET}@h/r " + "a-" * 30_000
    out = mask_text_shapes(text)
    assert SECRET not in out
    assert "t0k3n" not in out
    assert out.count(MASK) == 3


def test_a_container_log_line_is_cut_and_never_buffered_whole() -> None:
    """Docker splits a log line at 16 KiB, but nothing may rely on it: a 1 MB line in 10 KB chunks comes out
    as one line of LINE_MAX characters and a note of how much was cut; the lines around it are intact."""
    chunks = [b"before\n", *([b"x" * 10_000] * 100), b"\nafter\r", b"progress\n"]
    lines = list(split_lines(chunks))
    assert lines[0] == "before"
    assert lines[1] == "x" * LINE_MAX + f" [... line cut: {1_000_000 - LINE_MAX} more characters]"
    assert lines[2:] == ["after", "progress"]


def test_diagnose_log_of_a_file_holding_a_1mb_line(tmp_path: Path) -> None:
    """`diagnose --log FILE` where the root-cause line carries a 1 MB tail (and a secret URL): the answer is
    the right one, the secret is masked, and the line the analyzers saw was cut to LINE_MAX."""
    log = tmp_path / "vllm.log"
    log.write_text(f"{FREE} see https://u:{SECRET}@host/x {DOTS * 16}\n{INIT_FAILED}\n", encoding="utf-8")
    code, out = run_diagnose(str(log), None, use_kernel=False, as_json=True)
    report = json.loads(out)
    assert code == 1
    assert report["diagnosis"].startswith("vLLM refused to start: only 115.17/122.86 GiB were free")
    assert SECRET not in out
    with log.open(encoding="utf-8") as fh:
        seen = list(capped_lines(fh))
    assert len(seen) == 2
    first = log.read_text(encoding="utf-8").split("\n")[0]
    assert seen[0] == first[:LINE_MAX] + f" [... line cut: {len(first) - LINE_MAX} more characters]"


@pytest.fixture
def chatty_webhook() -> Iterator[str]:
    """A Feishu-like endpoint answering 200 with its error code and a long message quoting our URL (60 KB,
    or 1 MB when the request asks for it)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            size = 1_000_000 if self.path.endswith("/huge") else 60_000
            body = json.dumps({"code": 19001, "msg": f"bad token {self.path} " + "z" * size}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/open-apis/bot/v2/hook/{SECRET}"
    srv.shutdown()
    srv.server_close()


def test_a_webhook_answer_is_read_bounded_and_its_detail_cut(chatty_webhook: str) -> None:
    """The platform's message is cut before the masker sees it; an answer over 64 KiB is not read (on main
    the whole 1 MB went through the masker's regexes)."""
    outcome = attempt("POST", chatty_webhook, kind="feishu", timeout=10, json_body={"msg_type": "text"})
    assert not outcome.ok
    assert outcome.detail.startswith("HTTP 200, feishu error 19001: bad token ")
    assert SECRET not in outcome.detail
    assert len(outcome.detail) < 600
    huge = attempt(
        "POST", chatty_webhook + "/huge", kind="feishu", timeout=10, json_body={"msg_type": "text"}
    )
    assert not huge.ok
    assert huge.detail == "HTTP 200, feishu: an answer larger than 64 KiB (not read)"
