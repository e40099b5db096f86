"""Scoring of the ShareGPT lm-eval tasks: ROUGE-L F1 (rouge_score, stemmed) of the generation
against the document's reference (the data set's reply, or the full arm's output)."""

from rouge_score import rouge_scorer

_SCORER = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)


def process_results(doc: dict, results: list[str]) -> dict[str, float]:
    """lm-eval's per-document hook: ``results[0]`` is the generation."""
    return {"rougeL": _SCORER.score(doc["reference"], results[0])["rougeL"].fmeasure}
