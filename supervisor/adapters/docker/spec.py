"""A container as its profile would describe it: ``docker inspect`` read back into a ContainerSpec.

The Docker adapter does the two reads (the container, its image); the parser is the one
``supervisorctl snapshot`` uses (:mod:`supervisor.core.spec.inspect`), so a drift check and a snapshot
never disagree about what a container is.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from supervisor.adapters.docker.adapter import DockerAdapter
from supervisor.core.errors import ContainerMissing, ImageMissing
from supervisor.core.spec.inspect import spec_from_inspect
from supervisor.core.spec.model import ContainerSpec


@dataclass(frozen=True)
class InspectedSpec:
    """One container's id, whether it runs, its spec, its image's own environment (both secret) and the
    image's config (what the container inherits: Cmd, Entrypoint, User, labels ...)."""

    id: str
    running: bool
    spec: ContainerSpec = field(repr=False)
    image_env: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    image_config: Mapping[str, Any] = field(default_factory=dict, repr=False)


def inspect_spec(docker: DockerAdapter, ref: str) -> InspectedSpec | None:
    """The spec of container ``ref`` (by id or exact name); None if there is none.

    Raises the adapter's errors when Docker does not answer. What the container inherited (env, labels,
    entrypoint) is judged against the image it *runs* (by id), not the one its tag names now: a tag that
    moved since the container was created is not drift (the reference is the same).
    """
    try:
        info = docker.inspect(ref)
    except ContainerMissing:
        return None
    try:
        image = docker.image_config(str(info.get("Image")))
    except ImageMissing:
        image = docker.image_config(str((info.get("Config") or {}).get("Image")))
    image_env = [str(e) for e in image.get("Env") or []]
    spec = spec_from_inspect(info, image_env, image)
    pairs = tuple((n, v) for n, _, v in (e.partition("=") for e in image_env))
    running = bool((info.get("State") or {}).get("Running"))
    return InspectedSpec(str(info.get("Id")), running, spec, pairs, dict(image))


#: The label of the stopped container an overlay check creates (force-removed at once; an orphan of a
#: crash carries it).
OVERLAY_CHECK_LABEL = "vllm-supervisor.overlay-check"


def missing_targets(docker: DockerAdapter, image: str, targets: Sequence[str]) -> list[str]:
    """The ``targets`` that do not exist in ``image``: a stopped container is created from it (never
    started), each path looked up in its filesystem, the container force-removed."""
    if not targets:
        return []
    name = f"vsup-overlay-check-{secrets.token_hex(6)}"
    probe = ContainerSpec(name=name, image=image, entrypoint=("true",), stop_timeout=None)
    cid = docker.create(probe, {OVERLAY_CHECK_LABEL: "1"})
    try:
        return [t for t in targets if not docker.path_exists(cid, t)]
    finally:
        docker.remove(cid, force=True)
