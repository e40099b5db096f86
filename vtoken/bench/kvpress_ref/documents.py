"""RULER documents split as kvpress's pipeline takes them: ``context``, ``question``, ``answer_prefix``.

kvpress's RULER data set keeps the task's text up to its question as the context, the question
line as the question and RULER's answer prefix as ``answer_prefix``; its pipeline compresses the
context only (the question is read after compression). The offline RULER documents
(:mod:`vtoken.bench.lmeval.ruler`) end with the question on their last line.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

# Where ``make venv`` installs the transformers kvpress 0.5.5 declares (transformers < 5.3 and the
# huggingface-hub and tokenizers it needs; requirements/kvpress-reference.lock), beside the venv's.
SIDE_ENV = Path(sys.prefix) / "kvpress-reference"


def split(doc: dict[str, Any]) -> tuple[str, str, str]:
    """(context, question, answer prefix) of one RULER document.

    Raises:
        ValueError: the document's last line is not a question (names the document).
    """
    text = doc["input"]
    cut = text.rfind("\n")
    context, question = text[:cut], text[cut + 1 :]
    if cut <= 0 or not question.rstrip().endswith("?"):
        raise ValueError(f"document index={doc.get('index')!r}: its last line {question[-80:]!r} is not a question; "
                         "kvpress's split needs the context, then the question on the last line")
    return context, question, doc.get("gen_prefix", "")
