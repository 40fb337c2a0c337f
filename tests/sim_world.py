"""The `world` of a daemon end-to-end test: one test's daemon, its simulator profiles and containers."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import requests

from tests.daemon_harness import DaemonProc, ProfileSpec, write_daemon_config, write_profile

if TYPE_CHECKING:
    from tests.conftest import Resources


class World:
    """One test's daemon, its profiles and containers."""

    def __init__(self, tmp: Path, res: Resources) -> None:
        self.tmp = tmp
        self.res = res
        self.daemons: list[DaemonProc] = []
        self.specs: dict[str, ProfileSpec] = {}

    def profile(self, name: str = "p", **kw: Any) -> ProfileSpec:
        spec = ProfileSpec(name=name, container=self.res.name(name), **kw)
        self.specs[name] = spec
        return spec

    def daemon(self, **cfg: Any) -> DaemonProc:
        paths = [write_profile(self.tmp, s, self.res.test_id) for s in self.specs.values()]
        config = write_daemon_config(self.tmp, paths, **cfg)
        d = DaemonProc(config, self.tmp)
        self.daemons.append(d)
        d.start()
        return d

    def container(self, name: str = "p") -> Any:
        c = self.res.client.containers.get(self.specs[name].container)
        c.reload()
        return c

    def url(self, name: str = "p") -> str:
        return f"http://127.0.0.1:{self.specs[name].port}"

    def fault(self, kind: str, name: str = "p") -> None:
        requests.post(self.url(name) + "/_sim/fault", json={"kind": kind}, timeout=5)

    def key(self, name: str = "p") -> str:
        return (self.tmp / f"{name}.key").read_text(encoding="utf-8").strip()

    def close(self) -> None:
        for d in self.daemons:
            d.close()
