"""Hashes and atomic writes shared by the asset builders.

Every generated asset carries a small provenance JSON (source package, version, sha256 of
the input and of each output file) and is written into a temporary sibling first and
renamed into place, so an interrupted build never leaves a half-written asset that a
later step would read as finished.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

_CHUNK = 1 << 20


def sha256_file(path: Path) -> str:
    """Return the hex sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def hash_tree(root: Path, exclude: tuple[str, ...] = ()) -> dict[str, str]:
    """Return {relative path: sha256} for every file under ``root``, sorted by path."""
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.name not in exclude)
    return {p.relative_to(root).as_posix(): sha256_file(p) for p in files}


def combined_sha256(file_hashes: dict[str, str]) -> str:
    """One sha256 over a {name: sha256} mapping (order-independent, name-sensitive)."""
    lines = "".join(f"{name}:{digest}\n" for name, digest in sorted(file_hashes.items()))
    return hashlib.sha256(lines.encode()).hexdigest()


def write_json_atomic(path: Path, obj: dict) -> None:
    """Write ``obj`` as sorted, indented JSON via a temporary file and a rename."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


def replace_dir(tmp_dir: Path, final_dir: Path) -> None:
    """Move a finished build directory into place, replacing an older one."""
    if final_dir.exists():
        old = final_dir.with_name(f".{final_dir.name}.old-{os.getpid()}")
        os.replace(final_dir, old)
        os.replace(tmp_dir, final_dir)
        shutil.rmtree(old)
    else:
        final_dir.parent.mkdir(parents=True, exist_ok=True)
        os.replace(tmp_dir, final_dir)


def read_json(path: Path) -> dict | None:
    """Return the parsed JSON at ``path``, or None if it is missing or unreadable."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
