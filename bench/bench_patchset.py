"""Patch-set hashing cost: what one drift check (every 15 s while serving) and one create spend on it.

Builds, in a temp dir, the field's layout (docs/field-notes.md, report 003): nine patched Python files of
60 KiB, a read-only patch directory of 40 files, and a weights directory of 2 x 8 GiB sparse shards plus
config files (stat only: a manifest); then times ``hash_mounts`` over all of them (median of 7).

Run: ``.venv/bin/python -m bench.bench_patchset``. Prints the median and the entry kinds.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from supervisor.adapters.store.patchset import hash_mounts
from supervisor.core.spec.model import Mount

RUNS = 7


def layout(root: Path) -> list[Mount]:
    mounts = []
    for i in range(9):
        f = root / f"patch_{i}.py"
        f.write_bytes(b"# patched\n" * 6144)  # 60 KiB
        mounts.append(Mount(str(f), f"/usr/local/lib/python3.12/dist-packages/vllm/p{i}.py", read_only=True))
    pdir = root / "patchdir"
    pdir.mkdir()
    for i in range(40):
        (pdir / f"m{i}.py").write_bytes(b"x = 1\n" * 2000)
    mounts.append(Mount(str(pdir), "/opt/patches", read_only=True))
    weights = root / "weights"
    weights.mkdir()
    for i in range(2):
        with (weights / f"model-{i:05d}-of-00002.safetensors").open("wb") as shard:
            shard.truncate(8 * 1024**3)  # sparse: the size of a shard, no data
    for name in ("config.json", "tokenizer.json", "generation_config.json"):
        (weights / name).write_text("{}", encoding="utf-8")
    mounts.append(Mount(str(weights), "/models/m", read_only=True))
    cache = root / "cache"
    cache.mkdir()
    mounts.append(Mount(str(cache), "/root/.cache"))
    return mounts


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="vsup-bench-patches-") as tmp:
        mounts = layout(Path(tmp))
        times = []
        for _ in range(RUNS):
            t0 = time.perf_counter()
            entries = hash_mounts(mounts)
            times.append(time.perf_counter() - t0)
        kinds: dict[str, int] = {}
        for e in entries:
            kinds[e.kind] = kinds.get(e.kind, 0) + 1
        print(f"hash_mounts over {len(mounts)} mounts: median {statistics.median(times) * 1000:.1f} ms")
        print("kinds: " + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
