"""The benchmark harness around the engine, one package per concept.

``workloads`` (the request manifests), ``harness`` (the trial runner, each arm's engine, the
server), ``raw`` (the raw tables' contract: what the harness writes and analysis reads),
``analysis`` (metrics, statistics, verdicts: raw tables in, never vLLM), ``lmeval`` (quality
through lm-eval: ShareGPT tasks, RULER) and ``grid`` (the pipeline's experiments). The command
line is ``python -m vtoken.bench`` (``__main__``).
"""
