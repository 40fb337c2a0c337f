"""Patch-set custody (pure): what the bind-mounted files and small directories of a container hold.

A "patched vLLM" is the image plus files bind-mounted read-only over the image's own (docs/field-notes.md).
Their content is part of the config: it goes into the fingerprint (:func:`patched_fingerprint`), into
drift (:func:`patch_drift`, field ``patches``), into the last known good (which keeps content-addressed
copies, so a rollback restores the files too). The hashing itself is I/O
(:mod:`supervisor.adapters.store.patchset`); the rule of what is hashed how lives here, once:

* a bind-mounted **file** of at most :data:`MAX_CONTENT_BYTES` is hashed by content (``file``);
* a **read-only directory** of at most :data:`MAX_DIR_FILES` files and :data:`MAX_CONTENT_BYTES` in total
  is hashed by content (``dir``); a bigger one (the model weights) by a manifest of (relative path, size,
  mtime) of at most :data:`MAX_MANIFEST_FILES` files (``manifest``: never read, only stat'ed); a file
  bigger than the bound likewise (``manifest``);
* a writable directory (the server writes its caches there), a directory with more files than the
  manifest bound, or a walk that exceeds :data:`HASH_DEADLINE_S` is not hashed (``skipped``);
* a source that does not exist is ``missing``.

Only ``file`` and ``dir`` entries can be kept and restored; see docs/operations.md "Patch custody".
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from supervisor.core.errors import StateError
from supervisor.core.spec.drift import DriftItem

#: The kinds of entry (what the digest is of).
FILE: Final = "file"
DIR: Final = "dir"
MANIFEST: Final = "manifest"
SKIPPED: Final = "skipped"
MISSING: Final = "missing"
KINDS: Final = (FILE, DIR, MANIFEST, SKIPPED, MISSING)
#: Kinds whose files the last known good keeps copies of (content-addressed).
CONTENT_KINDS: Final = (FILE, DIR)
#: The bounds of the hashing rule (module docstring).
MAX_DIR_FILES: Final = 256
MAX_CONTENT_BYTES: Final = 64 * 1024 * 1024
MAX_MANIFEST_FILES: Final = 2_000
HASH_DEADLINE_S: Final = 10.0
#: The content-addressed copies of every last known good together stay under this (bytes).
MAX_KEPT_BYTES: Final = 512 * 1024 * 1024
#: The container label carrying the patch set it was created with (drift compares the host with it).
PATCH_LABEL: Final = "vllm-supervisor.patches"
#: How a failed overlay check begins (the failed start's reason names the targets).
OVERLAY_MISSING: Final = "overlay target missing"
#: The ledger's diagnosis of that failed start (no container ran: there is no log to read).
OVERLAY_DIAGNOSIS: Final = (
    "A file overlay's target is not in the new image (the failed start's reason names it): port the patch "
    "to the new image's layout, drop the mount, or pin the previous image."
)
#: Digest characters a label, a diff line and the fingerprint input show (sha256 hex prefix).
SHORT: Final = 16


@dataclass(frozen=True)
class PatchEntry:
    """One bind mount's content: ``kind`` (module docstring), ``digest`` (sha256 hex; "" when not
    hashed), ``files`` the (relative path, sha256) of each content-hashed file ("" for a file mount),
    ``note`` why it was not hashed (skipped) or what the manifest covers."""

    target: str
    source: str
    kind: str
    digest: str = ""
    files: tuple[tuple[str, str], ...] = ()
    size: int = 0
    note: str = ""

    def shown(self) -> str:
        """``file 1a2b...`` / ``manifest 3c4d... (40 files)`` / ``skipped (writable directory)``."""
        text = f"{self.kind} {self.digest[:SHORT]}" if self.digest else self.kind
        return f"{text} ({self.note})" if self.note else text


def patched_fingerprint(base: str, entries: Sequence[PatchEntry]) -> str:
    """The config fingerprint ``base`` with the patch set folded in (same length); no bind mounts:
    ``base`` itself (a profile without patches keeps its KV baseline and last known good)."""
    if not entries:
        return base
    payload = json.dumps([base, sorted((e.target, e.kind, e.digest) for e in entries)], separators=(",", ":"))
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[: len(base)]


def to_label(entries: Sequence[PatchEntry]) -> str:
    """The label value: ``[[target, kind, digest prefix], ...]`` (JSON)."""
    return json.dumps([[e.target, e.kind, e.digest[:SHORT]] for e in entries], separators=(",", ":"))


def from_label(text: str) -> tuple[PatchEntry, ...]:
    """Inverse of :func:`to_label` (source unknown: ""); StateError on a wrong shape."""
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise StateError(f"label {PATCH_LABEL}: not JSON: {exc}") from exc
    if not isinstance(raw, list):
        raise StateError(f"label {PATCH_LABEL}: expected a list")
    out = []
    for item in raw:
        if not (isinstance(item, list) and len(item) == 3 and all(isinstance(v, str) for v in item)):
            raise StateError(f"label {PATCH_LABEL}: expected [target, kind, digest] items")
        out.append(PatchEntry(item[0], "", item[1], item[2]))
    return tuple(out)


def labelled(labels: Sequence[tuple[str, str]]) -> tuple[PatchEntry, ...] | None:
    """The patch set a container's labels carry (None: created without one, e.g. by an older daemon)."""
    text = dict(labels).get(PATCH_LABEL)
    return None if text is None else from_label(text)


