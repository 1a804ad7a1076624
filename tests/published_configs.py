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

# tiiuae/Falcon-H1-7B-Instruct config.json (geometry as transformers' FalconH1 table gives it:
# 44 layers, 12 heads on 2 KV heads of 128, 24 Mamba-2 heads of 128, d_state 256)
FALCON_H1_7B = {
    "architectures": ["FalconH1ForCausalLM"], "model_type": "falcon_h1", "attention_bias": False,
    "attn_layer_indices": None, "head_dim": 128, "hidden_act": "silu", "hidden_size": 3072,
    "intermediate_size": 12288, "mamba_chunk_size": 128, "mamba_conv_bias": True, "mamba_d_conv": 4,
    "mamba_d_head": 128, "mamba_d_ssm": 3072, "mamba_d_state": 256, "mamba_expand": 2, "mamba_n_groups": 1,
    "mamba_n_heads": 24, "mamba_norm_before_gate": False, "mamba_proj_bias": False, "mamba_rms_norm": False,
    "max_position_embeddings": 262144, "mlp_bias": False, "num_attention_heads": 12, "num_hidden_layers": 44,
    "num_key_value_heads": 2, "projectors_bias": False, "rope_theta": 1e11, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "vocab_size": 130048}

# ibm-granite/granite-4.0-h-tiny config.json (from memory of the model page: hidden 1536, 40
# layers of which 4 attention, Mamba-2 48 heads x 64, state 128, 1 group; 64 experts of 512, 6 per
# token, shared MLP 1024)
GRANITE_H_TINY = {
    "architectures": ["GraniteMoeHybridForCausalLM"], "model_type": "granitemoehybrid", "hidden_size": 1536,
    "num_hidden_layers": 40, "num_attention_heads": 12, "num_key_value_heads": 4,
    "layer_types": ["attention" if i in (5, 15, 25, 35) else "mamba" for i in range(40)],
    "mamba_n_heads": 48, "mamba_d_head": 64, "mamba_d_state": 128, "mamba_n_groups": 1, "mamba_d_conv": 4,
    "mamba_expand": 2, "num_local_experts": 64, "num_experts_per_tok": 6, "intermediate_size": 512,
    "shared_intermediate_size": 1024, "max_position_embeddings": 131072, "position_embedding_type": "nope",
    "tie_word_embeddings": True, "torch_dtype": "bfloat16", "vocab_size": 100352}
