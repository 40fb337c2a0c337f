"""The daemon's own heap: how many glibc malloc arenas its threads may use, and its free pages given back.

glibc gives a thread that finds the arenas busy an arena of its own, up to 8 per core, and keeps every arena
it made. The daemon starts and ends threads for each container run (its log and event followers, their
stream closers, the job pool's bursts), so over days of restarts its RSS crept up in arenas that are seldom
reused and never returned. Two arenas are plenty for a daemon that mostly waits; measured side by side
(two 6-minute soaks with a fault every 30 s, 2026-12-02): RSS +3.1 MiB with glibc's default, +1.6 MiB with
two arenas, CPU alike (0.84 %). ``MALLOC_ARENA_MAX`` in the environment wins (glibc read it at start).

The cap alone did not hold RSS: 2-hour soaks still grew 3.2-3.7 MiB over the last hour while the Python
objects traced by ``tracemalloc`` stayed between 0.45 and 1.1 MiB with no trend (16-minute soak, a fault
every 30 s, 2026-12-02); the growth was in the main heap (``[heap]`` in ``/proc/PID/smaps``: all of +376 KiB
over 3 minutes). Part of it is freed chunks that glibc keeps because a live chunk above them stops it from
lowering the break. :class:`HeapTrim` hands those free pages back with ``malloc_trim(0)`` once a minute (it
walks every arena and releases their whole free pages, not only the top). Side by side (two 12-minute
soaks, a fault every 30 s, 2026-12-02 22:59): +2.83 MiB without the trim and +2.03 MiB with it, +0.76 and
+0.35 MiB over their second 6 minutes: it slows the creep, it does not end it (what is left is in use, or
in holes smaller than a page). One call took 0.1 ms median, 0.8 ms at most, in 20 calls on a fragmented
heap of a 58 MiB process (2026-12-02).

The memory map of a 2-hour soak's daemon (2026-12-03) had Python's own small-object arenas among the pages
that kept being touched, filled with the containers' log lines (one 2 MiB region +288 KiB in 9 minutes, its
new pages mostly 160-byte blocks holding access-log lines). Every container run left its
:class:`~supervisor.daemon.executor.containers.ContainerWatch` (and its 400-line log tail) to the cyclic
garbage
collector: the watch held its thread and the thread held the watch's bound method, and CPython runs a full
collection only once the long-lived objects grew by a quarter (~12,000 more for the ~47,000 a started daemon
tracks). Supervised threads now let go of their body when they end (adapters/threads.py), so a watch goes
with its last reference; and :class:`HeapTrim` runs a full ``gc.collect()`` every ``COLLECT_EVERY`` trims
(every 5 minutes) before the trim, for whatever other cycle a run leaves. One full collection of the
daemon's objects took 30 ms (median of 10, with a soak beside it): 0.01 % of a core at that period. It did
not stop the creep: side by side with the daemon before the change, over the same 53 minutes, that one grew
1.81 MiB and this one 2.32 MiB (README, "Measured"); in that hour the growth had moved to glibc's main heap
and second arena again.

What was left has a mechanism in glibc itself: its mmap threshold is dynamic. A block of 128 KiB or more
is mmapped and unmapped when freed, but freeing one raises the threshold to that block's size (up to
32 MiB), and from then on every block below it comes from the heaps, where blocks of every age share pages.
The daemon frees such blocks (Docker's answers and log chunks, a resized dict table: CPython's
interned-strings table was rebuilt at 2.5 MiB mid-soak), so after the first one its mid-sized blocks moved
into the heaps for good. Seen in a bare interpreter (glibc 2.36, 2026-12-03): after a 4 MiB block is freed,
a new 1 MiB block lies inside ``[heap]``; with the threshold fixed at 128 KiB it is mmapped, and goes back
to the kernel when freed. :func:`fix_mmap_threshold` fixes it (setting it turns glibc's adjustment off);
``MALLOC_MMAP_THRESHOLD_`` or a ``glibc.malloc.mmap_threshold`` tunable in the environment wins. Its cost
is one mmap and one munmap per such block, which the daemon allocates a few times a minute. An earlier
30-minute soak with ``MALLOC_MMAP_THRESHOLD_=131072`` in the environment grew as much as one without over
its first half hour (51.2 against 51.1 MiB at 15 minutes, 2026-12-02): that half hour's growth is start-up,
and the threshold only matters once big blocks have come and gone. Two 2-hour soaks side by side
(2026-12-03, README "Measured") did not show it helping either: +0.648 MiB over the last hour with it,
+0.537 MiB without. It stays for its mechanism, which costs nothing measurable. What kept freeing big blocks
was the interned-strings table being rebuilt again and again (adapters/host/cputime.py).
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
