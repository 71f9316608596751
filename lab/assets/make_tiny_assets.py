#!/usr/bin/env python3
"""Make a tiny model, tokenizer and SFT data set for running verl on CPU, with nothing fetched from a hub.

Usage (with a venv that has torch, transformers, tokenizers and pyarrow, e.g. the verl venv):

    python lab/assets/make_tiny_assets.py OUT_DIR

Writes, deterministically (fixed seeds):

* OUT_DIR/model/ - a randomly initialised Qwen2 causal LM (hidden 64, 2 layers) in save_pretrained form, with
  a byte-level BPE tokenizer trained here on the data set's own text (PreTrainedTokenizerFast with a ChatML chat
  template, pad and eos tokens) saved beside it, so model.path alone is enough for verl;
* OUT_DIR/data/train.parquet and val.parquet - a `messages` column (list of {role, content}) as verl's
  MultiTurnSFTDataset reads it (data.messages_key=messages);
* OUT_DIR/data/rl_train.parquet and rl_val.parquet - the same questions for PPO/GRPO (verl's RLHFDataset):
  `prompt` (the user turn as chat messages), `data_source`, `reward_model` ({style, ground_truth}: the answer)
  and `extra_info`;
* OUT_DIR/reward/tiny_reward.py - the rule-based reward function for those rows (a copy of
  lab/assets/tiny_reward.py: compute_score, a character-bigram F1 against the answer);
* OUT_DIR/manifest.json - written last, naming every file and its size.

Idempotent: when the manifest exists and every file it names is there with its recorded size, the script says so
and exits 0 without rewriting anything. The heavy libraries are imported only when something must be written, so
the pure parts (rows, template, completeness check) import and test without torch.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys

SEED = 1234
# 256 rows: an SFT epoch is 32 steps (batch 8), so the lab's 30-step retry drills resume mid-epoch. verl 0.9.1
# skips the next epoch when it resumes from a checkpoint saved at an epoch's end (verl#7401); the record says
# so (status ended_short), and a drill that hit an epoch's end by chance would fail on that, not on ours.
TRAIN_ROWS = 256
VAL_ROWS = 16
VOCAB_SIZE = 512
MANIFEST = "manifest.json"
# Bumped whenever what the script writes changes, so an older complete set is rewritten, not kept.
ASSETS_VERSION = 3
DATA_SOURCE = "tiny"
REWARD_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tiny_reward.py")

# ChatML without a default system prompt. verl tokenizes each turn on its own and checks that the concatenation
# equals the whole conversation; a template that renders every message independently of the others (no implicit
# system prompt, no "last turn" special cases) keeps the two identical.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
PAD_TOKEN = "<|endoftext|>"
EOS_TOKEN = "<|im_end|>"

MODEL_CONFIG = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    # head_dim 32 (64 / 2): vLLM's CPU attention refuses 16 ("Unsupported CPU attention configuration").
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "max_position_embeddings": 512,
    "tie_word_embeddings": True,
}

SUBDIRS = ("model", "data", "reward")

_NAMES = ["Ada", "Bob", "Cleo", "Dan", "Eve", "Finn", "Gia", "Hal"]
_COLOURS = ["red", "green", "blue", "yellow", "black", "white"]
_NUMBER_WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]


def make_messages(rng: random.Random) -> list[dict[str, str]]:
    """One short user/assistant exchange (sometimes two turns), drawn from rng."""
    kind = rng.randrange(3)
    if kind == 0:
        a, b = rng.randrange(10), rng.randrange(10)
        user, answer = f"What is {a} plus {b}?", f"{a} plus {b} is {a + b}."
    elif kind == 1:
        name, colour = rng.choice(_NAMES), rng.choice(_COLOURS)
        user, answer = f"{name} likes {colour}. What colour does {name} like?", f"{name} likes {colour}."
    else:
        n = rng.randrange(11)
        user, answer = f"Write {n} as a word.", f"{n} is written {_NUMBER_WORDS[n]}."
    messages = [{"role": "user", "content": user}, {"role": "assistant", "content": answer}]
    if rng.random() < 0.25:
        messages += [{"role": "user", "content": "Thank you."}, {"role": "assistant", "content": "You are welcome."}]
    return messages


def make_rows(count: int, seed: int) -> list[list[dict[str, str]]]:
    """`count` conversations, the same ones for the same seed."""
    rng = random.Random(seed)
    return [make_messages(rng) for _ in range(count)]


def render_chat(messages: list[dict[str, str]], add_generation_prompt: bool = False) -> str:
    """What CHAT_TEMPLATE renders, in plain Python: used to train the tokenizer on the exact training text."""
    text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    return text + ("<|im_start|>assistant\n" if add_generation_prompt else "")


def read_manifest(out_dir: str) -> dict | None:
    """The manifest if every file it names exists with its recorded size, else None (outputs incomplete)."""
    path = os.path.join(out_dir, MANIFEST)
    try:
        with open(path) as f:
            manifest = json.load(f)
        files = manifest["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not files or manifest.get("assets_version") != ASSETS_VERSION:
        return None
    for rel, size in files.items():
        full = os.path.join(out_dir, rel)
        if not os.path.isfile(full) or os.path.getsize(full) != size:
            return None
    return manifest


def _human(size: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return str(size)


def print_manifest(manifest: dict) -> None:
    total = 0
    for rel, size in sorted(manifest["files"].items()):
        print(f"  {rel}  {_human(size)}")
        total += size
    print(f"  total {_human(total)} in {len(manifest['files'])} files")


def build_tokenizer(texts: list[str]):
    """A byte-level BPE tokenizer trained on `texts`, wrapped for transformers."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    # AutoTokenizer always loads a qwen2 model's tokenizer as Qwen2Tokenizer (transformers 5 lists qwen2 among
    # models whose saved tokenizer class it ignores), which rebuilds the pipeline from vocab and merges with its
    # own normalizer and pre-tokenizer. Training with those same two makes the loaded tokenizer split text
    # exactly as the trained one did.
    from transformers import Qwen2Tokenizer

    reference = Qwen2Tokenizer().backend_tokenizer
    tok.normalizer = reference.normalizer
    tok.pre_tokenizer = reference.pre_tokenizer
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        chat_template=CHAT_TEMPLATE,
        model_max_length=MODEL_CONFIG["max_position_embeddings"],
    )


