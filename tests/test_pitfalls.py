"""Valid settings known to hurt a 7x24 vLLM server are warned about (config/pitfalls.py), and a container's
log rotation goes through the profile, Docker and a snapshot unchanged (real Docker)."""

from __future__ import annotations

import io
from pathlib import Path

import docker
import pytest

from supervisor.config import cli_check_config, load_profile
from supervisor.config.pitfalls import profile_pitfalls
from supervisor.core.spec.inspect import spec_from_inspect
from supervisor.core.spec.model import LogConfig
from supervisor.core.spec.shape import container_create_kwargs
from tests.conftest import Resources

BASE = """\
name: p
container:
  name: {name}
  image: {image}
  command: ["sleep", "300"]
"""


def _profile(tmp_path: Path, extra: str, name: str = "vsup-pitfall", image: str = "busybox") -> Path:
    path = tmp_path / "p.yaml"
    path.write_text(BASE.format(name=name, image=image) + extra, encoding="utf-8")
    return path


def test_tmp_bind_no_shm_and_no_log_rotation_are_warned(tmp_path: Path) -> None:
    src = tmp_path / "fixed_config.json"  # pytest's tmp_path is under /tmp, like the field's own file
    src.write_text("{}")
    path = _profile(tmp_path, f"  mounts: ['{src}:/etc/fixed_config.json:ro']\n")
    keys = [k for k, _ in profile_pitfalls(load_profile(path))]
    assert keys == ["container.mounts[0]", "container.shm_size", "container.log_config"]
    buf = io.StringIO()
    assert cli_check_config(path, buf) == 0  # warnings, not errors
    assert "emptied at every boot" in buf.getvalue()


def test_a_careful_profile_has_no_pitfalls(tmp_path: Path) -> None:
    path = _profile(
        tmp_path,
        "  ipc_mode: host\n  log_config: {type: json-file, config: {max-size: 100m, max-file: 5}}\n",
    )
    prof = load_profile(path)
    assert profile_pitfalls(prof) == []
    assert prof.container.log_config == LogConfig("json-file", (("max-file", "5"), ("max-size", "100m")))


def test_a_bad_log_config_is_a_problem(tmp_path: Path) -> None:
    buf = io.StringIO()
    assert cli_check_config(_profile(tmp_path, "  log_config: {config: [1]}\n"), buf) == 1
    assert "container.log_config.config: must be a mapping" in buf.getvalue()


@pytest.mark.docker
def test_log_rotation_reaches_docker_and_comes_back_from_inspect(
    tmp_path: Path, resources: Resources, base_image: str
) -> None:
    """The profile's log_config is what Docker runs with, and what a snapshot (inspect) reads back; a
    container with Docker's default log settings reads back as no log_config (no drift)."""
    name = resources.name("logrot")
    prof = load_profile(
        _profile(
            tmp_path,
            "  log_config: {type: json-file, config: {max-size: 10m, max-file: '3'}}\n",
            name=name,
            image=base_image,
        )
    )
    kwargs = container_create_kwargs(prof.container)
    api: docker.APIClient = resources.client.api
    created = api.create_container(**kwargs)
    try:
        got = api.inspect_container(created["Id"])
        assert got["HostConfig"]["LogConfig"] == {
            "Type": "json-file",
            "Config": {"max-size": "10m", "max-file": "3"},
        }
        assert spec_from_inspect(got, []).log_config == prof.container.log_config
    finally:
        api.remove_container(created["Id"], force=True)
    plain = api.create_container(image=base_image, name=resources.name("plain"), command=["true"])
    try:
        assert spec_from_inspect(api.inspect_container(plain["Id"]), []).log_config is None
    finally:
        api.remove_container(plain["Id"], force=True)
