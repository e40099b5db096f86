"""Column schemas of the raw tables a trial writes, and their validation.

A trial (one arm, one setup, one concurrency, one repetition ``pair``) writes, under
``data/raw/<trial_id>/`` (``trial_id`` = ``<setup>/<arm>/c<C>/p<pair>``, see
``vtoken.bench.raw.trials.TrialKey``), through ``vtoken.bench.raw.rawio.write_trial`` (validated,
atomic, never overwritten):

- ``requests.parquet``: ``REQUEST_COLUMNS``, one row per request of the workload;
- ``steps.parquet``: ``STEP_COLUMNS``, one row per engine step x request scheduled in it
  (block-level truth: what the request holds, what of it is live);
- ``engine_steps.parquet``: ``ENGINE_STEP_COLUMNS``, one row per engine step (overheads);
- ``tokens.parquet`` (teacher-forced and recorded trials only): ``TOKEN_COLUMNS``, one row per
  request x output position: the token emitted, its negative log-likelihood, the arg-max and the
  log-probabilities of the watched (or top-k) ids (``vtoken.plugin.forcing``);
- ``trial.json``: one ``TRIAL_COLUMNS`` record plus provenance (git sha, package versions,
  config, model, workload manifest sha256).

Times are seconds from the trial's start on one monotonic clock. Trials with the same
``setup``, ``concurrency`` and ``pair`` but different ``arm`` are a paired set: they share
the workload, seed and pool, and differ only in the arm (arm order randomised per pair).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import pandas as pd

DTYPES = ("int64", "float64", "string", "bool")
RAW_FILES = {"requests": "requests.parquet", "steps": "steps.parquet",
             "engine_steps": "engine_steps.parquet", "tokens": "tokens.parquet", "trial": "trial.json"}
PAIR_KEYS = ("setup", "concurrency", "pair")


@dataclass(frozen=True)
class Column:
    """One column: name, dtype (one of ``DTYPES``) and meaning."""

    name: str
    dtype: str
    doc: str

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ValueError(f"column {self.name!r}: dtype={self.dtype!r}, allowed {DTYPES}")


def _cols(*specs: tuple[str, str, str]) -> tuple[Column, ...]:
    return tuple(Column(*s) for s in specs)


TRIAL_COLUMNS = _cols(
    ("trial_id", "string", "TrialKey.trial_id: '<setup>/<arm>/c<C>/p<pair>'"),
    ("setup", "string", "named setup: workload, policy, eviction ratio, pool, model"),
    ("workload", "string", "manifest name, e.g. 'sharegpt-s0'"),
    ("arm", "string", "KV strategy (docs/design.md §5): full, naive, holefill, vtoken, ..."),
    ("base_arm", "string", "the implemented arm the trial ran: arm itself, or the arm of a variant (naive_aa -> naive)"),
    ("policy", "string", "eviction policy (h2o, scissorhands, streamingllm, random; none: evicts nothing; builtin: a self-evicting baseline)"),
    ("pair", "int64", "repetition index; equal (setup, concurrency, pair) = one paired set"),
    ("seed", "int64", "trials.pair_seed(base seed, pair): engine, Random policy, arm order"),
    ("concurrency", "int64", "C: closed-loop concurrency (or max in flight)"),
    ("arm_position", "int64", "position of this arm in the pair's order (row of the Williams design)"),
    ("num_gpu_blocks", "int64", "fixed KV pool in blocks, headroom included"),
    ("block_size", "int64", "B, tokens per block"),
    ("wall_s", "float64", "trial wall time"),
    ("sample_sha256", "string", "trials.sample_sha256: identity of the pair's request sample (equal within a pair)"),
    ("sample_indices", "string", "manifest rows the trial ran, comma-separated, in submission order"),
    ("forcing", "string", "teacher forcing of the run: 'native', 'reference', or '' (free-running)"),
    ("capacity_probe", "bool", "a capacity-search probe (vtoken.bench.harness.capacity_search): its arm alone at a C "
     "off the fixed grid, counted for feasible C only; False: a trial of the fixed grid"),
    ("sure_failure_c", "int64", "with the capacity search, for a searched arm: the smallest C at which its requests "
     "of the pair's sample surely fail the pool at their budget (grid.censoring.sure_failure; never run), 0: none "
     "within the sample, or no search"),
)

REQUEST_COLUMNS = _cols(
    ("trial_id", "string", "trial"),
    ("arm", "string", "KV strategy"),
    ("req_index", "int64", "row of the workload manifest"),
    ("req_id", "string", "engine request id"),
    ("arrival_s", "float64", "submitted to the engine"),
    ("first_token_s", "float64", "first output token received (NaN: none)"),
    ("finish_s", "float64", "last output token received (NaN: did not finish)"),
    ("prompt_tokens", "int64", "prompt tokens"),
    ("output_tokens", "int64", "output tokens generated"),
    ("max_tokens", "int64", "output contract of the request"),
    ("finish_reason", "string", "'stop', 'length', 'abort' or 'error'"),
    ("num_preemptions", "int64", "times the scheduler preempted the request"),
    ("output_sha256", "string", "output_sha256(token ids): equal iff the outputs are token-identical"),
    ("output_text", "string", "decoded output"),
)

STEP_COLUMNS = _cols(
    ("trial_id", "string", "trial"),
    ("arm", "string", "KV strategy"),
    ("step", "int64", "engine step number"),
    ("t_s", "float64", "end of the step"),
    ("req_id", "string", "request scheduled in the step"),
    ("phase", "string", "'prefill' or 'decode' (of this request in this step)"),
    ("num_tokens", "int64", "logical tokens of the request so far (prompt + output)"),
    ("live_tokens", "int64", "tokens not evicted, after this step's eviction"),
    ("blocks_held", "int64", "blocks the request holds after this step (null blocks excluded)"),
    ("charged_blocks", "int64", "whole pool blocks handed out for the request's side storage (Zipage query "
     "cache, DiffKV low tier; 0 for the other arms): what the pool must give"),
    ("side_blocks", "float64", "the same side storage in exact block-equivalents (its bytes / one pool block's "
     "bytes, fractional; <= charged_blocks): what retained blocks count"),
    ("low_tokens", "int64", "live tokens held in a low tier outside the pool (DiffKV; 0 otherwise)"),
    ("block_size", "int64", "B"),
    ("blocks_util_le_25", "int64", "held blocks with live/B <= 0.25"),
    ("blocks_util_25_50", "int64", "held blocks with 0.25 < live/B <= 0.50"),
    ("prefix_blocks", "int64", "of blocks_held, the request's prefix blocks: full prompt blocks in the prefix "
     "cache, read-only (0 without prefix caching; vtoken.plugin.prefix_cache)"),
    ("shared_blocks", "int64", "of blocks_held, blocks another running request holds too (ref count > 1)"),
)

ENGINE_STEP_COLUMNS = _cols(
    ("trial_id", "string", "trial"),
    ("arm", "string", "KV strategy"),
    ("step", "int64", "engine step number"),
    ("t_s", "float64", "end of the step"),
    ("num_running", "int64", "requests running"),
    ("num_waiting", "int64", "requests waiting (not yet admitted, or preempted)"),
    ("num_free_blocks", "int64", "free blocks in the pool after the step"),
    ("reserved_blocks", "int64", "block-equivalents the arm reserves (headroom, side buffers; docs/design.md §3.5)"),
    ("planner_cpu_s", "float64", "reclamation planner CPU time in the step"),
    ("copy_s", "float64", "relocation copy time in the step"),
    ("indirection_s", "float64", "token-view indirection time (slot translation) in the step"),
    ("tokens_relocated", "int64", "tokens moved by relocation in the step"),
    ("bytes_relocated", "int64", "KV bytes copied by relocation in the step"),
    ("blocks_freed", "int64", "blocks returned to the pool by reclamation in the step"),
    ("reclaim_asked", "int64", "blocks the scheduler asked a reclaim round to free this step instead of "
     "preempting (compaction before preemption; 0 otherwise)"),
    ("reclaim_paused", "int64", "running requests the scheduler paused for that round"),
    ("reclaimed", "int64", "blocks the reclaim round freed (part of blocks_freed)"),
    ("reclaim_s", "float64", "time of the reclaim round (planner + copy + apply; part of planner_cpu_s + copy_s)"),
)

TOKEN_COLUMNS = _cols(
    ("trial_id", "string", "trial"),
    ("arm", "string", "KV strategy"),
    ("req_index", "int64", "row of the workload manifest"),
    ("pos", "int64", "output position (0: the first output token)"),
    ("token", "int64", "the token emitted there (the forced one; the sampled one in a recorded-only run)"),
    ("nll", "float64", "-log p(token) under the step's raw distribution (nats, float32 log-softmax)"),
    ("argmax", "int64", "the most probable token of that distribution"),
    ("ids", "string", "the watched ids (the reference's top-k at this position) or the own top-k, comma-joined"),
    ("lps", "string", "their log-probabilities, comma-joined Python float reprs (exact round trip)"),
)

TABLES = {"trials": TRIAL_COLUMNS, "requests": REQUEST_COLUMNS, "steps": STEP_COLUMNS,
          "engine_steps": ENGINE_STEP_COLUMNS, "tokens": TOKEN_COLUMNS}
# Columns that raw tables written by earlier versions of the harness lack, with the value such a
# trial had (no forcing, no capacity probe, no prefix caching, no reclaim rounds): a raw table
# without them reads them so.
ADDED_LATER = {"trials": {"forcing": "", "capacity_probe": False, "sure_failure_c": 0}, "steps": {"prefix_blocks": 0, "shared_blocks": 0},
               "engine_steps": {"reclaim_asked": 0, "reclaim_paused": 0, "reclaimed": 0, "reclaim_s": 0.0}}


def output_sha256(token_ids: list[int]) -> str:
    """Hash of an output for the ``output_sha256`` column: sha256 of the token ids written in
    decimal, comma-joined (token ids rather than text, so that two outputs decoding to the
    same text from different tokens still differ)."""
    return hashlib.sha256(",".join(str(int(t)) for t in token_ids).encode()).hexdigest()


def empty_frame(columns: tuple[Column, ...]) -> pd.DataFrame:
    """An empty DataFrame with the schema's columns and dtypes."""
    return pd.DataFrame({c.name: pd.Series(dtype=c.dtype) for c in columns})


