"""The morning-after story: what the flight recorder's last records say about an unclean end. Pure.

Told first in the ``daemon.crashed`` message (docs/wedge.md): when the host went down, what was
loading or serving (with its requests), how MemAvailable moved in the last 30 s, what the kernel said
last and whether the daemon killed a container or could not act, e.g. ``the host went down at about
03:12:40 (rebooted, back 03:19) while thor-t5000 was RUNNING (3 requests); in its last 30 s
MemAvailable fell 14.2 -> 1.1 GiB; kernel: NV_ERR_NO_MEMORY at 03:12:35 (NVRM: ...); the daemon killed
the container of thor-t5000 at 03:12:36``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

#: Memory is described over this last stretch of the records.
LAST_S = 30.0
#: Kernel lines and kills this long before the end belong to the story.
KERNEL_S = 120.0
_UP = ("STARTING", "RUNNING", "DEGRADED", "DRAINING", "MAINTENANCE", "STOPPING")
_KIND = {"nv_err_no_memory": "NV_ERR_NO_MEMORY", "oom_kill": "OOM kill", "xid": "Xid"}


@dataclass(frozen=True)
class Night:
    """The story and its parts (for the alert's fields and the profiles' wedge)."""

    text: str
    last_t: float  # the last record: about when the host (or the daemon) went down
    up: tuple[str, ...]  # profiles that were loading or serving then
    mem_from_gib: float | None
    mem_to_gib: float | None
    kernel: str | None  # the last kernel line of interest (its kind and time, then the line)


def clock_time(at: float) -> str:
    """``HH:MM:SS`` in the host's local time."""
    return datetime.fromtimestamp(at).astimezone().strftime("%H:%M:%S")


def _requests(entry: Sequence[Any]) -> str:
    running = entry[1] if len(entry) > 1 else None
    waiting = entry[2] if len(entry) > 2 else None
    if running is None and waiting is None:
        return ""
    n = int((running or 0) + (waiting or 0))
    return f" ({n} request{'s' if n != 1 else ''})"


def _last_states(records: Sequence[dict[str, Any]]) -> dict[str, list[Any]]:
    """Each profile's last known [state, running, waiting]: the samples, then any later state change
    (a change between the last sample and the end is news the sample does not have yet)."""
    out: dict[str, list[Any]] = {}
    for r in records:
        if r.get("k") == "s" and isinstance(r.get("p"), dict):
            for name, entry in r["p"].items():
                if isinstance(entry, list) and entry:
                    out[name] = list(entry)
        elif r.get("k") == "ev" and r.get("n") == "state.changed" and isinstance(r.get("f"), dict):
            new = r["f"].get("new")
            if isinstance(new, str) and r.get("p"):
                counts = out.get(str(r["p"]), [None, None, None])[1:]
                out[str(r["p"])] = [new, *counts]
    return out


def _memory(samples: list[dict[str, Any]], end: float) -> tuple[str, float | None, float | None]:
    last = [s for s in samples if isinstance(s.get("ma"), int | float) and s["t"] >= end - LAST_S]
    if not last:
        return "", None, None
    a, b = float(last[0]["ma"]), float(last[-1]["ma"])
    span = f"in its last {LAST_S:.0f} s MemAvailable"
    if f"{a:.1f}" == f"{b:.1f}":
        text = f"{span} stayed at {b:.1f} GiB"
    else:
        text = f"{span} {'fell' if b < a else 'rose'} {a:.1f} -> {b:.1f} GiB"
    free = last[-1].get("mf")
    if isinstance(free, int | float):
        text += f" (MemFree {free:.1f} GiB)"
    return text, a, b


def night_story(
    records: Sequence[dict[str, Any]],
    *,
    rebooted: bool,
    back_at: float,
    fmt: Callable[[float], str] = clock_time,
) -> Night | None:
    """The story of the previous run's end from its flight records (None: no records)."""
    if not records:
        return None
    end = float(records[-1]["t"])
    samples = [r for r in records if r.get("k") == "s"]
    who = "the host went down" if rebooted else "the supervisor ended"
    back = f" (rebooted, back {fmt(back_at)[:5]})" if rebooted else f" (back {fmt(back_at)[:5]})"
    parts = [f"{who} at about {fmt(end)}{back}"]
    up: list[str] = []
    states = _last_states(records)
    if states:
        doing = []
        for name, entry in states.items():
            if entry and entry[0] in _UP:
                up.append(name)
                doing.append(f"{name} was {entry[0]}{_requests(entry)}")
        parts[0] += " while " + ", ".join(doing) if doing else " with nothing loading or serving"
    mem, m_from, m_to = _memory(samples, end)
    if mem:
        parts.append(mem)
    recent = [r for r in records if float(r["t"]) >= end - KERNEL_S]
    kernel = [r for r in recent if r.get("k") == "kernel"]
    last_kernel = None
    if kernel:
        k = kernel[-1]
        kt = k.get("kt")
        at = float(kt) if isinstance(kt, int | float) else float(k["t"])
        last_kernel = f"{_KIND.get(str(k.get('kind')), str(k.get('kind')))} at {fmt(at)}"
        parts.append(f"kernel: {last_kernel} ({str(k.get('line', ''))[:240]})")
    kills = [r for r in recent if r.get("k") == "ev" and r.get("n") == "emergency.kill"]
    if kills:
        done = ", ".join(f"the container of {r.get('p')} at {fmt(float(r['t']))}" for r in kills[-3:])
        parts.append(f"the daemon killed {done}")
    elif kernel:
        parts.append("the daemon could not act (no kill recorded)")
    return Night("; ".join(parts), end, tuple(up), m_from, m_to, last_kernel)


def previous_boot_note(lines: Sequence[str], classify: Callable[[str], Any], n: int = 3) -> str | None:
    """``previous boot's kernel log: ...`` with its last ``n`` lines of interest (None: none).

    ``classify``: supervisor.core.host.kernel_log.classify_kernel_line (an event with ``kind`` and
    ``line``, or None)."""
    found = [ev for ev in (classify(raw) for raw in lines) if ev is not None]
    if not found:
        return None
    told = "; ".join(f"{_KIND.get(ev.kind, ev.kind)} ({str(ev.line)[:160]})" for ev in found[-n:])
    return f"previous boot's kernel log: {told}"
