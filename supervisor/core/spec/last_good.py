"""Last known good (pure): the spec of the last start that reached RUNNING, and what to do when a
CHANGED config keeps failing.

Every start the daemon made from the profile that reaches RUNNING becomes the profile's last known good
(its resolved container spec and config fingerprint, kept by the store in a 0600 file). A failed start
whose fingerprint differs from the last known good's counts as a failure *of the change*; after
``rollback_after`` of them in a row the profile's ``on_failed_change`` policy applies: ``rollback`` starts
the last known good instead (until the config changes again, or an operator ``start``/``reset``),
``hold`` only alerts. The alert names what differs (drift's comparison, secret values masked).
See docs/operations.md "Last known good".
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final

from supervisor.core.errors import StateError
from supervisor.core.spec.codec import spec_from_dict, spec_to_dict
from supervisor.core.spec.drift import DriftItem, drift_fields, spec_drift
from supervisor.core.spec.model import ContainerSpec
from supervisor.core.spec.patchset import PatchEntry, entries_from_list, entries_to_list, patch_drift

ROLLBACK: Final = "rollback"
HOLD: Final = "hold"
#: ``running_spec`` values: what the current (or last) container was created from.
SPEC_PROFILE: Final = "profile"
SPEC_LAST_GOOD: Final = "last_known_good"
#: Diff lines an alert carries at most (the rest is counted).
MAX_DIFF_LINES = 12


@dataclass(frozen=True)
class LastGood:
    """The last known good start of a profile: the spec the daemon created (secrets included)."""

    spec: ContainerSpec = field(repr=False)
    fingerprint: str
    image_id: str | None = None
    container_id: str | None = None
    saved_at: float | None = None
    #: The content of its bind mounts when it was created (docs/operations.md "Patch custody").
    patches: tuple[PatchEntry, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe (holds secret values: written 0600 only)."""
        return {
            "fingerprint": self.fingerprint,
            "image_id": self.image_id,
            "container_id": self.container_id,
            "saved_at": self.saved_at,
            "spec": spec_to_dict(self.spec),
            "patches": entries_to_list(self.patches),
        }

    @classmethod
    def from_dict(cls, data: object) -> LastGood:
        """Inverse of :meth:`to_dict`; StateError on a wrong shape."""
        if not isinstance(data, Mapping):
            raise StateError(f"last known good: expected an object, got {type(data).__name__}")
        fp = data.get("fingerprint")
        if not isinstance(fp, str) or not fp:
            raise StateError("last known good: 'fingerprint' must be a non-empty string")
        image_id, cid, saved = data.get("image_id"), data.get("container_id"), data.get("saved_at")
        if not (image_id is None or isinstance(image_id, str)) or not (cid is None or isinstance(cid, str)):
            raise StateError("last known good: 'image_id' and 'container_id' must be strings")
        if saved is not None and (isinstance(saved, bool) or not isinstance(saved, int | float)):
            raise StateError("last known good: 'saved_at' must be a number")
        spec = spec_from_dict(data.get("spec"), "last known good.spec")
        patches = entries_from_list(data.get("patches", []), "last known good.patches")
        return cls(spec, fp, image_id, cid, float(saved) if saved is not None else None, patches)

    def pinned_spec(self) -> ContainerSpec:
        """The spec to create a rollback from: the image by the id it ran (a moved tag is not followed)."""
        if self.image_id:
            return replace(self.spec, image=self.image_id)
        return self.spec


@dataclass(frozen=True)
class ChangeVerdict:
    """What one failed start means for the change: the streak, and whether to roll back / alert now."""

    changed_failures: int
    rollback: bool = False  # from now on the next start uses the last known good
    alert: bool = False  # the streak just reached rollback_after: tell a human (once per streak)


def after_failed_start(
    *,
    fingerprint: str | None,
    last_good: str | None,
    running_spec: str,
    changed_failures: int,
    rollback_after: int,
    on_failed_change: str,
) -> ChangeVerdict:
    """Judge one failed start.

    Not a failure of a change: the start ran the last known good itself, there is no last known good,
    or it ran the same config (fingerprint equal: the host, not the config, is the problem; the streak
    ends). An unknown fingerprint leaves the streak as it is.
    """
    if running_spec == SPEC_LAST_GOOD or last_good is None:
        return ChangeVerdict(changed_failures)
    if fingerprint is None:
        return ChangeVerdict(changed_failures)
    if fingerprint == last_good:
        return ChangeVerdict(0)
    n = changed_failures + 1
    reached = n == max(1, rollback_after)
    return ChangeVerdict(n, rollback=reached and on_failed_change == ROLLBACK, alert=reached)


def change_diff(
    new: ContainerSpec,
    last_good: ContainerSpec,
    secret_names: Collection[str] = (),
    *,
    new_image_id: str | None = None,
    last_good_image_id: str | None = None,
    new_patches: tuple[PatchEntry, ...] | None = None,
    last_good_patches: tuple[PatchEntry, ...] = (),
) -> tuple[DriftItem, ...]:
    """How the failing config (``new``) differs from the last known good: drift's comparison (``want``
    is the new config's value, ``have`` the last known good's; secret values masked). Images are also
    compared by id when both are known (a tag that now names another image is a change too), bind
    mounts by content when ``new_patches`` is known."""
    items = spec_drift(new, last_good, secret_names=frozenset(secret_names))
    if new_patches is not None:
        items += patch_drift(new_patches, last_good_patches)
    moved = new_image_id and last_good_image_id and new_image_id != last_good_image_id
    if moved and not any(i.field == "image" for i in items):
        items += (DriftItem("image", "image id", repr(new_image_id), repr(last_good_image_id)),)
    return items


def diff_summary(items: tuple[DriftItem, ...]) -> str:
    """``image, env VLLM_X, command``: the fields, env and label names spelled out."""
    named = [f"{i.field} {i.key}" for i in items if i.field in ("env", "labels")]
    plain = [f for f in drift_fields(items) if f not in ("env", "labels")]
    return ", ".join([*plain, *named]) or "nothing (the same spec)"


def diff_details(items: tuple[DriftItem, ...]) -> tuple[tuple[str, str], ...]:
    """(``field key``, ``new X, last known good Y``) per difference, at most MAX_DIFF_LINES."""
    out = []
    for i in items[:MAX_DIFF_LINES]:
        where = f"{i.field} {i.key}" if i.key and i.key != i.field else i.field
        out.append((where, f"new {i.want}, last known good {i.have}"))
    if len(items) > MAX_DIFF_LINES:
        out.append(("more", f"{len(items) - MAX_DIFF_LINES} more differences"))
    return tuple(out)


def failed_change_reason(action: str, items: tuple[DriftItem, ...]) -> str:
    """The reason of the alert about a failing change (its title is the catalogue's
    ``config.change_failed`` with the failures and the action)."""
    differs = f"last known good differs in: {diff_summary(items)}"
    if action == ROLLBACK:
        return differs
    return f"{differs}; the new config is kept (on_failed_change: hold)"
