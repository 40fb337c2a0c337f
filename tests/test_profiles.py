"""The example profiles validate, say what the field reports say, and create the containers they describe."""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from supervisor.adapters.secrets import ensure_key_file, spec_with_key
from supervisor.config import cli_check_config, container_create_kwargs, load_config, load_profile
from supervisor.core.spec.model import ContainerSpec, Mount
from tests.conftest import Resources

PROFILES = Path(__file__).resolve().parent.parent / "profiles"
EXAMPLES = ["thor-t5000.yaml", "spark-gb10.yaml", "sim-demo.yaml", "real-vllm-cpu.yaml", "demo.daemon.yaml"]
VP = "/usr/local/lib/python3.12/dist-packages/vllm"
GIB = 1024**3


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_validates(name: str) -> None:
    """Every example file passes check-config."""
    buf = io.StringIO()
    assert cli_check_config(PROFILES / name, buf) == 0, buf.getvalue()
    assert buf.getvalue().startswith("OK: ")


def test_thor_profile_has_final_knobs() -> None:
    """Thor: field report 000's run line with field report 002's final knobs."""
    p = load_profile(PROFILES / "thor-t5000.yaml")
    cmd = p.container.command
    for flag, value in [
        ("--port", "8001"),
        ("--max-num-seqs", "8"),
        ("--gpu-memory-utilization", "0.73"),
        ("--max-num-batched-tokens", "16384"),
        ("--mamba-ssm-cache-dtype", "bfloat16"),
        ("--speculative-config", '{"method":"mtp","num_speculative_tokens":2}'),
    ]:
        assert cmd[cmd.index(flag) + 1] == value
    c = p.container
    assert (c.runtime, c.network_mode, c.shm_size) == ("nvidia", "host", 32 * GIB)
    assert [(u.name, u.soft, u.hard) for u in c.ulimits] == [
        ("memlock", -1, -1),
        ("stack", 67108864, 67108864),
    ]
    assert p.base_url == "http://127.0.0.1:8001"
    assert p.served_model_name == "qwen3.8-flash-next"
    assert p.api_key is not None
    assert p.api_key.inject_env == "VLLM_API_KEY"
    assert p.markers.forbidden == ("errno=22",)


