"""Prompt lists drawn from the ShareGPT asset for engine tests and benchmarks."""

from __future__ import annotations

from pathlib import Path


def first_human_turns(sharegpt_dir: Path, num: int = 8, chars: int = 600, min_chars: int = 200) -> list[str]:
    """The first human turn, cut to ``chars`` characters, of the first ``num`` conversations
    (in file order) whose first turn is human and has at least ``min_chars`` characters.

    Args:
        sharegpt_dir: the built ShareGPT asset (``data/sharegpt``).
        num: number of prompts.
        chars: characters kept per prompt.
        min_chars: shortest first turn accepted.

    Returns:
        ``num`` prompt strings.

    Raises:
        ValueError: the data set has fewer than ``num`` such conversations.
    """
    from vtoken.assets import sharegpt

    prompts = []
    for conv in sharegpt.load(Path(sharegpt_dir)):
        turns = conv["conversations"]
        if turns and turns[0]["from"] == "human" and len(turns[0]["value"]) >= min_chars:
            prompts.append(turns[0]["value"][:chars])
            if len(prompts) == num:
                return prompts
    raise ValueError(f"num={num}: only {len(prompts)} conversations open with a human turn of >= {min_chars} chars")
