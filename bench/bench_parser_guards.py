"""What issue 39's guards cost and save, pure (no Docker): ``python -m bench.bench_parser_guards``.

Times, on the code it runs with: ``check-config`` of an alias bomb, a 240 KB flat list and a 240 KB
mapping (refused before PyYAML's Python constructor builds them); the secret-shape masker on 64 KiB lines
of the shapes that made its URL pattern quadratic; ``diagnose --log`` of a file holding a 1 MB line. Prints
one JSON line. Run it against an older tree (``PYTHONPATH=<tree>``) for the before figures.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

from supervisor.config import check_config
from supervisor.core.spec.secrets import mask_text_shapes
from supervisor.offline.diagnose import run_diagnose

FREE = (
    "(EngineCore_DP0 pid=20) ERROR 06-30 13:53:19 [core.py:515] ValueError: Free memory on device "
    "(115.17/122.86 GiB) on startup is less than desired GPU memory utilization (0.95, 116.72 GiB). "
    "Decrease GPU memory utilization"
)


def _timed(name: str, fn: object, *args: object) -> float:
    """Seconds ``fn(*args)`` took; printed at once (an old tree may take minutes on the last ones)."""
    t = time.perf_counter()
    fn(*args)  # type: ignore[operator]
    took = round(time.perf_counter() - t, 3)
    print(f"{name}: {took} s", flush=True)
    return took


def main() -> None:
    os.environ["VLLM_SUPERVISOR_TRUST_CONFIG_FILES"] = "1"
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        bomb = "".join(
            f"{c}: &{c} [" + ",".join([f"*{p}" if p else '"lol"'] * 9) + "]\n"
            for c, p in zip("abcdefgh", ["", *"abcdefg"], strict=True)
        )
        docs = {
            "alias_bomb_8_lines": bomb,
            "flat_list_240kb": "x: [" + ",".join(["1"] * 120_000) + "]\n",
            "mapping_240kb": "".join(f"k{i}: v\n" for i in range(25_000)),
        }
        for name, text in docs.items():
            f = d / f"{name}.yaml"
            f.write_text(text, encoding="utf-8")
            out[f"check_config_{name}_s"] = _timed(name, check_config, f)
        for name, line in {"a.a": "a." * 32_768, "a-a": "a-" * 32_768}.items():
            out[f"mask_64kib_{name}_s"] = _timed(f"mask 64 KiB {name}", mask_text_shapes, line)
        log = d / "vllm.log"
        log.write_text(FREE + " " + "a." * 500_000 + "\n", encoding="utf-8")
        out["diagnose_log_1mb_line_s"] = _timed(
            "diagnose --log, 1 MB line", run_diagnose, str(log), None, False, True
        )
    print(json.dumps(out))


if __name__ == "__main__":
    main()
