"""The summary table: rows taken from the claims and capacity tables, in order, nothing written by hand."""

import pandas as pd

from vtoken.bench.analysis.summary import COLUMNS, summary


def _claim(claim_id, comparison, setup="s", measured="m", verdict="v", claim=None, aa=""):
    return {"claim_id": claim_id, "claim": claim or claim_id, "setup": setup, "comparison": comparison,
            "measured": measured, "verdict": verdict, "aa": aa}


CLAIMS = pd.DataFrame([
    _claim("retained", "vToken vs Naive-Evict", setup="C = 4", measured="+0.0 %"),
    _claim("retained", "vToken vs Naive-Evict", setup="C = 17", measured="-21.9 %"),
    _claim("retained", "vToken vs Naive-Evict", setup="scissorhands, C = 4", measured="+0.0 %"),
    _claim("retained", "vToken vs Naive-Evict", setup="scissorhands, C = 8", measured="-30.1 %"),
    _claim("retained", "HoleFill vs Naive-Evict", setup="C = 17"),
    _claim("retained", "vToken vs Naive-Evict", setup="RULER 1k"),
    _claim("retained", "vToken vs Naive-Evict", setup="—", measured="—", verdict="measured in profile extended"),
    _claim("sla", "vToken (eager) vs Naive-Evict", measured="1.76"),
    _claim("plane", "vToken vs PagedEviction"),
    _claim("capability", "vToken (eager) vs PagedEviction (policy scores)", measured="gap -0.0058"),
    _claim("aa", "naive_aa vs naive", claim="A/A control: e2e_p95_s", measured="1.03", verdict="", aa="resolvable"),
    _claim("aa", "naive_aa vs naive", claim="A/A control: rouge_l_mean", measured="1", verdict="", aa="exact"),
])
CAPACITY = pd.DataFrame([
    {"setup": "s", "arm": "vtoken_eager", "reference": "naive", "intervals": "12 vs 8", "verdict": "more"},
    {"setup": "s", "arm": "vtoken_eager", "reference": "paged_eviction", "intervals": "12 vs 12", "verdict": "same"},
])


def test_rows_come_from_the_claims_and_capacity_tables_in_order():
    got = summary(CLAIMS, CAPACITY, label=str.upper)
    assert list(got.columns) == COLUMNS
    assert got["this run"].tolist() == ["-21.9 %", "-30.1 %", "1.76", "12 vs 12", "gap -0.0058", "1.03"]
    # the retained row at each main setup's largest C only, no HoleFill, no RULER, no unmeasured claim
    assert got["where"].tolist()[:2] == ["C = 17", "scissorhands, C = 8"]
    # capacity against the block mechanism only (Naive-Evict's is the claims table's capacity row), labelled
    assert got.iloc[3]["comparison"] == "VTOKEN_EAGER vs PAGED_EVICTION" and got.iloc[3]["verdict"] == "same"
    # the A/A control's timing rows, with the A/A reading as verdict
    assert got.iloc[5]["claim"] == "the machine alone: e2e_p95_s" and got.iloc[5]["verdict"] == "resolvable"


def test_a_row_the_machine_cannot_resolve_says_so_beside_its_verdict():
    from vtoken.bench.analysis import verdicts
    wide = f"1.04 [0.88, 1.14]: {verdicts.AA_WIDE} (A/A of e2e_p95_s at C_ref)"
    claims = pd.DataFrame([_claim("sla", "vToken vs Naive-Evict", measured="1.53", verdict="holds", aa=wide),
                           _claim("sla", "vToken (eager) vs Naive-Evict", measured="1.37", verdict="holds",
                                  aa=f"1.00 [0.99, 1.01]: {verdicts.AA_OK}")])
    got = summary(claims, pd.DataFrame(), label=str)
    assert got.verdict.tolist() == [f"holds; A/A {wide}", "holds"]


def test_without_capacity_rows_the_table_still_builds():
    got = summary(CLAIMS, pd.DataFrame(), label=str)
    assert len(got) == 5


def _table_md():
    header = "| " + " | ".join(COLUMNS) + " |"
    return f"{header}\n|---|---|---|---|---|\n| a | b | c | d | e |\n\nThe caption.\n"


def test_the_readme_block_is_replaced_and_nothing_else():
    from vtoken.bench.analysis.summary import BEGIN, END, quote

    readme = f"# T\nbefore\n{BEGIN}\nold table\n{END}\nafter\n"
    got = quote(readme, _table_md(), "run X")
    assert got.startswith("# T\nbefore\n" + BEGIN + "\n*run X.* The caption.\n\n| claim |")
    assert got.endswith("| a | b | c | d | e |\n" + END + "\nafter\n")
    assert "old table" not in got
    assert quote(got, _table_md(), "run X") == got  # idempotent


def test_a_readme_without_the_markers_or_a_wrong_table_is_refused():
    import pytest

    from vtoken.bench.analysis.summary import BEGIN, END, quote

    with pytest.raises(ValueError, match="exactly one"):
        quote("# no markers\n", _table_md(), "r")
    with pytest.raises(ValueError, match="not a summary table"):
        quote(f"{BEGIN}\n{END}\n", "| x | y |\n|---|---|\n", "r")


def test_the_readme_quotes_a_summary_table():
    from pathlib import Path

    from vtoken.bench.analysis.summary import BEGIN, END

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    block = readme.split(BEGIN)[1].split(END)[0]
    assert "| " + " | ".join(COLUMNS) + " |" in block
