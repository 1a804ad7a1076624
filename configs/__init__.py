"""Bundled model and deployment configs (ships in the wheel as kvcalc.configs)."""
