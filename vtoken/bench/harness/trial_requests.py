"""Which requests a trial runs: the manifest's requests, each pair's sample, their arrival.

Every request of the manifest is prepared once per run (prompt re-derived from ShareGPT,
hash-checked, tokenized; contract capped at ``--max-tokens``). Pair p runs its own sample of
``--num-requests`` rows (``trials.pair_sample``: disjoint across pairs, the same for every
arm and C of the pair), or the whole manifest; a one-wave trial at C runs the first C rows
of it. Requests arrive in a closed loop at C, or by ``--rate`` (Poisson, at most C in flight).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from vtoken.bench.harness.arm_engine import PreparedRequest
from vtoken.bench.raw.trials import pair_sample

if TYPE_CHECKING:
    from vtoken.bench.harness.run_config import RunConfig


def load_requests(cfg: RunConfig) -> tuple[list[PreparedRequest], dict[str, Any]]:
    """Every request of the manifest (contracts capped at ``max_tokens``), prompts
    re-derived from ShareGPT, hash-checked and tokenized; ``sample`` picks rows.

    Returns:
        The requests in manifest order, and the manifest's spec (``read_manifest``).

    Raises:
        ValueError: a prompt's token count differs from the manifest, or a request does
            not fit ``max_model_len``.
    """
    from vtoken.assets import sharegpt as sharegpt_asset
    from vtoken.bench.workloads import materialize, read_manifest
    from vtoken.bench.workloads.prompt import PromptRenderer

    requests, spec = read_manifest(Path(cfg.manifest))
    renderer = PromptRenderer(cfg.model_dir)
    prompts = materialize(requests, sharegpt_asset.load(cfg.sharegpt_dir), renderer, spec)
    max_len = cfg.max_model_len
    out = []
    for req, prompt in zip(requests, prompts):
        ids = tuple(renderer.ids(prompt))
        if len(ids) != req.prompt_tokens:
            raise ValueError(f"request {req.req_index}: {len(ids)} prompt tokens, manifest says {req.prompt_tokens}")
        max_tokens = min(req.max_tokens, cfg.max_tokens or req.max_tokens)
        if len(ids) + max_tokens > max_len:
            raise ValueError(f"request {req.req_index}: {len(ids)} + {max_tokens} tokens > max_model_len {max_len}")
        out.append(PreparedRequest(req.req_index, ids, max_tokens, req.ignore_eos))
    return out, spec


def sample(cfg: RunConfig, pair: int) -> tuple[int, ...]:
    """Manifest rows pair ``pair`` runs, in submission order (see ``RunConfig.num_requests``)."""
    if cfg.num_requests is None:
        return tuple(range(cfg.num_manifest_rows))
    return pair_sample(cfg.num_manifest_rows, cfg.num_requests, cfg.seed, pair)


def trial_rows(cfg: RunConfig, pair: int, concurrency: int) -> tuple[int, ...]:
    """Manifest rows the trial of ``pair`` at C = ``concurrency`` runs: the pair's sample, or
    with ``one_wave`` its first C rows (every C of a pair runs a prefix of the same sample)."""
    rows = sample(cfg, pair)
    return rows[:concurrency] if cfg.one_wave else rows


def arrival(cfg: RunConfig) -> dict[str, Any] | None:
    """Arrival spec for ``arrival_from_config`` without C (None: closed loop)."""
    return {"kind": "poisson", "rate": cfg.rate} if cfg.rate else None
