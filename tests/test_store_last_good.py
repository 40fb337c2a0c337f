"""The store's last-known-good file: atomic, 0600 from creation, corrupt content moved aside."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from supervisor.adapters.store.state import Store
from supervisor.core.errors import StateError
from supervisor.core.spec.last_good import LastGood
from supervisor.core.spec.model import ContainerSpec, EnvVar


def test_last_good_round_trip_is_private(tmp_path: Path) -> None:
    """Saved with its secrets 0600 (even under a permissive umask), read back equal, replaced in place."""
    store = Store(tmp_path / "state")
    assert store.load_last_good("p") is None
    good = LastGood(ContainerSpec("c", "img:1", env=(EnvVar("VLLM_API_KEY", "k-1"),)), "fp1", "sha256:a")
    old = os.umask(0)
    try:
        store.save_last_good("p", good.to_dict())
    finally:
        os.umask(old)
    path = store.last_good_path("p")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    loaded = store.load_last_good("p")
    assert loaded is not None
    assert LastGood.from_dict(loaded) == good
    store.save_last_good("p", LastGood(good.spec, "fp2").to_dict())
    again = store.load_last_good("p")
    assert again is not None
    assert again["fingerprint"] == "fp2"
    assert [p.name for p in path.parent.iterdir() if ".tmp-" in p.name] == []


def test_corrupt_last_good_is_moved_aside(tmp_path: Path) -> None:
    """A file that is not JSON raises StateError naming it and is kept aside; the next read finds none."""
    store = Store(tmp_path / "state")
    store.last_good_path("p").write_text("{not json", encoding="utf-8")
    with pytest.raises(StateError, match=r"last_good\.json"):
        store.load_last_good("p")
    assert store.load_last_good("p") is None
