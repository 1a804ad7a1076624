"""Published model configs the calc tests share (each with the config.json it comes from)."""

from kvcalc.schema import ModelSpec

# huggingface.co/meta-llama/Llama-3.1-8B/blob/main/config.json
LLAMA_8B = ModelSpec(
    name="llama-3.1-8b",
    n_layers=32,
    n_heads=32,
    n_kv_heads=8,
    hidden_size=4096,
    vocab_size=128256,
    intermediate_size=14336,
    max_position_embeddings=131072,
)
# huggingface.co/google/gemma-3-27b-it config.json (text_config): 62 layers, 5 sliding : 1 full,
# window 1024, 32 heads, 16 KV heads, head_dim 128, hidden 5376, intermediate 21504, vocab 262208
GEMMA3_27B = ModelSpec(
    name="gemma-3-27b",
    n_layers=62,
    n_heads=32,
    n_kv_heads=16,
    head_dim=128,
    hidden_size=5376,
    intermediate_size=21504,
    vocab_size=262208,
    sliding_window=1024,
    layer_pattern=["sliding"] * 5 + ["full"],
    tie_word_embeddings=True,
    max_position_embeddings=131072,
)
# huggingface.co/deepseek-ai/DeepSeek-V2-Lite config.json: 27 layers, MLA 512 + 64, 16 heads
DSV2_LITE = ModelSpec(
    name="deepseek-v2-lite",
    n_layers=27,
    n_heads=16,
    hidden_size=2048,
    attention="mla",
    kv_lora_rank=512,
    qk_rope_head_dim=64,
    qk_nope_head_dim=128,
    v_head_dim=128,
    vocab_size=102400,
    intermediate_size=10944,
    moe_intermediate_size=1408,
    n_experts=64,
    n_experts_per_token=6,
    shared_expert_intermediate_size=2816,
    first_dense_layers=1,
)
