"""Drift (pure): the profile's spec against the container's, the reload plan, and the machine's marks."""

from __future__ import annotations

import dataclasses

from supervisor.core.actions import CheckDrift, StopContainer
from supervisor.core.events import ConfigReloaded, ContainerObserved, DaemonStarted, DriftChecked
from supervisor.core.fleet.reload import reload_plan
from supervisor.core.spec.drift import drift_fields, spec_drift
from supervisor.core.spec.model import ContainerSpec, EnvVar, Mount, PortBinding
from supervisor.core.spec.secrets import MASK, is_secret_env
from supervisor.core.states import State
from tests.test_machine_driver import Driver

BASE = ContainerSpec(
    name="m",
    image="vllm:1",
    command=("--model", "/m", "--gpu-memory-utilization", "0.8"),
    env=(EnvVar("HF_HOME", "/hf"), EnvVar("VLLM_API_KEY", "sk-old"), EnvVar("HF_TOKEN", "hf-1")),
    mounts=(Mount("/w", "/models", True),),
    ports=(PortBinding(8000, 8000),),
    shm_size=1 << 30,
)


def test_identical_specs_have_no_drift() -> None:
    """A container made from the profile does not drift (mount/port order does not matter)."""
    have = dataclasses.replace(BASE, mounts=tuple(reversed(BASE.mounts)))
    assert spec_drift(BASE, have) == ()


def test_each_kind_of_difference_is_named() -> None:
    """image, command, env, mounts, ports and resources each show up as their own field."""
    have = dataclasses.replace(
        BASE,
        image="vllm:0",
        command=("--model", "/m", "--gpu-memory-utilization", "0.9"),
        env=(EnvVar("HF_HOME", "/cache"), EnvVar("VLLM_API_KEY", "sk-old"), EnvVar("HF_TOKEN", "hf-1")),
        mounts=(Mount("/w2", "/models", True),),
        ports=(PortBinding(8000, 8001),),
        shm_size=2 << 30,
    )
    items = spec_drift(BASE, have)
    assert drift_fields(items) == ("image", "command", "mounts", "resources", "ports", "env")
    env = next(i for i in items if i.field == "env")
    assert (env.key, env.want, env.have) == ("HF_HOME", "'/hf'", "'/cache'")
    assert next(i for i in items if i.field == "resources").key == "shm_size"
    assert "0.8" in next(i for i in items if i.field == "command").want


def test_secret_values_are_masked() -> None:
    """A changed key, token or the profile's API key variable shows only that it changed."""
    want = dataclasses.replace(
        BASE,
        env=(
            EnvVar("HF_HOME", "/hf"),
            EnvVar("VLLM_API_KEY", "sk-new"),
            EnvVar("HF_TOKEN", "hf-2"),
            EnvVar("SERVER_AUTH", "a"),
        ),
    )
    have = dataclasses.replace(BASE, env=(*BASE.env, EnvVar("SERVER_AUTH", "b")))
    items = spec_drift(want, have, secret_names=frozenset({"SERVER_AUTH"}))
    text = " ".join(i.line() for i in items)
    for secret in ("sk-new", "sk-old", "hf-1", "hf-2", "'a'", "'b'"):
        assert secret not in text
    assert {i.key for i in items} == {"VLLM_API_KEY", "HF_TOKEN", "SERVER_AUTH"}
    assert all(i.want == MASK and i.have == MASK for i in items)
    assert is_secret_env("db_password")
    assert is_secret_env("OPENAI_API_KEY")
    assert not is_secret_env("HF_HOME")


def test_env_equal_to_the_image_default_is_not_drift() -> None:
    """The profile setting a variable to the image's own value is what the container has."""
    want = dataclasses.replace(BASE, env=(*BASE.env, EnvVar("PATH", "/usr/bin")))
    assert spec_drift(want, BASE, image_env={"PATH": "/usr/bin"}) == ()
    gone = spec_drift(BASE, want, image_env={})
    assert [(i.key, i.want) for i in gone] == [("PATH", "(unset)")]


def test_host_network_ignores_ports_and_the_daemon_label() -> None:
    """With the host's network published ports mean nothing; the daemon's own label is not drift."""
    want = dataclasses.replace(BASE, network_mode="host", labels=(("team", "a"),))
    have = dataclasses.replace(BASE, network_mode="host", ports=(), labels=(("team", "a"), ("mine", "p")))
    assert spec_drift(want, have, ignore_labels=frozenset({"mine"})) == ()
    assert drift_fields(spec_drift(want, have)) == ("labels",)


def test_reload_plan_added_removed_changed() -> None:
    """Profiles are matched by name; equal values are unchanged."""
    plan = reload_plan({"a": 1, "b": 2, "c": 3}, {"a": 1, "b": 20, "d": 4})
    assert (plan.added, plan.removed, plan.changed) == (("d",), ("c",), ("b",))
    assert plan.summary() == "added d; changed b; removed c (left running)"
    assert reload_plan({"a": 1}, {"a": 1}).summary() == "no profile changed"


def test_adoption_asks_for_a_drift_check_and_the_answer_marks_without_bouncing() -> None:
    """Adopted: CheckDrift; a drifted answer sets ``drift`` and emits once; nothing is stopped."""
    d = Driver()
    d.send(DaemonStarted(boot_changed=False))
    acts = d.send(ContainerObserved(container_id="c1", running=True, exit_code=None))
    assert CheckDrift("c1") in acts
    acts = d.send(DriftChecked("c1", ("image", "env"), "image: profile 'a', container 'b'"))
    assert d.s.drift == ("image", "env")
    assert d.emits(acts) == ["container.drift"]
    assert not any(isinstance(a, StopContainer) for a in d.log)
    assert d.send(DriftChecked("c1", ("image", "env"))) == []  # unchanged: no second event
    assert d.s.status_dict(d.now)["drift"] == ["image", "env"]
    assert d.emits(d.send(DriftChecked("c1", ()))) == ["container.drift_cleared"]
    assert d.s.status_dict(d.now)["drift"] == []


def test_late_or_failed_drift_reports_do_not_mark() -> None:
    """A report about another container, or one Docker could not answer, changes nothing."""
    d = Driver()
    d.to_running("c2")
    d.send(DriftChecked("c1", ("image",)))
    assert d.s.drift == ()
    acts = d.send(DriftChecked("c2", error="Docker engine did not answer"))
    assert d.s.drift == ()
    assert d.emits(acts) == ["drift.check_failed"]


def test_reload_checks_the_running_container_and_a_fresh_container_clears_drift() -> None:
    """ConfigReloaded: CheckDrift of the current container (none when stopped); a new container: no drift."""
    d = Driver()
    d.to_running("c1")
    assert d.send(ConfigReloaded()) == [CheckDrift("c1")]
    d.send(DriftChecked("c1", ("command",)))
    assert d.st() == State.RUNNING
    assert d.s.drift == ("command",)
    d2 = Driver()
    d2.s = dataclasses.replace(d2.s, drift=("command",))
    d2.to_starting("c9")
    assert d2.s.drift == ()
    d3 = Driver()
    d3.s = dataclasses.replace(d3.s, drift=("image",))
    assert d3.send(ConfigReloaded()) == []
    assert d3.s.drift == ()
