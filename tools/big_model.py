"""Write a bigger random-weight Llama (same tokenizer as the tiny model) whose long prefill is slow on CPU.

Run with the real-vLLM venv's interpreter: ``VENV/bin/python tools/big_model.py OUTDIR TINY_MODEL_DIR``;
``python -m tools.realvllm`` callers use :func:`ensure` below (cached under the vLLM cache as ``big-model``).

Shape: hidden 2048, 16 heads of 128 (16 KV heads), 8 layers, intermediate 4096, 32K positions: about 0.35 B
parameters (0.7 GB in bf16), 64 KiB of KV cache per token. On this project's 2-core CPU box a 12K-token prompt
takes over a minute to prefill (docs/vllm-facts.md "Forward progress").
"""

from __future__ import annotations

import importlib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HIDDEN = 2048
HEADS = 16
LAYERS = 8
INTERMEDIATE = 4096
MAX_POSITIONS = 32768
SEED = 4321
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json")
STAMP = ".vsup-recipe"


def build(out: Path, tiny: Path) -> None:
    """Save the tokenizer files of ``tiny`` and a bigger random model into ``out`` (which must exist)."""
    transformers: Any = importlib.import_module("transformers")
    torch: Any = importlib.import_module("torch")
    for name in TOKENIZER_FILES:
        if (tiny / name).exists():
            shutil.copy(tiny / name, out / name)
    fast = transformers.AutoTokenizer.from_pretrained(str(out))
    torch.manual_seed(SEED)
    config = transformers.LlamaConfig(
        vocab_size=len(fast),
        hidden_size=HIDDEN,
        intermediate_size=INTERMEDIATE,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=HEADS,
        max_position_embeddings=MAX_POSITIONS,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
        tie_word_embeddings=False,
        torch_dtype="bfloat16",
    )
    model = transformers.LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(str(out))
    for path in out.iterdir():
        path.chmod(0o644)


def recipe_hash() -> str:
    import hashlib

    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]


def ensure(venv_python: Path, tiny: Path, final: Path) -> Path:
    """Build ``final`` once (stamped with this file's hash); returns it. Call with the cache lock held."""
    stamp = final / STAMP
    if stamp.exists() and stamp.read_text(encoding="utf-8").strip() == recipe_hash():
        return final
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.build-", dir=final.parent))
    subprocess.run([str(venv_python), __file__, str(tmp), str(tiny)], check=True, timeout=1800)
    (tmp / STAMP).write_text(recipe_hash(), encoding="utf-8")
    tmp.chmod(0o755)
    if final.exists():
        shutil.rmtree(final)
    tmp.rename(final)
    return final


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: big_model.py OUTDIR TINY_MODEL_DIR", file=sys.stderr)
        return 2
    out = Path(argv[1])
    out.mkdir(parents=True, exist_ok=True)
    build(out, Path(argv[2]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
