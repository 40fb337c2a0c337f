"""Where an engine hung: the Python stack of the engine-core process, read from outside its container with
``py-spy dump`` (docs/vllm-facts.md "A hang that burns a core"), parsed here (pure).

``py-spy dump --pid PID`` prints, per thread, ``Thread N (active|idle): "NAME"`` and then one line per frame,
innermost first: ``    function (file:line)``. The engine core's step runs on its ``MainThread``; its top
frames are the answer. Sampled a few times, "the same top frame every time" tells a hang from a slow step.
"""

from __future__ import annotations

import re

from supervisor.core.probe_events import StackFrame, StackRead

#: Frames of the chosen thread kept per sample (innermost first).
TOP_FRAMES = 6

_THREAD = re.compile(r'^Thread\s+\S+\s*(?:\((?P<state>[^)]*)\))?:?\s*(?:"(?P<name>[^"]*)")?')
_FRAME = re.compile(r"^\s+(?P<function>.+?) \((?P<file>[^():]+):(?P<line>\d+)\)\s*$")


def threads(text: str) -> list[tuple[str, tuple[StackFrame, ...]]]:
    """The threads of one ``py-spy dump`` text: (name, frames innermost first), in the dump's order."""
    out: list[tuple[str, list[StackFrame]]] = []
    for line in text.splitlines():
        m = _THREAD.match(line)
        if m is not None and line.startswith("Thread"):
            out.append((m.group("name") or "", []))
            continue
        f = _FRAME.match(line)
        if f is not None and out:
            out[-1][1].append(StackFrame(f.group("function"), f.group("file"), int(f.group("line"))))
    return [(name, tuple(frames)) for name, frames in out]


def main_frames(text: str, keep: int = TOP_FRAMES) -> tuple[StackFrame, ...]:
    """The top ``keep`` frames of the dump's MainThread (else its first thread with frames)."""
    found = threads(text)
    for name, frames in found:
        if name == "MainThread" and frames:
            return frames[:keep]
    return next((frames[:keep] for _, frames in found if frames), ())


def summarize(container_id: str, dumps: list[str], pid: int | None, purpose: str = "stuck") -> StackRead:
    """The StackRead of several dumps of one process: the last sample's top frames and how many samples
    had the same top frame."""
    parsed = [main_frames(d) for d in dumps]
    read = [p for p in parsed if p]
    if not read:
        return StackRead(container_id, samples=len(dumps), error="py-spy printed no Python frame", pid=pid,
                         purpose=purpose)  # fmt: skip
    last = read[-1]
    # the same function of the same file (a hot loop's line changes from one sample to the next)
    same = sum(1 for p in read if (p[0].function, p[0].file) == (last[0].function, last[0].file))
    return StackRead(container_id, last, samples=len(read), same=same, pid=pid, purpose=purpose)
