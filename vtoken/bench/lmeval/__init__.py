"""Quality on the field's benchmarks through lm-eval: the ShareGPT tasks, RULER, an arm behind vLLM's server."""
