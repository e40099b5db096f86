"""The kvpress reference: the document split, the command line's checks and the table's
counts on hand-written pipeline and engine outputs (vtoken.bench.kvpress_ref,
vtoken.bench.analysis.kvpress_reference)."""

import math

import pandas as pd
import pytest

from vtoken.bench.analysis.kvpress_reference import summarise
from vtoken.bench.kvpress_ref.__main__ import check
from vtoken.bench.kvpress_ref.documents import split


def _match(answer, refs):  # RULER's string_match_all on one reference
    return float(all(r.lower() in answer.lower() for r in refs))


def _hf(doc, press, ratio, kvpress, per_head, consensus, overlap=0.7, kept=(1, 2, 3)):
    return {"doc": doc, "press": press, "ratio": ratio, "references": [f"{doc}{doc}{doc}"], "kvpress": kvpress,
            "per_head": per_head, "consensus": consensus, "overlap": overlap, "consensus_kept": list(kept)}


def _eng(doc, press, ratio, engine, kept=(1, 2, 3), blocks=10.0):
    return {"doc": doc, "press": press, "ratio": ratio, "engine": engine, "engine_kept": list(kept),
            "engine_blocks": blocks}


def test_the_table_counts_each_step_and_shows_a_missing_document():
    hf = pd.DataFrame([
        _hf(1, "none", 0.0, "111", "111", "111", 1.0), _hf(2, "none", 0.0, "222", "222", "222", 1.0),
        _hf(3, "none", 0.0, "333", "333", "333", 1.0),
        # doc 1: everything agrees; doc 2: the consensus loses the answer the per-head rule keeps;
        # doc 3: the engine keeps another set and answers otherwise, both wrong.
        _hf(1, "KnormPress", 0.5, "111", "111", "111", 0.8),
        _hf(2, "KnormPress", 0.5, "222", "222", "2", 0.6),
        _hf(3, "KnormPress", 0.5, "3", "3", "3", 0.5),
    ])
    engine = pd.DataFrame([
        _eng(1, "none", 0.0, "111", blocks=30.0), _eng(2, "none", 0.0, "222 x", blocks=31.0),  # doc 3 missing
        _eng(1, "KnormPress", 0.5, "111", blocks=12.0), _eng(2, "KnormPress", 0.5, "2", blocks=14.0),
        _eng(3, "KnormPress", 0.5, "33", kept=(1, 2, 4), blocks=13.0),
    ])
    rows = {r["press"]: r for r in summarise(hf, engine, _match).to_dict("records")}
    none, knorm = rows["none"], rows["KnormPress"]
    assert (none["documents"], none["missing"]) == (2, 1)
    assert none["engine_vs_kvpress_identical"] == 1 and none["engine_vs_kvpress_same_score"] == 2
    assert pd.isna(none["kept_identical"])  # no press: no kept set to compare
    assert (knorm["documents"], knorm["missing"]) == (3, 0)
    assert knorm["kvpress_score"] == pytest.approx(2 / 3) and knorm["consensus_score"] == pytest.approx(1 / 3)
    assert knorm["engine_score"] == pytest.approx(1 / 3)
    assert knorm["kvpress_se"] == pytest.approx(math.sqrt(1 / 3) / math.sqrt(3))
    assert knorm["replay_identical"] == 3 and knorm["consensus_identical"] == 2
    assert knorm["overlap"] == pytest.approx((0.8 + 0.6 + 0.5) / 3)
    assert knorm["kept_identical"] == 2 and knorm["kept_sym_diff"] == pytest.approx(2 / 3)
    assert knorm["engine_vs_consensus_identical"] == 2  # doc 3: "33" vs "3"
    assert knorm["engine_vs_kvpress_identical"] == 1 and knorm["engine_vs_kvpress_same_score"] == 2
    # per document: the consensus lost doc 2's answer (worse on 1, better on none): a sign test of 1 gives p = 1
    assert (knorm["consensus_better"], knorm["consensus_worse"], knorm["consensus_sign_p"]) == (0, 1, 1.0)
    assert knorm["engine_blocks"] == pytest.approx(13.0)
    assert knorm["engine_blocks_ci_low"] < 13.0 < knorm["engine_blocks_ci_high"]


def test_a_ruler_document_splits_into_context_question_and_prefix():
    doc = {"index": 4, "input": "Remember 7.\nFiller.\nWhat is the number?", "gen_prefix": "The number is"}
    assert split(doc) == ("Remember 7.\nFiller.", "What is the number?", "The number is")
    with pytest.raises(ValueError, match=r"document index=5: its last line 'Filler.' is not a question"):
        split({"index": 5, "input": "Remember 7.\nFiller."})


@pytest.mark.parametrize("presses, ratios, match", [
    (["TOVAPress"], [0.5], r"press='TOVAPress': the reference runs \['KnormPress'"),
    (["RandomPress"], [0.5], "press='RandomPress'"),
    (["KnormPress"], [1.0], r"ratio=1.0: kvpress's compression_ratio, in \(0, 1\)"),
])
def test_the_command_line_refuses_what_it_cannot_compare(presses, ratios, match):
    with pytest.raises(ValueError, match=match):
        check(presses, ratios)


def test_better_on_8_of_16_documents_is_resolved_and_on_4_is_not():
    """The consensus against kvpress's per-head sets is read per document (a sign test), not on the
    means: 8 documents better and none worse resolve it (p = 0.0078), 4 do not (p = 0.125)."""
    def rows(better):
        hf = pd.DataFrame([_hf(d, "KnormPress", 0.75, "x" if d < better else f"{d}{d}{d}", "x", f"{d}{d}{d}")
                           for d in range(16)])
        engine = pd.DataFrame([_eng(d, "KnormPress", 0.75, f"{d}{d}{d}") for d in range(16)])
        return summarise(hf, engine, _match).iloc[0]
    eight, four = rows(8), rows(4)
    assert (eight.consensus_better, eight.consensus_worse) == (8, 0)
    assert eight.consensus_sign_p == pytest.approx(2 * 0.5 ** 8) and eight.consensus_sign_p < 0.05
    assert four.consensus_sign_p == pytest.approx(0.125)
