"""One set of defaults: the machine's Policy comes only from the config's frozen dataclasses."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from supervisor.config.model import DaemonConfig, Profile
from supervisor.config.policy import default_config, default_policy, policy_for
from supervisor.core.machine import Policy
from supervisor.core.settings.profile import ProbeConfig


def test_policy_has_no_defaults_of_its_own() -> None:
    """A Policy cannot be made without naming every value (config is the only home of defaults)."""
    assert all(f.default is dataclasses.MISSING for f in dataclasses.fields(Policy))
    with pytest.raises(TypeError):
        Policy()  # type: ignore[call-arg]


def test_the_parser_adds_no_defaults_of_its_own() -> None:
    """The parsed bare profile/daemon config gives the same Policy as the dataclasses' own defaults."""
    parsed_profile, parsed_config = default_config()
    spec = parsed_profile.container
    declared = policy_for(
        Profile(name=parsed_profile.name, source=parsed_profile.source, container=spec),
        DaemonConfig(
            path=parsed_config.path,
            state_dir=parsed_config.state_dir,
            socket_path=parsed_config.socket_path,
            restore_dir=parsed_config.restore_dir,
        ),
    )
    assert default_policy() == declared


def test_the_machine_warms_up_as_the_product_does() -> None:
    """The drift this removed: the machine's tests ran with warm-up 0 s, the product with 300 s."""
    assert default_policy().probes.warmup_s == ProbeConfig().warmup_s == 300.0
    assert default_policy().reboot_rearms_breaker is False


def test_default_config_is_a_real_parse() -> None:
    """The defaults come through the real parser (a base URL derived from the default port, not typed)."""
    prof, cfg = default_config()
    assert prof.base_url == "http://127.0.0.1:8000"
    assert cfg.profiles == ()
    assert cfg.path == Path("/daemon.yaml")
