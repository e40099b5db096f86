"""One copy of a model's weights per process, shared by every CPU engine of that model.

A run keeps one in-process engine per arm (``vtoken.bench.harness.runner``); the arms differ only in
their KV cache managers, never in the model. vLLM's CPU model runner packs every linear's weight
for its GEMM (oneDNN), so each engine of SmolLM2-135M in float32 held ~0.9 GB of weights of its own,
and a worker with 14 arms had to release and restart engines under its memory budget (a restarted
engine's first trial runs slower: docs/pipeline.md). Here the first engine of a model registers its
weights -- every module's parameters and its CPU GEMM (``cpu_linear``, the packed weight inside) --
and each later engine with the same key adopts them, dropping its own copy: it holds ~0.15 GB (its
KV cache and buffers).

Adoption is checked, never assumed: the two models must have the same modules and parameter names,
bit-identical parameters, and every linear must give bit-identical outputs on the same probe rows
(``same_weights``). A model that differs keeps its own weights. The key (``key``) only picks the
candidate: the model path, dtype, quantization, revision, the thread count and whether the linears
are batch-invariant (the wrapping decided per thread count: ``batch_invariance``). Weights are
read-only at inference and the engines of a process step one at a time, so sharing changes no bit
of any output. The table goes when the last model using it is collected.
"""

from __future__ import annotations

import logging
import weakref
from dataclasses import dataclass

import torch

from vtoken.cpu_host import trim_memory

logger = logging.getLogger(__name__)


@dataclass
class Table:
    """A registered model's weights: module name -> its parameters, and -> its CPU GEMM."""

    params: dict[str, dict[str, torch.nn.Parameter]]
    linears: dict[str, object]
    users: int = 0


_TABLES: dict[tuple, Table] = {}


def key(model_config, batch_invariant: bool) -> tuple:
    """Which engines may share weights: the same model files, dtype, quantization, revision, threads
    and batch invariance."""
    return (str(model_config.model), str(model_config.dtype), model_config.quantization, model_config.revision,
            torch.get_num_threads(), bool(batch_invariant))


def table_of(model: torch.nn.Module) -> Table:
    """``model``'s weights as a table (strong references to its parameters and GEMM functions only)."""
    return Table(params={n: dict(m._parameters) for n, m in model.named_modules()},
                 linears={n: m.cpu_linear for n, m in model.named_modules() if callable(getattr(m, "cpu_linear", None))})


def same_weights(model: torch.nn.Module, table: Table, seed: int = 0) -> str | None:
    """None if ``model`` computes exactly what ``table``'s model does, else the first difference found:
    module or parameter names, a parameter's bits, or a linear's output on the same random rows."""
    modules = dict(model.named_modules())
    if set(modules) != set(table.params):
        return "module names"
    gen = torch.Generator().manual_seed(seed)
    for name, m in modules.items():
        theirs = table.params[name]
        if set(m._parameters) != set(theirs):
            return f"parameters of {name}"
        for p, mine in m._parameters.items():
            other = theirs[p]
            if (mine is None) != (other is None) or (mine is not None and (
                    mine.shape != other.shape or mine.dtype != other.dtype or not torch.equal(mine, other))):
                return f"{name}.{p}" if name else p
        if (name in table.linears) != callable(getattr(m, "cpu_linear", None)):
            return f"GEMM of {name}"
        if name in table.linears and (diff := _linear_differs(m, table, name, gen)):
            return diff
    return None


def _linear_differs(m: torch.nn.Module, table: Table, name: str, gen: torch.Generator) -> str | None:
    from vtoken.plugin.cpu.batch_invariance import in_features, param_dtype

    k = in_features(m)
    if k is None:
        return f"GEMM of {name} (input width unknown)"
    rows = torch.randn(3, k, generator=gen).to(param_dtype(m))
    weight, bias = getattr(m, "weight", None), getattr(m, "bias", None)
    theirs = table.params[name]
    out = m.cpu_linear(rows, weight, bias)
    other = table.linears[name](rows, theirs.get("weight", weight), theirs.get("bias", bias))
    return None if torch.equal(out, other) else f"GEMM of {name}"


def share(model: torch.nn.Module, key: tuple) -> bool:
    """Make ``model`` use the weights registered under ``key`` (True), or register its own (False:
    the first model of the key, or one whose weights differ -- logged). Its own copy is freed."""
    table = _TABLES.get(key)
    if table is not None:
        diff = same_weights(model, table)
        if diff is None:
            for name, m in model.named_modules():
                m._parameters.update(table.params[name])
                if name in table.linears:
                    m.cpu_linear = table.linears[name]
            _use(model, key, table)
            trim_memory()  # the adopting engine's own copy, freed
            return True
        logger.warning("vtoken: this engine's weights differ from the process's other engine of %s (%s): "
                       "it keeps its own copy", key[0], diff)
        return False
    table = _TABLES[key] = table_of(model)
    _use(model, key, table)
    return False


def _use(model: torch.nn.Module, key: tuple, table: Table) -> None:
    table.users += 1
    weakref.finalize(model, _drop, key, table)


def _drop(key: tuple, table: Table) -> None:
    """A model using ``table`` was collected: the table goes with the last one."""
    table.users -= 1
    if table.users == 0 and _TABLES.get(key) is table:
        del _TABLES[key]


def registered() -> dict[tuple, int]:
    """The keys with a table, and how many live models use each."""
    return {k: t.users for k, t in _TABLES.items()}