def test_spark_profile_reproduces_seed() -> None:
    """Spark: the nine overlay files read-only at field report 003's $VP paths, plus the two data mounts."""
    p = load_profile(PROFILES / "spark-gb10.yaml")
    c = p.container
    assert c.image == "vllm/vllm-openai:nightly-8a728663c1c3eeace834a95f5654fa653cc1998c"
    overlays = [m for m in c.mounts if m.target.startswith(VP)]
    assert len(overlays) == 9
    assert all(
        m.read_only and m.source.startswith("/home/coolthor/patches/qwen4exp-ple-mmap/") for m in overlays
    )
    assert len(c.mounts) == 11
    assert len(c.env) == 14
    assert c.env_dict()["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert p.served_model_name == "qwen38-flash-next"
    assert c.command[-2:] == ("--kv-cache-dtype", "fp8_e4m3")


def test_demo_daemon_config_paths() -> None:
    """The demo daemon config keeps its state under profiles/var and loads the simulator profile."""
    cfg = load_config(PROFILES / "demo.daemon.yaml")
    assert cfg.state_dir == PROFILES / "var" / "state"
    assert cfg.socket_path == PROFILES / "var" / "control.sock"
    assert [p.name for p in cfg.profiles] == ["sim-demo"]
    assert cfg.profiles[0].base_url == "http://127.0.0.1:18000"
    assert cfg.profiles[0].served_model_name == "demo"


@pytest.fixture
def tagged(docker_client: docker.DockerClient, base_image: str) -> Iterator[list[str]]:
    """Tags of the base image added by a test (removed afterwards; pre-existing tags are never touched)."""
    added: list[str] = []
    yield added
    for tag in added:
        docker_client.api.remove_image(tag)


def _tag_base_as(docker_client: docker.DockerClient, base_image: str, image: str, added: list[str]) -> None:
    try:
        docker_client.images.get(image)
    except docker.errors.ImageNotFound:
        repo, _, tag = image.rpartition(":")
        assert docker_client.images.get(base_image).tag(repo, tag)
        added.append(image)


def _local_sources(spec: ContainerSpec, root: Path) -> ContainerSpec:
    """The spec with bind sources moved under `root` (files for file overlays, dirs otherwise)."""
    mounts: list[Mount] = []
    for m in spec.mounts:
        src = root / m.source.lstrip("/")
        src.parent.mkdir(parents=True, exist_ok=True)
        if Path(m.target).suffix in (".py", ".json"):
            src.write_text("# overlay\n")
        else:
            src.mkdir(exist_ok=True)
        mounts.append(dataclasses.replace(m, source=str(src)))
    return dataclasses.replace(spec, mounts=tuple(mounts))


def _create(
    docker_client: docker.DockerClient, resources: Resources, spec: ContainerSpec, tmp: Path
) -> tuple[dict[str, Any], dict[str, Any], bool]:
    """Create (never start) the container; returns (kwargs, inspect, runtime_dropped)."""
    spec = _local_sources(spec, tmp)
    spec = dataclasses.replace(
        spec, name=resources.name(spec.name), labels=(*spec.labels, *resources.labels.items())
    )
    kwargs = container_create_kwargs(spec)
    dropped = False
    try:
        docker_client.api.create_container(**kwargs)
    except docker.errors.APIError as exc:
        if "runtime" not in str(exc).lower():
            raise
        # the nvidia runtime is not installed on this machine: create without it (asserted in kwargs)
        kwargs["host_config"] = {k: v for k, v in kwargs["host_config"].items() if k != "Runtime"}
        docker_client.api.create_container(**kwargs)
        dropped = True
    return container_create_kwargs(spec), docker_client.api.inspect_container(spec.name), dropped


@pytest.mark.docker
def test_thor_and_spark_create_as_seeds_ask(
    docker_client: docker.DockerClient,
    base_image: str,
    resources: Resources,
    tagged: list[str],
    tmp_path: Path,
) -> None:
    """Containers made from the Thor and Spark profiles carry the field reports' settings in docker inspect"""
    thor_profile = load_profile(PROFILES / "thor-t5000.yaml")
    assert thor_profile.api_key is not None
    key_source = dataclasses.replace(thor_profile.api_key, file=tmp_path / "thor-api-key")
    assert ensure_key_file(key_source)
    thor = spec_with_key(key_source, thor_profile.container)
    spark_profile = load_profile(PROFILES / "spark-gb10.yaml")
    spark = spec_with_key(spark_profile.api_key, spark_profile.container)
    for spec in (thor, spark):
        _tag_base_as(docker_client, base_image, spec.image, tagged)

    kw, info, dropped = _create(docker_client, resources, thor, tmp_path / "thor")
    hc, cfg = info["HostConfig"], info["Config"]
    assert kw["host_config"]["Runtime"] == "nvidia"
    assert hc["Runtime"] == ("runc" if dropped else "nvidia")
    assert cfg["Image"] == "vllm-thor:plemmap"
    assert cfg["Cmd"] == list(thor.command)
    assert {"VLLM_PLE_MMAP=1", "VLLM_PLE_MMAP_DIR=/model"} <= set(cfg["Env"])
    key = (tmp_path / "thor-api-key").read_text().strip()
    assert f"VLLM_API_KEY={key}" in cfg["Env"]  # injected from the key file
    assert hc["NetworkMode"] == "host"
    assert hc["ShmSize"] == 32 * GIB
    assert {(u["Name"], u["Soft"], u["Hard"]) for u in hc["Ulimits"]} == {
        ("memlock", -1, -1),
        ("stack", 67108864, 67108864),
    }
    assert hc["RestartPolicy"]["Name"] == "no"
    assert sum(b.endswith(":ro") for b in hc["Binds"]) == 2
    assert any(b.endswith(":/model:ro") for b in hc["Binds"])

    _, info, _ = _create(docker_client, resources, spark, tmp_path / "spark")
    hc, cfg = info["HostConfig"], info["Config"]
    assert cfg["Image"] == spark.image
    assert cfg["Cmd"] == list(spark.command)
    assert set(cfg["Env"]) >= {f"{e.name}={e.value}" for e in spark.env}
    assert (hc["NetworkMode"], hc["IpcMode"], hc["ShmSize"]) == ("host", "host", 32 * GIB)
    assert [(u["Name"], u["Soft"], u["Hard"]) for u in hc["Ulimits"]] == [("memlock", -1, -1)]
    assert [(d["Count"], d["Capabilities"]) for d in hc["DeviceRequests"]] == [(-1, [["gpu"]])]
    assert hc["RestartPolicy"]["Name"] == "no"
    ro = [b for b in hc["Binds"] if b.endswith(":ro")]
    assert len(hc["Binds"]) == 11
    assert len(ro) == 10
    assert sum(f":{VP}/" in b for b in ro) == 9
    assert info["State"]["Status"] == "created"