def validate(df: pd.DataFrame, table: str) -> pd.DataFrame:
    """Check a raw table against its schema and invariants; return it with schema dtypes.

    Args:
        df: the table; extra columns are kept after the schema's; a column of
            ``ADDED_LATER`` it lacks takes its default.
        table: a key of ``TABLES``.

    Returns:
        A copy with the schema's columns first, cast to the schema's dtypes.

    Raises:
        ValueError: unknown table, missing column, uncastable column, or a broken invariant
            (the message names the column, a row and the constraint).
    """
    if table not in TABLES:
        raise ValueError(f"table={table!r}: allowed {sorted(TABLES)}")
    columns = TABLES[table]
    later = {k: v for k, v in ADDED_LATER.get(table, {}).items() if k not in df.columns}
    if later:
        df = df.assign(**later)
    missing = [c.name for c in columns if c.name not in df.columns]
    if missing:
        raise ValueError(f"{table}: missing columns {missing}")
    out = df[[c.name for c in columns] + [c for c in df.columns if c not in {x.name for x in columns}]].copy()
    for c in columns:
        if c.dtype == "int64" and out[c.name].isna().any():
            raise ValueError(f"{table}.{c.name}: holds missing values, dtype int64 allows none")
        try:
            out[c.name] = out[c.name].astype(c.dtype)
        except (TypeError, ValueError) as err:
            raise ValueError(f"{table}.{c.name}: cannot cast to {c.dtype} ({err})") from err
    _INVARIANTS.get(table, lambda _: None)(out)
    return out


