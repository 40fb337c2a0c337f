"""Write a tiny random-weight Llama, byte-level BPE tokenizer and chat template into a directory (offline).

Run with the real-vLLM venv's interpreter (it has torch, transformers and tokenizers):
``VENV/bin/python tools/tiny_model.py OUTDIR``. tools/realvllm.py does this and caches the result; any change
to this file changes the cache key.

Shape: hidden 128, 2 heads (head_dim 64: the CPU backend needs >= 32), 2 layers, vocab ~500. The output is
gibberish (random weights); token counts are real.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

VOCAB_SIZE = 500
HIDDEN = 128
HEADS = 2
LAYERS = 2
SEED = 1234
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}</s>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
SPECIAL_TOKENS = ["<s>", "</s>", "<unk>", "<pad>", "<|system|>", "<|user|>", "<|assistant|>"]
_SENTENCES = [
    "The supervisor watches a vLLM server running in a Docker container.",
    "When the engine dies, the container is restarted after a short backoff.",
    "Hello, how are you today? I am fine, thank you very much.",
    "The quick brown fox jumps over the lazy dog near the river bank.",
    "Memory is shared between the CPU and the GPU on a unified memory box.",
    "Tokens are generated one at a time until the end of the sequence.",
    "Health checks, metrics and chat completions are served over HTTP.",
    "Numbers like 0 1 2 3 4 5 6 7 8 9 10 100 1000 appear in logs.",
]


def _corpus() -> list[str]:
    return [f"{s} {t}" for s in _SENTENCES for t in _SENTENCES]


def build(out: Path) -> None:
    """Save tokenizer and model into ``out`` (which must exist)."""
    tokenizers: Any = importlib.import_module("tokenizers")
    transformers: Any = importlib.import_module("transformers")
    torch: Any = importlib.import_module("torch")

    tok = tokenizers.Tokenizer(tokenizers.models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer=trainer)
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(out))

    torch.manual_seed(SEED)
    config = transformers.LlamaConfig(
        vocab_size=len(fast),
        hidden_size=HIDDEN,
        intermediate_size=HIDDEN * 2,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=HEADS,
        max_position_embeddings=1024,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
        tie_word_embeddings=False,
    )
    model = transformers.LlamaForCausalLM(config)
    model.save_pretrained(str(out))
    for path in out.iterdir():  # safetensors writes 0600; containers may run as another user
        path.chmod(0o644)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: tiny_model.py OUTDIR", file=sys.stderr)
        return 2
    out = Path(argv[1])
    out.mkdir(parents=True, exist_ok=True)
    build(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
