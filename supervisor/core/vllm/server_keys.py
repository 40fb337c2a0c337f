"""Which API keys a vLLM server accepts, from its argv and environment (pure; docs/vllm-facts.md §6).

vLLM 0.8+ takes ``args.api_key or [VLLM_API_KEY]``: the command line wins over the environment.
``--api-key`` takes one or several values (``--api-key a b``); given twice, argparse keeps the last
occurrence (vLLM 0.32 logs "Found duplicate keys --api-key" and serves only the last one's values);
``--api-key=a`` is one value. Empty values are dropped. Keys are secrets: never log what this returns.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from supervisor.core.spec.model import ContainerSpec
from supervisor.core.vllm.cmdline import API_KEY_ENV, api_keys, argv_of


def server_keys(argv: Sequence[str], env: Mapping[str, str]) -> tuple[str, ...]:
    """The keys the server accepts: ``--api-key`` values, else ``VLLM_API_KEY``; empty: it is open."""
    keys = api_keys(argv)
    if keys:
        return keys
    value = env.get(API_KEY_ENV) or ""
    return (value,) if value else ()


def env_of(lines: Sequence[str]) -> dict[str, str]:
    """``KEY=value`` lines (``docker inspect``'s ``Config.Env``) as a mapping (the last one wins)."""
    return dict(line.partition("=")[::2] for line in lines)


def key_expected(declared: bool, spec: ContainerSpec) -> bool:
    """True if a container made from ``spec`` guards its port: the profile declares a key (``declared``:
    an ``api_key:`` section), or the spec itself sets one (``--api-key`` / ``VLLM_API_KEY``)."""
    return declared or bool(server_keys(argv_of(spec), spec.env_dict()))
