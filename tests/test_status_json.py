"""docs/status-json.md documents exactly the keys of the real status document, and its example has them."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from supervisor.adapters.host.buddyinfo import read_contiguity
from supervisor.config import load_config
from supervisor.config.fleet import fleet_policy_for
from supervisor.core.alerts.channels import RETRIES_EXHAUSTED, Delivery
from supervisor.core.clock import FakeClock
from supervisor.core.fleet import maintenance
from supervisor.core.fleet.docker import DockerHealth
from supervisor.core.fleet.events import ChannelReported, ContiguitySampled, DiskSampled, MemorySampled
from supervisor.core.fleet.policy import FleetPolicy
from supervisor.core.fleet.state import FleetState
from supervisor.core.fleet.step import channel_status, step
from supervisor.core.profile_state import KvDraw, ProfileState
from supervisor.core.states import State
from supervisor.daemon.status import SCHEMA, status_document
from tests.harness import REPO

DOC = REPO / "docs" / "status-json.md"
NOW = 1_790_000_000.0
#: The shape the fleet step keeps in ``daemon.host`` after a memory sample on a kernel with PSI and a sample
#: of the state directory's free space.
_HOST = step(FleetState(), MemorySampled(90.0, 40.0, 0.0, 0.0, 0.0, 0.0, 0.0), NOW, {}, FleetPolicy())[0]
_HOST_DISK = step(_HOST, DiskSampled(212.5), NOW, {}, FleetPolicy())[0]
_BUDDY = read_contiguity(Path(__file__).parent / "fixtures" / "buddyinfo" / "x86-2core-healthy.txt", 4096)
assert _BUDDY is not None
HOST_SAMPLE = dict(step(_HOST_DISK, ContiguitySampled(_BUDDY), NOW, {}, FleetPolicy())[0].host)


def leaves(value: Any, prefix: str = "") -> set[str]:
    """Dotted paths of every non-object value (list items as ``key[]``)."""
    if isinstance(value, dict):
        out: set[str] = set()
        for k, v in value.items():
            out |= leaves(v, f"{prefix}.{k}" if prefix else str(k))
        return out
    if isinstance(value, list) and value and isinstance(value[0], dict):
        return set().union(*(leaves(v, f"{prefix}[]") for v in value))
    return {prefix}


def documented() -> set[str]:
    """The key paths of the tables in docs/status-json.md."""
    return set(re.findall(r"^\| `([a-z0-9_.\[\]]+)` \|", DOC.read_text(encoding="utf-8"), re.MULTILINE))


def real_document(tmp_path: Path) -> dict[str, Any]:
    """A status document as the daemon publishes it, for a RUNNING profile."""
    (tmp_path / "p.yaml").write_text("container:\n  image: img:1\n", encoding="utf-8")
    cfg = tmp_path / "daemon.yaml"
    cfg.write_text(f"state_dir: {tmp_path}/state\nprofiles: [p.yaml]\n", encoding="utf-8")
    state = replace(ProfileState.initial("p", NOW), state=State.RUNNING, kv=KvDraw(tokens=557_599))
    docker, _ = DockerHealth().observe(True, NOW)
    config = load_config(cfg)
    rule = fleet_policy_for(config).maintenance
    fake = FakeClock(NOW)
    policy = FleetPolicy(channels=(("ops", "slack"),))
    lost = ChannelReported(Delivery("ops", "slack", False, RETRIES_EXHAUSTED, "HTTP 502", "t", "x", "p"))
    fleet, _ = step(FleetState(), lost, fake.now(), {}, policy)
    return status_document(
        config,
        {"p": state},
        now=NOW,
        uptime_s=12.0,
        docker=docker,
        maintenance=maintenance.status(maintenance.tick(FleetState(), NOW, {}, rule)[0], rule),
        slot_holder=None,
        host=HOST_SAMPLE,
        kernel_log={"mode": "kmsg", "error": None, "events": 0, "lost": 0, "held_back": 0},
        alerts=channel_status(fleet, policy),
    )


def test_every_key_of_the_status_document_is_documented(tmp_path: Path) -> None:
    """The documented key paths are exactly the real document's (nothing missing, nothing stale)."""
    real = leaves(real_document(tmp_path))
    docs = documented()
    assert real - docs == set(), "keys missing from docs/status-json.md"
    assert docs - real == set(), "documented keys the daemon does not publish"


def test_the_example_has_the_real_shape(tmp_path: Path) -> None:
    """The JSON example of the page parses and has the same keys and schema as the real document."""
    text = DOC.read_text(encoding="utf-8")
    example = json.loads(text.split("```json\n", 1)[1].split("```", 1)[0])
    assert example["schema"] == SCHEMA == 1
    assert leaves(example) == leaves(real_document(tmp_path))


def test_readme_links_the_page() -> None:
    """The README points newcomers at the status document's schema."""
    assert "docs/status-json.md" in (REPO / "README.md").read_text(encoding="utf-8")
