"""The one secret rule (pure): names, flags, URLs, free text and records, with plain values."""

from __future__ import annotations

import dataclasses

import pytest

from supervisor.core.alerts.message import AlertMessage
from supervisor.core.spec.drift import spec_drift
from supervisor.core.spec.model import ContainerSpec, EnvVar
from supervisor.core.spec.normal import normalised
from supervisor.core.spec.secrets import (
    MASK,
    Redactor,
    is_secret_env,
    is_secret_flag,
    mask_command,
    mask_env,
    mask_text,
    mask_url,
    secret_env_names,
    spec_secret_values,
    text_secret_values,
)
from supervisor.core.vllm import kv_pool

SECRET_NAMES = (
    "DB_PASSWD",
    "AWS_CREDENTIALS",
    "HF_TOKEN",
    "MY_API_KEY",
    "OPENAI_API_KEY",
    "AWS_SECRET_ACCESS_KEY",
    "db_password",
    "dbPassword",
    "REDIS_PASS",
    "MYSQL_PWD",
    "GCP_CREDENTIAL",
    "PROXY_AUTH",
    "TLS_PRIVATE",
    "SESSION_COOKIE",
    "CLIENT_CERT",
    "APIKEY",
    "HFTOKEN",
    "DBPASSWORD",
    "X-Amz-Signature",
)
CLEAR_NAMES = (
    "MODEL_PATH",
    "VLLM_PORT",
    "HF_HOME",
    "KEYBOARD",
    "TOKENIZERS_PARALLELISM",
    "VLLM_MAX_TOKENS",
    "CUDA_VISIBLE_DEVICES",
    "VLLM_ATTENTION_BACKEND",
    "PYTHONPATH",
    "PASSENGER",
    "AUTHOR",
)


@pytest.mark.parametrize("name", SECRET_NAMES)
def test_names_that_look_secret_are_secret(name: str) -> None:
    """Every part that is a secret word (any case, any separator) makes the name secret."""
    assert is_secret_env(name)


@pytest.mark.parametrize("name", CLEAR_NAMES)
def test_ordinary_names_stay_clear(name: str) -> None:
    """Names whose parts only contain a secret word (KEYBOARD, TOKENIZERS) are not masked."""
    assert not is_secret_env(name)


def test_declared_names_are_secret_whatever_they_are_called() -> None:
    """The profile's api_key env name counts even when it does not look secret."""
    assert is_secret_env("MODEL_ACCESS", {"MODEL_ACCESS"})
    assert secret_env_names({"MODEL_ACCESS": "x", "HF_TOKEN": "y", "HF_HOME": "z"}, {"MODEL_ACCESS"}) == {
        "MODEL_ACCESS",
        "HF_TOKEN",
    }
    assert mask_env({"DB_PASSWD": "pw-1", "MODEL_PATH": "/m"}) == {"DB_PASSWD": MASK, "MODEL_PATH": "/m"}


def test_secret_flag_values_are_masked_in_every_spelling() -> None:
    """--api-key X, --api-key=X, every value of --api-key, --hf-token X, --*-secret, --*password*."""
    argv = [
        *("vllm", "serve", "/models/q", "--api-key", "sk-one", "sk-two", "--port", "8000"),
        *("--api-key=sk-three", "--hf-token", "hf_abc", "--client-secret", "cs", "--db-password-file", "f"),
        *("--tokenizer", "/tok", "--max-num-batched-tokens", "8192"),
    ]
    out = mask_command(argv)
    assert out == [
        *("vllm", "serve", "/models/q", "--api-key", MASK, MASK, "--port", "8000"),
        *(f"--api-key={MASK}", "--hf-token", MASK, "--client-secret", MASK, "--db-password-file", MASK),
        *("--tokenizer", "/tok", "--max-num-batched-tokens", "8192"),
    ]
    assert is_secret_flag("--hf-token")
    assert not is_secret_flag("--ssl-keyfile")
    assert not is_secret_flag("--return-tokens-as-token-ids")


