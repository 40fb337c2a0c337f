"""The daemon's malloc settings (supervisor/adapters/host/memalloc.py), seen in glibc's own report and
placement.

Each case runs in a fresh interpreter: 8 threads alive at once each allocate (malloc, not Python's
small-object pool), and ``malloc_info`` lists the arenas. glibc gives each new thread an arena of its own
up to 8 per core, so the uncapped run shows the workload makes many (9 here), the capped one holds at 2.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from supervisor.adapters.host.memalloc import HeapTrim

_PROBE = r"""
import ctypes, ctypes.util, sys, threading
from supervisor.adapters.host.memalloc import limit_arenas
applied = limit_arenas(2) if sys.argv[1] == "cap" else None
together = threading.Barrier(8)
def work():
    keep = [bytearray(4096) for _ in range(200)]  # > 512 bytes: glibc malloc, in this thread's arena
    together.wait(30)  # all 8 alive at once: no thread can take over an ended one's arena
    del keep
threads = [threading.Thread(target=work) for _ in range(8)]
for t in threads: t.start()
for t in threads: t.join()
libc = ctypes.CDLL(ctypes.util.find_library("c"))
buf, size = ctypes.c_char_p(), ctypes.c_size_t()
libc.open_memstream.restype = ctypes.c_void_p
fp = libc.open_memstream(ctypes.byref(buf), ctypes.byref(size))
libc.malloc_info(0, ctypes.c_void_p(fp))
libc.fclose(ctypes.c_void_p(fp))
print(applied, buf.value.decode().count("<heap nr="))
"""


def _arenas(mode: str, env: dict[str, str] | None = None) -> tuple[str, int]:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, mode],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={**os.environ, **(env or {})},
    ).stdout.split()
    return out[0], int(out[1])


def test_the_cap_holds_the_arenas_that_threads_would_otherwise_multiply() -> None:
    """Uncapped: more than 2 arenas for 8 threads; capped: at most 2, and limit_arenas says it applied."""
    env = {"MALLOC_ARENA_MAX": ""}
    _, uncapped = _arenas("none", env)
    applied, capped = _arenas("cap", env)
    assert uncapped > 2, uncapped
    assert (applied, capped <= 2) == ("True", True), (applied, capped)


def test_an_arena_limit_from_the_environment_is_left_alone() -> None:
    """MALLOC_ARENA_MAX set by the operator (glibc applied it at start): not overridden."""
    applied, arenas = _arenas("cap", {"MALLOC_ARENA_MAX": "3"})
    assert applied == "False"
    assert arenas <= 3


_MMAP_PROBE = r"""
import ctypes, sys
from supervisor.adapters.host.memalloc import fix_mmap_threshold
applied = fix_mmap_threshold() if sys.argv[1] == "fix" else None
big = bytearray(4 << 20)  # a 4 MiB block: mmapped; freeing it raises glibc's dynamic threshold to 4 MiB
del big
block = bytearray(1 << 20)  # 1 MiB, > 512 bytes: glibc malloc
addr = ctypes.addressof((ctypes.c_char * len(block)).from_buffer(block))
heap = next(l.split()[0] for l in open("/proc/self/maps") if l.rstrip().endswith("[heap]"))
lo, hi = (int(x, 16) for x in heap.split("-"))
print(applied, "heap" if lo <= addr < hi else "mmapped")
"""


def _placement(mode: str, env: dict[str, str] | None = None) -> list[str]:
    # glibc reads an empty MALLOC_MMAP_THRESHOLD_ as 0 (every block mmapped): leave the names out instead
    base = {k: v for k, v in os.environ.items() if k not in ("MALLOC_MMAP_THRESHOLD_", "GLIBC_TUNABLES")}
    return subprocess.run(
        [sys.executable, "-c", _MMAP_PROBE, mode],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={**base, **(env or {})},
    ).stdout.split()


def test_a_fixed_mmap_threshold_keeps_big_blocks_out_of_the_heap_after_a_big_free() -> None:
    """glibc's default: once a 4 MiB block is freed, a 1 MiB block lands in the heap; with the daemon's fixed
    threshold it is mmapped (and goes back to the kernel when freed)."""
    assert _placement("none") == ["None", "heap"]
    assert _placement("fix") == ["True", "mmapped"]


def test_an_mmap_threshold_from_the_environment_is_left_alone() -> None:
    """MALLOC_MMAP_THRESHOLD_ set by the operator (glibc applied it at start): not overridden."""
    assert _placement("fix", {"MALLOC_MMAP_THRESHOLD_": "8388608"}) == ["False", "heap"]


_TRIM_PROBE = r"""
import random
from supervisor.adapters.host.memalloc import HeapTrim
def rss_kib():
    return int(open("/proc/self/statm").read().split()[1]) * 4
