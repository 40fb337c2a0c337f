"""Thread CPU per followed log line: the daemon's follower against docker-py's reader and a bare wake-up.

Run: ``.venv/bin/python -m bench.bench_logfollow [--trials 3] [--seconds 20] [--json]``. A container of the
base image prints a vLLM access-log line every 50 ms (a server answering 20 requests a second); each
reader follows it with timestamps for ``--seconds`` in a thread of its own, and the figure is that
thread's CPU time (user + system) per line, median over the trials:

- ``adapter``: ``DockerAdapter.logs(follow=True, timestamps=True)``, the lines as the daemon gets them;
- ``docker_py``: docker-py's ``APIClient.logs(stream=True, follow=True)`` split into lines as the adapter
  does (``split_lines``): the adapter's path before it read the stream itself (commit e5cf7ba);
- ``recv``: a thread woken by a 120-byte write on a socketpair, one ``recv`` each (the floor: a wake-up).

Also the ratio adapter / docker_py. Noisy on a shared box: compare figures taken side by side.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterable

import docker

from supervisor.adapters.docker.adapter import DockerAdapter
from supervisor.adapters.docker.errors import until_reaped
from supervisor.adapters.docker.stream import split_lines
from tests.harness import unique_name
from tools.images import ensure_base_image

LINE = '(APIServer pid=1) INFO:     172.17.0.1:40000 - "GET /metrics HTTP/1.1" 200 OK'
PERIOD_S = 0.05


def _per_line(lines: Callable[[threading.Event], Iterable[object]], seconds: float) -> float:
    """Follow ``lines`` in a thread for ``seconds``; that thread's CPU microseconds per item."""
    stop = threading.Event()
    out: dict[str, float] = {}

    def run() -> None:
        n, t0 = 0, None
        for _ in lines(stop):
            if t0 is None:
                t0 = time.thread_time()  # from the first line: the connection's set-up is not counted
                continue
            n += 1
            if stop.is_set():
                break
        out["us"] = (time.thread_time() - (t0 or 0.0)) / max(n, 1) * 1e6
        out["n"] = n

    th = threading.Thread(target=run, daemon=True)
    th.start()
    time.sleep(seconds)
    stop.set()
    th.join(10)
    if out.get("n", 0) < seconds / PERIOD_S / 4:
        raise RuntimeError(f"too few lines followed ({out.get('n')}): is the container printing?")
    return out["us"]


def _recv_floor(seconds: float) -> float:
    a, b = socket.socketpair()
    with a, b:
        stop = threading.Event()

        def lines(_stop: threading.Event) -> Iterable[bytes]:
            while not stop.is_set():
                yield a.recv(65536)

        def writer() -> None:
            while not stop.is_set():
                b.send(LINE.encode() + b"\n")
                time.sleep(PERIOD_S)
            b.send(b"end\n")

        w = threading.Thread(target=writer, daemon=True)
        w.start()
        try:
            return _per_line(lines, seconds)
        finally:
            stop.set()
            w.join(5)


def measure(trials: int, seconds: float) -> dict[str, object]:
    client = docker.from_env()
    name = unique_name("logfollow")
    script = f"while true; do echo '{LINE}'; sleep {PERIOD_S}; done"
    c = client.containers.run(ensure_base_image(), ["sh", "-c", script], name=name, detach=True)
    adapter = DockerAdapter()
    try:

        def ours(stop: threading.Event) -> Iterable[str]:
            return adapter.logs(name, since=time.time(), follow=True, stop=stop, timestamps=True)

        def docker_py(stop: threading.Event) -> Iterable[str]:
            stream = client.api.logs(name, stream=True, follow=True, timestamps=True, since=time.time())

            def close() -> None:
                stop.wait()
                stream.close()

            threading.Thread(target=close, daemon=True).start()
            lines: Iterable[str] = split_lines(stream)
            return lines

        runs: dict[str, list[float]] = {"adapter": [], "docker_py": [], "recv": []}
        for _ in range(trials):  # interleaved: the box's load falls on all three alike
            runs["adapter"].append(_per_line(ours, seconds))
            runs["docker_py"].append(_per_line(docker_py, seconds))
            runs["recv"].append(_recv_floor(seconds))
    finally:
        until_reaped(lambda: c.remove(force=True))
        adapter.close()
    med = {k: round(statistics.median(v), 1) for k, v in runs.items()}
    return {
        "us_per_line_median": med,
        "runs": {k: [round(x, 1) for x in v] for k, v in runs.items()},
        "adapter_over_docker_py": round(med["adapter"] / med["docker_py"], 2),
        "trials": trials,
        "seconds": seconds,
        "line_every_s": PERIOD_S,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=3)
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    result = measure(a.trials, a.seconds)
    if a.json:
        print(json.dumps(result))
    else:
        for k, v in result["us_per_line_median"].items():  # type: ignore[attr-defined]
            print(f"{k:10s} {v:8.1f} us of thread CPU per line")
        print(f"adapter / docker-py: {result['adapter_over_docker_py']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