def _fail_if(mask: pd.Series, df: pd.DataFrame, table: str, constraint: str) -> None:
    mask = mask.fillna(False).to_numpy(dtype=bool)
    if mask.any():
        row = int(np.flatnonzero(mask)[0])
        raise ValueError(f"{table}: row {row} breaks {constraint}: {df.iloc[row].to_dict()}")


def _check_requests(df: pd.DataFrame) -> None:
    _fail_if(df.first_token_s < df.arrival_s, df, "requests", "arrival_s <= first_token_s")
    _fail_if(df.finish_s < df.first_token_s, df, "requests", "first_token_s <= finish_s")
    _fail_if(df.output_tokens > df.max_tokens, df, "requests", "output_tokens <= max_tokens")
    _fail_if((df.output_tokens < 0) | (df.num_preemptions < 0), df, "requests", "counts >= 0")
    allowed = {"stop", "length", "abort", "error"}
    _fail_if(~df.finish_reason.isin(allowed), df, "requests", f"finish_reason in {sorted(allowed)}")


def _check_steps(df: pd.DataFrame) -> None:
    _fail_if(df.live_tokens - df.low_tokens > df.blocks_held * df.block_size, df, "steps",
             "live_tokens - low_tokens <= blocks_held * block_size")
    _fail_if((df.charged_blocks < 0) | (df.low_tokens < 0) | (df.low_tokens > df.live_tokens), df, "steps",
             "0 <= charged_blocks and 0 <= low_tokens <= live_tokens")
    _fail_if((df.side_blocks < 0) | (df.side_blocks > df.charged_blocks), df, "steps",
             "0 <= side_blocks <= charged_blocks")
    _fail_if(df.live_tokens > df.num_tokens, df, "steps", "live_tokens <= num_tokens")
    _fail_if((df.prefix_blocks > df.blocks_held) | (df.shared_blocks > df.blocks_held), df, "steps",
             "prefix_blocks, shared_blocks <= blocks_held")
    _fail_if(df.blocks_util_le_25 + df.blocks_util_25_50 > df.blocks_held, df, "steps",
             "blocks_util_le_25 + blocks_util_25_50 <= blocks_held")
    _fail_if(~df.phase.isin({"prefill", "decode"}), df, "steps", "phase in ['decode', 'prefill']")
    _fail_if(df.block_size < 1, df, "steps", "block_size >= 1")


def _check_tokens(df: pd.DataFrame) -> None:
    _fail_if((df.pos < 0) | (df.token < 0) | (df.argmax < 0), df, "tokens", "pos, token, argmax >= 0")
    # float32 rounding may put log p of a near-certain token a hair above 0
    _fail_if(~(df.nll >= -1e-5), df, "tokens", "nll >= 0 (a negative log-likelihood; -1e-5 allowed for rounding)")
    counts = df.ids.str.count(",") - df.lps.str.count(",")
    _fail_if(counts != 0, df, "tokens", "ids and lps of equal length")


_INVARIANTS = {"requests": _check_requests, "steps": _check_steps, "tokens": _check_tokens}
