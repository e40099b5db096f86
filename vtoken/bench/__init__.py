"""Paired trial harness, engine-independent half: workloads, raw-table schemas, DESIGN §5
metrics, paired statistics and output quality.

The trial runner that drives the vLLM engine writes the raw tables of ``schema``; everything
here reads them (or hand-made tables in tests) and never imports vLLM.
"""
