"""How to run the simulator image with the docker SDK (shared by every test that needs a fake vLLM).

``client.containers.run(**sim_run_kwargs(name, port, labels, env={"VSIM_SCENARIO": "stuck"}))``.
The image itself is built by ``tools.images.ensure_sim_image()``.
"""

from __future__ import annotations

import os
from typing import Any

#: The stable alias of the simulator image (same value as ``tools.images.SIM_IMAGE``; the demo uses it).
SIM_IMAGE = "vllm-supervisor-sim:local"
#: Set by the test session to the content-addressed tag it built (several checkouts may share one engine:
#: each must run its own simulator, whatever another one tagged ``:local`` meanwhile).
IMAGE_ENV = "VSUP_SIM_IMAGE"


def sim_image() -> str:
    """The simulator image to run: ``$VSUP_SIM_IMAGE`` when set, else the stable alias."""
    return os.environ.get(IMAGE_ENV) or SIM_IMAGE


#: Port the simulator listens on inside its container.
SIM_PORT = 8000
#: Default served model name when no ``args`` are given.
DEFAULT_MODEL = "sim-model"


def sim_run_kwargs(
    name: str,
    port: int,
    labels: dict[str, str],
    env: dict[str, str] | None = None,
    args: list[str] | None = None,
) -> dict[str, Any]:
    """Keyword arguments for ``docker.DockerClient.containers.run`` publishing the sim on 127.0.0.1:port.

    ``args`` are vLLM-style arguments (default: a served model name and a short max model len);
    ``env`` carries ``VSIM_*`` knobs and e.g. ``VLLM_API_KEY``.
    """
    command = (
        list(args)
        if args is not None
        else [
            "--model",
            f"/models/{DEFAULT_MODEL}",
            "--served-model-name",
            DEFAULT_MODEL,
            "--max-model-len",
            "32768",
        ]
    )
    return {
        "image": sim_image(),
        "name": name,
        "command": command,
        "environment": dict(env or {}),
        "ports": {f"{SIM_PORT}/tcp": ("127.0.0.1", port)},
        "labels": dict(labels),
        "detach": True,
        "restart_policy": {"Name": "no"},
    }
