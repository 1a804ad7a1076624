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