def test_a_key_that_begins_with_a_dash_is_a_secret_value_and_a_short_option_is_not() -> None:
    """``--api-key K -K2``: vLLM refuses -K2 and prints it back, so it is masked (fixture 053); ``-tp 2``
    after a key is vLLM's tensor-parallel option and stays; the usage text's ``API_KEY`` is no value."""
    argv = [
        "--api-key",
        "sk-first-0001",
        "-dashKeyValue0002",
        "--port",
        "8000",
        "--api-key",
        "k3abcdef",
        "-tp",
        "2",
    ]
    assert mask_command(argv) == ["--api-key", MASK, MASK, "--port", "8000", "--api-key", MASK, "-tp", "2"]
    spec = ContainerSpec(name="m", image="i", command=tuple(argv))
    assert spec_secret_values(spec) == {"sk-first-0001", "-dashKeyValue0002", "k3abcdef"}
    # vLLM reads "-OKEY" as its -O option and prints KEY in `non-default args`: masked; "-O3" is -O 3
    assert mask_command(["--api-key", "k3abcdef", "-OsomeKey0003", "-O3"]) == ["--api-key", MASK, MASK, "-O3"]
    usage = "usage: api_server.py [--api-key API_KEY [API_KEY ...]] ... VLLM_API_KEY"
    assert "API_KEY" not in text_secret_values(usage)  # else "VLLM_API_KEY" reads "VLLM_<secret>"


def test_a_flag_inside_one_argument_is_masked() -> None:
    """``bash -c "vllm serve --api-key K"`` hides K too."""
    out = mask_command(["bash", "-c", "vllm serve /m --api-key sk-inline --port 8000"])
    assert out == ["bash", "-c", f"vllm serve /m --api-key {MASK} --port 8000"]


def test_url_userinfo_and_token_parameters_are_masked() -> None:
    """https://u:p@h/x?token=t: userinfo and secret parameters go, the rest stays readable."""
    assert mask_url("https://u:p@h/x?token=t") == f"https://{MASK}@h/x?token={MASK}"
    masked = mask_url("http://h:9/a?model=m&access_token=a1&key=k&sig=s&X-Amz-Signature=z#code=c")
    assert (
        masked
        == f"http://h:9/a?model=m&access_token={MASK}&key={MASK}&sig={MASK}&X-Amz-Signature={MASK}#code={MASK}"
    )
    assert mask_url("http://127.0.0.1:8000/health") == "http://127.0.0.1:8000/health"


def test_free_text_masks_known_values_and_secret_shapes() -> None:
    """A known value anywhere, and flags, NAME=value, dict reprs, URLs and Bearer tokens by shape."""
    text = (
        "boom: password hunter2-long rejected; argv --api-key sk-abc HF_TOKEN=hf_1 "
        "{'api_key': ['sk-2'], \"db_passwd\": \"pw\"} GET https://u:p@h/x?token=t "
        "Authorization: Bearer abcdefghij"
    )
    out = mask_text(text, {"hunter2-long"})
    for secret in ("hunter2-long", "sk-abc", "hf_1", "sk-2", '"pw"', "u:p", "token=t", "abcdefghij"):
        assert secret not in out
    assert out.startswith(f"boom: password {MASK} rejected; argv --api-key {MASK} HF_TOKEN={MASK}")


def test_short_known_values_are_not_masked_in_prose() -> None:
    """A known value shorter than MIN_KNOWN_LEN would mask ordinary words: only its shape hides it."""
    assert mask_text("auth is on", {"on"}) == "auth is on"
    assert mask_text("DB_PASS=on", {"on"}) == f"DB_PASS={MASK}"


def test_clear_text_is_unchanged_and_masking_is_idempotent() -> None:
    """Ordinary lines pass untouched; masking masked text changes nothing."""
    line = "container.exited: exit 137 after 12.5 s, kv_tokens=557599 at http://127.0.0.1:8000/v1"
    assert mask_text(line) == line
    once = mask_text("--api-key sk-1 https://a:b@h/?token=x", {"sk-1"})
    assert mask_text(once, {"sk-1"}) == once


def test_records_are_masked_to_the_leaves() -> None:
    """Dicts, lists, tuples and frozen dataclasses (an alert message) come back with every string masked."""
    r = Redactor(frozenset({"s3cr3t-value"}))
    record = {"name": "x", "fields": {"reason": "key s3cr3t-value", "n": 3, "lines": ["a s3cr3t-value"]}}
    assert r.data(record) == {
        "name": "x",
        "fields": {"reason": f"key {MASK}", "n": 3, "lines": [f"a {MASK}"]},
    }
    msg = AlertMessage(
        "p",
        "critical",
        "t",
        "RUNNING",
        "FAILED",
        "exc s3cr3t-value",
        "h",
        0.0,
        details=(("k", "s3cr3t-value"),),
    )
    masked = r.data(msg)
    assert masked.reason == f"exc {MASK}"
    assert masked.details == (("k", MASK),)


