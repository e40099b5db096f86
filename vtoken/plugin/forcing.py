"""Teacher forcing: a request decodes a given continuation token by token, and every sampled
step records what the model made of it (worker side).

Quality under eviction is measured the way StreamingLLM and H2O measure it: every arm decodes
the *same* text, so every arm's eviction decisions follow the same tokens and each step of each
arm pairs with the same step of the reference. A request asks for it in its sampling parameters,
``SamplingParams(extra_args={FORCING_KEY: {...}})`` (:func:`forcing_of` reads and checks it):

- ``ids``: the continuation to force. At its k-th sampled step the request emits ``ids[k]``
  whatever the model would have sampled (the sampler runs as usual; its choice is replaced
  before vLLM's bookkeeping, so the forced token is what the next step reads and what the
  request returns). Absent: the request samples as usual and is only recorded (the reference's
  own run).
- ``watch``: per step, the token ids whose log-probabilities to record (the reference's top-k at
  that step): one list per forced token.
- ``topk``: without ``watch``, record the ``topk`` most probable tokens and their
  log-probabilities (what the reference's run records, so that its top-k becomes the arms'
  ``watch``).

Each recorded step gives a :class:`ForcedToken` (``StepStats.forced``; the metrics sink's
request line ``forced``): the output position, the token emitted, its negative log-likelihood
and the arg-max of the model's raw distribution, and the watched (or top-k) ids with their
log-probabilities. Log-probabilities are ``log_softmax`` of the step's raw logits in float32,
before any logits processor, penalty or temperature (vLLM's ``raw_logprobs``), computed one row
at a time, so a row's numbers do not depend on the other rows of the batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

FORCING_KEY = "vtoken_forcing"
MAX_TOPK = 256  # what one step may record: a sink line per request stays small


@dataclass(frozen=True)
class Forcing:
    """One request's forcing (:func:`forcing_of`): the ids to force (None: record only), the ids
    to watch per step (None: record the top ``topk``)."""

    ids: tuple[int, ...] | None = None
    watch: tuple[tuple[int, ...], ...] | None = None
    topk: int = 0

    def watched(self, pos: int) -> tuple[int, ...] | None:
        """The ids to record at output position ``pos`` (None: the top ``topk``)."""
        if self.watch is None:
            return None
        return self.watch[pos] if pos < len(self.watch) else ()


@dataclass(frozen=True)
class ForcedToken:
    """What one sampled step of a recorded request measured (JSON-able through ``as_dict``).

    Attributes:
        pos: output position (0: the first output token).
        token: the token the request emitted (forced, or sampled when nothing is forced).
        nll: ``-log p(token)`` under the step's raw distribution (nats).
        argmax: the most probable token of that distribution.
        ids: the watched ids (or the top-k, most probable first).
        lps: their log-probabilities, in the order of ``ids``.
    """

    pos: int
    token: int
    nll: float
    argmax: int
    ids: tuple[int, ...]
    lps: tuple[float, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"pos": self.pos, "token": self.token, "nll": self.nll, "argmax": self.argmax, "ids": list(self.ids),
                "lps": list(self.lps)}


def _ids(value: Any, field: str, vocab_size: int | None) -> tuple[int, ...]:
    if not isinstance(value, (list, tuple)) or any(isinstance(t, bool) or not isinstance(t, int) for t in value):
        raise ValueError(f"extra_args[{FORCING_KEY!r}][{field!r}]={str(value)[:80]}: must be a list of token ids")
    bad = [t for t in value if t < 0 or (vocab_size is not None and t >= vocab_size)]
    if bad:
        raise ValueError(f"extra_args[{FORCING_KEY!r}][{field!r}]: token id {bad[0]} outside the vocabulary "
                         f"[0, {vocab_size})")
    return tuple(value)


def forcing_of(sampling_params, vocab_size: int | None = None, max_tokens: int | None = None) -> Forcing | None:
    """The forcing a request asks for (module docstring), checked; None when it asks for none.

    Args:
        sampling_params: the request's ``SamplingParams`` (or None).
        vocab_size: the model's vocabulary (ids must lie in [0, vocab_size)); None: not checked.
        max_tokens: the request's output contract; forced ids must fill it exactly (a longer one
            could never be emitted, a shorter one would leave steps unforced).

    Raises:
        ValueError: naming the field, the value and what is allowed.
    """
    extra = getattr(sampling_params, "extra_args", None) or {}
    spec = extra.get(FORCING_KEY)
    if spec is None:
        return None
    if not isinstance(spec, dict):
        raise ValueError(f"extra_args[{FORCING_KEY!r}]={spec!r}: must be a dict with 'ids', 'watch' and/or 'topk'")
    unknown = sorted(set(spec) - {"ids", "watch", "topk"})
    if unknown:
        raise ValueError(f"extra_args[{FORCING_KEY!r}]: unknown keys {unknown}; allowed ['ids', 'topk', 'watch']")
    ids = _ids(spec["ids"], "ids", vocab_size) if spec.get("ids") is not None else None
    if ids is not None and not ids:
        raise ValueError(f"extra_args[{FORCING_KEY!r}]['ids']=[]: the forced continuation is empty")
    if ids is not None and max_tokens is not None and len(ids) != max_tokens:
        raise ValueError(f"extra_args[{FORCING_KEY!r}]['ids']: {len(ids)} forced tokens, but max_tokens={max_tokens} "
                         "(they must be equal)")
    watch = None
    if spec.get("watch") is not None:
        if not isinstance(spec["watch"], (list, tuple)):
            raise ValueError(f"extra_args[{FORCING_KEY!r}]['watch']: must be a list of id lists, one per step")
        watch = tuple(_ids(w, "watch", vocab_size) for w in spec["watch"])
        if any(len(w) > MAX_TOPK for w in watch):
            raise ValueError(f"extra_args[{FORCING_KEY!r}]['watch']: at most {MAX_TOPK} ids per step")
    topk = spec.get("topk", 0)
    if isinstance(topk, bool) or not isinstance(topk, int) or not 0 <= topk <= MAX_TOPK:
        raise ValueError(f"extra_args[{FORCING_KEY!r}]['topk']={topk!r}: must be an integer in [0, {MAX_TOPK}]")
    return Forcing(ids, watch, topk)


def measure(logits: torch.Tensor, row: int, pos: int, forcing: Forcing, token: int) -> ForcedToken:
    """The record of one row of a step's raw ``logits`` (float32 log-softmax of that row alone):
    ``token`` is what the request emits at output position ``pos``."""
    lp = torch.log_softmax(logits[row].to(torch.float32), dim=-1)
    watched = forcing.watched(pos)
    if watched is None:
        k = min(forcing.topk, lp.numel())
        values, ids = torch.topk(lp, k) if k else (lp[:0], torch.zeros(0, dtype=torch.long))
        ids_t = tuple(int(i) for i in ids.tolist())
    else:
        ids_t = watched
        values = lp[torch.tensor(watched, dtype=torch.long)] if watched else lp[:0]
    return ForcedToken(pos=pos, token=int(token), nll=-float(lp[token]), argmax=int(torch.argmax(lp)),
                       ids=ids_t, lps=tuple(float(v) for v in values.tolist()))


class ForcingRows:
    """The forced requests of a worker: their specs (read once per request from its sampling
    parameters) and, per step, which logits rows to measure and force."""

    def __init__(self, vocab_size: int | None = None) -> None:
        self.vocab_size = vocab_size
        self._specs: dict[str, Forcing | None] = {}

    def drop(self, req_id: str) -> None:
        self._specs.pop(req_id, None)

    def unforced(self, req_id: str) -> None:
        """Treat ``req_id`` as unforced (its fields failed the check at its start)."""
        self._specs[req_id] = None

    def spec(self, req_id: str, sampling_params) -> Forcing | None:
        if req_id not in self._specs:
            self._specs[req_id] = forcing_of(sampling_params, self.vocab_size)
        return self._specs[req_id]

    def sample(self, logits: torch.Tensor, sampled: torch.Tensor, rows: list[tuple[int, str, int, Forcing]],
               ) -> dict[str, dict[str, Any]]:
        """Force and measure ``rows`` (row, request id, output position, forcing) of one step:
        overwrite ``sampled`` (vLLM's sampled ids, ``[rows, 1]``) at each forced position, and
        return each request's record (``ForcedToken.as_dict``)."""
        out = {}
        for row, req_id, pos, forcing in rows:
            if forcing.ids is not None and pos < len(forcing.ids):
                sampled[row, 0] = forcing.ids[pos]
            out[req_id] = measure(logits, row, pos, forcing, int(sampled[row, 0])).as_dict()
        return out
