"""The reference models a vLLM release is asked about: small configs the engine reads as local models.

Written to a temporary folder by the learn worker (``learn_worker``: the reference launch
command's model, the DSA buffers' shape) and by the vLLM launch adapter (its warm-up command). Plain
data: imports nothing; imported by both, so neither imports the other for it.
"""

from __future__ import annotations

# A DSA model small enough to configure quickly: DeepSeek-V3.2's attention shape (MLA, the
# indexer's index_topk / index_n_heads / index_head_dim) with two layers. The learner's own
# stand-in, written to a temporary folder: the engine reads it as a local model.
REFERENCE_DSA = {
    "architectures": ["DeepseekV32ForCausalLM"], "model_type": "deepseek_v32", "hidden_size": 1024,
    "intermediate_size": 2048, "moe_intermediate_size": 256, "num_hidden_layers": 2, "first_k_dense_replace": 1,
    "num_attention_heads": 16, "num_key_value_heads": 16, "n_routed_experts": 8, "n_shared_experts": 1,
    "num_experts_per_tok": 2, "n_group": 1, "topk_group": 1, "kv_lora_rank": 512, "q_lora_rank": 768,
    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "index_topk": 2048, "index_n_heads": 64,
    "index_head_dim": 128, "max_position_embeddings": 163840, "vocab_size": 4096, "rope_theta": 10000,
    "rms_norm_eps": 1e-06, "hidden_act": "silu", "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "num_nextn_predict_layers": 1, "topk_method": "noaux_tc", "scoring_func": "sigmoid", "norm_topk_prob": True,
    "routed_scaling_factor": 2.5, "moe_layer_freq": 1,
    "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
                     "original_max_position_embeddings": 4096, "type": "yarn"},
}


# A small Llama: the reference command's model (every release knows the architecture).
REFERENCE_LLAMA = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 1024, "intermediate_size": 2816,
    "num_attention_heads": 16, "num_key_value_heads": 8, "num_hidden_layers": 2, "vocab_size": 32000,
    "max_position_embeddings": 8192, "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "torch_dtype": "bfloat16",
}
REFERENCE_MODELS = {"dsa": REFERENCE_DSA, "llama": REFERENCE_LLAMA}
# A tokenizer of two words, beside the Llama's config: releases whose scheduler's structured-output
# manager loads the model's tokenizer whatever --skip-tokenizer-init says (0.9.x) find one.
REFERENCE_TOKENIZER = {
    "tokenizer.json": {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
                       "pre_tokenizer": {"type": "Whitespace"}, "post_processor": None, "decoder": None,
                       "model": {"type": "WordLevel", "vocab": {"<unk>": 0, "a": 1}, "unk_token": "<unk>"}},
    "tokenizer_config.json": {"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "<unk>"},
}
