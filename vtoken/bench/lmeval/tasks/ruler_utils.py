"""Scoring of the offline RULER task: RULER's string_match_all of the generation against the
document's references (vtoken.bench.lmeval.ruler.score)."""

from vtoken.bench.lmeval.ruler import score


def process_results(doc: dict, results: list[str]) -> dict[str, float]:
    """lm-eval's per-document hook: ``results[0]`` is the generation."""
    return {"score": score(results[0], doc["outputs"])}
