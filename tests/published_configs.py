"""Published model configs that several test files use, each as its publisher's config.json
holds it (the fields kvcalc reads), so one copy serves every test."""

# nvidia/Nemotron-H-8B-Base-8K config.json
NEMOTRON_H_8B = {
    "architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h", "hidden_size": 4096,
    "hybrid_override_pattern": "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-",
    "intermediate_size": 21504, "max_position_embeddings": 8192, "num_attention_heads": 32,
    "num_hidden_layers": 52, "num_key_value_heads": 8, "head_dim": 128, "mamba_num_heads": 128,
    "mamba_head_dim": 64, "ssm_state_size": 128, "n_groups": 8, "conv_kernel": 4, "expand": 2,
    "torch_dtype": "bfloat16", "vocab_size": 131072}

# deepseek-ai/DeepSeek-V3.2-Exp config.json: the V3 fields (61 layers, kv_lora_rank 512,
# qk_rope_head_dim 64) plus the indexer's (index_head_dim 128)
DEEPSEEK_V32 = {
    "architectures": ["DeepseekV32ForCausalLM"], "model_type": "deepseek_v32", "hidden_size": 7168,
    "intermediate_size": 18432, "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64,
    "qk_nope_head_dim": 128, "v_head_dim": 128, "num_attention_heads": 128, "num_hidden_layers": 61,
    "num_key_value_heads": 128, "n_routed_experts": 256, "n_shared_experts": 1, "moe_intermediate_size": 2048,
    "num_experts_per_tok": 8, "first_k_dense_replace": 3, "moe_layer_freq": 1, "max_position_embeddings": 163840,
    "index_head_dim": 128, "index_n_heads": 64, "index_topk": 2048, "torch_dtype": "bfloat16",
    "rope_scaling": {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096, "beta_fast": 32,
                     "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0},
    "vocab_size": 129280}