def build_model(tokenizer, seed: int):
    """A randomly initialised tiny Qwen2ForCausalLM whose vocabulary matches the tokenizer."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        torch_dtype="float32",
        **MODEL_CONFIG,
    )
    return Qwen2ForCausalLM(config)


def write_parquet(rows: list[list[dict[str, str]]], path: str) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    message = pa.struct([("role", pa.string()), ("content", pa.string())])
    table = pa.table({"messages": pa.array(rows, type=pa.list_(message))})
    pq.write_table(table, path)


def rl_row(messages: list[dict[str, str]], index: int, split: str) -> dict:
    """A PPO/GRPO row from a conversation: its first question as the prompt, its first answer as ground truth."""
    return {
        "data_source": DATA_SOURCE,
        "prompt": [messages[0]],
        "reward_model": {"style": "rule", "ground_truth": messages[1]["content"]},
        "extra_info": {"split": split, "index": index},
    }


def write_rl_parquet(rows: list[list[dict[str, str]]], path: str, split: str) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    records = [rl_row(messages, i, split) for i, messages in enumerate(rows)]
    pq.write_table(pa.Table.from_pylist(records), path)


def write_assets(out_dir: str, seed: int = SEED) -> dict:
    """Write model/ and data/ afresh (dropping any partial ones), then the manifest last."""
    train_rows = make_rows(TRAIN_ROWS, seed)
    val_rows = make_rows(VAL_ROWS, seed + 1)
    os.makedirs(out_dir, exist_ok=True)
    for sub in SUBDIRS:
        shutil.rmtree(os.path.join(out_dir, sub), ignore_errors=True)
    model_dir, data_dir = os.path.join(out_dir, "model"), os.path.join(out_dir, "data")
    os.makedirs(data_dir)
    os.makedirs(os.path.join(out_dir, "reward"))
    shutil.copyfile(REWARD_SOURCE, os.path.join(out_dir, "reward", "tiny_reward.py"))

    texts = [render_chat(m) for m in train_rows + val_rows]
    tokenizer = build_tokenizer(texts)
    model = build_model(tokenizer, seed)
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    write_parquet(train_rows, os.path.join(data_dir, "train.parquet"))
    write_parquet(val_rows, os.path.join(data_dir, "val.parquet"))
    write_rl_parquet(train_rows, os.path.join(data_dir, "rl_train.parquet"), "train")
    write_rl_parquet(val_rows, os.path.join(data_dir, "rl_val.parquet"), "val")

    files = {}
    for sub in SUBDIRS:
        for name in sorted(os.listdir(os.path.join(out_dir, sub))):
            rel = f"{sub}/{name}"
            files[rel] = os.path.getsize(os.path.join(out_dir, rel))
    manifest = {
        "assets_version": ASSETS_VERSION,
        "seed": seed,
        "train_rows": TRAIN_ROWS,
        "val_rows": VAL_ROWS,
        "vocab_size": len(tokenizer),
        "parameters": sum(p.numel() for p in model.parameters()),
        "files": files,
    }
    tmp = os.path.join(out_dir, MANIFEST + ".tmp")
    with open(tmp, "w") as f:
        json.dump(manifest, f, indent=2, sort_keys=True)
    os.replace(tmp, os.path.join(out_dir, MANIFEST))
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", help="folder to write model/, data/ and manifest.json into")
    args = parser.parse_args(argv)
    out_dir = os.path.abspath(args.out_dir)

    manifest = read_manifest(out_dir)
    if manifest is not None:
        print(f"tiny assets already complete in {out_dir}; nothing rewritten")
        print_manifest(manifest)
        return 0
    manifest = write_assets(out_dir)
    print(f"wrote tiny assets to {out_dir} (seed {manifest['seed']}, {manifest['parameters']} parameters, "
          f"vocab {manifest['vocab_size']}, {manifest['train_rows']} train / {manifest['val_rows']} val rows)")
    print_manifest(manifest)
    return 0


if __name__ == "__main__":
    sys.exit(main())
