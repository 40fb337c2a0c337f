"""Hostile local clients of a running daemon, for the combined live test and ``bench/bench_hostile.py``.

* :func:`idle_connections`: N idle TCP connections to the metrics port, held open (in this process);
* :func:`hostile_control`: 40 slow or malformed control-socket clients (8 each: trickling, half-JSON,
  deep nesting, huge lines, never-closing) in a subprocess run as user nobody (a socket-group member
  who is not root), each reconnecting until its time is up;
* :func:`raise_nofile`: lift this process's descriptor limit for them (or say why it cannot).
"""

from __future__ import annotations

import contextlib
import json
import resource
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.daemon_harness import DaemonProc, write_daemon_config
from tests.harness import AS_NOBODY, REPO

KINDS = ("trickle", "half_json", "deep", "huge", "never_closing")
PER_KIND = 8

CLIENTS = r"""
import json, socket, sys, threading, time
path, seconds, per_kind = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
end = time.monotonic() + seconds
counts = {}
lock = threading.Lock()

def count(kind, what):
    with lock:
        counts.setdefault(kind, {}).setdefault(what, 0)
        counts[kind][what] += 1

def until_closed(s, send_every=None, byte=b"x"):
    # hold the connection (trickling ``byte`` every ``send_every`` s) until the server closes it
    s.settimeout(send_every or 0.5)
    seen = b""
    while time.monotonic() < end:
        try:
            if send_every:
                s.sendall(byte)
            data = s.recv(65536)
        except socket.timeout:
            continue
        except OSError:
            data = b""
        if data == b"":
            return "busy" if b"busy" in seen else ("answered" if seen else "closed")
        seen = (seen + data)[-4096:]
    return "held"

def client(kind):
    while time.monotonic() < end:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.settimeout(5)
            s.connect(path)
            count(kind, "connected")
            if kind == "trickle":
                s.sendall(b'{"cmd": "st')
                got = until_closed(s, 0.3, b"a")
            elif kind == "half_json":
                s.sendall(b'{"cmd": "status", "args": {"name": "p"')
                got = until_closed(s)
            elif kind == "deep":
                s.sendall(b"[" * 20000 + b"]" * 20000 + b"\n")
                got = until_closed(s)
            elif kind == "huge":
                s.sendall(b'{"cmd": "' + b"x" * (1 << 20))
                got = until_closed(s)
            else:
                got = until_closed(s)
            count(kind, got)
        except OSError:
            count(kind, "refused")
        finally:
            s.close()
        time.sleep(0.2)  # a refused client comes back at once, but not in a hot loop

threads = [threading.Thread(target=client, args=(k,), daemon=True)
           for k in ("trickle", "half_json", "deep", "huge", "never_closing") for _ in range(per_kind)]
for t in threads:
    t.start()
print("attacking", flush=True)
for t in threads:
    t.join(seconds + 15)
print(json.dumps(counts), flush=True)
"""


def exposed_daemon(work: Path, profiles: list[Path], sock_dir: Path, port: int) -> DaemonProc:
    """A daemon (not started) on ``profiles`` whose control socket in ``sock_dir`` user nobody (group
    nogroup) may connect to, with /metrics on 127.0.0.1:``port``."""
    sock_dir.chmod(0o755)
    sock = sock_dir / "control.sock"
    extra = {"socket_path": str(sock), "socket_group": "nogroup", "metrics": {"listen": f"127.0.0.1:{port}"}}
    d = DaemonProc(write_daemon_config(work, profiles, extra=extra), work)
    d.socket = sock
    return d


def raise_nofile(need: int) -> str | None:
    """Lift the soft descriptor limit to at least ``need``; the reason it cannot (None: it is enough)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= need:
        return None
    if hard != resource.RLIM_INFINITY and hard < need:
        return f"needs {need} descriptors, the hard limit is {hard} (raise it: ulimit -Hn)"
    resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
    return None


@dataclass
class Idle:
    """Idle connections held open; how many could be opened."""

    socks: list[socket.socket] = field(default_factory=list)
    failed: int = 0

    def closed_by_server(self) -> int:
        """How many of them the server has closed by now (it reads end-of-file)."""
        n = 0
        for s in self.socks:
            s.setblocking(False)
            try:
                if s.recv(1) == b"":
                    n += 1
            except BlockingIOError:
                pass
            except OSError:
                n += 1
        return n


@contextlib.contextmanager
def idle_connections(port: int, n: int) -> Iterator[Idle]:
    """``n`` idle TCP connections to 127.0.0.1:``port`` (each sends nothing), closed on exit."""
    idle = Idle()
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.settimeout(2)
            try:
                s.connect(("127.0.0.1", port))
            except OSError:
                idle.failed += 1
                s.close()
                continue
            idle.socks.append(s)
        yield idle
    finally:
        for s in idle.socks:
            s.close()


@dataclass
class Attack:
    """The hostile control clients' process; ``counts`` once it has ended."""

    proc: subprocess.Popen[str]
    counts: dict[str, dict[str, int]] = field(default_factory=dict)


@contextlib.contextmanager
def hostile_control(sock: Path, seconds: float, per_kind: int = PER_KIND) -> Iterator[Attack]:
    """5 x ``per_kind`` hostile clients of the control socket ``sock`` as user nobody for ``seconds``;
    yields once they are running; on exit waits for their counts (killed if they overstay)."""
    proc = subprocess.Popen(
        [*AS_NOBODY, sys.executable, "-c", CLIENTS, str(sock), str(seconds), str(per_kind)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    attack = Attack(proc)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        if first.strip() != "attacking":
            raise RuntimeError(
                f"hostile clients did not start: {first!r} {proc.stderr.read() if proc.stderr else ''}"
            )
        yield attack
        out, _err = proc.communicate(timeout=seconds + 30)
        last = out.strip().splitlines()[-1] if out.strip() else "{}"
        attack.counts = json.loads(last)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def totals(counts: dict[str, Any], what: str) -> int:
    """The sum of one outcome over the kinds: ``connected``; then one of ``busy`` (refused for the cap),
    ``answered`` (an error answer, then closed), ``closed`` (closed unanswered: a deadline, a size
    limit), ``held`` (still open at the end), ``refused`` (could not connect or send)."""
    return sum(int(c.get(what, 0)) for c in counts.values())
