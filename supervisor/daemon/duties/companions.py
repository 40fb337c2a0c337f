"""Companion checks in the daemon: the loop schedules them, the pool runs them, the loop applies them.

Each due companion (``profile.companions``) gets one HTTP GET as a pool job (at most one in flight per
companion); the answer comes back through the inbox as a :class:`~supervisor.daemon.inbox.CompanionChecked`
and only the loop applies it (:meth:`CompanionChecks.apply`): the pure
:class:`~supervisor.core.fleet.companions.CompanionHealth` decides flips, which become the history events
``companion.failing`` / ``companion.recovered`` and a warning / info alert. Never a restart. A companion
URL is shown with its userinfo and token parameters masked (:func:`~supervisor.core.spec.secrets.mask_url`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from supervisor.adapters.vllm import probes
from supervisor.config import CompanionConfig, Profile
from supervisor.core import actions as A
from supervisor.core.alerts.localize import title_en
from supervisor.core.fleet.companions import CompanionHealth
from supervisor.core.spec.secrets import mask_url
from supervisor.daemon.executor.records import Records
from supervisor.daemon.inbox import CompanionChecked

#: (profile, job kind, function, *args): the executor's pool submit (one job of a kind at a time).
Submit = Callable[..., None]
PostDaemon = Callable[[CompanionChecked], None]


def check(profile: str, companion: CompanionConfig, post: PostDaemon) -> list[Any]:
    """The pool job: one GET, its answer posted to the loop."""
    r = probes.check_url(companion.url, companion.timeout_s, companion.expect_status, redirects=False)
    post(CompanionChecked(profile, companion.name, r.ok, r.status, r.error))
    return []


class CompanionChecks:
    """The companions of every profile: schedule (``tick``), apply answers, report (``status``)."""

    def __init__(
        self, profiles: Sequence[Profile], records: Records, submit: Submit, post: PostDaemon
    ) -> None:
        self._records = records
        self._submit = submit
        self._post = post
        self._config = {(p.name, c.name): (p, c) for p in profiles for c in p.companions}
        self._health = {key: CompanionHealth(key[1]) for key in self._config}

    def tick(self, now: float) -> None:
        """Start the checks that are due (on the loop: only submits)."""
        for key, (profile, companion) in self._config.items():
            h = self._health[key]
            if h.due(now):
                self._health[key] = h.scheduled(now, companion.interval_s)
                self._submit(
                    profile.name, f"companion-{companion.name}", check, profile.name, companion, self._post
                )

    def apply(self, ev: CompanionChecked, now: float) -> None:
        """One answer (on the loop): new health; on a flip an event and an alert."""
        key = (ev.profile, ev.name)
        entry = self._config.get(key)
        if entry is None:
            return
        profile, companion = entry
        self._health[key], flip = self._health[key].observe(ev.ok, ev.status, ev.error, now)
        if flip is None:
            return
        what = f"HTTP {ev.status}" if ev.status is not None else (ev.error or "no answer")
        url = mask_url(companion.url)
        fields: dict[str, object] = {
            "companion": ev.name,
            "url": url,
            "status": ev.status,
            "error": ev.error,
        }
        params = (("name", ev.name),)
        if flip == "bad":
            self._records.emit(ev.profile, "companion.failing", fields)
            alert = A.Alert(
                "warning",
                title_en("companion.failing", params),
                "ok",
                "failing",
                f"{url}: {what}, expected HTTP {companion.expect_status} (not restarted: not ours)",
                kind="companion.failing",
                params=params,
            )
        else:
            self._records.emit(ev.profile, "companion.recovered", fields)
            reason = f"{url}: {what}"
            title = title_en("companion.back", params)
            alert = A.Alert("info", title, "failing", "ok", reason, kind="companion.back", params=params)
        self._records.alert(ev.profile, profile.container.name, alert, None)

    def status(self) -> dict[str, list[dict[str, Any]]]:
        """``{profile: [companion status, ...]}`` for the status document."""
        out: dict[str, list[dict[str, Any]]] = {}
        for (name, _), h in self._health.items():
            out.setdefault(name, []).append(h.to_dict())
        return out
