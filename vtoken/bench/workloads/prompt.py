"""Prompt rendering and token counting with the served model's tokenizer.

Every workload renders prompts the same way: the model's chat template over the messages
with the generation prompt appended (SmolLM2-Instruct is a chat model; its template adds a
default system message). Token counts are of that rendered text tokenized without adding
special tokens, which is what vLLM feeds the model for a chat request (the template already
holds them; SmolLM2's tokenizer adds no BOS either way).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

# ShareGPT speaker names -> chat-template roles.
ROLES = {"human": "user", "gpt": "assistant", "system": "system"}
# Files whose bytes decide tokenization and rendering; hashed into every manifest spec.
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


class PromptRenderer:
    """Chat-template rendering and token counts for one model folder."""

    def __init__(self, model_dir: Path) -> None:
        """Load the tokenizer of a local HF model folder.

        Args:
            model_dir: folder with ``tokenizer.json`` (and the chat template).
        """
        from transformers import AutoTokenizer  # heavy import, kept local

        self.model_dir = Path(model_dir)
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_dir)
        self.fingerprint = tokenizer_fingerprint(self.model_dir)

    def chat(self, turns: list[dict]) -> str:
        """Render ShareGPT turns (``{"from", "value"}``) as the model's chat prompt."""
        messages = []
        for i, turn in enumerate(turns):
            if turn["from"] not in ROLES:
                raise ValueError(f"turn {i}: from={turn['from']!r}, allowed {sorted(ROLES)}")
            messages.append({"role": ROLES[turn["from"]], "content": turn["value"]})
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def count(self, text: str) -> int:
        """Number of tokens of ``text`` (no special tokens added)."""
        return len(self.tokenizer(text, add_special_tokens=False).input_ids)

    def ids(self, text: str) -> list[int]:
        """Token ids of ``text`` (no special tokens added)."""
        return self.tokenizer(text, add_special_tokens=False).input_ids

    def decode(self, ids: list[int]) -> str:
        """Text of token ids, special tokens kept."""
        return self.tokenizer.decode(ids)


def tokenizer_fingerprint(model_dir: Path) -> str:
    """sha256 over the tokenizer and chat-template files present in ``model_dir``."""
    digest = hashlib.sha256()
    for name in _TOKENIZER_FILES:
        path = Path(model_dir) / name
        if path.exists():
            digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()
