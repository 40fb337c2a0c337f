"""Remove test containers a killed test run left behind (scripts/test runs this before pytest).

Every container a test creates carries the label ``vllm-supervisor.test`` (tests/harness.TEST_LABEL) and is
force-removed by the test's fixture, unless the run was killed (SIGKILL, CI timeout, lost terminal). Such a
leftover can be a real vLLM holding its RAM (about 0.6 GiB for the tiny model, more for the big one) and,
mid-load or under a test's client, its CPU (idle, the tiny model's server used 0.017 of a core over 60 s,
2026-12-03). Several test sessions may share one Docker engine, so only containers older than any test run
could be (``--older-than``, default 2 h) go.

``python -m tools.sweep [--older-than SECONDS] [--label KEY[=VALUE]]`` prints one line per removed container.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Iterable
from datetime import UTC, datetime

TEST_LABEL = "vllm-supervisor.test"  # same value as tests.harness.TEST_LABEL (tools must not import tests)
DEFAULT_MAX_AGE_S = 2 * 3600


def parse_created(text: str) -> datetime:
    """Docker's ``.Created`` (RFC 3339 with nanoseconds, e.g. ``2026-11-29T08:01:02.123456789Z``) as UTC."""
    stamp = text.strip().replace("Z", "+00:00")
    head, dot, rest = stamp.partition(".")
    if dot:  # fromisoformat takes at most 6 fraction digits
        digits = "".join(c for c in rest if c.isdigit())
        stamp = f"{head}.{digits[:6]}{rest[len(digits) :]}"
    parsed = datetime.fromisoformat(stamp)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def stale(created: Iterable[tuple[str, datetime]], now: datetime, max_age_s: float) -> list[str]:
    """Ids of the containers created at least ``max_age_s`` seconds before ``now``."""
    return [cid for cid, when in created if (now - when).total_seconds() >= max_age_s]


def _docker(*args: str) -> str:
    res = subprocess.run(["docker", *args], capture_output=True, text=True, check=True, timeout=120)
    return res.stdout


def labelled(label: str) -> list[tuple[str, datetime]]:
    """(id, creation time) of every container, running or not, matching the label filter."""
    ids = _docker("ps", "-aq", "--no-trunc", "--filter", f"label={label}").split()
    if not ids:
        return []
    out: list[tuple[str, datetime]] = []
    for line in _docker("inspect", "--format", "{{.Id}} {{.Created}}", *ids).splitlines():
        cid, _, when = line.partition(" ")
        if cid and when:
            out.append((cid, parse_created(when)))
    return out


def sweep(label: str = TEST_LABEL, max_age_s: float = DEFAULT_MAX_AGE_S) -> list[str]:
    """Force-remove the stale containers matching ``label``; return their ids."""
    gone: list[str] = []
    for cid in stale(labelled(label), datetime.now(UTC), max_age_s):
        res = subprocess.run(["docker", "rm", "-f", "-v", cid], capture_output=True, check=False, timeout=120)
        if res.returncode == 0:
            gone.append(cid)
    return gone


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.sweep", description=__doc__.splitlines()[0])
    parser.add_argument("--older-than", type=float, default=DEFAULT_MAX_AGE_S, metavar="SECONDS")
    parser.add_argument("--label", default=TEST_LABEL, metavar="KEY[=VALUE]")
    args = parser.parse_args(argv[1:])
    for cid in sweep(args.label, args.older_than):
        print(f"[sweep] removed leftover test container {cid[:12]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
