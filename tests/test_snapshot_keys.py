"""A container whose key is on its command line (`--api-key`): its snapshot is a profile that works."""

from __future__ import annotations

import io
import os
import stat
from pathlib import Path

import docker
import pytest
import requests

from supervisor.adapters.docker.errors import until_reaped
from supervisor.cli.offline import cli_snapshot
from supervisor.config import load_profile
from supervisor.core.vllm.server_keys import key_expected
from supervisor.daemon.executor.livekey import spec_key
from tests.conftest import Resources
from tests.daemon_harness import DaemonProc, write_daemon_config
from tests.harness import free_port, wait_for

pytestmark = [pytest.mark.docker, pytest.mark.slow]

SECRET = "sk-argv-SECRET-7c1e55"


def test_snapshot_of_a_command_line_key_serves_under_the_daemon(
    docker_client: docker.DockerClient, resources: Resources, sim_image: str, tmp_path: Path
) -> None:
    """`docker run ... --api-key K` -> snapshot (key only in 0600 files, never printed) -> the daemon runs
    the snapshot's profile: RUNNING, auth enforced, the probes send K."""
    port = free_port()
    name = resources.name("argvkey")
    docker_client.containers.run(
        sim_image,
        ["--served-model-name", "snap-model", "--port", "8000", "--api-key", "old-key", "--api-key", SECRET],
        name=name,
        environment={"VSIM_LOAD_SECONDS": "1"},
        labels=resources.labels,
        ports={"8000/tcp": ("127.0.0.1", port)},
        detach=True,
    )
    out_dir = tmp_path / "snap"
    printed = io.StringIO()
    assert cli_snapshot(name, out_dir, printed) == 0
    assert SECRET not in printed.getvalue()
    for f in out_dir.iterdir():  # wherever the key is written, the file is 0600
        if SECRET in f.read_text(encoding="utf-8"):
            assert stat.S_IMODE(os.stat(f).st_mode) == 0o600, f
    profile_path = out_dir / f"{name}.profile.yaml"
    profile = load_profile(profile_path)
    assert spec_key(profile.api_key, profile.container) == SECRET  # the last --api-key, as vLLM takes it
    assert key_expected(profile.api_key is not None, profile.container)

    serving = docker_client.containers.get(name)
    until_reaped(lambda: serving.remove(force=True))  # the daemon recreates it from the profile
    config = write_daemon_config(tmp_path, [profile_path])
    d = DaemonProc(config, tmp_path)
    try:
        d.start()
        # the unkeyed request of the auth check is a job of its own: it may land after RUNNING
        st = d.wait_state(profile.name, "RUNNING", 90, auth="enforced")
        assert st["last_probe"]["ok"] is True
        base = f"http://127.0.0.1:{port}"
        assert requests.get(base + "/v1/models", timeout=5).status_code == 401
        ok = requests.get(base + "/v1/models", headers={"Authorization": f"Bearer {SECRET}"}, timeout=5)
        assert ok.status_code == 200
        wait_for(lambda: docker_client.containers.get(name).status == "running", 10, message="recreated")
        assert SECRET not in d.log_tail(100_000)
    finally:
        d.close()
