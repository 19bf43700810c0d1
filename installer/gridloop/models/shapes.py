"""The shapes of the models `gridloop models make` writes (pure).

A Llama-architecture causal LM (Hugging Face's `LlamaForCausalLM`: the config.json keys and
tensor names transformers and vLLM read). Sizes are presets: `tiny` for tests, a few
hundred kilobytes; `1g`, just over 1 GiB of float16 weights, for the load benchmarks.
vLLM's CPU attention supports a head size of 32, 64, 80, 96, 112, 128, 160, 192, 224
or 256 (cpu_attn: 16 is refused), so every preset's is 64 or 128.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Shape:
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    vocab: int
    max_positions: int = 2048

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def tensors(self) -> dict[str, tuple[int, ...]]:
        """Every weight, by its name in the checkpoint, and its shape ([out, in] for
        linear layers, as torch stores them)."""
        h, kv = self.hidden, self.kv_heads * self.head_dim
        out: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (self.vocab, h)}
        for i in range(self.layers):
            p = f"model.layers.{i}"
            out[f"{p}.input_layernorm.weight"] = (h,)
            out[f"{p}.self_attn.q_proj.weight"] = (h, h)
            out[f"{p}.self_attn.k_proj.weight"] = (kv, h)
            out[f"{p}.self_attn.v_proj.weight"] = (kv, h)
            out[f"{p}.self_attn.o_proj.weight"] = (h, h)
            out[f"{p}.post_attention_layernorm.weight"] = (h,)
            out[f"{p}.mlp.gate_proj.weight"] = (self.intermediate, h)
            out[f"{p}.mlp.up_proj.weight"] = (self.intermediate, h)
            out[f"{p}.mlp.down_proj.weight"] = (h, self.intermediate)
        out["model.norm.weight"] = (h,)
        out["lm_head.weight"] = (self.vocab, h)
        return out

    def parameters(self) -> int:
        total = 0
        for shape in self.tensors().values():
            n = 1
            for d in shape:
                n *= d
            total += n
        return total

    def config(self, bos: int, eos: int, dtype: str) -> dict[str, Any]:
        """config.json, as transformers' LlamaConfig writes it."""
        return {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "hidden_size": self.hidden,
            "intermediate_size": self.intermediate,
            "num_hidden_layers": self.layers,
            "num_attention_heads": self.heads,
            "num_key_value_heads": self.kv_heads,
            "head_dim": self.head_dim,
            "hidden_act": "silu",
            "max_position_embeddings": self.max_positions,
            "rms_norm_eps": 1e-06,
            "rope_theta": 10000.0,
            "vocab_size": self.vocab,
            "bos_token_id": bos,
            "eos_token_id": eos,
            "tie_word_embeddings": False,
            "attention_bias": False,
            "mlp_bias": False,
            "torch_dtype": dtype,
        }


PRESETS = {
    "tiny": Shape(hidden=128, intermediate=256, layers=2, heads=2, kv_heads=1, vocab=512),
    "1g": Shape(hidden=2048, intermediate=5632, layers=12, heads=16, kv_heads=4, vocab=8192),
}
