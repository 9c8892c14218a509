"""The KV pool a deployment runs with, in tokens: given, or estimated and labelled as such.

How many requests can sit at committed length ``s`` at once is bounded by the pool: a pooled buffer
that fails only when a whole graph batch of ``n`` requests is at ``s`` needs ``n * s`` KV tokens.
SGLang sizes the pool at start-up from what is left of the GPU's memory after the weights
(``--mem-fraction-static`` of it), or takes ``--max-total-tokens``. A check cannot measure the
memory, so without that flag it estimates, per tensor-parallel rank:

    pool_tokens = (gpu_bytes * mem_fraction_static - weights_bytes / tp) / kv_bytes_per_token_per_rank

where an MHA model's KV heads split across ranks (``kv_bytes / tp``) and an MLA model's latent does
not. Worked example: Llama-3.1-8B (32 layers, 8 KV heads of 128, bf16: 131072 bytes a token; about
16.1 GB of weights) on one 80 GiB GPU at fraction 0.85: (85899345920 * 0.85 - 16060522496) / 131072
is about 434,000 tokens, so 8 requests of 131072 tokens (1,048,576) do not fit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

ASSUMED_MEM_FRACTION = 0.85  # the workbench's stand-in where the engine picks it at start-up


@dataclass(frozen=True)
class Pool:
    tokens: int | None
    source: str  # "--max-total-tokens", or how it was estimated, or why it is unknown
    estimated: bool


def dense_weights_bytes(config: Mapping[str, object], dtype_bytes: int = 2) -> int | None:
    """Parameters of a dense decoder (embeddings, attention, gated MLP) times ``dtype_bytes``; None
    for a config that is not of that shape (MoE, MLA)."""
    keys = ("hidden_size", "num_hidden_layers", "intermediate_size", "vocab_size", "num_attention_heads")
    values = [config.get(k) for k in keys]
    if not all(isinstance(v, int) for v in values) or any(k in config for k in ("num_experts", "n_routed_experts",
                                                                               "num_local_experts", "kv_lora_rank")):
        return None
    hidden, layers, inter, vocab, heads = (int(str(v)) for v in values)
    kv_heads = int(str(config.get("num_key_value_heads", heads)))
    head_dim = int(str(config.get("head_dim", hidden // heads)))
    attention = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2
    embeddings = vocab * hidden * (1 if config.get("tie_word_embeddings") else 2)
    return (embeddings + layers * (attention + 3 * hidden * inter)) * dtype_bytes


def estimate(*, max_total_tokens: int | None, gpu: str, gpu_memory_gib: float, mem_fraction: float | None,
             weights_bytes: int | None, kv_bytes_per_token: int | None, tp: int, mla: bool) -> Pool:
    if max_total_tokens is not None:
        return Pool(max_total_tokens, "--max-total-tokens", False)
    if kv_bytes_per_token is None or weights_bytes is None:
        missing = "its KV bytes per token" if kv_bytes_per_token is None else "its weights' size (a dense model's only)"
        return Pool(None, f"unknown: the workbench cannot estimate {missing} (give --max-total-tokens)", True)
    fraction = mem_fraction if mem_fraction is not None else ASSUMED_MEM_FRACTION
    per_rank_kv = kv_bytes_per_token if mla else max(1, kv_bytes_per_token // tp)
    free = gpu_memory_gib * (1 << 30) * fraction - weights_bytes / tp
    tokens = max(0, int(free // per_rank_kv))
    said = "--mem-fraction-static" if mem_fraction is not None else f"{ASSUMED_MEM_FRACTION} assumed"
    return Pool(tokens, f"estimated: {gpu} {gpu_memory_gib:g} GiB x {fraction:g} ({said}) - weights "
                        f"{weights_bytes / 1e9:.1f} GB / tp {tp}, {per_rank_kv} KV bytes a token a rank", True)
