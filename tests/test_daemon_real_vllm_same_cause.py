"""The daemon and the REAL vLLM 0.32 (CPU build, tiny model): the same root cause twice stops the retries.

The field patches vLLM by bind-mounting edited files over the venv's own (an overlay). Here the overlay is
the real ``vllm/v1/worker/cpu_worker.py`` with one line added at the top of ``determine_available_memory``
(called while the engine initialises, after the weights load) that raises the seed's error:
``ValueError: NvFp4 MoE backend 'VLLM_CUTLASS' does not support the deployment configuration ...``.

- Raised at every start: FATAL after exactly two starts (breaker limit 5), the critical chat alert
  ``breaker.same_cause`` (a real HTTP receiver on 127.0.0.1) and ``history`` quote the line and the overlay
  file and function it was raised in.
- Raised once, then another error, then nothing (a counter file in a writable mount): the two different
  lines are retried as usual: a third start begins with the breaker closed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Resources
from tests.daemon_harness import real_vllm_spec, start_daemon
from tests.harness import WebhookReceiver, wait_for, webhook_receiver
from tests.real_faults import WORKER, worker_overlay

pytestmark = [pytest.mark.docker, pytest.mark.real_vllm, pytest.mark.slow]

NVFP4 = (
    "NvFp4 MoE backend 'VLLM_CUTLASS' does not support the deployment configuration since kernel does not "
    "support quantization scheme QuantKey(u8, scale(f8e4m3fn, static, GroupShape(row=1, col=16)))"
)
QSA = "QSA ring capacity 12 must divide the attention block size 1616"
DEF = "    def determine_available_memory(self) -> int:\n"
ALWAYS = f"        raise ValueError({NVFP4!r})\n"
COUNTED = (
    "        import pathlib as _pl\n"
    "        _f = _pl.Path('/vsup-count/n')\n"
    "        _n = int(_f.read_text()) if _f.exists() else 0\n"
    "        _f.write_text(str(_n + 1))\n"
    f"        if _n == 0:\n            raise ValueError({NVFP4!r})\n"
    f"        if _n == 1:\n            raise AssertionError({QSA!r})\n"
)


def _daemon(
    tmp: Path,
    resources: Resources,
    base_image: str,
    paths: tuple[Path, Path],
    body: str,
    recv: WebhookReceiver,
    *mounts: str,
) -> Any:
    venv, model = paths
    spec = real_vllm_spec("real", resources.name("real"), base_image, venv, model)
    base = spec.extra_container["mounts"]
    spec.extra_container = {
        **spec.extra_container,
        "mounts": [*base, worker_overlay(tmp, venv, DEF, body), *mounts],
    }
    channels = {"channels": [{"kind": "generic", "name": "chat", "url": f"{recv.url}/hook"}]}
    return start_daemon(
        tmp,
        spec,
        resources.test_id,
        breaker_limit=5,
        backoff_initial_s=1.0,
        backoff_max_s=1.0,
        extra={"alerts": channels},
    )


def _decisions(d: Any) -> list[str]:
    return [e["fields"]["decision"] for e in d.events("real") if e["name"] == "start.same_cause"]


def test_real_vllm_the_same_error_at_two_starts_is_fatal_after_exactly_two(
    tmp_path: Path, resources: Resources, base_image: str, real_vllm_paths: tuple[Path, Path]
) -> None:
    with webhook_receiver() as recv:
        d = _daemon(tmp_path, resources, base_image, real_vllm_paths, ALWAYS, recv)
        try:
            st = d.wait_state("real", "FATAL", 400)
            assert st["breaker"]["state"] == "open"
            names = d.event_names("real")
            # (beside a writer of kernel lines, a soak, a decision may read "host_dependent": a retry)
            assert names.count("container.started") == 2, _decisions(d)
            assert _decisions(d) == ["first", "same_cause"]
            rows = list(d.call("history", name="real", n=10)["data"]["starts"])
            print(
                "history:",
                [{k: r.get(k) for k in ("outcome", "root_cause", "root_cause_where")} for r in rows],
            )
            assert len(rows) == 2
            for r in rows:
                assert r["root_cause"] == f"ValueError: {NVFP4}"
                assert f"{WORKER}:" in r["root_cause_where"]  # the overlay file, as the traceback names it
                assert "in determine_available_memory" in r["root_cause_where"]

            def same_cause_alert() -> dict[str, Any] | None:
                bodies = [q.json() for q in recv.received()]
                return next((b for b in bodies if b.get("kind") == "breaker.same_cause"), None)

            alert = wait_for(same_cause_alert, 30, message="the breaker.same_cause alert")
            print("alert:", alert["severity"], alert["title"], "|", alert["reason"], "|", alert["todo"])
            assert alert["severity"] == "critical"
            assert f"ValueError: {NVFP4}" in alert["reason"]
            assert "cpu_worker.py" in alert["reason"]
            assert "in determine_available_memory" in alert["reason"]
            assert "supervisorctl reset real" in alert["todo"]
        finally:
            d.close()


def test_real_vllm_a_failure_that_does_not_repeat_keeps_its_retries(
    tmp_path: Path, resources: Resources, base_image: str, real_vllm_paths: tuple[Path, Path]
) -> None:
    count = tmp_path / "count"
    count.mkdir()
    count.chmod(0o777)
    with webhook_receiver() as recv:
        d = _daemon(
            tmp_path, resources, base_image, real_vllm_paths, COUNTED, recv, f"{count}:/vsup-count:rw"
        )
        try:
            # the retries kept: a third start begins after two different failures (that it then serves is
            # the overlay's doing, not a judgement: not waited for, one load fewer)
            wait_for(
                lambda: d.event_names("real").count("container.started") >= 3,
                400,
                interval=0.5,
                message="a third start",
            )
            st = d.status("real")
            assert st["state"] != "FATAL", st
            assert st["breaker"]["state"] == "closed"
            assert d.event_names("real").count("container.started") == 3
            decisions = _decisions(d)
            print("decisions:", decisions)
            # two different lines: never "same_cause"; either may read "host_dependent" when kernel lines of
            # other work on this shared box (the real /dev/kmsg: a soak's GB10 boot lines, seen 2026-12-05)
            # land in its window: also a retry
            assert len(decisions) == 2
            assert "same_cause" not in decisions
            assert set(decisions) <= {"first", "different", "host_dependent"}
            rows = list(d.call("history", name="real", n=10)["data"]["starts"])
            assert [r.get("root_cause") for r in rows[:2]] == [
                f"ValueError: {NVFP4}",
                f"AssertionError: {QSA}",
            ]
            assert not [q for q in recv.received() if q.json().get("kind") == "breaker.same_cause"]
        finally:
            d.close()
