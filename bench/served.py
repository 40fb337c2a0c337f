"""A client that keeps asking a model server for a real generation and timestamps when it answers again."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import requests

from tests.harness import wait_for

POLL_S = 0.25
REQUEST_TIMEOUT_S = 2.0


def generate(url: str, key: str, model: str, timeout: float = REQUEST_TIMEOUT_S) -> bool:
    """One chat completion; True when it returned 200 with completion tokens."""
    try:
        r = requests.post(
            f"{url}/v1/chat/completions",
            json={"model": model, "messages": [{"role": "user", "content": "ping"}], "max_tokens": 4},
            headers={"Authorization": f"Bearer {key}"},
            timeout=timeout,
        )
        if r.status_code != 200:
            return False
        return int(r.json().get("usage", {}).get("completion_tokens") or 0) > 0
    except (requests.RequestException, ValueError):
        return False


def wait_serving(url: str, key: str, model: str, timeout: float) -> float:
    """Wait until a generation succeeds; the wall time it did."""
    wait_for(lambda: generate(url, key, model), timeout, interval=POLL_S, message=f"a generation from {url}")
    return time.time()


@dataclass
class Recovery:
    """Polls from ``t0``: the first failed generation, then the first success after it."""

    url: str
    key: str
    model: str
    t0: float = 0.0
    first_failure: float | None = None
    served_again: float | None = None
    attempts: int = 0
    first_after: float = 0.0  # seconds after t0 before the first request (a fault "then a request")
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self, t0: float) -> None:
        self.t0 = t0
        self._thread = threading.Thread(target=self._loop, name=f"recovery-{self.url}", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        self._stop.wait(max(0.0, self.t0 + self.first_after - time.time()))
        while not self._stop.is_set():
            started = time.time()
            ok = generate(self.url, self.key, self.model)
            self.attempts += 1
            if not ok and self.first_failure is None:
                self.first_failure = started
            elif ok and self.first_failure is not None:
                self.served_again = time.time()
                return
            self._stop.wait(max(0.0, started + POLL_S - time.time()))

    @property
    def seconds(self) -> float | None:
        """Fault -> first served generation after the outage; None while (or if) never served again."""
        return None if self.served_again is None else round(self.served_again - self.t0, 2)

    @property
    def done(self) -> bool:
        return self.served_again is not None

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=REQUEST_TIMEOUT_S + 2)
