"""Strip what wraps a vLLM log line (docs/vllm-facts.md §2.1) and return the bare message. Pure, no I/O.

Steps: drop ``\\r`` (keep the last tqdm refresh of a ``\\r``-joined line), strip ANSI SGR codes and their
residue without ESC, strip outer wrappers (docker compose, buildkite, ``docker logs -t``, CI, journald/syslog,
markdown quote, terminal ``^C``), the optional ``(Proc pid=N)`` prefix and the optional vLLM header
``LEVEL MM-DD HH:MM:SS [file:line]``. A 0.33 JSON-formatter record is unpacked as well.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

ANSI = re.compile(r"(?:\x1b)?\[[0-9;]{1,8}m")
_ANSI_BODY = re.compile(r"\[[0-9;]{1,8}m")  # literal first char: much faster scan; stray ESC removed apart
WRAPPERS = (
    r"\S+\s+\|\s",  # docker compose "service  | "
    r"\s*\|\s",  # buildkite
    r"\d{4}-\d\d-\d\dT[\d:.]+Z\s",  # docker logs -t
    r"\[\d{4}-\d\d-\d\dT[\d:.]+Z\]\s",  # CI
    r"\S+ \d{1,2} \d\d:\d\d:\d\d \S+ [^\s:]+(?:\[\d+\])?:\s",  # journald / syslog (month may be localised)
    r"> ",  # markdown quote
    r"\^C",  # terminal echo of Ctrl-C
)
_WRAP = re.compile("|".join(f"(?:{w})" for w in WRAPPERS))
PROC = re.compile(r"\((?P<proc>[^()\s]+(?: [^()\s]+)*?) pid=(?P<pid>\d+)\)\s?")
HEADER = re.compile(
    r"(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) "
    r"(?P<ts>\d\d-\d\d \d\d:\d\d:\d\d|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[.,]\d+) "
    r"\[?(?P<file>[^\s\[\]]+):(?P<line>\d+)(?:\[\]|\])\s?"
)
# One anchored pass: any number of wrappers, then the optional process prefix, then the optional header.
_ENVELOPE = re.compile(
    f"(?:{_WRAP.pattern})*(?:{PROC.pattern})?(?:{HEADER.pattern})?".replace("(?P<ts>", "(?:")
    .replace("(?P<file>", "(?:")
    .replace("(?P<line>", "(?:")
)


@dataclass(frozen=True)
class Line:
    """One log line after normalisation: who printed it (if known), its level, and the bare message."""

    proc: str | None
    pid: int | None
    level: str | None
    message: str


def _strip_cr(s: str) -> str:
    s = s.rstrip("\r\n")
    if "\r" in s:
        # tqdm refreshes with "\r": the last non-blank segment is what the terminal finally showed
        parts = [p for p in s.split("\r") if p.strip()]
        s = parts[-1] if parts else ""
    return s


def _json_record(s: str) -> Line | None:
    try:
        rec = json.loads(s)
    except ValueError:
        return None
    if not isinstance(rec, dict) or not isinstance(rec.get("message"), str):
        return None
    pid = rec.get("process")
    level = rec.get("levelname")
    proc = rec.get("processName")
    return Line(
        proc=proc if isinstance(proc, str) else None,
        pid=pid if isinstance(pid, int) else None,
        level=level if isinstance(level, str) else None,
        message=rec["message"],
    )


def split_line(raw: str) -> tuple[str | None, int | None, str | None, str]:
    """``normalize`` as a plain tuple (proc, pid, level, message): the hot path of the parsers."""
    s = _strip_cr(raw) if ("\r" in raw or raw.endswith("\n")) else raw
    if "[" in s:
        s = _ANSI_BODY.sub("", s)
        if "\x1b" in s:
            s = s.replace("\x1b", "")
    m = _ENVELOPE.match(s)
    assert m is not None  # every part is optional: the pattern always matches
    msg = s[m.end() :]
    pid = m.group("pid")
    if msg.startswith("{") and '"message"' in msg:
        rec = _json_record(msg)
        if rec is not None:
            return rec.proc, rec.pid, rec.level, rec.message
    return m.group("proc"), int(pid) if pid else None, m.group("level"), msg


def normalize(raw: str) -> Line:
    """Apply docs/vllm-facts.md §2.1 steps 1-4 to one raw line."""
    return Line(*split_line(raw))
