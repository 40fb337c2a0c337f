"""Whose process a kernel line names: this profile's container, another process, or nobody. Pure.

A line may name a pid (OOM kill, Xid ``pid=``) and/or a process name (Xid ``name=``, the nvgpu channel
owner). The daemon looks the pid up (``/proc/PID/cgroup``: the container id) and hands the result here:

* the pid is in a profile's container -> ``ours`` for that profile, ``other`` for the rest;
* the pid is alive in no container of ours -> ``other`` for every profile;
* the pid is gone (an OOM-killed process may already be reaped) or the line names only a process name:
  a vLLM process name (python*, pt_main_thread, VLLM::*) -> ``nobody`` (it goes to whoever loads or
  serves), any other name -> ``other``;
* the line names nobody (NV_ERR_NO_MEMORY, nvmap, CMA) -> ``nobody``.

The OOM killer prints the victim's cgroup itself, in the ``oom-kill:...,task_memcg=PATH,task=NAME,pid=N``
line just before ``Out of memory: Killed process N``: when that line was seen, the pid's container is
known even after the victim was reaped (``PidLookup(True, id)``; a cgroup that names no container ->
``other``), so a reaped process of another job is never taken for ours.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

OURS = "ours"
OTHER = "other"
NOBODY = "nobody"

#: A Docker container id in a cgroup path (``/docker/<id>``, ``docker-<id>.scope``, ``/kubepods/.../<id>``).
_CONTAINER_ID = re.compile(r"(?<![0-9a-f])[0-9a-f]{64}(?![0-9a-f])")


def container_id_in(cgroup_text: str) -> str | None:
    """The (last) 64-hex container id named in ``/proc/PID/cgroup`` text or a cgroup path, or None."""
    ids = _CONTAINER_ID.findall(cgroup_text)
    return ids[-1] if ids else None


@dataclass(frozen=True)
class PidLookup:
    """What the host said about the pid a line names: alive, and the container id in its cgroup."""

    alive: bool
    container_id: str | None


def attribute(
    pid: int | None,
    vllm_name: bool | None,
    lookup: PidLookup | None,
    containers: Mapping[str, str | None],
) -> dict[str, str]:
    """Each profile's share of one kernel line: ours | other | nobody.

    ``vllm_name``: the line's process name is a vLLM one (None: the line names no process);
    ``lookup``: the pid looked up (None: no pid); ``containers``: profile -> its container id (None: none).
    """
    if pid is not None and lookup is not None and lookup.alive:
        cid = (lookup.container_id or "").lower()
        return {n: OURS if c and cid and _same(cid, c) else OTHER for n, c in containers.items()}
    if vllm_name is None:
        return dict.fromkeys(containers, NOBODY if pid is None else OTHER)
    return dict.fromkeys(containers, NOBODY if vllm_name else OTHER)


def _same(full_id: str, given: str) -> bool:
    g = given.strip().lower()
    return len(g) >= 12 and (full_id.startswith(g) or g.startswith(full_id))
