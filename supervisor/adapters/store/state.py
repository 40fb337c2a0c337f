"""Persistence under the state directory: per-profile state, run/stop intent, event history, start ledger.

Layout (the directory is created 0700; every file 0600)::

    <state_dir>/<profile>.state.json   the daemon's snapshot of one profile (atomic replace)
    <state_dir>/<profile>.intent       "run" or "stop" (atomic replace; survives a corrupt state file)
    <state_dir>/<profile>.last_good.json  the last known good start's spec (holds secrets; atomic, 0600)
    <state_dir>/events.jsonl           event history, one JSON object per line (+ events.jsonl.1)
    <state_dir>/starts.jsonl           one record per start attempt (+ starts.jsonl.1)
    <state_dir>/kmsg.position.json     where the kernel-log follower got to (atomic replace)
    <state_dir>/maintenance.json       last maintenance-schedule evaluation, round in progress (atomic)
    <state_dir>/conditions.json        the raised alert conditions (docs/alerts.md; atomic replace)
    <state_dir>/alive.json             the daemon's last sign of life and clean-stop flag (atomic)
    <state_dir>/fleet.json             the daemon-wide snapshot (core/fleet/state.py; atomic replace)

Whole-file writes are temp file + fsync + rename + directory fsync, so a crash leaves either the old or
the new content. Appends are flushed and fsynced; a torn last line (crash mid-append) is skipped on read
and never glued to the next record. Every appended record (events, starts) passes ``redact`` first
(the daemon's :class:`~supervisor.adapters.secrets.SecretBook`; by default the secret shapes of
:mod:`supervisor.core.spec.secrets`): no secret value reaches ``events.jsonl`` or the ledger.
Every OS failure (full disk, read-only fs, permission) becomes a
:class:`StateError` naming the file; the previous content stays intact.

Start records (``append_start``) use these keys: ``ts`` (epoch s), ``profile``, ``outcome`` ("ready" or a
failure outcome), ``kv_tokens``, ``max_concurrency``, ``load_s``, ``mem_available_gib`` (MemAvailable
before the start); extra keys are kept (the KV-pool keys ``kv_gib``, ``model_gib``, ``gmu``, ``image_id``,
``fingerprint``, ``start_id`` are defined in supervisor/core/vllm/kv_pool.py and docs/kv-pool.md).
"""

from __future__ import annotations

import errno
import json
import os
import re
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import structlog

from supervisor.adapters.store.files import check_state_dir, describe, fsync_dir, write_atomic
from supervisor.core.clock import Clock, SystemClock
from supervisor.core.errors import StateError
from supervisor.core.host.paths import NAME_PATTERN
from supervisor.core.spec.secrets import Redactor
from supervisor.core.vocab import DAEMON_PROFILE, Intent

log = structlog.get_logger(__name__)

EVENTS_FILE = "events.jsonl"
#: The ``profile`` of daemon-wide events: ``supervisor`` (alerts about the daemon), ``""`` or none (older).
DAEMON_WIDE: frozenset[str | None] = frozenset({DAEMON_PROFILE, "", None})
STARTS_FILE = "starts.jsonl"
PERF_FILE = "perf.jsonl"
MAINTENANCE_FILE = "maintenance.json"
CONDITIONS_FILE = "conditions.json"
ALIVE_FILE = "alive.json"
FLEET_FILE = "fleet.json"
LAST_GOOD_SUFFIX = ".last_good.json"  # <state_dir>/<profile>.last_good.json
#: Rotate a JSON-lines file once it reaches this size; one old generation (``.1``) is kept.
DEFAULT_ROTATE_BYTES = 5 * 1024 * 1024
_NAME_RE = re.compile(rf"^{NAME_PATTERN}$")
_READ_CHUNK = 64 * 1024


