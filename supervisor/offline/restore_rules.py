"""Pure decisions of ``supervisorctl restore`` (docs/snapshot.md): which image to create from, how long to
wait for the load, who owns the container, and the few progress lines a 5-20 minute load prints."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from supervisor.core.clock import format_duration
from supervisor.core.vllm.analyzer import LogAnalyzer
from supervisor.core.vllm.signals import (
    EngineDead,
    HangHint,
    KvPool,
    Phase,
    Ready,
    ShardProgress,
    StartupFailure,
)

#: The load deadline when neither ``--wait``, the snapshot's profile nor a daemon profile gives one.
DEFAULT_DEADLINE_S = 1800.0
#: A "still loading" line this often while the log says nothing new.
HEARTBEAT_S = 30.0

_PHASE_TEXT = {
    "api_server_starting": "API server starting",
    "engine_starting": "engine starting",
    "weights_loaded": "weights read",
    "model_loaded": "model loaded",
    "kv_cache": "memory profiled (KV cache sized)",
    "cache_config": "KV cache blocks allocated",
    "graph_capture": "CUDA graphs captured",
    "engine_init_done": "engine initialised",
    "server_started": "HTTP server listening",
    "compile": "torch.compile",
    "routes": "API routes registered",
    "uvicorn_starting": "uvicorn starting",
}


@dataclass(frozen=True)
class ImageChoice:
    """What to create the container from, and what the operator must be told about it."""

    ref: str  # the tag (when it still names the image the container ran) or the recorded image id
    warning: str | None = None


def choose_image(tag: str, ran_id: str | None, ran_id_present: bool, tag_id: str | None) -> ImageChoice:
    """Pin the exact image the snapshotted container ran (``ran_id``, inspect's ``Image``).

    The tag is used only when it still names that image (the recreated ``Config.Image`` then reads as
    before) or when the image is gone; every other case creates from the id and says why.
    """
    if not ran_id or tag == ran_id:
        return ImageChoice(tag)
    if ran_id_present:
        if tag_id == ran_id:
            return ImageChoice(tag)
        if tag_id is None:
            return ImageChoice(
                ran_id, f"tag {tag} names no local image now; restoring the exact image {ran_id} it ran"
            )
        return ImageChoice(ran_id, f"tag {tag} now names {tag_id}; restoring the exact image {ran_id} it ran")
    if tag_id is None:
        return ImageChoice(
            tag, f"the image {ran_id} it ran is gone and tag {tag} names no local image: pull {tag} first"
        )
    return ImageChoice(tag, f"the image {ran_id} it ran is gone; restoring from tag {tag}, now {tag_id}")


def load_deadline(
    wait_s: float | None, snapshot_s: float | None, daemon_s: float | None
) -> tuple[float, str]:
    """(seconds, where the number came from): ``--wait``, else the snapshot profile's own
    ``startup.deadline_s``, else the daemon profile naming the container, else 30 min."""
    if wait_s is not None:
        return wait_s, "--wait"
    if snapshot_s is not None:
        return snapshot_s, "startup.deadline_s of the snapshot's profile"
    if daemon_s is not None:
        return daemon_s, "startup.deadline_s of the daemon profile"
    return DEFAULT_DEADLINE_S, "default"


def owning_profile(container: str, status_doc: Mapping[str, Any]) -> str | None:
    """The name of the profile of a running daemon (its status document) that manages ``container``."""
    for p in status_doc.get("profiles") or ():
        if isinstance(p, Mapping) and p.get("container") == container:
            return str(p.get("name"))
    return None


def slot_holder_text(holder: Mapping[str, Any] | None, now: float) -> str:
    """Who holds the host's load slot, from the lock file's note: ``daemon profile p (pid 12, for 3 min)``."""
    if not holder:
        return "another process (it left no note)"
    owner = str(holder.get("owner") or "") or "a process"
    details = []
    if isinstance(holder.get("pid"), int):
        details.append(f"pid {holder['pid']}")
    since = holder.get("since")
    if isinstance(since, int | float):
        details.append(f"for {format_duration(now - since)}")
    return owner + (f" ({', '.join(details)})" if details else "")


class LoadProgress:
    """Fed the container's log line by line; answers the few lines worth printing while a model loads."""

    def __init__(self) -> None:
        self.analyzer = LogAnalyzer()
        self._pct: int | None = None
        self._said: set[str] = set()

    def feed(self, raw: str) -> str | None:
        """One log line; a progress line to print, or None when it tells nothing new."""
        sig = self.analyzer.feed(raw)
        text: str | None = None
        if isinstance(sig, ShardProgress):
            if sig.pct == self._pct:
                return None
            self._pct = sig.pct
            return f"loading weights: {sig.pct}% (shard {sig.done}/{sig.total})"
        if isinstance(sig, Phase):
            text = _PHASE_TEXT.get(sig.name, sig.name.replace("_", " "))
        elif isinstance(sig, KvPool) and sig.tokens is not None:
            text = f"KV cache: {sig.tokens} tokens"
        elif isinstance(sig, Ready):
            text = "application startup complete"
        elif isinstance(sig, StartupFailure):
            text = f"the log shows a startup failure: {sig.outcome}"
        elif isinstance(sig, EngineDead):
            text = f"the engine died: {sig.detail}"
        elif isinstance(sig, HangHint):
            return f"a worker has waited {sig.seconds}s for shared memory (slow or stuck)"
        if text is None or text in self._said:
            return None
        self._said.add(text)
        return text

    def status(self, elapsed_s: float, deadline_s: float) -> str:
        """The periodic line: how long, out of how long, and the last thing the log proved."""
        phase = self.analyzer.report().get("last_phase")
        where = _PHASE_TEXT.get(phase, phase) if phase else "no progress in the log yet"
        if self._pct is not None and phase == "loading_weights":
            where = f"loading weights {self._pct}%"
        elapsed, deadline = format_duration(elapsed_s), format_duration(deadline_s)
        return f"still loading after {elapsed} (deadline {deadline}): {where}"

    def outcome(self) -> str:
        """What the log proves about the load (``ready``, ``starting``, ``failed_*``, ``engine_dead``...)."""
        return self.analyzer.outcome()
