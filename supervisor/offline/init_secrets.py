"""``supervisorctl init``'s secrets split (pure): which values of a running container leave its profile.

One rule decides what is secret: core/spec/secrets.py (the same the daemon masks with). From the spec:

* **the API key**: one ``--api-key K`` (``--api-key=K``) value, else env ``VLLM_API_KEY``, goes to a 0600
  key file and back into the container **through the environment** (``inject_env: VLLM_API_KEY``, where
  vLLM reads it): never onto vLLM's command line, which every local user reads in ``/proc/PID/cmdline``.
  Several ``--api-key`` values (vLLM takes more than one; its environment holds only one) stay on the
  command line: the first comes from the key file (``inject_arg``), the others stay in the profile,
  which is then 0600;
* **environment variables** whose name is secret (``HF_TOKEN``) *or whose value holds a secret*
  (``HTTPS_PROXY=http://user:password@proxy:3128``, a database URL with a password) go to the 0600
  env file;
* whatever secret the rule still finds in the spec (``--hf-token V``, a key inside ``bash -c "..."``,
  a second key) makes the profile itself 0600: :attr:`Secrets.residual` lists them, never printed.

The daemon's own labels are dropped too (they are not the user's).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Final

from supervisor.core.spec.model import ContainerSpec, EnvVar
from supervisor.core.spec.patchset import PATCH_LABEL
from supervisor.core.spec.secrets import is_secret_env, spec_secret_values, text_secret_values
from supervisor.core.vllm.cmdline import API_KEY_ENV, API_KEY_FLAG

PLACEHOLDER: Final = "<api_key.file>"
#: Labels the daemon puts on containers it creates (MANAGED_LABEL, PATCH_LABEL): not the user's.
DAEMON_LABELS: Final = frozenset({"vllm-supervisor.profile", PATCH_LABEL})
#: Where the key comes back: the environment (one key), the command line (several keys), nowhere.
KEY_ENV: Final = "env"
KEY_ARG: Final = "arg"


@dataclass(frozen=True)
class Secrets:
    """The spec with its secrets taken out, and where they went."""

    spec: ContainerSpec  # no key, no secret env values
    key: str | None
    key_in: str | None  # KEY_ENV | KEY_ARG | None: how the recreated container gets it
    key_from: str | None  # "arg" | "env" | None: where it was found
    secret_env: tuple[EnvVar, ...]
    residual: frozenset[str] = frozenset()  # secret values still in `spec` (the profile is then 0600)


def _key_values(command: list[str]) -> list[tuple[int, str]]:
    """(index, value) of every ``--api-key`` value: ``--api-key=K``, ``--api-key K1 [K2 ...]``."""
    out: list[tuple[int, str]] = []
    taking = False
    for i, arg in enumerate(command):
        if taking and not arg.startswith("-"):
            out.append((i, arg))
            continue
        taking = arg == API_KEY_FLAG
        if arg.startswith(API_KEY_FLAG + "="):
            out.append((i, arg.split("=", 1)[1]))
    return out


def _drop_single_key(command: list[str], index: int) -> list[str]:
    """``command`` without the one ``--api-key`` flag and its value at ``index``."""
    if command[index].startswith(API_KEY_FLAG + "="):
        return command[:index] + command[index + 1 :]
    return command[: index - 1] + command[index + 1 :]


def env_is_secret(e: EnvVar) -> bool:
    """A secret name (``HF_TOKEN``) or a value that holds a secret (a URL with a password)."""
    return is_secret_env(e.name) or bool(text_secret_values(e.value))


def split_secrets(spec: ContainerSpec) -> Secrets:
    """Take the key, the secret env values and the daemon's labels out of ``spec`` (module docstring)."""
    command = list(spec.command)
    env = spec.env_dict()
    keys = _key_values(command)
    key: str | None = None
    key_in = key_from = None
    if len(keys) == 1:  # one key on the command line: it moves into the environment
        (index, key), key_in, key_from = keys[0], KEY_ENV, "arg"
        command = _drop_single_key(command, index)
    elif keys:  # several: vLLM's environment holds one; the first comes from the file, in its place
        (index, key), key_in, key_from = keys[0], KEY_ARG, "arg"
        if command[index].startswith(API_KEY_FLAG + "="):
            command[index] = f"{API_KEY_FLAG}={PLACEHOLDER}"
        else:
            command[index] = PLACEHOLDER
    elif env.get(API_KEY_ENV):
        key, key_in, key_from = env[API_KEY_ENV], KEY_ENV, "env"
    moved_key_env = key_in == KEY_ENV
    public = tuple(e for e in spec.env if not env_is_secret(e) and e.name != API_KEY_ENV)
    hidden = tuple(e for e in spec.env if env_is_secret(e) and not (moved_key_env and e.name == API_KEY_ENV))
    labels = tuple((k, v) for k, v in spec.labels if k not in DAEMON_LABELS)
    clean = dataclasses.replace(spec, command=tuple(command), env=public, labels=labels)
    residual = frozenset(v for v in spec_secret_values(clean) if v != PLACEHOLDER)
    return Secrets(clean, key, key_in, key_from, hidden, residual)