def test_spec_secret_values_are_what_must_never_appear() -> None:
    """Secret env values, flag values and URL secrets of a spec; ordinary values are not."""
    spec = ContainerSpec(
        name="m",
        image="vllm:1",
        command=("--model", "/m", "--api-key", "sk-flag", "--hf-token=hf-flag"),
        env=(
            EnvVar("DB_PASSWD", "pw-env"),
            EnvVar("MODEL_PATH", "/models/m"),
            EnvVar("DATABASE_URL", "postgres://user:urlpass@db/x"),
        ),
    )
    assert spec_secret_values(spec) == {"sk-flag", "hf-flag", "pw-env", "user:urlpass", "urlpass"}


def test_drift_never_shows_a_secret_and_says_when_only_one_differs() -> None:
    """DB_PASSWD, AWS_CREDENTIALS, --api-key: drift names what changed, never the values."""
    want = ContainerSpec(
        name="m",
        image="vllm:1",
        command=("--model", "/m", "--api-key", "sk-profile"),
        env=(EnvVar("DB_PASSWD", "pw-profile"), EnvVar("AWS_CREDENTIALS", "aws-profile")),
    )
    have = dataclasses.replace(
        want,
        command=("--model", "/m", "--api-key", "sk-container"),
        env=(EnvVar("DB_PASSWD", "pw-container"), EnvVar("AWS_CREDENTIALS", "aws-container")),
    )
    lines = [i.line() for i in spec_drift(want, have)]
    text = "\n".join(lines)
    for secret in (
        "sk-profile",
        "sk-container",
        "pw-profile",
        "pw-container",
        "aws-profile",
        "aws-container",
    ):
        assert secret not in text
    assert f"env DB_PASSWD: profile {MASK}, container {MASK}" in lines
    assert any(line.startswith("command:") and "a secret value differs" in line for line in lines)


def test_fingerprint_uses_the_one_rule() -> None:
    """A rotated DB_PASSWD or --hf-token keeps the fingerprint (both were missed by one old rule)."""
    spec = ContainerSpec(name="m", image="i", command=("--hf-token", "a"), env=(EnvVar("DB_PASSWD", "1"),))
    rotated = dataclasses.replace(spec, command=("--hf-token", "b"), env=(EnvVar("DB_PASSWD", "2"),))
    assert kv_pool.spec_fingerprint(spec, None) == kv_pool.spec_fingerprint(rotated, None)
    changed = dataclasses.replace(spec, command=("--hf-token", "a", "--seed", "1"))
    assert kv_pool.spec_fingerprint(spec, None) != kv_pool.spec_fingerprint(changed, None)


def test_docker_defaults_written_out_are_no_drift() -> None:
    """shm 64 MiB, ipc private, runtime runc, network default, a device without permissions: no drift."""
    profile = ContainerSpec(
        name="m",
        image="i",
        shm_size=64 * 1024 * 1024,
        ipc_mode="private",
        runtime="runc",
        network_mode="default",
        devices=("/dev/fuse",),
        user="",
    )
    container = ContainerSpec(name="m", image="i", devices=("/dev/fuse:/dev/fuse:rwm",))
    assert spec_drift(profile, container) == ()
    assert spec_drift(container, profile) == ()
    assert normalised(profile) == normalised(container)
    bigger = dataclasses.replace(profile, shm_size=128 * 1024 * 1024)
    assert [i.key for i in spec_drift(bigger, container)] == ["shm_size"]


def test_the_images_own_values_written_out_are_no_drift() -> None:
    """A profile repeating its image's Cmd, Entrypoint, User, WorkingDir, StopSignal or a label has what
    the container inherited (inspect leaves those out); a different value is still drift."""
    image = {
        "Cmd": ["serve"],
        "Entrypoint": ["/entry.sh"],
        "User": "vllm",
        "WorkingDir": "/app",
        "StopSignal": "SIGINT",
        "Labels": {"vendor": "x"},
    }
    profile = ContainerSpec(
        name="m",
        image="i",
        command=("serve",),
        entrypoint=("/entry.sh",),
        user="vllm",
        working_dir="/app",
        stop_signal="SIGINT",
        labels=(("vendor", "x"),),
    )
    container = ContainerSpec(name="m", image="i", command=("serve",))  # what inspect reads back
    assert spec_drift(profile, container, image_config=image) == ()
    assert spec_drift(profile, container) != ()  # without the image's config they differ
    other = dataclasses.replace(profile, user="root", command=("serve", "--x"))
    assert [i.key for i in spec_drift(other, container, image_config=image)] == ["command", "user"]
