"""The I/O of the last known good (pool jobs): which spec a start creates, saving a good one, the
alert about a failing change. The decisions are the core's (:mod:`supervisor.core.spec.last_good`).

The spec holds the environment's secrets: it lives in memory between the create and RUNNING, then in
the store's 0600 file; it is never logged (EnvVar values have no repr) and the alert masks secret values.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog

from supervisor.adapters.docker import spec as container_spec
from supervisor.adapters.docker.adapter import DockerAdapter
from supervisor.adapters.secrets import declared_names, ensure_key_file, spec_with_key
from supervisor.adapters.store import patchset
from supervisor.adapters.store.state import LAST_GOOD_SUFFIX, Store
from supervisor.config import Profile
from supervisor.core import actions as A
from supervisor.core.alerts.localize import title_en
from supervisor.core.clock import Clock
from supervisor.core.errors import ImageMissing, StateError, SupervisorError
from supervisor.core.events import ContainerStarted, ContainerStartFailed, Event, LastGoodSaved
from supervisor.core.spec.last_good import (
    HOLD,
    LastGood,
    change_diff,
    diff_details,
    diff_summary,
    failed_change_reason,
)
from supervisor.core.spec.model import ContainerSpec
from supervisor.core.spec.patchset import OVERLAY_MISSING, PatchEntry, kept_digests
from supervisor.core.vllm.kv_pin import pinned_spec
from supervisor.core.vocab import Outcome
from supervisor.daemon.executor import jobs
from supervisor.daemon.executor.records import Records

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class Created:
    """The spec a container of ours was created from (kept until that start reaches RUNNING)."""

    container_id: str
    spec: ContainerSpec = field(repr=False)
    fingerprint: str | None
    image_id: str | None
    patches: tuple[PatchEntry, ...] = ()


def declared_secrets(profile: Profile) -> list[str]:
    """The env names the profile's API key uses (masked like any name that looks secret)."""
    return sorted(declared_names(profile.api_key))


def load(store: Store, name: str) -> LastGood | None:
    """The profile's last known good (None: none yet); StateError when unreadable."""
    data = store.load_last_good(name)
    return LastGood.from_dict(data) if data is not None else None


def create(
    docker: DockerAdapter,
    store: Store,
    profile: Profile,
    use_last_good: bool,
    clock: Clock,
    remember: Callable[[Created], None],
    kv_pin_bytes: int | None = None,
) -> list[Event]:
    """The create job: the profile's spec (with kv_pool.pin apply's ``--kv-cache-memory-bytes``), or the
    last known good (image pinned by id, today's key, the profile's container name); remembers what it
    created."""
    try:
        good = load(store, profile.name)
    except StateError as exc:
        if use_last_good:
            return [ContainerStartFailed(f"last known good unreadable: {exc}")]
        good = None
    if use_last_good:
        if good is None:
            return [ContainerStartFailed("no last known good spec to roll back to")]
        base = dataclasses.replace(good.pinned_spec(), name=profile.container.name)
    else:
        base = pinned_spec(profile.container, kv_pin_bytes)
    try:
        if profile.api_key is not None and not use_last_good:
            ensure_key_file(profile.api_key)
        spec = spec_with_key(profile.api_key, base)
    except (SupervisorError, OSError) as exc:
        return [ContainerStartFailed(f"API key: {exc}")]
    if use_last_good and good is not None:
        try:  # the patch files as they were (refused, nothing written, when a copy is missing or bad)
            restored = patchset.restore(store.state_dir, good.patches)
        except StateError as exc:
            return [ContainerStartFailed(f"rollback refused: {exc}")]
        if restored:
            log.warning("last_good.patches_restored", profile=profile.name, files=restored)
    patches = patchset.hash_mounts(spec.mounts)
    missing, image_id = overlays_missing(docker, spec, good)
    if missing:
        fingerprint = jobs.start_fingerprint(spec, image_id, declared_secrets(profile), patches)
        return [
            ContainerStartFailed(missing, fingerprint=fingerprint, outcome=Outcome.FAILED_OVERLAY_MISSING)
        ]
    stand_in = good.image_id if good is not None and good.spec.image == spec.image else None
    events = jobs.create_and_start(
        docker, profile.name, spec, declared_secrets(profile), clock, stand_in, patches
    )
    for ev in events:
        if isinstance(ev, ContainerStarted):
            remember(Created(ev.container_id, spec, ev.fingerprint, ev.image_id, patches))
    return events


