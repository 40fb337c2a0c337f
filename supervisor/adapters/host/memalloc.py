"""The daemon's own heap: how many glibc malloc arenas its threads may use, and its free pages given back.

Three glibc mechanisms made a daemon that starts and ends threads for every container run grow over days
of restarts, each countered here (the soaks that found them, with their figures: bench/results/README.md):

- **Arenas.** glibc gives a thread that finds the arenas busy an arena of its own, up to 8 per core, and
  keeps every arena it made. Two are plenty for a daemon that mostly waits; ``MALLOC_ARENA_MAX`` in the
  environment wins (glibc reads it at start).
- **Free pages kept.** Freed chunks below a live one stop glibc from lowering the break. :class:`HeapTrim`
  hands whole free pages back with ``malloc_trim(0)`` once a minute (every arena, not only the top), and runs
  a full ``gc.collect()`` every ``COLLECT_EVERY`` trims first, for any reference cycle a container run left
  (supervised threads let go of their body when they end: adapters/threads.py).
- **A dynamic mmap threshold.** A block of 128 KiB or more is mmapped, but freeing one raises the threshold
  to that block's size (up to 32 MiB), and from then on mid-sized blocks come from the heaps, where blocks of
  every age share pages. :func:`fix_mmap_threshold` fixes it at 128 KiB (setting it turns glibc's adjustment
  off); ``MALLOC_MMAP_THRESHOLD_`` or a ``glibc.malloc.mmap_threshold`` tunable in the environment wins. Its
  cost is one mmap and one munmap per such block, a few a minute.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import os
from collections.abc import Callable

#: glibc's ``mallopt`` parameter number for the arena limit (malloc.h: ``#define M_ARENA_MAX -8``).
M_ARENA_MAX = -8
#: The daemon's arena limit (see the module docstring).
DAEMON_ARENAS = 2
#: glibc's ``mallopt`` parameter number for the mmap threshold (malloc.h: ``#define M_MMAP_THRESHOLD -3``).
M_MMAP_THRESHOLD = -3
#: Blocks from this size on are mmapped, and unmapped when freed (glibc's own starting value, kept fixed).
DAEMON_MMAP_THRESHOLD = 128 * 1024


#: Seconds between two ``malloc_trim`` calls (see the module docstring).
TRIM_EVERY_S = 60.0
#: A full garbage collection before every this many trims (the first due trim included).
COLLECT_EVERY = 5


def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        return ctypes.CDLL(name)
    except OSError:
        return None


def _mallopt(param: int, value: int) -> bool:
    """glibc's ``mallopt``; False when it refused, or under another libc (musl has no mallopt)."""
    mallopt = getattr(_libc(), "mallopt", None)
    if mallopt is None:
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(param, value))


def limit_arenas(arenas: int = DAEMON_ARENAS) -> bool:
    """Cap glibc's malloc arenas at ``arenas`` for threads started from now on (call before any thread
    starts). True when applied; False under another libc, or when ``MALLOC_ARENA_MAX`` is set already."""
    if os.environ.get("MALLOC_ARENA_MAX"):
        return False
    return _mallopt(M_ARENA_MAX, arenas)


def fix_mmap_threshold(size: int = DAEMON_MMAP_THRESHOLD) -> bool:
    """Keep glibc's mmap threshold at ``size`` bytes for good (see the module docstring). True when applied;
    False under another libc, or when the environment sets the threshold already."""
    # present at all counts: glibc reads an empty MALLOC_MMAP_THRESHOLD_ as 0 (every block mmapped)
    if "MALLOC_MMAP_THRESHOLD_" in os.environ or "mmap_threshold" in os.environ.get("GLIBC_TUNABLES", ""):
        return False
    return _mallopt(M_MMAP_THRESHOLD, size)


def _malloc_trim() -> Callable[[], bool] | None:
    """glibc's ``malloc_trim(0)`` as a call that says whether memory was released (None without glibc)."""
    trim = getattr(_libc(), "malloc_trim", None)
    if trim is None:
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return lambda: bool(trim(0))


class HeapTrim:
    """Hands the heap's free pages back to the kernel at most once every ``every_s`` (the loop's tick),
    after a full garbage collection every ``collect_every`` of those turns."""

    def __init__(
        self,
        every_s: float = TRIM_EVERY_S,
        trim: Callable[[], bool] | None = None,
        collect: Callable[[], int] = gc.collect,
        collect_every: int = COLLECT_EVERY,
    ) -> None:
        self._every = every_s
        self._trim = trim if trim is not None else _malloc_trim()
        self._collect = collect
        self._collect_every = max(1, collect_every)
        self._next: float | None = None
        self.calls = 0  # turns taken (a trim each, under glibc)
        self.collections = 0

    def tick(self, mono: float) -> None:
        """Collect and trim when due (the first tick only schedules: start-up is not the steady state)."""
        if self._next is None:
            self._next = mono + self._every
            return
        if mono < self._next:
            return
        self._next = mono + self._every
        if self.calls % self._collect_every == 0:
            self._collect()
            self.collections += 1
        if self._trim is not None:
            self._trim()
        self.calls += 1
