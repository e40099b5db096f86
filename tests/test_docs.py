"""The documentation stands on its own and its links resolve.

* No tracker references (an issue number) and no commit-id-looking tokens in the docs, the
  README, the Python files of ``vtoken/``, ``baselines/``, ``benchmarks/``, ``workflows/`` and
  ``tests/``, the Snakemake files and the YAML: the text states what a thing is and why, and
  dated measurements live in ``docs/runs.md`` without commit ids.
* Every relative markdown link of the README and ``docs/*.md`` names a file that exists, and every
  ``#anchor`` (in the same page or another) names a heading of that page.
* Nothing tracked points outside the repository (the design lives in ``docs/design.md``).

A commit id is 7-40 lowercase hex characters with at least one digit and one letter, standing
alone. Allowed, because they are not this project's commits:

* an upstream repository pinned at a commit, ``owner/repo @ <sha>``: the code a baseline
  reimplements (each baseline's docstring and ``docs/baselines.md`` cite it);
* the random 8-hex suffix vLLM appends to a request id (``<id>-<8 hex>``; the tests build such
  ids), excluded by the hyphen before it;
* a hex colour (``#`` before it) and a Python binary literal (``0b`` and binary digits).
"""

import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO

ISSUE = re.compile(r"\bissues?[ -]#?[0-9]", re.IGNORECASE)
HEX = re.compile(r"(?<![\w.#-])(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![\w-])")
UPSTREAM_PIN = re.compile(r"[\w.-]+/[\w.-]+ @ $")
BINARY_LITERAL = re.compile(r"0b[01]+")
# Built from parts so that this file does not match itself.
OUTSIDE = ("..", "/shared", "DESIGN", " §")
OUTSIDE_PATTERNS = (OUTSIDE[0] + OUTSIDE[1], OUTSIDE[2] + OUTSIDE[3])