def overlays_missing(docker: DockerAdapter, spec: ContainerSpec, good: LastGood | None) -> tuple[str, str]:
    """After an image change (its id is not the last known good's), the file overlays whose target the
    new image lacks though the old one had it (or the old one is gone): (reason, new image id); reason
    "" when none. A target missing in both images is a file the profile adds, not an overlay."""
    if good is None or not good.image_id:
        return "", ""
    targets = [m.target for m in spec.mounts if m.type == "bind" and os.path.isfile(m.source)]
    try:
        image_id = str(docker.image_info(spec.image).get("Id") or "")
        if not targets or not image_id or image_id == good.image_id:
            return "", image_id
        missing = container_spec.missing_targets(docker, image_id, targets)
        if missing:
            try:
                had = set(missing) - set(container_spec.missing_targets(docker, good.image_id, missing))
            except ImageMissing:
                had = set(missing)
            missing = [t for t in missing if t in had]
    except SupervisorError as exc:  # the create says what Docker thinks of the image
        log.warning("overlay.check_failed", image=spec.image, error=str(exc))
        return "", ""
    if not missing:
        return "", image_id
    return f"{OVERLAY_MISSING}: image {spec.image} ({image_id[:19]}) has no " + ", ".join(missing), image_id


def save(store: Store, records: Records, name: str, created: Created | None, now: float) -> list[Event]:
    """The start in ``created`` reached RUNNING: keep its spec as the last known good (0600, atomic)."""
    if created is None or created.fingerprint is None:
        records.emit(name, "last_good.save_skipped", {"reason": "the created spec is not known"})
        return []
    good = LastGood(
        created.spec, created.fingerprint, created.image_id, created.container_id, now, created.patches
    )
    try:
        problems = patchset.keep(store.state_dir, created.patches)
        store.save_last_good(name, good.to_dict())
    except StateError as exc:
        log.error("last_good.save_failed", profile=name, error=str(exc))
        records.emit(name, "last_good.save_failed", {"error": str(exc)})
        return []
    if problems:
        records.emit(name, "last_good.patches_not_kept", {"problems": problems[:10]})
    collect_patches(store, records)
    records.emit(
        name, "last_good.saved", {"fingerprint": created.fingerprint, "container_id": created.container_id}
    )
    return [LastGoodSaved(created.fingerprint)]


def collect_patches(store: Store, records: Records) -> None:
    """Remove the patch copies no profile's last known good references (none when one is unreadable)."""
    referenced: set[str] = set()
    for path in store.state_dir.glob(f"*{LAST_GOOD_SUFFIX}"):
        try:
            good = load(store, path.name.removesuffix(LAST_GOOD_SUFFIX))
        except StateError:
            return
        if good is not None:
            referenced |= kept_digests(good.patches)
    removed = patchset.collect(store.state_dir, referenced)
    if removed:
        records.emit("", "last_good.patches_collected", {"removed": len(removed)})


def report(store: Store, records: Records, profile: Profile, rep: A.ReportFailedChange) -> list[Event]:
    """Alert that a changed config keeps failing, with how it differs from the last known good."""
    try:
        good = load(store, profile.name)
    except StateError as exc:
        log.error("last_good.unreadable", profile=profile.name, error=str(exc))
        good = None
    details: tuple[tuple[str, str], ...] = ()
    if good is None:
        reason = "the last known good spec could not be read"
    else:
        new = spec_with_key(profile.api_key, profile.container)
        records.secrets.learn_spec(good.spec, declared_secrets(profile))  # an older key, say
        items = change_diff(
            new,
            good.spec,
            declared_secrets(profile),
            new_image_id=rep.image_id,
            last_good_image_id=good.image_id,
            new_patches=patchset.hash_mounts(profile.container.mounts),
            last_good_patches=good.patches,
        )
        reason = failed_change_reason(rep.action, items)
        details = diff_details(items)
        records.emit(
            profile.name,
            "config.change_diff",
            {"differs": diff_summary(items), "lines": [f"{k}: {v}" for k, v in details]},
        )
    severity = "critical" if rep.action == HOLD else "warning"  # hold: nothing serves meanwhile
    params = (("failures", str(rep.failures)), ("action", rep.action))  # action: a catalogue phrase
    title = title_en("config.change_failed", params)
    alert = A.Alert(
        severity,
        title,
        rep.old_state,
        rep.new_state,
        reason,
        details=details,
        kind="config.change_failed",
        params=params,
    )
    records.alert(profile.name, profile.container.name, alert, None)
    return []