random.seed(1)
keep = [bytearray(random.randint(16_000, 64_000)) for _ in range(1000)]  # glibc heap (below mmap threshold)
top = bytearray(2000)  # allocated last: it sits above the freed chunks and pins the heap's break
keep = keep[::2]  # every other chunk freed: holes glibc keeps for reuse
before = rss_kib()
trim = HeapTrim(every_s=60.0)
trim.tick(0.0)
trim.tick(60.0)
print(trim.calls, before, rss_kib())
"""


def test_heap_trim_gives_a_fragmented_heaps_free_pages_back() -> None:
    """~40 MiB allocated in 16-64 KiB chunks, half freed in holes below a live chunk: glibc keeps those
    pages until trimmed; the trimmer's one due call (the first tick only schedules) returns >= 4 MiB."""
    out = subprocess.run(
        [sys.executable, "-c", _TRIM_PROBE], capture_output=True, text=True, timeout=60, check=True
    ).stdout.split()
    calls, before, after = (int(x) for x in out)
    assert calls == 1
    assert before - after >= 4096, (before, after)


def test_heap_trim_is_due_once_per_period_from_the_first_tick() -> None:
    """Plain values: the first tick schedules, an early tick does nothing, then one call a period."""
    made: list[int] = []

    def fake_trim() -> bool:
        made.append(1)
        return True

    collected: list[int] = []

    def fake_collect() -> int:
        collected.append(1)
        return 0

    trim = HeapTrim(every_s=60.0, trim=fake_trim, collect=fake_collect, collect_every=2)
    for mono in (100.0, 130.0, 159.9, 160.0, 200.0, 220.0, 400.0):
        trim.tick(mono)
    assert (trim.calls, len(made)) == (3, 3)  # at 160, 220 and 400
    assert (trim.collections, len(collected)) == (2, 2)  # a full collection at the first and third


@pytest.mark.docker  # the watch asks the real engine for a container that does not exist
def test_a_container_watch_goes_with_its_last_reference() -> None:
    """The watch of a container (its threads ended) is freed by reference counting alone, not left to the
    seldom full garbage collection with its log tail: every run of a container makes one. Before
    2026-12-03 its thread held its bound method and it lived on in a reference cycle."""
    code = r"""
import gc, threading, time, weakref
from supervisor.adapters.docker.adapter import DockerAdapter
from supervisor.daemon.executor.containers import ContainerWatch
gc.disable()
w = ContainerWatch(DockerAdapter(), "0" * 64, post=lambda e: None, now=time.time, created_at=None)
w.start()
time.sleep(0.5)
w.stop()
for _ in range(200):  # its threads end within about a second (at most 20 s here)
    if threading.active_count() == 1:
        break
    time.sleep(0.1)
print(threading.active_count())
ref = weakref.ref(w)
del w
print(ref() is None)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    threads, freed = out.stdout.split()[-2:]
    assert threads == "1", out.stdout + out.stderr  # the watch's threads ended
    assert freed == "True", out.stdout + out.stderr
