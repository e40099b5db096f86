"""The experimental grid of a pipeline config: its setups, and the serving, lm-eval and RULER runs."""
