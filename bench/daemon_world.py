"""One benchmark run's daemon, simulator profiles and containers; everything is removed on close.

Containers are named ``vsup-bench-<stem>-<hex>`` and labelled ``vllm-supervisor.test=bench-<uuid>``;
:meth:`BenchWorld.close` kills the daemons and force-removes every container carrying the run's label
(and every name it handed out), so nothing remains even after an error or Ctrl-C.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import tempfile
import types
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
from docker.errors import DockerException, NotFound
from requests import RequestException

from tests.daemon_harness import DaemonProc, ProfileSpec, write_daemon_config, write_profile
from tests.harness import TEST_LABEL

NAME_PREFIX = "vsup-bench-"


class BenchWorld:
    """Profiles written to a private temp dir, daemons started on them, containers swept at the end."""

    def __init__(self) -> None:
        self.run_id = f"bench-{uuid.uuid4().hex[:12]}"
        self.tmp = Path(tempfile.mkdtemp(prefix="vsup-bench-"))
        self.client: Any = docker.from_env()
        self.specs: dict[str, ProfileSpec] = {}
        self.daemons: list[DaemonProc] = []
        self._names: list[str] = []

    def profile(self, name: str, **kw: Any) -> ProfileSpec:
        container = f"{NAME_PREFIX}{name}-{uuid.uuid4().hex[:8]}"
        self._names.append(container)
        spec = ProfileSpec(name=name, container=container, **kw)
        self.specs[name] = spec
        return spec

    def daemon(self, subdir: str, specs: list[ProfileSpec], **cfg: Any) -> DaemonProc:
        """Write the profiles and a daemon config under ``tmp/subdir`` and start the daemon."""
        work = self.tmp / subdir
        work.mkdir()
        paths = [write_profile(work, s, self.run_id) for s in specs]
        config = write_daemon_config(work, paths, **cfg)
        d = DaemonProc(config, work)
        self.daemons.append(d)
        d.start()
        return d

    def container(self, name: str) -> Any:
        c = self.client.containers.get(self.specs[name].container)
        c.reload()
        return c

    def close(self) -> None:
        for d in self.daemons:
            with contextlib.suppress(Exception):
                d.close()
        self.sweep()
        shutil.rmtree(self.tmp, ignore_errors=True)
        with contextlib.suppress(Exception):
            self.client.close()

    def sweep(self) -> None:
        """Force-remove every container of this run (by label, then by the names handed out)."""
        found: list[Any] = []
        # RequestException too: the engine may be restarting (its socket gone) on a shared machine
        with contextlib.suppress(DockerException, RequestException):
            found = self.client.containers.list(all=True, filters={"label": f"{TEST_LABEL}={self.run_id}"})
        for c in found:
            with contextlib.suppress(NotFound, DockerException, RequestException):
                c.remove(force=True)
        for name in self._names:
            with contextlib.suppress(NotFound, DockerException, RequestException):
                self.client.containers.get(name).remove(force=True)


def _raise_interrupt(signum: int, frame: types.FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


@contextlib.contextmanager
def bench_world() -> Iterator[BenchWorld]:
    """A world that is cleaned up on return, error, Ctrl-C or SIGTERM."""
    old = signal.signal(signal.SIGTERM, _raise_interrupt)
    world = BenchWorld()
    try:
        yield world
    finally:
        world.close()
        signal.signal(signal.SIGTERM, old)
