"""The host side of ``supervisorctl restore``: the daemon owning the container, the host's load slot, the
page-cache drop and memory settle, the exact image, and a long load's wait with progress on the way.

A restore loads a model like a daemon start does, so it behaves like one: it takes the same flock
(``host.load_lock_path``), drops the page cache and waits for ``min_mem_available_gib`` with the daemon
config's values, and waits as long as the profile's startup deadline while printing what the log proves.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from supervisor.adapters.control.client import ControlClient
from supervisor.adapters.docker.adapter import DockerAdapter
from supervisor.adapters.host import system as host
from supervisor.adapters.vllm.probes import ProbeResult, wait_until_healthy
from supervisor.config import HostConfig
from supervisor.core.clock import Clock, format_duration
from supervisor.core.errors import ControlError, ImageMissing, SnapshotError, SupervisorError
from supervisor.offline.restore_rules import (
    HEARTBEAT_S,
    ImageChoice,
    LoadProgress,
    choose_image,
    owning_profile,
    slot_holder_text,
)

#: Told one progress line (the CLI writes it to stderr).
Say = Callable[[str], None]
#: How often the slot and the memory are looked at again while waiting.
POLL_S = 1.0
#: A control socket that does not answer within this long is taken as no daemon.
CONTROL_TIMEOUT_S = 5.0


def refuse_if_daemon_owned(container: str, sockets: Sequence[Path], config_profile: str | None) -> None:
    """SnapshotError if a running daemon (one of ``sockets``) has a profile managing ``container``.

    The daemon recreates its containers from their profiles and removes a stale one of the name before
    it creates: a restore next to it would be two processes creating the same container. A socket that
    exists but does not answer is taken as a daemon when the config's profile (``config_profile``) names
    the container: better a refusal the operator can lift than a race.
    """
    for sock in dict.fromkeys(sockets):
        try:
            reply = ControlClient(sock, timeout=CONTROL_TIMEOUT_S).call("status")
        except ControlError as exc:
            if config_profile is not None and sock.exists():
                raise SnapshotError(
                    f"container {container} belongs to profile {config_profile} and a daemon socket "
                    f"exists at {sock} but did not answer ({exc}); refusing to race the daemon"
                ) from exc
            continue
        data = reply.get("data")
        profile = owning_profile(container, data) if isinstance(data, dict) else None
        if profile is not None:
            raise SnapshotError(
                f"container {container} is managed by profile {profile} of the running daemon ({sock}); "
                f"the daemon recreates it from its profile: run `supervisorctl stop {profile}` and then "
                f"`supervisorctl start {profile}` (restore never creates a container a daemon owns; to run "
                "the snapshot's settings, list its .profile.yaml in the daemon config and reload)"
            )


def pick_image(adapter: DockerAdapter, tag: str, inspect: dict[str, Any]) -> ImageChoice:
    """The image to create from: the one the container ran (inspect's ``Image``) when it still exists."""
    ran_id = str(inspect.get("Image") or "") or None
    ran_present = False
    if ran_id is not None:
        try:
            ran_present = str(adapter.image_info(ran_id).get("Id")) == ran_id
        except ImageMissing:
            ran_present = False
    try:
        tag_id: str | None = str(adapter.image_info(tag).get("Id"))
    except ImageMissing:
        tag_id = None
    return choose_image(tag, ran_id, ran_present, tag_id)


def take_slot(lock: host.LoadLock, max_wait_s: float, say: Say, clock: Clock) -> None:
    """Hold the host's load slot, waiting (with a line every HEARTBEAT_S) at most ``max_wait_s``."""
    start = clock.monotonic()
    last_said = -HEARTBEAT_S
    for _ in range(int(max_wait_s / POLL_S) + 2):  # bounded; the deadline check below ends it first
        if lock.try_acquire():
            if clock.monotonic() - start >= POLL_S:
                say(f"took the load slot after {format_duration(clock.monotonic() - start)}")
            return
        waited = clock.monotonic() - start
        if waited >= max_wait_s:
            break
        if waited - last_said >= HEARTBEAT_S:
            last_said = waited
            say(
                f"waiting for the load slot held by {slot_holder_text(lock.holder(), clock.now())} "
                f"({lock.path}; waited {format_duration(waited)} of {format_duration(max_wait_s)})"
            )
        time.sleep(POLL_S)
    raise SnapshotError(
        f"the load slot ({lock.path}) is still held by {slot_holder_text(lock.holder(), clock.now())} "
        f"after {format_duration(max_wait_s)}; nothing was changed"
    )


def settle_host(hcfg: HostConfig, say: Say, clock: Clock, gmu: float | None = None) -> None:
    """Drop the page cache and wait for the memory floor (``min_mem_available_gib``, or with ``auto`` the
    snapshot's gmu x MemTotal + ``reserve_gib``), as a daemon start's settle does."""
    if hcfg.drop_caches:
        dropped = host.drop_caches(hcfg.drop_caches_level)
        say("page cache dropped" if dropped else "page cache not dropped (not permitted: run as root)")
    floor = host.start_floor_gib(hcfg, gmu)
    if floor <= 0:
        return
    now_gib = host.mem_available_gib()
    if now_gib < floor:
        say(
            f"waiting for MemAvailable >= {floor:g} GiB (now {now_gib:.1f} GiB; "
            f"at most {format_duration(hcfg.settle_timeout_s)})"
        )
    ok, mem = host.wait_for_memory(floor, hcfg.settle_timeout_s, clock, POLL_S)
    if not ok:
        raise SnapshotError(
            f"MemAvailable is {mem:.1f} GiB after {format_duration(hcfg.settle_timeout_s)}, below "
            f"host.min_mem_available_gib {floor:g} GiB; nothing was created"
        )


def _follow(adapter: DockerAdapter, cid: str, lines: queue.Queue[str], stop: threading.Event) -> None:
    """Copy the container's log into ``lines`` until it exits or ``stop`` is set."""
    try:
        for line in adapter.logs(cid, follow=True, stop=stop):
            lines.put(line)
    except SupervisorError:
        pass  # progress is a courtesy: the health wait decides


class LoadWatch:
    """Waits for ``/health`` while following the container's log and printing the load's progress."""

    def __init__(self, adapter: DockerAdapter, cid: str, say: Say, clock: Clock) -> None:
        self.progress = LoadProgress()
        self._adapter, self._cid, self._say, self._clock = adapter, cid, say, clock
        self._lines: queue.Queue[str] = queue.Queue()
        self._stop = threading.Event()
        self._start = clock.monotonic()
        self._last_said = self._start
        self._deadline_s = 0.0

    def _pump(self, seconds: float) -> None:
        """The health wait's pause: print what the log proved meanwhile, and a heartbeat when it is quiet."""
        until = self._clock.monotonic() + seconds
        while (left := until - self._clock.monotonic()) > 0:
            try:
                line = self._lines.get(timeout=left)
            except queue.Empty:
                break
            if (text := self.progress.feed(line)) is not None:
                self._say(text)
                self._last_said = self._clock.monotonic()
        now = self._clock.monotonic()
        if now - self._last_said >= HEARTBEAT_S:
            self._say(self.progress.status(now - self._start, self._deadline_s))
            self._last_said = now

    def wait(self, base_url: str, deadline_s: float, alive: Callable[[], bool]) -> ProbeResult:
        """Probe ``base_url``/health once a second until 200, the deadline, or the container's exit."""
        self._deadline_s = deadline_s
        follower = threading.Thread(
            target=_follow, args=(self._adapter, self._cid, self._lines, self._stop), daemon=True
        )
        follower.start()
        try:
            return wait_until_healthy(
                base_url, deadline_s, interval_s=POLL_S, probe_timeout_s=2.0, alive=alive, sleep=self._pump
            )
        finally:
            self._stop.set()
            follower.join(timeout=5)
            while not self._lines.empty():  # the last lines (a failure's cause) still count
                self.progress.feed(self._lines.get_nowait())
