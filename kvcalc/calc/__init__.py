"""Pure arithmetic: KV bytes per layer kind (`kv_cache`), weights and parameter counts
(`weights`), the per-GPU memory plan (`memory_plan`) and the decode roofline (`roofline`).

No I/O, no rich, no CLI words: every function takes schema objects and numbers and returns
numbers or result models. Nothing is imported at package import time.
"""
