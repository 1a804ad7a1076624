"""Pure arithmetic: KV bytes per layer kind (`kv_cache`), weights and parameter counts
(`weights`), the per-GPU memory plan (`memory_plan`), the decode roofline (`roofline`) and a
deployment checked against its GPU and targets (`check`).

No I/O, no rich, no CLI words: every function takes schema objects and numbers and returns
numbers or result models (`kvcalc.results`); an error names its `field` as data and the CLI
renders the flag. Nothing is imported at package import time.
"""
