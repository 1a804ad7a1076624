"""kvcalc: exact KV-cache bytes and roofline decode throughput for real LLM architectures.

Importing this package does no work and imports nothing heavy (no torch, no rich).
"""

__version__ = "0.2.0"
