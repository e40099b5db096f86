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

    With ``cfg.forcing == "reference"`` each request also gets its reference continuation
    (``workloads.references``: a RULER answer, the ShareGPT data's own reply), tokenized without
    special tokens and cut at the request's contract.

    Returns:
        The requests in manifest order, and the manifest's spec (``read_manifest``).

    Raises:
        ValueError: a prompt's token count differs from the manifest, a request does not fit
            ``max_model_len``, or a reference continuation is empty or holds ids outside the
            model's vocabulary (naming the request).
    """
    from vtoken.assets import sharegpt as sharegpt_asset
    from vtoken.bench.workloads import materialize, read_manifest, references
    from vtoken.bench.workloads.prompt import PromptRenderer

    requests, spec = read_manifest(Path(cfg.manifest))
    renderer = PromptRenderer(cfg.model_dir)
    dataset = sharegpt_asset.load(cfg.sharegpt_dir)
    prompts = materialize(requests, dataset, renderer, spec)
    refs = references(requests, dataset, renderer, spec) if cfg.forcing == "reference" else [None] * len(requests)
    max_len = cfg.max_model_len
    out = []
    for req, prompt, ref in zip(requests, prompts, refs):
        ids = tuple(renderer.ids(prompt))
        if len(ids) != req.prompt_tokens:
            raise ValueError(f"request {req.req_index}: {len(ids)} prompt tokens, manifest says {req.prompt_tokens}")
        max_tokens = min(req.max_tokens, cfg.max_tokens or req.max_tokens)
        if len(ids) + max_tokens > max_len:
            raise ValueError(f"request {req.req_index}: {len(ids)} + {max_tokens} tokens > max_model_len {max_len}")
        reference = ()
        if ref is not None:
            reference = tuple(renderer.tokenizer.encode(ref, add_special_tokens=False)[:max_tokens])
            check_forced(req.req_index, reference, len(ids), max_len, len(renderer.tokenizer))
        out.append(PreparedRequest(req.req_index, ids, max_tokens, req.ignore_eos, reference))
    return out, spec


def check_forced(req_index: int, ids, prompt_tokens: int, max_model_len: int, vocab_size: int) -> None:
    """A forced continuation a request can decode: not empty, within the model's window after its
    prompt, every id in the vocabulary.

    Raises:
        ValueError: naming the request, the value and what is allowed.
    """
    if not len(ids):
        raise ValueError(f"request {req_index}: its forced continuation is empty (the reference has no tokens)")
    if prompt_tokens + len(ids) > max_model_len:
        raise ValueError(f"request {req_index}: {prompt_tokens} prompt + {len(ids)} forced tokens > max_model_len "
                         f"{max_model_len}")
    bad = [int(t) for t in ids if not 0 <= int(t) < vocab_size]
    if bad:
        raise ValueError(f"request {req_index}: forced token id {bad[0]} outside the vocabulary [0, {vocab_size})")


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
