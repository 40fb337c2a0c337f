"""The rate limit on kernel warnings about processes that are not the profile's own (pure).

Any local user can make the kernel log an OOM kill (each with a new pid) or an Xid of their own
process; without a limit each would be a new ``kernel.while_serving`` warning and a flood would push
real alerts out of the queues. A line that names this profile's container (``ours``) is not limited.
Every other one is keyed by its **kind** (not its pid or summary): at most one warning per kind per
:data:`QUIET_WINDOW_S`; the next one that passes says how many were held back since the last.
The history keeps every line either way (the daemon's ``kernel.<kind>`` events).
"""

from __future__ import annotations

from dataclasses import dataclass

#: At most one warning per kind of kernel line about other processes in this window.
QUIET_WINDOW_S = 600.0


@dataclass(frozen=True)
class KernelQuiet:
    """Per kind: when it was last alerted and how many lines of it were held back since."""

    kinds: tuple[str, ...] = ()
    at: tuple[float, ...] = ()
    held: tuple[int, ...] = ()

    def admit(
        self, kind: str, now: float, window_s: float = QUIET_WINDOW_S
    ) -> tuple[KernelQuiet, int | None]:
        """(the new state, None: hold this line back | the number held back since the last warning)."""
        rows = {k: (a, h) for k, a, h in zip(self.kinds, self.at, self.held, strict=False)}
        last = rows.get(kind)
        if last is not None and 0 <= now - last[0] < window_s:  # a clock gone back: not held
            rows[kind] = (last[0], last[1] + 1)
            return self._from(rows), None
        rows[kind] = (now, 0)
        return self._from(rows), (last[1] if last is not None else 0)

    @staticmethod
    def _from(rows: dict[str, tuple[float, int]]) -> KernelQuiet:
        kinds = tuple(sorted(rows))
        return KernelQuiet(kinds, tuple(rows[k][0] for k in kinds), tuple(rows[k][1] for k in kinds))


def held_note(held: int, window_s: float = QUIET_WINDOW_S) -> str:
    """The sentence a warning carries about the lines of its kind held back before it ("" for none)."""
    if held <= 0:
        return ""
    return (
        f" (+{held} more of this kind about other processes held back since the last warning;"
        f" at most 1 per {window_s / 60:g} min)"
    )
