"""Last known good (pure): the spec codec, the record, the verdict on a failed start, the diff."""

from __future__ import annotations

import json

import pytest

from supervisor.core.alerts.localize import title_en
from supervisor.core.errors import StateError
from supervisor.core.spec.codec import spec_from_dict, spec_to_dict
from supervisor.core.spec.last_good import (
    ChangeVerdict,
    LastGood,
    after_failed_start,
    change_diff,
    diff_details,
    diff_summary,
    failed_change_reason,
)
from supervisor.core.spec.model import ContainerSpec, DeviceRequest, EnvVar, Mount, PortBinding, Ulimit

FULL = ContainerSpec(
    name="vllm",
    image="vllm:0.11",
    command=("--model", "/m", "--port", "8000"),
    entrypoint=("vllm", "serve"),
    env=(EnvVar("VLLM_API_KEY", "k-123"), EnvVar("VLLM_X", "1")),
    mounts=(Mount("/w", "/models", True), Mount("shm", "/dev/shm", False, "tmpfs")),
    network_mode="bridge",
    ipc_mode="host",
    shm_size=2**30,
    ulimits=(Ulimit("memlock", -1, -1),),
    runtime="nvidia",
    device_requests=(DeviceRequest(count=-1, capabilities=(("gpu",),), options=(("a", "b"),)),),
    devices=("/dev/x:/dev/x:rwm",),
    ports=(PortBinding(8000, 8001, "tcp", "127.0.0.1"),),
    labels=(("team", "ml"),),
    security_opt=("seccomp=unconfined",),
    cap_add=("SYS_NICE",),
    privileged=False,
    user="1000",
    hostname="h",
    extra_hosts=("db:10.0.0.1",),
    init=True,
    stop_signal="SIGINT",
    stop_timeout=30,
)


def test_spec_round_trips_through_json() -> None:
    """Every field of a fully populated spec survives dict -> JSON -> dict -> spec."""
    assert spec_from_dict(json.loads(json.dumps(spec_to_dict(FULL)))) == FULL
    minimal = ContainerSpec("n", "i", entrypoint=None, stop_timeout=None)
    assert spec_from_dict(json.loads(json.dumps(spec_to_dict(minimal)))) == minimal


@pytest.mark.parametrize(
    "bad",
    [
        None,
        [],
        {"name": "n"},
        {"name": "n", "image": "i", "env": "X=1"},
        {"name": "n", "image": "i", "ports": [{"nope": 1}]},
        {"name": "n", "image": "i", "labels": [["a"]]},
    ],
)
def test_spec_decoding_refuses_wrong_shapes(bad: object) -> None:
    """A wrong shape is a StateError, never a half-read spec."""
    with pytest.raises(StateError):
        spec_from_dict(bad)


def test_record_round_trip_and_pinned_image() -> None:
    """The record keeps spec, fingerprint, image id; a rollback creates the image by its id."""
    good = LastGood(FULL, "fp1", "sha256:abc", "c1", 1790000000.0)
    back = LastGood.from_dict(json.loads(json.dumps(good.to_dict())))
    assert back == good
    assert back.pinned_spec().image == "sha256:abc"
    assert LastGood(FULL, "fp1").pinned_spec().image == "vllm:0.11"
    assert "k-123" not in repr(good)
    for broken in (
        {"spec": spec_to_dict(FULL)},
        {"fingerprint": "f", "spec": 1},
        {"fingerprint": "f", "saved_at": "x", "spec": spec_to_dict(FULL)},
        "x",
    ):
        with pytest.raises(StateError):
            LastGood.from_dict(broken)


def _verdict(
    fp: str | None, changed: int = 0, spec: str = "profile", policy: str = "rollback", after: int = 2
) -> ChangeVerdict:
    return after_failed_start(
        fingerprint=fp,
        last_good="good",
        running_spec=spec,
        changed_failures=changed,
        rollback_after=after,
        on_failed_change=policy,
    )


def test_verdict_counts_failures_of_a_changed_config() -> None:
    """A differing fingerprint counts; the Nth alerts (and rolls back per policy) once per streak."""
    first = _verdict("new")
    assert (first.changed_failures, first.rollback, first.alert) == (1, False, False)
    second = _verdict("new", 1)
    assert (second.changed_failures, second.rollback, second.alert) == (2, True, True)
    third = _verdict("new", 2, policy="hold")
    assert (third.changed_failures, third.rollback, third.alert) == (3, False, False)
    held = _verdict("new", 1, policy="hold")
    assert (held.rollback, held.alert) == (False, True)
    once = _verdict("new", 0, after=1)
    assert (once.rollback, once.alert) == (True, True)


def test_verdict_ignores_what_is_not_a_failing_change() -> None:
    """The same config failing ends the streak; the last known good failing, no record or no fingerprint
    leave it as it was."""
    assert _verdict("good", 1).changed_failures == 0
    assert _verdict("new", 1, spec="last_known_good") == _verdict(None, 1)
    assert _verdict(None, 1).changed_failures == 1
    none = after_failed_start(
        fingerprint="new",
        last_good=None,
        running_spec="profile",
        changed_failures=0,
        rollback_after=2,
        on_failed_change="rollback",
    )
    assert (none.changed_failures, none.rollback, none.alert) == (0, False, False)


def test_diff_names_fields_and_masks_secret_values() -> None:
    """The alert diff: image, command, env by name; secret values masked; the texts say what happens."""
    from dataclasses import replace

    new = replace(
        FULL,
        image="vllm:0.12",
        command=("--model", "/m", "--broken"),
        env=(EnvVar("VLLM_API_KEY", "k-999"), EnvVar("VLLM_X", "2"), EnvVar("HF_TOKEN", "hf-zzz")),
    )
    items = change_diff(new, FULL, ["VLLM_API_KEY"])
    summary = diff_summary(items)
    assert summary == "image, command, env HF_TOKEN, env VLLM_API_KEY, env VLLM_X"
    text = json.dumps(diff_details(items))
    assert "k-999" not in text
    assert "k-123" not in text
    assert "hf-zzz" not in text
    assert "new '2', last known good '1'" in text
    reason = failed_change_reason("hold", items)
    assert reason.startswith("last known good differs in: image, command")
    assert reason.endswith("the new config is kept (on_failed_change: hold)")
    assert failed_change_reason("rollback", items) == f"last known good differs in: {summary}"
    hold = title_en("config.change_failed", (("failures", "2"), ("action", "hold")))
    assert hold == "the new config failed 2 times; holding it (on_failed_change: hold)"
    rollback = title_en("config.change_failed", (("failures", "2"), ("action", "rollback")))
    assert rollback == "the new config failed 2 times: rolling back to the last known good"
    assert diff_summary(change_diff(FULL, FULL)) == "nothing (the same spec)"
    moved = change_diff(FULL, FULL, new_image_id="sha256:b", last_good_image_id="sha256:a")
    assert diff_summary(moved) == "image"