class Store:
    """All state the daemon keeps on disk. Thread-safe: one writer, readers from the control thread."""

    def __init__(
        self,
        state_dir: Path,
        clock: Clock | None = None,
        rotate_bytes: int = DEFAULT_ROTATE_BYTES,
        redact: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> None:
        self.state_dir = Path(state_dir)
        self._redact = redact or Redactor().data
        self._clock: Clock = clock or SystemClock()
        self._rotate_bytes = rotate_bytes
        self._lock = threading.Lock()
        self._paths: dict[tuple[str, str], Path] = {}  # see _profile_path
        try:
            self.state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            st = os.stat(self.state_dir, follow_symlinks=False)
        except OSError as exc:
            raise StateError(f"{self.state_dir}: cannot create state directory: {describe(exc)}") from exc
        check_state_dir(self.state_dir, st)

    # ---- paths -------------------------------------------------------------------------------------

    def swap_boot_id(self, current: str) -> bool:
        """Persist the host's boot id; True when it differs from the one saved before (a reboot).

        A first run (nothing saved) is not a reboot. A boot id that cannot be written is logged and the
        answer still given: the next daemon start may then see a reboot that was not one.
        """
        path = self.state_dir / "boot_id"
        try:
            previous: str | None = path.read_text(encoding="utf-8").strip() or None
        except OSError:
            previous = None
        try:
            self._write_atomic(path, (current + "\n").encode("utf-8"))
        except StateError as exc:
            log.error("store.write_failed", what="boot_id", error=str(exc))
        return previous is not None and previous != current

    def save_kmsg_position(self, position: dict[str, Any]) -> None:
        """Persist the kernel-log follower's position (raises StateError; the old file is then intact)."""
        payload = (json.dumps(position, sort_keys=True) + "\n").encode("utf-8")
        with self._lock:
            self._write_atomic(self.state_dir / "kmsg.position.json", payload)

    def load_kmsg_position(self) -> dict[str, Any] | None:
        """The saved kernel-log position; None when never saved or unreadable (the follower starts fresh)."""
        try:
            data = json.loads((self.state_dir / "kmsg.position.json").read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            return None
        return data if isinstance(data, dict) else None

    def _profile_path(self, name: str, suffix: str) -> Path:
        """Made once per profile and kind, then kept: Python 3.11's pathlib interns the name of every path it
        builds, and a name built again for each write only churned CPython's interned-strings table
        (adapters/host/cputime.py). Bounded: the profiles are few; a flood of names empties the table."""
        path = self._paths.get((name, suffix))
        if path is None:
            if not _NAME_RE.match(name):
                raise ValueError(f"invalid profile name for a state file: {name!r}")
            if len(self._paths) >= 256:
                self._paths.clear()
            path = self._paths[(name, suffix)] = self.state_dir / f"{name}{suffix}"
        return path

    def state_path(self, name: str) -> Path:
        """Where the state of profile ``name`` lives."""
        return self._profile_path(name, ".state.json")

    def intent_path(self, name: str) -> Path:
        """Where the run/stop intent of profile ``name`` lives."""
        return self._profile_path(name, ".intent")

    # ---- atomic whole-file writes ------------------------------------------------------------------

    def _write_atomic(self, path: Path, payload: bytes) -> None:
        write_atomic(path, payload)

    def _move_aside(self, path: Path) -> Path | None:
        target = path.with_name(f"{path.name}.corrupt-{int(self._clock.now())}")
        try:
            os.replace(path, target)
        except OSError:
            return None
        return target

    def _corrupt(self, path: Path, problem: str) -> StateError:
        kept = self._move_aside(path)
        where = f"; kept as {kept}" if kept else ""
        return StateError(f"{path}: {problem}{where}")

    # ---- profile state ----------------------------------------------------------------------------

    def save_profile_state(self, name: str, data: dict[str, Any]) -> None:
        """Replace the state of ``name`` atomically (raises StateError; the old file is then intact)."""
        payload = (json.dumps(data, sort_keys=True, indent=1, default=str) + "\n").encode("utf-8")
        with self._lock:
            self._write_atomic(self.state_path(name), payload)

    def load_profile_state(self, name: str) -> dict[str, Any] | None:
        """The saved state of ``name``; None if never saved; StateError if corrupt (moved aside first)."""
        return self._load_object(self.state_path(name))

    # ---- last known good -------------------------------------------------------------------------

    def last_good_path(self, name: str) -> Path:
        """Where the last known good spec of profile ``name`` lives (0600: it holds the env's secrets)."""
        return self._profile_path(name, LAST_GOOD_SUFFIX)

    def save_last_good(self, name: str, data: dict[str, Any]) -> None:
        """Replace the last known good of ``name`` atomically (0600 from creation; StateError on failure)."""
        payload = (json.dumps(data, sort_keys=True, indent=1) + "\n").encode("utf-8")
        with self._lock:
            self._write_atomic(self.last_good_path(name), payload)

    def load_last_good(self, name: str) -> dict[str, Any] | None:
        """The last known good of ``name``; None if none; StateError if corrupt (moved aside first)."""
        return self._load_object(self.last_good_path(name))

    # ---- maintenance schedule ---------------------------------------------------------------------

    def save_maintenance(self, data: dict[str, Any]) -> None:
        """Replace ``maintenance.json`` (last schedule evaluation, round in progress) atomically."""
        payload = (json.dumps(data, sort_keys=True, indent=1, default=str) + "\n").encode("utf-8")
        with self._lock:
            self._write_atomic(self.state_dir / MAINTENANCE_FILE, payload)

    def load_maintenance(self) -> dict[str, Any] | None:
        """``maintenance.json``; None if never saved; StateError if corrupt (moved aside first)."""
        return self._load_object(self.state_dir / MAINTENANCE_FILE)

    # ---- raised alert conditions -------------------------------------------------------------------

    def save_conditions(self, data: dict[str, Any]) -> None:
        """Replace ``conditions.json`` (the raised alert conditions) atomically (StateError on failure)."""
        payload = (json.dumps(data, sort_keys=True, indent=1, ensure_ascii=False) + "\n").encode("utf-8")
        with self._lock:
            self._write_atomic(self.state_dir / CONDITIONS_FILE, payload)

    def load_conditions(self) -> dict[str, Any] | None:
        """``conditions.json``; None if never saved; StateError if corrupt (moved aside first)."""
        return self._load_object(self.state_dir / CONDITIONS_FILE)

    def save_fleet(self, data: dict[str, Any]) -> None:
        """Replace ``fleet.json`` (the daemon-wide snapshot) atomically (StateError on failure)."""
        payload = (json.dumps(data, sort_keys=True, indent=1, default=str) + "\n").encode("utf-8")
        with self._lock:
            self._write_atomic(self.state_dir / FLEET_FILE, payload)

    def load_fleet(self) -> dict[str, Any] | None:
        """``fleet.json``; None if never saved; StateError if corrupt (moved aside first)."""
        return self._load_object(self.state_dir / FLEET_FILE)

    # ---- the daemon's alive record ----------------------------------------------------------------

    def save_alive(self, data: dict[str, Any]) -> None:
        """Replace ``alive.json`` (last sign of life, clean-stop flag) atomically (StateError on failure)."""
        payload = (json.dumps(data, sort_keys=True) + "\n").encode("utf-8")
        with self._lock:
            self._write_atomic(self.state_dir / ALIVE_FILE, payload)

    def load_alive(self) -> dict[str, Any] | None:
        """``alive.json``; None if never saved; StateError if corrupt (moved aside first)."""
        return self._load_object(self.state_dir / ALIVE_FILE)

    def _load_object(self, path: Path) -> dict[str, Any] | None:
        with self._lock:
            try:
                raw = path.read_bytes()
            except FileNotFoundError:
                return None
            except OSError as exc:
                raise self._corrupt(path, f"unreadable: {describe(exc)}") from exc
            try:
                data = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                raise self._corrupt(path, f"not valid JSON ({exc})") from exc
            if not isinstance(data, dict):
                raise self._corrupt(path, f"expected a JSON object, found {type(data).__name__}")
            return data

    # ---- intent -----------------------------------------------------------------------------------

    def save_intent(self, name: str, intent: Intent) -> None:
        """Persist "run" or "stop" for ``name`` (atomic; separate from the state file)."""
        if intent not in tuple(Intent):
            raise ValueError(f"intent must be one of {tuple(Intent)}, got {intent!r}")
        with self._lock:
            self._write_atomic(self.intent_path(name), f"{Intent(intent).value}\n".encode())

    def load_intent(self, name: str) -> Intent | None:
        """The persisted intent of ``name``: "run", "stop" or None if never set."""
        path = self.intent_path(name)
        with self._lock:
            try:
                text = path.read_text(encoding="utf-8").strip()
            except FileNotFoundError:
                return None
            except (OSError, UnicodeDecodeError) as exc:
                raise StateError(f"{path}: unreadable: {exc}") from exc
            try:
                return Intent(text)
            except ValueError:
                raise self._corrupt(path, f"expected 'run' or 'stop', found {text[:40]!r}") from None

    # ---- JSON-lines files -------------------------------------------------------------------------

    def _append_line(self, filename: str, record: dict[str, Any]) -> None:
        plain = json.loads(json.dumps(record, default=str))  # every value a JSON value (str() of the rest)
        line = json.dumps(self._redact(plain), ensure_ascii=False, separators=(",", ":"))
        path = self.state_dir / filename
        with self._lock:
            try:
                if path.exists() and path.stat().st_size >= self._rotate_bytes:
                    os.replace(path, path.with_name(filename + ".1"))
                    fsync_dir(self.state_dir)
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
                try:
                    size = os.fstat(fd).st_size
                    # A crash mid-append leaves a line without "\n": never glue the next record to it.
                    prefix = "\n" if size > 0 and os.pread(fd, 1, size - 1) != b"\n" else ""
                    data = (prefix + line + "\n").encode("utf-8")
                    try:
                        written = os.write(fd, data)
                        if written != len(data):
                            raise OSError(errno.ENOSPC, "short write")
                        os.fsync(fd)
                    except OSError:
                        os.ftruncate(fd, size)  # leave no half record behind
                        raise
                finally:
                    os.close(fd)
            except OSError as exc:
                raise StateError(f"{path}: cannot append: {describe(exc)}") from exc

    def _iter_lines_reversed(self, path: Path) -> Iterator[bytes]:
        """Lines of ``path`` from last to first, reading backwards in chunks (bounded memory)."""
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise StateError(f"{path}: unreadable: {describe(exc)}") from exc
        try:
            pos = os.fstat(fd).st_size
            rest = b""
            while pos > 0:
                step = min(_READ_CHUNK, pos)
                pos -= step
                chunk = os.pread(fd, step, pos) + rest
                lines = chunk.split(b"\n")
                rest = lines[0]
                yield from reversed(lines[1:])
            yield rest
        finally:
            os.close(fd)

    def _read_lines(
        self, filename: str, profile: str | frozenset[str | None] | None, n: int
    ) -> list[dict[str, Any]]:
        if n <= 0:
            return []
        with self._lock:  # no rotation between reading the current and the old file
            return self._read_lines_locked(filename, profile, n)

    def _read_lines_locked(
        self, filename: str, profile: str | frozenset[str | None] | None, n: int
    ) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        base = self.state_dir / filename
        for path in (base, base.with_name(filename + ".1")):
            for raw in self._iter_lines_reversed(path):
                if not raw.strip():
                    continue
                try:
                    record = json.loads(raw.decode("utf-8"))
                except (UnicodeDecodeError, json.JSONDecodeError):
                    continue  # a torn line from a crash mid-append
                if not isinstance(record, dict):
                    continue
                if profile is not None and not _of(record.get("profile"), profile):
                    continue
                found.append(record)
                if len(found) >= n:
                    return list(reversed(found))
        return list(reversed(found))

    # ---- events ------------------------------------------------------------------------------------

    def append_event(self, record: dict[str, Any]) -> None:
        """Append one event ({ts, name, profile, fields}) to the history; ``ts`` defaults to now."""
        if not isinstance(record.get("name"), str):
            raise ValueError("an event record needs a dotted 'name'")
        full = {"ts": self._clock.now(), "profile": None, "fields": {}} | record
        self._append_line(EVENTS_FILE, full)

    def read_events(self, profile: str | None = None, n: int = 50) -> list[dict[str, Any]]:
        """The last ``n`` events (of ``profile`` if given), oldest first. ``supervisor`` (``DAEMON_PROFILE``)
        selects the daemon-wide events: those of profile ``supervisor``, ``""`` or none."""
        return self._read_lines(EVENTS_FILE, DAEMON_WIDE if profile == DAEMON_PROFILE else profile, n)

    # ---- start ledger ------------------------------------------------------------------------------

    def append_start(self, record: dict[str, Any]) -> None:
        """Append one start record (see the module docstring for its keys); ``ts`` defaults to now."""
        if not isinstance(record.get("profile"), str):
            raise ValueError("a start record needs a 'profile'")
        self._append_line(STARTS_FILE, {"ts": self._clock.now()} | record)

    def read_starts(self, profile: str | None = None, n: int = 50) -> list[dict[str, Any]]:
        """The last ``n`` start records (of ``profile`` if given), oldest first."""
        return self._read_lines(STARTS_FILE, profile, n)

    # ---- perf ledger (the sentinel's canaries, docs/sentinel.md) -----------------------------------

    def append_perf(self, record: dict[str, Any]) -> None:
        """Append one canary record (profile, fingerprint, container_id, figures, backends)."""
        self._append_line(PERF_FILE, {"ts": self._clock.now()} | record)

    def read_perf(self, profile: str | None = None, n: int = 50) -> list[dict[str, Any]]:
        """The last ``n`` canary records (of ``profile`` if given), oldest first."""
        return self._read_lines(PERF_FILE, profile, n)


def _of(value: object, profile: str | frozenset[str | None]) -> bool:
    """Whether a record's ``profile`` is ``profile`` (or one of them)."""
    if isinstance(profile, frozenset):
        return (value is None or isinstance(value, str)) and value in profile
    return value == profile
