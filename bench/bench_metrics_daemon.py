"""Does scraping /metrics slow a real daemon? Control-socket latencies with and without a scraper.

Run: ``.venv/bin/python -m bench.bench_metrics_daemon [--seconds S] [--rounds N]`` (needs Docker and the
simulator image, like bench_daemon).

A real daemon (subprocess) supervises one simulator profile (probe round every second) with
``metrics.listen`` on a free 127.0.0.1 port. Once it is RUNNING, three phases take turns ``--rounds``
times: *idle* (nobody scrapes), *1/s* (a thread GETs /metrics once a second: 15 times Prometheus's
default rate) and *flat out* (back to back, hundreds per second: a worst case no Prometheus produces).
In each phase the bench measures, for ``--seconds``:

- ``status``: the round trip of a ``status`` request on the control socket (what ``supervisorctl
  status`` does, without the CLI process start): served from the published document, off the loop;
- ``loop``: the round trip of ``start`` on the RUNNING profile: the request goes through the daemon's
  inbox, the loop steps the machine ("already running"), persists and publishes, and replies. Its
  latency is the loop's responsiveness (queue wait included), i.e. a loop-lag measure.

Prints medians, p95 and n per phase (all rounds pooled) and the scrape rate; exits 0 (a measurement).
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
import urllib.request

from bench.daemon_world import bench_world
from supervisor.adapters.control.client import ControlClient
from tests.harness import free_port
from tools.images import ensure_sim_image


def _p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20)[18] if len(values) >= 20 else max(values)


def _fmt(name: str, values: list[float]) -> str:
    return (
        f"{name:<22} median {statistics.median(values) * 1e3:7.3f} ms  p95 {_p95(values) * 1e3:7.3f} ms"
        f"  (n={len(values)})"
    )


class Scraper:
    """A thread GETting /metrics every ``period`` s (0: back to back) while ``on`` is set."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.period = 0.0
        self.on = threading.Event()
        self.done = threading.Event()
        self.count = 0
        self.seconds = 0.0
        self.bytes = 0
        self._thread = threading.Thread(target=self._run, name="scraper", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self.done.is_set():
            if not self.on.wait(0.1):
                continue
            t0 = time.perf_counter()
            with urllib.request.urlopen(self.url, timeout=10) as resp:
                self.bytes = len(resp.read())
            took = time.perf_counter() - t0
            self.seconds += took
            self.count += 1
            if self.period > 0:
                self.done.wait(max(0.0, self.period - took))

    def close(self) -> None:
        self.on.clear()
        self.done.set()
        self._thread.join(15)


def _measure(client: ControlClient, seconds: float, status: list[float], loop: list[float]) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t0 = time.perf_counter()
        reply = client.call("status")
        t1 = time.perf_counter()
        assert reply.get("ok"), reply
        reply = client.call("start", name="p")
        t2 = time.perf_counter()
        assert reply.get("ok"), reply
        assert reply["data"]["message"] == "already running", reply
        status.append(t1 - t0)
        loop.append(t2 - t1)
        time.sleep(0.02)  # a client, not a load generator: leave the loop its own work


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=10.0, help="length of each phase")
    ap.add_argument("--rounds", type=int, default=3, help="idle/scraped phase pairs")
    args = ap.parse_args()
    ensure_sim_image()
    port = free_port()
    with bench_world() as world:
        spec = world.profile("p", api_key=False)
        d = world.daemon("d", [spec], extra={"metrics": {"listen": f"127.0.0.1:{port}"}})
        d.wait_state("p", "RUNNING", 90)
        client = ControlClient(d.socket, timeout=15)
        scraper = Scraper(f"http://127.0.0.1:{port}/metrics")
        phases: dict[str, float | None] = {"idle": None, "1/s": 1.0, "flat out": 0.0}
        status: dict[str, list[float]] = {k: [] for k in phases}
        loop: dict[str, list[float]] = {k: [] for k in phases}
        flat = [0, 0.0, 0.0]  # scrapes, their seconds, phase seconds
        try:
            for _ in range(args.rounds):
                for phase, period in phases.items():
                    count, spent, t0 = scraper.count, scraper.seconds, time.monotonic()
                    if period is not None:
                        scraper.period = period
                        scraper.on.set()
                    _measure(client, args.seconds, status[phase], loop[phase])
                    scraper.on.clear()
                    if phase == "flat out":
                        flat[0] += scraper.count - count
                        flat[1] += scraper.seconds - spent
                        flat[2] += time.monotonic() - t0
        finally:
            scraper.close()
        assert d.status("p")["state"] == "RUNNING"
    print(f"{args.rounds} rounds of 3 phases x {args.seconds:g} s, one simulator profile")
    for phase in phases:
        print(_fmt(f"status, {phase}", status[phase]))
    for phase in phases:
        print(_fmt(f"loop (start), {phase}", loop[phase]))
    if flat[0]:
        print(
            f"flat out: {flat[0]} scrapes in {flat[2]:.1f} s ({flat[0] / flat[2]:.0f}/s), "
            f"mean {flat[1] / flat[0] * 1e3:.2f} ms, last {scraper.bytes} bytes"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
