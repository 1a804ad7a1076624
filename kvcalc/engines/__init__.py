"""Engine profiles: what vLLM, SGLang and llama.cpp allocate, rule by rule, one module each."""
