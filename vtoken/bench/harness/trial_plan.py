"""The trials of a run, in execution order: a function of its ``RunConfig`` alone.

No engine, manifest or tokenizer is needed, so what a ``python -m vtoken.bench trial`` command
will run can be counted from its arguments (``TrialRunner.plan`` runs this; so does ``python -m
vtoken.bench grid show``, from the arguments the pipeline's trials rule passes).
"""

from __future__ import annotations

from dataclasses import dataclass

from vtoken.bench.harness.run_config import RunConfig
from vtoken.bench.harness.setup_name import setup_name
from vtoken.bench.raw.trials import TrialKey, arm_order, pair_seed

REFERENCE = "full"  # a teacher-forced run's reference (Native)


@dataclass(frozen=True)
class PlannedTrial:
    """One trial to run: its key, seed and position in its paired set's arm order; ``probe``: a
    capacity-search probe (run after the plan's trials of its pair, ``TrialRunner.run_search``)."""

    key: TrialKey
    seed: int
    arm_position: int
    probe: bool = False


def plan(cfg: RunConfig, setup: str | None = None) -> list[PlannedTrial]:
    """Every trial of the run in execution order: pair, then C, then the pair's arm order
    (teacher-forced: Native first, the reference every other arm reads; the rest in the order
    of the other arms' Williams design). ``setup``: the run's setup name (default: ``setup_name``)."""
    setup = setup or setup_name(cfg)
    out = []
    for pair in cfg.pair_indices:
        seed = pair_seed(cfg.seed, pair)
        if cfg.forcing is not None:
            order = [REFERENCE, *arm_order([a for a in cfg.arms if a != REFERENCE], pair, cfg.seed)]
        else:
            order = arm_order(cfg.arms, pair, cfg.seed)
        for c in cfg.concurrency:
            here = [arm for arm in order if c in cfg.concurrency_of(arm)]
            out += [PlannedTrial(TrialKey(setup, arm, c, pair), seed, pos) for pos, arm in enumerate(here)]
    return out
