"""SIGTERM on the real vLLM 0.32 CPU server: how long until the container exits, by the moment it is sent.

Phases (each a fresh container of the project's real-vLLM recipe, tools/realvllm.py):

- ``init``: SIGTERM once the engine core initialises (the first ``EngineCore`` log line), nothing else;
- ``init2``: as ``init``, then a second SIGTERM 5 s later;
- ``initready``: as ``init``, then another SIGTERM once the server is ready anyway;
- ``serving``: SIGTERM once the server is ready (``Application startup complete.``);
- ``stop``: ``docker stop -t 10`` (the daemon's emergency grace) once the engine core initialises.

Each trial records the seconds from the signal to the container's exit, its exit code, whether the ready line
appeared after the signal and the log lines that followed it. The container is SIGKILLed after ``--cap`` s
(then ``exit_s`` is None). Run under ``flock /tmp/vsup-heavy.lock`` (a real vLLM load takes most of a core).

    python -m bench.bench_sigterm [--phases init,init2,serving] [--cap 150] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
import uuid
from typing import Any

import docker

from tools.images import base_image_tag
from tools.realvllm import READY_LINE, ensure, server_argv, volumes

LABEL = "vsup.bench"
INIT_MARK = "EngineCore"


def _trial(client: docker.DockerClient, image: str, phase: str, cap: float) -> dict[str, Any]:
    p = ensure()
    name = f"vsup-bench-sigterm-{uuid.uuid4().hex[:8]}"
    lines: list[tuple[float, str]] = []
    container = client.containers.run(
        image,
        server_argv(p.venv),
        name=name,
        detach=True,
        labels={LABEL: "sigterm"},
        environment={"VLLM_CPU_KVCACHE_SPACE": "1"},
        shm_size="1g",
        volumes=volumes(p),
    )
    started = time.monotonic()

    def follow() -> None:
        for raw in container.logs(stream=True, follow=True):
            for line in raw.decode(errors="replace").splitlines():
                lines.append((time.monotonic(), line))

    threading.Thread(target=follow, daemon=True).start()
    mark = READY_LINE if phase == "serving" else INIT_MARK
    try:
        while not any(mark in text for _, text in lines):
            if time.monotonic() - started > 600:
                raise RuntimeError(f"{mark!r} not seen in 600 s")
            time.sleep(0.05)
        if phase == "serving":
            time.sleep(1.0)
        sent = time.monotonic()
        if phase == "stop":
            container.stop(timeout=10)  # what StopContainer(grace_s=10) does: SIGTERM, SIGKILL after 10 s
        else:
            container.kill(signal="SIGTERM")
        second: float | None = None
        exit_s: float | None = None
        while time.monotonic() - sent < cap:
            container.reload()
            if container.status in ("exited", "dead"):
                exit_s = time.monotonic() - sent
                break
            if phase == "init2" and second is None and time.monotonic() - sent >= 5.0:
                container.kill(signal="SIGTERM")
                second = time.monotonic() - sent
            if phase == "initready" and second is None and any(READY_LINE in x for t, x in lines if t > sent):
                time.sleep(1.0)
                container.kill(signal="SIGTERM")
                second = time.monotonic() - sent
            time.sleep(0.1)
        if exit_s is None:
            container.kill()
        container.reload()
        state = container.attrs["State"]
        after = [(round(t - sent, 2), text) for t, text in lines if t >= sent]
        return {
            "phase": phase,
            "signal_at_load_s": round(sent - started, 2),
            "second_sigterm_s": second,
            "exit_s": None if exit_s is None else round(exit_s, 2),
            "exit_code": state.get("ExitCode"),
            "ready_after_signal": any(READY_LINE in text for _, text in after),
            "lines_after": after[:15] + after[15:][-25:],
        }
    finally:
        container.remove(force=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--phases", default="init,init2,initready,serving,stop")
    ap.add_argument("--cap", type=float, default=150.0)
    ap.add_argument("--json", default="")
    args = ap.parse_args(argv)
    client = docker.from_env(timeout=120)
    image = base_image_tag()
    rows = []
    for phase in args.phases.split(","):
        row = _trial(client, image, phase, args.cap)
        rows.append(row)
        print(
            f"{phase:8} signal at {row['signal_at_load_s']:6.1f} s of the load"
            f" -> exit after {row['exit_s']} s"
            f" (code {row['exit_code']}, ready after the signal: {row['ready_after_signal']})",
            flush=True,
        )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(rows, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
