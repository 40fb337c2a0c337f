"""The performance sentinel's pool job (docs/sentinel.md): the idle check, the canary, vLLM's counters; on a
run's first round the perf ledger's history of this fingerprint and the backends its log names. The answer
goes to the one inbox as a :class:`~supervisor.core.fleet.events.CanaryMeasured`; the fleet step judges
(core/fleet/sentinel.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import structlog

from supervisor.adapters.docker.adapter import DockerAdapter
from supervisor.adapters.store.state import Store
from supervisor.adapters.vllm import probes
from supervisor.adapters.vllm.canary import run_canary
from supervisor.config import Profile
from supervisor.core.errors import StateError, SupervisorError
from supervisor.core.fleet.events import CanaryMeasured, FleetEvent
from supervisor.core.sentinel import judge
from supervisor.core.sentinel.counters import counters_from_text
from supervisor.core.sentinel.judge import Sample
from supervisor.core.sentinel.ledger import PERF_ROWS, history_of
from supervisor.core.vllm.backends import backend_lines
from supervisor.core.vllm.metrics import VllmMetrics
from supervisor.core.vllm.signals import Ready, classify

log = structlog.get_logger("supervisor.sentinel")

#: The start's log is read for backend lines up to its ready line, at most this many lines.
MAX_LOG_LINES = 20000
METRICS_TIMEOUT_S = 10.0
#: Perf ledger rows read on a run's first round for the last sentinel restart (6 h of canaries every 30 s
#: is 720).
RESTART_SCAN_ROWS = 2000


def _load_lines(docker: DockerAdapter, container_id: str) -> Iterator[str]:
    """The container's log up to its ready line (bounded)."""
    for i, line in enumerate(docker.logs(container_id)):
        yield line
        if i >= MAX_LOG_LINES or isinstance(classify(line), Ready):
            return


def canary_round(
    profile: Profile,
    container_id: str,
    first: bool,
    fingerprint: str | None,
    key: Callable[[], str | None],
    store: Store,
    docker: DockerAdapter,
    post: Callable[[FleetEvent], None],
    now: Callable[[], float],
) -> None:
    """The pool job: idle check, canary, vLLM's counters; on a run's first round its history too. ``key``:
    the profile's one live API key (the executor's, which follows the running container)."""
    name, s = profile.name, profile.sentinel
    loaded: dict[str, Any] = {}
    if first:
        try:
            rows = store.read_perf(name, n=RESTART_SCAN_ROWS)
        except StateError as exc:
            log.error("store.read_failed", what="perf", error=str(exc))
            rows = []
        history, earlier = history_of(rows[-PERF_ROWS:], fingerprint, container_id)
        last_restart = judge.last_restart(rows)
        try:
            backends = backend_lines(_load_lines(docker, container_id))
        except SupervisorError as exc:
            log.warning("sentinel.log_unreadable", profile=name, error=str(exc))
            backends = ()
        loaded = {
            "loaded": True,
            "history": history,
            "earlier_backends": earlier,
            "backends": backends,
            "last_restart": last_restart,
        }
    mres, text = probes.fetch_metrics(profile.base_url, METRICS_TIMEOUT_S)
    m = VllmMetrics.from_text(text) if mres.ok else None
    if m is None or m.requests_running is None or m.requests_running > 0 or (m.requests_waiting or 0) > 0:
        post(CanaryMeasured(name, container_id, busy=True, **loaded))
        return
    model = profile.served_model_name or profile.container.name
    at = now()
    c = run_canary(
        profile.base_url, key(), model, prompt=s.prompt, max_tokens=s.max_tokens, timeout=s.timeout_s
    )
    if not c.ok or c.ttft_ms is None or c.decode_tps is None or c.tokens is None:
        post(CanaryMeasured(name, container_id, error=c.error or "failed", **loaded))
        return
    mres, text = probes.fetch_metrics(profile.base_url, METRICS_TIMEOUT_S)
    engine = counters_from_text(text) if mres.ok else counters_from_text("")
    sample = Sample(at, c.ttft_ms, c.decode_tps, c.tokens, engine.mtp_acceptance, engine.prefix_hit_rate)
    post(CanaryMeasured(name, container_id, sample=sample, **loaded))
