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

#: The cgroup of a Docker container, exactly: the systemd driver's scope or the cgroupfs driver's folder.
_DOCKER_CGROUP = re.compile(r"/system\.slice/docker-(?P<a>[0-9a-f]{64})\.scope|/docker/(?P<b>[0-9a-f]{64})")
_ID = re.compile(r"[0-9a-f]{64}")


def docker_container_id(path: str, parents: tuple[str, ...] = ()) -> str | None:
    """The container id of a cgroup path in one of Docker's exact shapes, else None.

    ``/system.slice/docker-<id>.scope`` (systemd driver), ``/docker/<id>`` (cgroupfs driver), or under a
    configured ``--cgroup-parent`` P: ``P/docker-<id>.scope`` or ``P/<id>``. A 64-hex run anywhere else (a
    user's session ``/user.slice/.../<id>``, a folder named after our container) names no container: any
    local user with a delegated memory controller may create such a path.
    """
    m = _DOCKER_CGROUP.fullmatch(path)
    if m is not None:
        return m.group("a") or m.group("b")
    for parent in parents:
        head, sep, tail = path.rpartition("/")
        if sep and head == parent.rstrip("/"):
            leaf = tail.removeprefix("docker-").removesuffix(".scope") if tail.startswith("docker-") else tail
            if _ID.fullmatch(leaf) and tail in (leaf, f"docker-{leaf}.scope"):
                return leaf
    return None


def docker_container_chain(path: str, parents: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The container ids a cgroup path nests, outermost first, when the whole path is a chain of
    :func:`docker_container_id` shapes (``/docker/<outer>/docker/<inner>``,
    ``/system.slice/docker-<outer>.scope/docker/<inner>``, ...); else ``()``.

    A Docker engine inside a container (a nested machine) makes its containers' cgroups under that
    container's own cgroup, so the outer engine's shape comes first and the inner one's follows. The chain
    starts at the root and covers the whole path: a shape after another prefix
    (``/user.slice/user-1000.slice/docker/<id>``) or after or before a folder of no shape
    (``/docker/<outer>/x/docker/<id>``) names nothing, since a local user may create such paths; only the
    host's root makes the first link, and a nested one takes that container's root with its cgroups writable
    (a privileged container: as good as the host's root already).
    """
    parts = path.split("/")
    if parts[0] or len(parts) < 2:  # not absolute
        return ()
    # one container's cgroup spans 2 components in Docker's own shapes, a parent's own plus 1 under a parent
    spans = sorted({2, *(len([c for c in p.split("/") if c]) + 1 for p in parents)})
    chains: dict[int, tuple[str, ...]] = {1: ()}  # components consumed (the leading "") -> ids so far
    for start in range(1, len(parts)):
        if start not in chains:  # no chain of containers ends here
            continue
        for end in (start + span for span in spans):
            if end > len(parts):
                break
            cid = docker_container_id("/" + "/".join(parts[start:end]), parents)
            if cid is not None and end not in chains:
                chains[end] = (*chains[start], cid)
    return chains.get(len(parts), ())


def container_id_in(cgroup_text: str, parents: tuple[str, ...] = ()) -> str | None:
    """The container id of ``/proc/PID/cgroup`` text (``hierarchy:controllers:path`` lines) or of one cgroup
    path (an OOM killer's ``task_memcg``): the innermost container it names; else None.

    Within a line, the last id of its :func:`docker_container_chain` (the innermost container). Across lines,
    the line with the longest chain, the last of equals: in a nested machine the hierarchies the inner engine
    manages name ``/docker/<outer>/docker/<inner>`` while the others (there: the unified ``0::`` line) stay at
    ``/docker/<outer>``, and the process is the inner container's. A line in no exact shape names nothing.
    """
    found: tuple[str, ...] = ()
    for line in cgroup_text.splitlines():
        path = line.split(":", 2)[2] if line.count(":") >= 2 else line
        chain = docker_container_chain(path.strip(), parents)
        if chain and len(chain) >= len(found):
            found = chain
    return found[-1] if found else None


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


def other_for_all(pid: int | None, vllm_name: bool | None, lookup: PidLookup | None) -> bool:
    """Whether a line is ``other`` for every profile whatever their containers: it names a process in no
    Docker container (alive, or its cgroup printed by the OOM killer), or a gone process with a name vLLM
    never runs as. Such lines may be held back from the history (core/host/kernel_quota.py)."""
    if pid is not None and lookup is not None and lookup.alive:
        return lookup.container_id is None
    return pid is not None and vllm_name is False
