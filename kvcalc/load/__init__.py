"""Everything that reads a file: YAML / JSON with line numbers and duplicate keys refused
(`files`), model configs from a bundled name, a YAML file or a Hugging Face config.json
(`models`, with the config.json families in `hf/`), the GPU table (`gpus`), deployment files
(`deployments`), and YAML export (`export`). Nothing is imported at package import time.
"""