def patch_drift(want: Sequence[PatchEntry], have: Sequence[PatchEntry]) -> tuple[DriftItem, ...]:
    """Per bind target whose content differs: ``patches <target>: profile <host now>, container <as
    created>`` (digests compared by the label's prefix)."""
    w = {e.target: e for e in want}
    h = {e.target: e for e in have}
    out = []
    for target in sorted(set(w) | set(h)):
        a, b = w.get(target), h.get(target)
        if a is not None and b is not None and (a.kind, a.digest[:SHORT]) == (b.kind, b.digest[:SHORT]):
            continue
        out.append(
            DriftItem("patches", target, a.shown() if a else "(no mount)", b.shown() if b else "(no mount)")
        )
    return tuple(out)


def kept_digests(entries: Sequence[PatchEntry]) -> frozenset[str]:
    """The sha256 of every file the content-addressed store keeps for ``entries``."""
    return frozenset(sha for e in entries if e.kind in CONTENT_KINDS for _, sha in e.files)


def entries_to_list(entries: Sequence[PatchEntry]) -> list[dict[str, Any]]:
    """JSON-safe (the last known good's ``patches``)."""
    return [
        {
            "target": e.target,
            "source": e.source,
            "kind": e.kind,
            "digest": e.digest,
            "files": [list(f) for f in e.files],
            "size": e.size,
            "note": e.note,
        }
        for e in entries
    ]


def entries_from_list(data: object, where: str = "patches") -> tuple[PatchEntry, ...]:
    """Inverse of :func:`entries_to_list`; StateError naming the item on a wrong shape."""
    if not isinstance(data, list):
        raise StateError(f"{where}: expected a list")
    out = []
    for i, item in enumerate(data):
        if not isinstance(item, Mapping):
            raise StateError(f"{where}[{i}]: expected an object")
        strs = [item.get(k) for k in ("target", "source", "kind", "digest", "note")]
        if not all(isinstance(v, str) for v in strs) or item.get("kind") not in KINDS:
            raise StateError(f"{where}[{i}]: target, source, kind, digest, note must be strings (kind known)")
        files = item.get("files")
        if not isinstance(files, list) or not all(
            isinstance(f, list) and len(f) == 2 and all(isinstance(v, str) for v in f) for f in files
        ):
            raise StateError(f"{where}[{i}].files: expected [[relative path, sha256], ...]")
        size = item.get("size")
        if isinstance(size, bool) or not isinstance(size, int):
            raise StateError(f"{where}[{i}].size: expected an integer")
        target, source, kind, digest, note = (str(v) for v in strs)
        out.append(PatchEntry(target, source, kind, digest, tuple((a, b) for a, b in files), size, note))
    return tuple(out)
