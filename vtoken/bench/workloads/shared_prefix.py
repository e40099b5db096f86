"""Shared prefixes: a trial's requests sharing long system prompts, at a sharing degree
(Table 1's prefix-sharing rows; the paper's §5.7).

A trial with ``--prefix-degree d`` puts a shared document in front of each request's own
prompt: request i of the trial (in submission order) gets document ``i // d`` of its pair, so
every d consecutive requests share one prefix (degree 1: every request its own, nothing
shared). The document is a system message -- the model's chat template over the text of a
long ShareGPT reply, cut to ``--prefix-tokens`` tokens -- followed by the request's own
rendered prompt, so the shared part is exactly the same token ids for every request of a
group, and a prefix cache can hit it whole blocks at a time.

Documents: the first gpt replies of ShareGPT conversations (file order) long enough for the
prefix, taken in that order without repetition: pair p uses documents ``p * G .. p * G + G - 1``
with G the trial's largest C, so pairs are real replicates (disjoint documents) and every
degree of a pair uses the same documents (a degree sweep is paired too). A pure function of
(ShareGPT file, tokenizer, prefix tokens, pair, G).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path


@dataclass(frozen=True)
class SharedPrefix:
    """Prefix sharing of a trial.

    Args:
        degree: requests per shared document (>= 1).
        tokens: tokens of a document's system message (>= 16).
    """

    degree: int
    tokens: int = 256

    def __post_init__(self) -> None:
        for name, low in (("degree", 1), ("tokens", 16)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ValueError(f"--prefix-{name}={value!r}: must be an integer >= {low}")


def document_texts(sharegpt_dir: Path, count: int, min_chars: int) -> list[str]:
    """The first ``count`` gpt replies (turn 2 of a human-first conversation, file order) of
    at least ``min_chars`` characters.

    Raises:
        ValueError: the data set has fewer such replies.
    """
    from vtoken.assets import sharegpt

    out = []
    for conv in sharegpt.load(Path(sharegpt_dir)):
        turns = conv["conversations"]
        if len(turns) >= 2 and turns[0]["from"] == "human" and turns[1]["from"] == "gpt" \
                and len(turns[1]["value"]) >= min_chars:
            out.append(turns[1]["value"])
            if len(out) == count:
                return out
    raise ValueError(f"--prefix-tokens: only {len(out)} ShareGPT replies of >= {min_chars} characters, {count} needed")


def document_ids(tokenizer, text: str, tokens: int) -> tuple[int, ...]:
    """A system message holding the start of ``text``, rendered by the model's chat template
    and tokenized: the longest such message of at most ``tokens`` tokens."""
    ids = tokenizer(text, add_special_tokens=False).input_ids

    def render(n: int) -> list[int]:
        body = tokenizer.decode(ids[:n])
        rendered = tokenizer.apply_chat_template([{"role": "system", "content": body}], tokenize=False)
        return tokenizer(rendered, add_special_tokens=False).input_ids

    n = min(len(ids), tokens)
    while n > 0 and len(render(n)) > tokens:
        n -= max(1, len(render(n)) - tokens)
    return tuple(render(n))


def pair_documents(tokenizer, sharegpt_dir: Path, prefix: SharedPrefix, pair: int, groups: int) -> list[tuple[int, ...]]:
    """The ``groups`` document prefixes of pair ``pair`` (module docstring)."""
    texts = document_texts(sharegpt_dir, (pair + 1) * groups, min_chars=8 * prefix.tokens)
    return [document_ids(tokenizer, t, prefix.tokens) for t in texts[pair * groups:]]


def with_shared_prefix(requests: list, documents: list[tuple[int, ...]], degree: int) -> list:
    """``requests`` (``PreparedRequest``, submission order) with document ``i // degree`` in
    front of request i's prompt."""
    if len(documents) < -(-len(requests) // degree):
        raise ValueError(f"{len(documents)} documents for {len(requests)} requests at degree {degree}")
    return [replace(r, prompt_ids=documents[i // degree] + tuple(r.prompt_ids)) for i, r in enumerate(requests)]
