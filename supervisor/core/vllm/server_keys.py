"""Which API keys a vLLM server accepts, from its argv and environment (pure; docs/vllm-facts.md §6).

vLLM 0.8+ takes ``args.api_key or [VLLM_API_KEY]``: the command line wins over the environment.
``--api-key`` takes one or several values (``--api-key a b``); given twice, argparse keeps the last
occurrence (vLLM 0.32 logs "Found duplicate keys --api-key" and serves only the last one's values);
``--api-key=a`` is one value. Empty values are dropped. Keys are secrets: never log what this returns.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from supervisor.core.spec.model import ContainerSpec

API_KEY_FLAG = "--api-key"
API_KEY_ENV = "VLLM_API_KEY"


def last_flag_values(argv: Sequence[str], flag: str) -> list[str] | None:
    """The values of the LAST occurrence of ``flag`` (``--flag a b`` up to the next ``-x``, or ``--flag=a``).

    None when the flag is absent (argparse: the last occurrence wins).
    """
    found: list[str] | None = None
    for i, arg in enumerate(argv):
        if arg == flag:
            vals: list[str] = []
            for nxt in argv[i + 1 :]:
                if nxt.startswith("-"):
                    break
                vals.append(nxt)
            found = vals
        elif arg.startswith(flag + "="):
            found = [arg.split("=", 1)[1]]
    return found


def argv_keys(argv: Sequence[str]) -> tuple[str, ...]:
    """The keys an ``--api-key`` in ``argv`` gives the server (empty: none on the command line)."""
    return tuple(v for v in last_flag_values(argv, API_KEY_FLAG) or () if v)


def server_keys(argv: Sequence[str], env: Mapping[str, str]) -> tuple[str, ...]:
    """The keys the server accepts: ``--api-key`` values, else ``VLLM_API_KEY``; empty: it is open."""
    keys = argv_keys(argv)
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
    return declared or bool(server_keys((*(spec.entrypoint or ()), *spec.command), spec.env_dict()))
