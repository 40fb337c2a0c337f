"""``supervisorctl diagnose`` masks secrets: a real container whose args hold ``--api-key K`` and whose
env holds ``DB_PASSWD=P`` prints both bare in its log; neither reaches diagnose's text or JSON output."""

from __future__ import annotations

import json
from pathlib import Path

import docker
import pytest

from supervisor.cli import main
from supervisor.core.spec.secrets import MASK
from supervisor.offline.diagnose import run_diagnose
from tests.conftest import Resources

KEY = "sk-live-4f1c0d8e9a7b6c5d"
PASSWD = "hunter2-db-9a7b6c5d4e"
# the echoed line is the log's last exception: diagnose prints it (twice) unless it is masked
SCRIPT = (
    'echo "(APIServer pid=1) INFO 06-30 13:53:10 [api_server.py:1] vLLM API server version 0.11.0"; '
    'echo "(APIServer pid=1) ERROR 06-30 13:53:20 [api_server.py:1] RuntimeError: auth failed for $2 '
    'while the database said no to $DB_PASSWD"'
)


def _run_container(docker_client: docker.DockerClient, base_image: str, resources: Resources) -> str:
    name = resources.name("diag-secret")
    c = docker_client.containers.run(
        base_image,
        ["sh", "-c", SCRIPT, "x", "--api-key", KEY],
        name=name,
        environment={"DB_PASSWD": PASSWD},
        labels=resources.labels,
        detach=True,
    )
    c.wait(timeout=60)
    raw = c.logs().decode()
    assert KEY in raw
    assert PASSWD in raw
    return name


@pytest.mark.parametrize("as_json", [False, True])
def test_container_secrets_never_reach_diagnose_output(
    docker_client: docker.DockerClient,
    base_image: str,
    resources: Resources,
    capsys: pytest.CaptureFixture[str],
    as_json: bool,
) -> None:
    name = _run_container(docker_client, base_image, resources)
    args = ["diagnose", "--container", name] + (["--json"] if as_json else [])
    main.main(args)
    out = capsys.readouterr().out
    assert "auth failed for" in out  # the line is printed ...
    assert KEY not in out
    assert PASSWD not in out
    assert MASK in out
    if as_json:
        assert MASK in json.loads(out)["vllm"]["last_exception"]


def test_log_file_value_shown_in_a_secret_shape_is_masked_everywhere(tmp_path: Path) -> None:
    """A value the log shows as ``'api_key': [...]`` is masked where a later line prints it bare, and in
    a kernel line too."""
    log = tmp_path / "vllm.log"
    log.write_text(
        "(APIServer pid=1) INFO 06-30 13:53:10 [utils.py:1] non-default args: "
        f"{{'model': 'm', 'api_key': ['{KEY}']}}\n"
        f"(APIServer pid=1) ERROR 06-30 13:53:20 [api_server.py:1] RuntimeError: rejected {KEY}\n"
    )
    kernel = tmp_path / "kern.log"
    kernel.write_text(f"[ 9.5] NVRM: Xid (PCI:0000:0a:00): 31, pid=42, name={KEY}, channel 0x2. MMU Fault\n")
    for as_json in (False, True):
        _code, out = run_diagnose(log, kernel, use_kernel=False, as_json=as_json)
        assert "rejected" in out
        assert "Xid" in out
        assert KEY not in out