CODE_ROOTS = ("vtoken", "baselines", "benchmarks", "workflows", "tests")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^()\s]+)\)|!\[[^\]]*\]\(([^()\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
INLINE_CODE = re.compile(r"`[^`\n]*`")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)


def _checked_files():
    files = [REPO / "README.md", REPO / "Snakefile", *sorted((REPO / "docs").glob("*.md"))]
    for root in CODE_ROOTS:
        for pattern in ("*.py", "*.smk", "*.yaml", "*.yml"):
            files += sorted(p for p in (REPO / root).rglob(pattern) if "__pycache__" not in p.parts)
    files += sorted(REPO.glob("*.yml")) + sorted(REPO.glob("*.yaml"))
    # This file holds the patterns and examples of what they find.
    return [p for p in files if p.is_file() and p != Path(__file__).resolve()]


def _markdown_pages():
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def _hits(path, pattern, allowed=lambda line, match: False):
    found = []
    for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        for match in pattern.finditer(line):
            if not allowed(line, match):
                found.append(f"{path.relative_to(REPO)}:{number}: {match.group(0)!r} in {line.strip()[:160]}")
    return found


def _commit_id_allowed(line, match):
    return bool(UPSTREAM_PIN.search(line[: match.start()])) or bool(BINARY_LITERAL.fullmatch(match.group(0)))


def test_the_checks_find_what_they_look_for():
    assert ISSUE.search("as Issue 42 asked") and ISSUE.search("(issues 15, 28)") and ISSUE.search("-issue-47")
    assert not ISSUE.search("an issue of the engine")
    for text in ("at 1ca7b60 (the run)", "commit 2cecd09).", "fresh clone at 02eb6bc,"):
        assert HEX.search(text), text
    for text in ("sha256 " + "ab12" * 16, "#1f77b4", "#1f77b4cc", "req a-0badcafe", "1.44269504088896341f",
                 "deadbeef", "1234567", "0b00111001"):
        match = HEX.search(text)
        assert match is None or _commit_id_allowed(text, match), text
    line = "code microsoft/Zipage @ 3cf00ad, on Nano-vLLM"
    assert _commit_id_allowed(line, HEX.search(line))


def test_no_tracker_references():
    found = [hit for path in _checked_files() for hit in _hits(path, ISSUE)]
    assert found == [], "\n".join(found)


def test_no_commit_ids():
    """The one commit id allowed: the README names the run its summary table is quoted from, on the
    line after the summary block's first marker (one commit)."""
    found = [hit for path in _checked_files() for hit in _hits(path, HEX, _commit_id_allowed)]
    run_line = f"README.md:{_readme_run_line()}: "
    quoted = [hit for hit in found if hit.startswith(run_line)]
    assert len(quoted) <= 1, "\n".join(quoted)
    assert [hit for hit in found if not hit.startswith(run_line)] == [], "\n".join(found)


def _readme_run_line() -> int:
    from vtoken.bench.analysis.summary import BEGIN

    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    return lines.index(BEGIN) + 2


def test_the_readme_is_short_and_names_only_pipeline_outputs():
    """At most 150 lines, and every figure or table it names is something the pipeline builds
    (a rule of that name), so a reader can rebuild it by name."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 150
    named = set(re.findall(r"(?:figures|paper_tables)/(?:[\w-]+/)?([\w-]+)\.(?:png|pdf|md|csv|tex)", text))
    rules = _rules()
    assert named and sorted(named - rules) == []


def _rules() -> set[str]:
    smk = [REPO / "Snakefile", *(REPO / "workflows" / "rules").glob("*.smk")]
    return {m for p in smk for m in re.findall(r"^rule (\w+):", p.read_text(encoding="utf-8"), re.MULTILINE)}


def _tracked_files():
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the tracked files are unknown")
    return [REPO / name for name in out.decode().split("\0") if name and (REPO / name).is_file()]


def test_nothing_tracked_points_outside_the_repository():
    found = []
    for path in _tracked_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        found += [f"{path.relative_to(REPO)}: {p!r}" for p in OUTSIDE_PATTERNS if p in text]
    assert found == [], "\n".join(found)


def _prose(text):
    """The page without fenced code blocks and inline code, where a bracket is not a link (line
    numbers kept)."""
    return INLINE_CODE.sub("", FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text))


def slug(heading):
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page):
    seen, out = {}, set()
    for heading in HEADING.findall(FENCE.sub("", page.read_text(encoding="utf-8"))):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def _links():
    for page in _markdown_pages():
        for number, line in enumerate(_prose(page.read_text(encoding="utf-8")).splitlines(), 1):
            for match in LINK.finditer(line):
                target = match.group(1) or match.group(2)
                if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                    continue
                yield page, number, target


def test_the_slug_is_githubs():
    assert slug("4. Paired comparisons (`stats`) — corrected definition") == "4-paired-comparisons-stats--corrected-definition"
    assert slug("The default grid: a held-out θ_F") == "the-default-grid-a-held-out-θ_f"


def test_every_relative_link_names_an_existing_file():
    missing = []
    for page, number, target in _links():
        path = target.split("#", 1)[0]
        generated = re.fullmatch(r"(?:figures|paper_tables)/([\w-]+)\.\w+", path)
        if generated and generated.group(1) in _rules():  # built by `make reproduce`, not committed
            continue
        if path and not (page.parent / path).exists():
            missing.append(f"{page.relative_to(REPO)}:{number}: {target}")
    assert missing == [], "\n".join(missing)


def test_every_anchor_names_a_heading():
    missing = []
    for page, number, target in _links():
        path, _, anchor = target.partition("#")
        dest = page.parent / path if path else page
        if anchor and dest.suffix == ".md" and dest.is_file() and anchor not in anchors(dest):
            missing.append(f"{page.relative_to(REPO)}:{number}: {target}")
    assert missing == [], "\n".join(missing)
