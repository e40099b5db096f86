"""vToken: token-level virtualization for reclaimable KV caches (arXiv 2608.13263).

The core library (token table, arms, policies, replay) never imports vLLM; the engine
integration lives in the plugin modules and is loaded through vLLM's entry points.
"""

__version__ = "0.1.0"
