"""Write a tiny Llama model directory with no weights, for a real vLLM server in tests.

    python scripts/make_tiny_model.py OUT_DIR [--vocab 2048] [--max-pos 4096]

vLLM serves it with `--load-format dummy` (random weights), so the server, tokenizer, chat template,
scheduler and HTTP API are all real while the text is gibberish. The tokenizer is a byte-level BPE trained
here on deterministic synthetic text, so the directory is reproducible and nothing is downloaded.
Only dependency: `tokenizers`.

Constraint worth knowing: vLLM's CPU attention backend accepts head sizes 32, 64, 80, 96, 112, 128, 160,
192, 224, 256 and 512 only, hence head_dim 64 below.
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Iterator
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

ENDOFTEXT, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = [ENDOFTEXT, IM_START, IM_END]

# ChatML. Content may be a plain string or a list of {"type": "text", "text": ...} parts.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}{% if part['type'] == 'text' %}{{ part['text'] }}"
    "{% endif %}{% endfor %}{% endif %}"
    "{{ '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

_WORDS = """
the a an of to in on for with and or not is are was be been it this that as at by from error warning info
debug failed failure cannot could should would will may memory cache block blocks gpu cpu cuda nccl device
model server request requests token tokens prompt completion chat stream json schema summary why fix step
steps confidence case id none language english chinese timeout connection refused reset retry process worker
engine core rank node host port address kernel driver version python torch vllm tensor parallel pipeline
size length max min total free used available allocate allocated out utilization batch sequence sequences
attention head heads layer layers weight weights load loading start started stop stopped exit code signal
killed oom runtime value type key file path line traceback raise exception assertion check run running
config configuration setting settings option flag argument environment variable network socket http status
ok bad wrong right new old first last next all any some more less each per time seconds ms ms/token rate
throughput latency queue waiting scheduled preempted swap kv prefix hit miss hash random dummy tiny test
user assistant system role content message answer explain because increase decrease set use try install
upgrade downgrade restart reduce raise lower higher enable disable shared share visible devices count zero
one two three four eight sixteen thirty-two sixty-four hundred thousand million gib mib kib bytes
""".split()
_PUNCT = [".", ",", ":", ";", "!", "?", " -", " (", ")", " =", "/", "_"]


def _training_lines(n_lines: int = 20_000, seed: int = 1234) -> Iterator[str]:
    rng = random.Random(seed)
    for i in range(n_lines):
        kind = rng.random()
        words = [rng.choice(_WORDS) for _ in range(rng.randint(4, 18))]
        if kind < 0.1:
            key, val = rng.choice(_WORDS), rng.choice(_WORDS)
            yield json.dumps({key: val, "n": rng.randint(0, 9999), "ok": rng.random() < 0.5})
        elif kind < 0.2:
            yield f"{i + 1}: " + " ".join(words)
        else:
            text = " ".join(w + (rng.choice(_PUNCT) if rng.random() < 0.15 else "") for w in words)
            yield text[0].upper() + text[1:] + "."


def train_tokenizer(vocab_size: int) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_training_lines(), trainer=trainer)
    return tok


def write_model_dir(out: Path, vocab: int = 2048, max_pos: int = 4096) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    tok = train_tokenizer(vocab)
    tok.save(str(out / "tokenizer.json"))
    bos_id, eos_id = tok.token_to_id(ENDOFTEXT), tok.token_to_id(IM_END)
    vocab_size = tok.get_vocab_size(with_added_tokens=True)

    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "num_hidden_layers": 2,
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "hidden_act": "silu",
        "max_position_embeddings": max_pos,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "attention_bias": False,
        "mlp_bias": False,
        "torch_dtype": "bfloat16",
        "vocab_size": vocab_size,
        "bos_token_id": bos_id,
        "eos_token_id": eos_id,
        "pad_token_id": bos_id,
    }
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": max_pos,
        "eos_token": IM_END,
        "pad_token": ENDOFTEXT,
        "bos_token": None,
        "unk_token": None,
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "added_tokens_decoder": {
            str(tok.token_to_id(t)): {
                "content": t,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "single_word": False,
                "special": True,
            }
            for t in SPECIAL_TOKENS
        },
        "chat_template": CHAT_TEMPLATE,
    }
    files = {
        "config.json": config,
        "generation_config.json": {"bos_token_id": bos_id, "eos_token_id": eos_id},
        "tokenizer_config.json": tokenizer_config,
        "special_tokens_map.json": {"eos_token": IM_END, "pad_token": ENDOFTEXT},
    }
    for name, data in files.items():
        (out / name).write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--vocab", type=int, default=2048, help="BPE vocabulary size incl. special tokens")
    parser.add_argument("--max-pos", type=int, default=4096, help="max_position_embeddings")
    args = parser.parse_args(argv)
    write_model_dir(args.out_dir, args.vocab, args.max_pos)
    print(args.out_dir)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
