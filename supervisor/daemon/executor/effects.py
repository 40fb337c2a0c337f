"""Execute the machine's actions: the only place where decisions turn into I/O.

Bookkeeping that is a file append or a queue put (history events, alerts, ledger rows of ready starts,
the load slot's non-blocking flock) runs inline on the loop. Everything that talks to Docker, HTTP or
the kernel log runs on a small bounded pool (:mod:`supervisor.daemon.executor.jobs`) and answers by posting
events; one job of each kind per profile at a time. The live handles (watchers, jobs in flight, the
slot lock) are private to this executor; nothing here changes a profile's state.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, TimeoutError as FutureTimeout
from dataclasses import dataclass, field

import structlog

from supervisor.adapters.docker.adapter import DockerAdapter
from supervisor.adapters.host import system as host
from supervisor.adapters.host.cputime import ThreadDemand
from supervisor.adapters.secrets import declared_names
from supervisor.adapters.store.log_archive import LogArchive
from supervisor.adapters.store.state import Store
from supervisor.config import DaemonConfig, Profile
from supervisor.core import actions as A
from supervisor.core.clock import Clock
from supervisor.core.errors import SupervisorError
from supervisor.core.events import Event, SlotAcquired, StartDiagnosed
from supervisor.core.vocab import UNWANTED, is_failed
from supervisor.daemon.executor import archive, host_jobs, jobs, kill, last_good, probe_jobs, slot
from supervisor.daemon.executor.answers import CRASH_ANSWERS, InFlight, family
from supervisor.daemon.executor.containers import ContainerWatch
from supervisor.daemon.executor.guard import LoopGuard
from supervisor.daemon.executor.livekey import LiveKey
from supervisor.daemon.executor.records import KernelLines, Records, diagnose_start
from supervisor.daemon.inbox import ReplyFn

log = structlog.get_logger("supervisor.effects")

Post = Callable[[str, Event], None]
#: Told each liveness probe's latency: (profile, kind, seconds) (``MetricsServer.observe_probe``).
ProbeObserver = Callable[[str, str, float], None]
#: An alert waiting for a failed start's diagnosis is sent without it after this long.
DIAGNOSIS_WAIT_S = 30.0
POOL_WORKERS = 8
#: The actions whose jobs read or write a container spec (the profile's or the last known good).
SpecAction = A.CreateAndStart | A.SaveLastGood | A.ReportFailedChange


@dataclass
class _Live:
    """The live handles of one profile (executor-private)."""

    profile: Profile
    key: LiveKey  # the running container's API key (what the probes send)
    in_flight: InFlight  # the pool jobs running for it (answers.py: each with its deadline)
    watch: ContainerWatch | None = None
    diagnosis: Future[list[Event]] | None = None
    created: last_good.Created | None = None  # the spec of our newest container (last known good)
    demand: ThreadDemand = field(default_factory=ThreadDemand)  # its threads' runnable shares


class Effects:
    """Runs actions for the daemon loop."""

    def __init__(
        self,
        config: DaemonConfig,
        docker: DockerAdapter,
        records: Records,
        clock: Clock,
        post: Post,
        archive: LogArchive | None = None,
        on_probe: ProbeObserver | None = None,
        store: Store | None = None,
        kernel_lines: KernelLines | None = None,
    ) -> None:
        self._config = config
        self._kernel_lines = kernel_lines  # the kernel-log follower's recent lines (failed-start diagnosis)
        self._store = store or Store(config.state_dir, clock)
        self._archive = archive
        self._on_probe = on_probe
        self._docker = docker
        self._clock = clock
        self._post = post
        self.records = records
        #: The loop's own guard: an exception escaping a loop part or an action is logged, recorded and
        #: alerted once, and supervision goes on (executor/guard.py).
        self.guard = LoopGuard(records)
        self._pool = ThreadPoolExecutor(max_workers=POOL_WORKERS, thread_name_prefix="effect")
        #: The host's load slot (executor/slot.py): which profile holds it is ProfileState.slot_held.
        self._slot = host.LoadLock(config.host.load_lock_path)
        self._lock = threading.Lock()
        self._live = {p.name: self._new_live(p) for p in config.profiles}
        self._daemon_jobs = InFlight(clock.monotonic)  # daemon-wide jobs in flight (``background``)

    def _new_live(self, profile: Profile) -> _Live:
        key = LiveKey(self._docker, profile.api_key, profile.container)
        return _Live(profile, key, in_flight=InFlight(self._clock.monotonic))

    def shutdown(self) -> None:
        """Stop the watchers and the pool (running jobs are abandoned: the daemon is exiting)."""
        for live in self._live.values():
            if live.watch is not None:
                live.watch.stop()
            slot.give_back(self._slot, live.profile.name)
        self._pool.shutdown(wait=False, cancel_futures=True)

    def set_profile(self, profile: Profile) -> None:
        """Use ``profile`` from now on (a reload added or changed it); a running watch is kept."""
        self.records.secrets.learn_profile(profile)
        live = self._live.get(profile.name)
        if live is None:
            self._live[profile.name] = self._new_live(profile)
        else:
            live.profile = profile
            live.key.configure(profile.api_key, profile.container)

    def live(self, name: str) -> tuple[Profile, Callable[[], str | None]] | None:
        """``name``'s config and its one live API key (what the probes send), None if not supervised."""
        live = self._live.get(name)
        return (live.profile, live.key.value) if live is not None else None

    def forget(self, name: str) -> None:
        """A reload removed the profile: stop watching its container (which is left running)."""
        live = self._live.pop(name, None)
        if live is not None and live.watch is not None:
            live.watch.stop()
        slot.give_back(self._slot, name)

    # ---- dispatch ---------------------------------------------------------------------------------

    def perform(self, name: str, action: A.Action, reply: ReplyFn | None) -> None:
        """:meth:`run`; an adapter that refuses is reported (``effect.failed``), supervision goes on."""
        try:
            self.run(name, action, reply)
        except SupervisorError as exc:
            log.error("effect.failed", profile=name, action=type(action).__name__, error=str(exc))
            self.records.emit(name, "effect.failed", {"action": type(action).__name__, "error": str(exc)})
        except Exception as exc:  # noqa: BLE001 - a bug in one action never stops supervision
            self.guard.crashed(f"effect.{type(action).__name__}", exc)

    def run(self, name: str, action: A.Action, reply: ReplyFn | None) -> None:
        """Execute one action of profile ``name`` (inline if it is bookkeeping, else on the pool)."""
        live = self._live[name]
        p = live.profile
        match action:
            case A.Emit(name=event_name, fields=fields):
                self.records.emit(name, event_name, fields)
            case A.Alert():
                self._alert(live, action)
            case A.RecordStart():
                self._record_start(live, action)
            case A.Reply(ok=ok, message=message):
                if reply is not None:
                    reply(ok, message)
            case A.AcquireSlot():
                if slot.take(self._slot, name):
                    self._post(name, SlotAcquired())
            case A.ReleaseSlot():
                slot.give_back(self._slot, name)
            case A.WatchContainer(container_id=cid, created_at=created):
                self._watch(live, cid, created)
            case A.CheckExternalStop():
                self._submit(live, "external-stop", jobs.check_external_stop, self._docker)
            case A.ObserveContainer():
                self._submit(live, "observe", jobs.observe, self._docker, p)
            case A.WaitDocker(limit_s=limit):
                self._submit(live, "wait-docker", jobs.wait_docker, self._docker, limit)
            case A.RunPreflight():
                self._submit(live, "preflight", jobs.preflight, p)
            case A.Settle():
                self._submit(live, "settle", host_jobs.settle_for(p), self._config.host, self._clock)
            case A.CheckReserve():
                self._submit(live, "reserve", host_jobs.reserve)
            case A.CheckHostAfterStop(container_id=cid, mem_before_gib=before, mem_back_gib=back):
                self._submit(
                    live,
                    f"after-stop-{cid}",
                    host_jobs.after_stop,
                    self._docker,
                    cid,
                    before,
                    back,
                    self._config.host,
                    self._clock,
                )
            case A.CreateAndStart() | A.SaveLastGood() | A.ReportFailedChange():
                self._spec_job(live, action)
            case A.StopContainer(grace_s=grace, reason=reason, container_id=cid):
                # a stray container's stop must not wait behind, nor stand for, our own; nor a kill (an
                # escalated or overdue stop) behind a SIGTERM stop still waiting out its grace
                kind = f"stop-unwanted-{cid}" if reason == UNWANTED else "kill" if grace <= 0 else "stop"
                ref = cid or p.container.name
                self._submit(live, kind, jobs.stop, self._docker, ref, grace, reason, cid)
            case A.KillContainer(reason=reason, container_id=cid):  # a thread of its own, never queued
                post = self._post
                kill.start(
                    self._lock, live.in_flight, lambda ev: post(name, ev), self._docker, p, reason, cid
                )
            case A.ProbeHealth():
                self._submit(live, "health", probe_jobs.health, p)
            case A.SampleLoad(container_id=cid):
                self._submit(live, "load-sample", probe_jobs.load_activity, cid, live.demand)
            case A.RunProbeRound(generation=gen, measure=measure, container_id=cid):
                timed = self._probe_timer(name) if measure else None  # warm-up: not performance
                self._submit(live, "round", probe_jobs.probe_round, p, timed, cid, live.demand)
                if gen:
                    self._submit(live, "generation", probe_jobs.liveness_generation, p, live.key.value, timed)
            case A.RunFirstGeneration():
                self._submit(live, "first", probe_jobs.first_generation, p, live.key.value)
            case A.CheckKeyFile():
                self._submit(live, "key-file", live.key.check_file)
            case A.RunSmokeGates():
                self._submit(live, "smoke", probe_jobs.smoke_gates, p, live.key.value)
            case A.CheckAuth():
                self._submit(live, "auth", probe_jobs.auth, p)
            case A.PollDrain():
                self._submit(live, "drain", probe_jobs.drain, p)
            case A.ReadEngineStack(container_id=cid, budget_s=budget, samples=n, purpose=why):
                self._submit(live, "stack", probe_jobs.engine_stack, cid, budget, n, why)
            case A.CheckDrift(container_id=cid):
                self._submit(live, "drift", jobs.check_drift, self._docker, p, cid, self.records.secrets)
            case A.ReadKvBaseline(fingerprint=fp, exclude=exclude):
                self._submit(live, "kv-baseline", self.records.kv_baseline, name, fp, exclude)

    def _spec_job(self, live: _Live, action: SpecAction) -> None:
        """The create (the profile's or the last known good spec), saving a last known good, the alert of a
        failing change."""
        p, store = live.profile, self._store
        match action:
            case A.CreateAndStart(last_good=use_last_good, kv_cache_memory_bytes=pin):

                def remember(created: last_good.Created) -> None:
                    live.created = created
                    self.records.secrets.learn_spec(created.spec, declared_names(p.api_key))

                args = (self._docker, store, p, use_last_good, self._clock, remember, pin)
                self._submit(live, "create", last_good.create, *args)
            case A.SaveLastGood(container_id=cid):
                created = live.created
                created = created if created is not None and created.container_id == cid else None
                now = self._clock.now()
                self._submit(live, "last-good", last_good.save, store, self.records, p.name, created, now)
            case A.ReportFailedChange():
                kind = f"change-alert-{id(action)}"
                self._submit(live, kind, last_good.report, store, self.records, p, action)

    def _probe_timer(self, name: str) -> probe_jobs.ProbeTimer | None:
        observe = self._on_probe
        if observe is None:
            return None
        return lambda kind, seconds: observe(name, kind, seconds)

    def submit(self, name: str, kind: str, fn: Callable[..., list[Event]], *args: object) -> None:
        """Run ``fn(*args)`` on the pool for profile ``name`` (one job of ``kind`` at a time); the events
        it returns are posted to the profile."""
        self._submit(self._live[name], kind, fn, *args)

    def background(self, kind: str, fn: Callable[..., object], *args: object) -> None:
        """Run a daemon-wide job ``fn(*args)`` (no profile, no answer; e.g. the daily digest) on the pool,
        one job of ``kind`` at a time."""
        self._once(self._daemon_jobs, kind, "", lambda: fn(*args))

    def _submit(self, live: _Live, kind: str, fn: Callable[..., list[Event]], *args: object) -> None:
        name = live.profile.name

        def body() -> None:
            for event in fn(*args):
                self._post(name, event)

        answer = CRASH_ANSWERS.get(family(kind))
        on_crash = None if answer is None else (lambda error: self._post(name, answer(error)))
        self._once(live.in_flight, kind, name, body, on_crash)

    def _once(
        self,
        running: InFlight,
        kind: str,
        profile: str,
        body: Callable[[], object],
        on_crash: Callable[[str], None] | None = None,
    ) -> None:
        """Run ``body`` on the pool unless a job of ``kind`` is in ``running`` already (its answer will
        come); a crash is logged, never raised, and answered by ``on_crash`` (the machine is never left
        waiting for an answer that cannot come), as is a job past its deadline (answers.py), found here;
        a shut-down pool (the daemon exiting) runs nothing."""
        with self._lock:
            late = running.overdue()
            gen = None if kind in running else running.claim(kind)
        for late_kind, age in late:  # hung (a FIFO, a dead NFS mount): released, answered as crashed
            log.error("effect.overdue", profile=profile, kind=late_kind, age_s=round(age))
            self.records.emit(profile, "effect.overdue", {"kind": late_kind, "age_s": round(age)})
            answer = CRASH_ANSWERS.get(family(late_kind)) if profile else None
            if answer is not None:
                self._post(profile, answer(f"{late_kind} did not finish in {age:.0f} s"))
        if gen is None:
            return

        def job() -> None:
            try:
                body()
            except Exception as exc:
                log.exception("effect.crashed", profile=profile, kind=kind, error=str(exc))
                if on_crash is not None:
                    on_crash(f"internal error in {kind}: {type(exc).__name__}: {exc}")
            finally:
                with self._lock:
                    running.release(kind, gen)

        try:
            self._pool.submit(job)
        except RuntimeError:  # pool shut down: the daemon is exiting
            with self._lock:
                running.release(kind, gen)

    # ---- watchers -----------------------------------------------------------------------------------

    def _watch(self, live: _Live, container_id: str, created_at: float | None = None) -> None:
        """Start the watchers of ``container_id`` (replacing those of an older container)."""
        if live.watch is not None and live.watch.container_id == container_id:
            return
        if live.watch is not None:
            live.watch.stop()
        p = live.profile
        live.key.watching(container_id)
        watch = ContainerWatch(
            self._docker,
            container_id,
            lambda ev: self._post(p.name, ev),
            self._clock.now,
            created_at=created_at,
            expected_markers=p.markers.expected,
            forbidden_markers=p.markers.forbidden,
            on_inspect=live.key.learn,
            marker_counts=p.markers.expected_counts,
        )
        live.watch = watch
        watch.start()

    # ---- records ------------------------------------------------------------------------------------

    def _record_start(self, live: _Live, rec: A.RecordStart) -> None:
        name = live.profile.name
        if not is_failed(rec.outcome):
            for event in self.records.record_start(name, rec, None):
                self._post(name, event)
            return
        tail = live.watch.tail_lines() if live.watch is not None else []

        # the log is archived next to the diagnosis, not before it: the ledger row must not wait on it
        copy = archive.LogCopy(self._docker, self._archive, self.records, self._clock)
        self._submit(live, f"archive-log-{rec.container_id}", copy.save, name, rec, tail)

        watch = live.watch

        def job() -> list[Event]:
            lines = watch.settled_tail() if watch is not None else tail  # the lines after the failing one too
            memory = host_jobs.memory_facts(self._config.host, rec.mem_available_gib, rec.gmu)
            report = diagnose_start(
                name,
                lines,
                rec.since,
                self._clock.now(),
                self._kernel_lines,
                rec.outcome,
                rec.container_id,
                memory,
            )
            answers = self.records.record_start(name, rec, report)
            for event in answers:
                self._post(name, event)
            return answers

        try:
            live.diagnosis = self._pool.submit(job)
        except RuntimeError:
            live.diagnosis = None

    def _alert(self, live: _Live, alert: A.Alert) -> None:
        name, container = live.profile.name, live.profile.container.name
        pending = live.diagnosis
        if not alert.await_diagnosis or pending is None:
            self.records.alert(name, container, alert, alert.diagnosis)
            return

        def job() -> list[Event]:
            diagnosis = None
            try:
                answers = pending.result(timeout=DIAGNOSIS_WAIT_S)
                diagnosis = next((e.diagnosis for e in answers if isinstance(e, StartDiagnosed)), None)
            except (FutureTimeout, Exception) as exc:  # noqa: BLE001 - the alert goes out regardless
                log.warning("alert.diagnosis_unavailable", profile=name, error=str(exc))
            self.records.alert(name, container, alert, diagnosis)
            return []

        self._submit(live, f"alert-{id(alert)}", job)
