"""What a reloaded config does to the running fleet (pure): the profiles added, removed and changed."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class ReloadPlan:
    """What a reloaded config does to the running fleet: start the added, mark the changed (a drift
    check, never a bounce), leave the removed running unsupervised and report them."""

    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()

    def summary(self) -> str:
        """``added a; changed b; removed c (left running)`` or ``no profile changed``."""
        parts = [f"added {', '.join(self.added)}"] if self.added else []
        parts += [f"changed {', '.join(self.changed)}"] if self.changed else []
        parts += [f"removed {', '.join(self.removed)} (left running)"] if self.removed else []
        return "; ".join(parts) or "no profile changed"


def reload_plan(old: Mapping[str, object], new: Mapping[str, object]) -> ReloadPlan:
    """Compare the profiles by name (values compared with ``==``; order kept as in each config)."""
    return ReloadPlan(
        added=tuple(n for n in new if n not in old),
        removed=tuple(n for n in old if n not in new),
        changed=tuple(n for n in new if n in old and new[n] != old[n]),
    )
