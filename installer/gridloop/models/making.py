"""`gridloop models make`: a causal LM with random weights and a tokenizer trained here.

Nothing is downloaded: the tokenizer is a byte-level BPE trained with Hugging Face's
`tokenizers` on a small corpus made below, and the weights are drawn from a seeded
normal distribution (std 0.02, norms at 1, as transformers initialises a Llama) and
written as safetensors, sharded past `shard_bytes` with the index transformers writes.
The folder is what `save_pretrained` gives: config.json, generation_config.json,
tokenizer.json, tokenizer_config.json and the weights, so transformers, vLLM and the
Run:ai streamer load it as any Hugging Face checkpoint. The same name, preset and seed
give the same bytes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from gridloop.models.shapes import Shape

SPECIAL = ("<unk>", "<s>", "</s>")
# OpenAI's chat endpoint renders the messages with the tokenizer's chat template, and
# transformers has no default one (vLLM answers 400 without it): a plain one, each message
# as `role: content` on its own line and the reply opened with `assistant: `
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- message['role'] + ': ' + message['content'] + '\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- 'assistant: ' -}}{%- endif -%}"
)
DEFAULT_SHARD_BYTES = 256 * 2**20


@dataclass(frozen=True)
class Made:
    folder: Path
    files: tuple[str, ...]
    parameters: int
    weight_bytes: int


def corpus(lines: int = 4000) -> list[str]:
    """Deterministic English-like sentences the tokenizer learns its merges from."""
    subjects = ("the model", "a node", "the scheduler", "gridloop", "the agent", "a GPU")
    verbs = ("serves", "streams", "admits", "quarantines", "trains", "rolls out", "reads")
    objects = ("weights", "a checkpoint", "the queue", "tokens", "a sandbox", "the fleet")
    out = []
    for i in range(lines):
        s, v, o = subjects[i % 6], verbs[(i // 6) % 7], objects[(i // 42) % 6]
        out.append(f"{s} {v} {o} number {i} in region {i % 13} at step {i * 7 % 1000}.")
    return out


def train_tokenizer(vocab: int) -> object:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token=SPECIAL[0]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        special_tokens=list(SPECIAL),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer)
    return tok


def shards(names: list[str], nbytes: dict[str, int], limit: int) -> list[list[str]]:
    """Tensors in order, cut into files of at most `limit` bytes (one tensor larger than
    that gets a file of its own)."""
    out: list[list[str]] = [[]]
    size = 0
    for name in names:
        if out[-1] and size + nbytes[name] > limit:
            out.append([])
            size = 0
        out[-1].append(name)
        size += nbytes[name]
    return out


def make(folder: Path, shape: Shape, seed: int = 0, shard_bytes: int = DEFAULT_SHARD_BYTES) -> Made:
    import numpy as np
    from safetensors.numpy import save_file

    folder.mkdir(parents=True, exist_ok=True)
    tok = train_tokenizer(shape.vocab)
    tok.save(str(folder / "tokenizer.json"))  # type: ignore[attr-defined]
    bos, eos = (tok.token_to_id(t) for t in SPECIAL[1:])  # type: ignore[attr-defined]
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": SPECIAL[1],
        "eos_token": SPECIAL[2],
        "unk_token": SPECIAL[0],
        "model_max_length": shape.max_positions,
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2) + "\n")
    config = shape.config(bos, eos, "float16")
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    generation = {"bos_token_id": bos, "eos_token_id": eos, "do_sample": False}
    (folder / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n")

    rng = np.random.default_rng(seed)
    tensors = shape.tensors()
    nbytes = {name: 2 * int(np.prod(dims)) for name, dims in tensors.items()}
    groups = shards(list(tensors), nbytes, shard_bytes)
    files = []
    weight_map = {}
    for n, group in enumerate(groups, start=1):
        name = (
            "model.safetensors"
            if len(groups) == 1
            else f"model-{n:05d}-of-{len(groups):05d}.safetensors"
        )
        arrays = {}
        for tensor in group:
            dims = tensors[tensor]
            if len(dims) == 1:  # RMSNorm scales
                arrays[tensor] = np.ones(dims, dtype=np.float16)
            else:
                drawn = rng.standard_normal(dims, dtype=np.float32) * np.float32(0.02)
                arrays[tensor] = drawn.astype(np.float16)
            weight_map[tensor] = name
        save_file(arrays, str(folder / name), metadata={"format": "pt"})
        files.append(name)
        del arrays
    if len(groups) > 1:
        index = {"metadata": {"total_size": sum(nbytes.values())}, "weight_map": weight_map}
        (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
        files.append("model.safetensors.index.json")
    meta = ["config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"]
    return Made(folder, (*meta, *files), shape.parameters(), sum(nbytes.values()))
