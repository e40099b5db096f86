"""Asset builders for the embedded default: the SmolLM2 model and the ShareGPT data.

Command line: ``python -m vtoken.assets {model,sharegpt,punkt,all} [--data-dir data]``.
"""

from pathlib import Path

DATA_DIR = Path("data")
MODEL_DIR = DATA_DIR / "models" / "smollm2-135m-instruct"
SHAREGPT_DIR = DATA_DIR / "sharegpt"
NLTK_DIR = DATA_DIR / "nltk_data"  # punkt_tab for lm-eval's RULER tasks (vtoken.assets.punkt)
