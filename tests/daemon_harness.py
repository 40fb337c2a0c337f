"""Run the real daemon as a subprocess against simulator (or real vLLM) containers, and talk to it.

Each test gets its own state dir, control socket, load lock and uniquely named containers, so several
daemons can run side by side. Nothing is mocked: Docker, the control socket and HTTP are real.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from supervisor.adapters.control.client import ControlClient
from supervisor.core.errors import ControlError
from supervisor.sim.launch import sim_image
from tests.harness import TEST_LABEL, GiveUp, free_port, wait_for

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class ProfileSpec:
    """What a test wants of one supervised server (written to a profile YAML)."""

    name: str
    container: str
    port: int = field(default_factory=free_port)
    env: dict[str, str] = field(default_factory=dict)
    args: list[str] = field(default_factory=list)
    image: str = field(default_factory=sim_image)
    api_key: bool = True
    interval_s: float = 1.0
    failure_threshold: int = 3
    stall_after_s: float = 3.0
    probe_timeout_s: float = 3.0
    deadline_s: float = 60.0
    silence_timeout_s: float = 30.0
    adopt_grace_s: float = 30.0
    drain_timeout_s: float = 15.0
    stop_timeout: int = 5
    extra_container: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    probes_extra: dict[str, Any] = field(default_factory=dict)  # more keys of the profile's probes section
    served: str = "sim-model"


def real_vllm_spec(
    name: str, container: str, base_image: str, venv: Path, model: Path, fork: bool = True, **kw: Any
) -> ProfileSpec:
    """A profile for the REAL vLLM (CPU build from tools/realvllm.py): probe rounds every 15 s (the shipped
    default is 5 s: a test that times a detection passes ``interval_s=5.0``), 4 failures, timeout 30 s,
    stall 120 s, a 1 GiB /dev/shm and the venv and model bind-mounted read-only.
    ``kw`` overrides any field (``args`` defaults to ``server_argv(venv)``). ``fork``: the fork overlay
    (tools/overlays/fork: its engine core starts by ``fork``, a load 23 s of CPU instead of 28-29 s) first
    on the server's ``PYTHONPATH``, ahead of any overlay ``kw`` lays there, and the shared model-info cache
    (tools/realvllm.MODELINFO_MOUNT: 15.6 s of CPU instead of 23 s)."""
    from tools.realvllm import MODEL_MOUNT, SERVED_MODEL_NAME, cheap_load_mounts, engine_env, server_argv

    fields: dict[str, Any] = {
        "args": server_argv(venv),
        "env": {"VLLM_CPU_KVCACHE_SPACE": "1"},
        "served": SERVED_MODEL_NAME,
        "interval_s": 15.0,
        "failure_threshold": 4,
        "stall_after_s": 120.0,
        "probe_timeout_s": 30.0,
        "deadline_s": 400.0,
        "silence_timeout_s": 240.0,
        "stop_timeout": 10,
        "extra_container": {"shm_size": "1g", "mounts": [f"{venv}:{venv}:ro", f"{model}:{MODEL_MOUNT}:ro"]},
        **kw,
    }
    if fork:
        extra = dict(fields["extra_container"])
        extra["mounts"] = [*extra.get("mounts", []), *cheap_load_mounts()]
        fields["extra_container"] = extra
    fields["env"] = engine_env(dict(fields["env"]), fork=fork)  # and the run's CPUs for it (tools/realvllm)
    return ProfileSpec(name=name, container=container, image=base_image, **fields)


def big_monolithic_spec(
    name: str, container: str, base_image: str, venv: Path, big: Path, fork: bool = True
) -> ProfileSpec:
    """The bigger random model of tools/big_model.py with ``--no-enable-chunked-prefill`` (a long prompt
    is one step, counted nowhere until it ends), with the shipped probe defaults (5 s rounds) and a
    load allowance for a shared box."""
    from tools.realvllm import server_argv

    return real_vllm_spec(
        name,
        container,
        base_image,
        venv,
        big,
        args=[*server_argv(venv, max_model_len=16384), "--no-enable-chunked-prefill"],
        env={"VLLM_CPU_KVCACHE_SPACE": "2"},
        interval_s=5.0,  # the shipped probe defaults
        deadline_s=500.0,
        silence_timeout_s=300.0,
        fork=fork,
    )


def spin_overlay_spec(
    name: str, container: str, base_image: str, venv: Path, model: Path, trigger_dir: Path, **kw: Any
) -> ProfileSpec:
    """The tiny real vLLM (chunked prefill on: vLLM V1's default) with the test overlay tools/overlays/spin
    on its ``PYTHONPATH`` (mounted read-only, as the field lays patches over the image) and ``trigger_dir``
    mounted read-write: ``<trigger_dir>/spin`` holding "2" makes the engine core's step spin once two
    requests run (issue 35). The shipped probe defaults (5 s rounds)."""
    from tools.realvllm import MODEL_MOUNT

    overlay = ROOT / "tools" / "overlays" / "spin"
    mounts = [f"{venv}:{venv}:ro", f"{model}:{MODEL_MOUNT}:ro", f"{overlay}:/vsup-overlay:ro"]
    mounts.append(f"{trigger_dir}:/vsup-trigger:rw")
    fields: dict[str, Any] = {
        "env": {"VLLM_CPU_KVCACHE_SPACE": "1", "PYTHONPATH": "/vsup-overlay"},
        "interval_s": 5.0,
        "extra_container": {"shm_size": "1g", "mounts": mounts},
        **kw,
    }
    return real_vllm_spec(name, container, base_image, venv, model, **fields)


def sim_args(served: str = "sim-model", *more: str) -> list[str]:
    """The simulator's command line for a profile (model, served name, port 8000), then ``more``."""
    return ["--model", "/models/sim", "--served-model-name", served, "--port", "8000", *more]


def write_profile(directory: Path, spec: ProfileSpec, test_id: str) -> Path:
    """Write ``<name>.yaml`` for ``spec`` in ``directory``."""
    command = spec.args or sim_args(spec.served)
    env = {"VSIM_LOAD_SECONDS": "1", **spec.env}
    container: dict[str, Any] = {
        "name": spec.container,
        "image": spec.image,
        "command": command,
        "env": env,
        "ports": [f"127.0.0.1:{spec.port}:8000/tcp"],
        "labels": {TEST_LABEL: test_id},
        "stop_timeout": spec.stop_timeout,
        **spec.extra_container,
    }
    doc: dict[str, Any] = {
        "name": spec.name,
        "container": container,
        "base_url": f"http://127.0.0.1:{spec.port}",
        "served_model_name": spec.served,
        "probes": {
            "interval_s": spec.interval_s,
            "timeout_s": spec.probe_timeout_s,
            "failure_threshold": spec.failure_threshold,
            "stall_after_s": spec.stall_after_s,
            "warmup_s": 0,
            **spec.probes_extra,
        },
        "startup": {
            "deadline_s": spec.deadline_s,
            "silence_timeout_s": spec.silence_timeout_s,
            "adopt_grace_s": spec.adopt_grace_s,
        },
        "stop": {"drain_timeout_s": spec.drain_timeout_s, "grace_s": spec.stop_timeout},
        **spec.extra,
    }
    if spec.api_key:
        doc["api_key"] = {"file": f"{spec.name}.key", "generate": True, "inject_env": "VLLM_API_KEY"}
    path = directory / f"{spec.name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


def start_daemon(directory: Path, spec: ProfileSpec, test_id: str, **cfg: Any) -> DaemonProc:
    """Write one profile and a daemon config (``cfg``: :func:`write_daemon_config`'s) in ``directory`` and
    start the daemon."""
    config = write_daemon_config(directory, [write_profile(directory, spec, test_id)], **cfg)
    d = DaemonProc(config, directory)
    d.start()
    return d


def write_daemon_config(
    directory: Path,
    profiles: list[Path],
    *,
    breaker_limit: int = 3,
    backoff_initial_s: float = 1.0,
    backoff_max_s: float = 4.0,
    extra: dict[str, Any] | None = None,
) -> Path:
    """Write a daemon config whose every path lives in ``directory``."""
    doc: dict[str, Any] = {
        "state_dir": str(directory / "state"),
        "socket_path": str(directory / "control.sock"),
        "restore_dir": str(directory / "restore"),
        "log_level": "debug",
        "profiles": [str(p) for p in profiles],
        "host": {
            "drop_caches": False,
            "load_lock_path": str(directory / "load.lock"),
            "memory_guard": {"enabled": False},
            # labelled kernel lines other tests write to the shared /dev/kmsg must not kill this test's
            # profiles: tests of the kill path set "kill" (tests/test_daemon_wedge.py)
            "kernel_memory_error": "warn",
        },
        "breaker": {"limit": breaker_limit, "window_s": 3600},
        "backoff": {
            "initial_s": backoff_initial_s,
            "factor": 2.0,
            "max_s": backoff_max_s,
            "reset_after_s": 60,
        },
        "maintenance": {"enabled": False},
        **(extra or {}),
    }
    path = directory / "daemon.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


class DaemonProc:
    """One ``vllm-supervisor`` process and a client of its control socket."""

    def __init__(self, config: Path, workdir: Path) -> None:
        self.config = config
        self.workdir = workdir
        self.socket = workdir / "control.sock"
        self.log_path = workdir / "daemon.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self._starts = 0

    def start(self, wait: bool = True, extra_env: dict[str, str] | None = None) -> None:
        self._starts += 1
        log = self.log_path.open("ab")
        env = {
            k: v for k, v in os.environ.items() if k not in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")
        }
        env.update(extra_env or {})
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "supervisor", "--config", str(self.config)],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env=env,
        )
        log.close()
        if wait:
            wait_for(self._answers, 60, message=f"daemon socket {self.socket}")

    def _answers(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise GiveUp(f"daemon exited with {self.proc.returncode}:\n{self.log_tail()}")
        try:
            self.call("status")
        except ControlError:
            return False
        return True

    def call(self, cmd: str, **args: Any) -> dict[str, Any]:
        return ControlClient(self.socket, timeout=15).call(cmd, **args)

    def status(self, name: str) -> dict[str, Any]:
        reply = self.call("status", name=name)
        assert reply.get("ok"), reply
        profiles = reply["data"]["profiles"]
        assert len(profiles) == 1, profiles
        return dict(profiles[0])

    def wait_state(self, name: str, state: str, timeout: float, **match: Any) -> dict[str, Any]:
        """Wait until `name` is in `state` with every `match` field equal; its status."""
        return self._wait_status(
            name,
            # a state counts once Docker confirmed it (not the recorded one a restarted daemon shows first)
            lambda st: (
                st["state"] == state
                and st.get("observed", True)
                and all(st.get(k) == want for k, want in match.items())
            ),
            timeout,
            f"{name} in {state} {match or ''}",
        )

    def wait_recovered(self, name: str, previous_id: str, timeout: float) -> dict[str, Any]:
        """Wait until `name` is RUNNING again in a container other than `previous_id`; its status."""
        return self._wait_status(
            name,
            lambda st: st["state"] == "RUNNING" and st["container_id"] != previous_id,
            timeout,
            f"{name} RUNNING again in a container other than {previous_id[:12]}",
        )

    def _wait_status(
        self, name: str, ok: Callable[[dict[str, Any]], bool], timeout: float, message: str
    ) -> dict[str, Any]:
        def check() -> dict[str, Any] | None:
            if self.proc is not None and self.proc.poll() is not None:
                raise GiveUp(f"daemon exited with {self.proc.returncode}:\n{self.log_tail()}")
            st = self.status(name)
            return st if ok(st) else None

        try:
            return wait_for(check, timeout, interval=0.2, message=message)
        except AssertionError as exc:
            raise AssertionError(
                f"{exc}\nlast status: {self._safe_status(name)}\n{self.log_tail()}"
            ) from None

    def _safe_status(self, name: str) -> Any:
        try:
            return self.status(name)
        except (ControlError, AssertionError) as exc:
            return repr(exc)

    def events(self, name: str | None = None, n: int = 500) -> list[dict[str, Any]]:
        reply = self.call("events", name=name, n=n) if name else self.call("events", n=n)
        assert reply.get("ok"), reply
        return list(reply["data"]["events"])

    def event_names(self, name: str | None = None) -> list[str]:
        return [str(e["name"]) for e in self.events(name)]

    def terminate(self, timeout: float = 20) -> int:
        """SIGTERM and wait; returns the exit code."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(10)

    def log_tail(self, n: int = 60) -> str:
        try:
            lines = self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return "(no daemon log)"
        return "\n".join(lines[-n:])

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(10)


@contextlib.contextmanager
def running_daemon(config: Path, workdir: Path) -> Iterator[DaemonProc]:
    """A started daemon that is killed at the end whatever happens."""
    d = DaemonProc(config, workdir)
    try:
        d.start()
        yield d
    finally:
        d.close()
