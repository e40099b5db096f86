"""The Snakemake workflow: config validation, the four profiles' plans, lint and format, the
figure style (seaborn never computing an interval, the fixed arm palette), and the smoke
config end to end on the real engine (every figure and table, the claims table, rebuilding
one figure alone)."""

import csv
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vtoken.bench.analysis import verdicts

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SNAKEMAKE = str(BIN / "snakemake")
PROFILES = ("default", "smoke", "paper", "slurm", "slurm-smoke", "extended")
FIGURES = ("fig01_low_util", "fig07_memory", "fig08_sla_frontier", "fig09_capacity", "fig10_block_demand",
           "fig11_overhead", "fig12_sensitivity", "fig_baselines", "fig_theta_f", "fig_memory_quality", "fig_ratio_sweep",
           "fig_compaction_frontier", "fig_factorial")
TABLES = ("table1_main", "table_overhead", "table_packing", "table_claims", "table_theta_f", "table_kvpress",
          "table_equal_memory")
CLAIMS = ("retained", "sla", "sla_interp", "sla_tpot", "capacity", "vs_best", "plane", "paper", "aa", "exactness",
          "indirection", "indirection_e2e", "policy_loc", "policy_dropin", "without_table", "capability")


def _env():
    # Rules call `python -m vtoken...` from PATH: the venv's, as the Makefile sets it.
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    for key in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "VLLM_NO_USAGE_STATS"):
        env.setdefault(key, "1")
    return env


def _snakemake(*args, timeout=300):
    return subprocess.run([SNAKEMAKE, *args], cwd=REPO, capture_output=True, text=True, timeout=timeout,
                          env=_env())


_plans: dict[str, subprocess.CompletedProcess] = {}


def _plan(profile: str) -> subprocess.CompletedProcess:
    """A profile's dry run with its shell commands (once per profile and session: ~13 s each)."""
    if profile not in _plans:
        _plans[profile] = _snakemake("-n", "-p", "--forceall", "--profile", f"workflows/profiles/{profile}")
    return _plans[profile]


@pytest.mark.parametrize("profile", PROFILES)
def test_every_profile_plans_every_figure_and_table(profile):
    proc = _plan(profile)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    for rule in ("trials", "process", *FIGURES, *TABLES, "all"):
        assert re.search(rf"^{rule}\s+\d+$", out, re.M), f"{profile}: no {rule} job\n{out}"


def test_the_kvpress_reference_runs_in_the_extended_profile_and_not_in_the_default():
    # one kvpress-pipeline job per press, one engine job per press and `none`, the table
    for profile, jobs in (("extended", {"kvpress_reference_hf": 4, "kvpress_reference_engine": 5,
                                        "kvpress_reference": 1}), ("default", {})):
        out = _plan(profile).stdout + _plan(profile).stderr
        for rule in ("kvpress_reference_hf", "kvpress_reference_engine", "kvpress_reference"):
            found = re.search(rf"^{rule}\s+(\d+)$", out, re.M)
            assert (int(found.group(1)) if found else 0) == jobs.get(rule, 0), (profile, rule)


def test_paper_and_slurm_request_a_gpu_per_engine_job():
    out = _plan("slurm").stdout
    trials = [block for block in out.split("\nrule ") if block.startswith("trials:")]
    assert trials and all("gpu=1" in b and "slurm_partition=gpu" in b for b in trials)
    assert "--model-dir=/models/Mistral-7B-Instruct-v0.2" in out


def test_paper_trials_run_on_cuda_with_the_cuda_classes(model_dir, monkeypatch):
    """Every trial the paper profile plans names --device=cuda, and what such a trial gives its
    vToken engines on CUDA is the CUDA worker, synchronous scheduling, no CPU pool size."""
    import json
    import shlex

    from vtoken.engine_args import device_engine_args

    monkeypatch.delenv("VLLM_USE_V2_MODEL_RUNNER", raising=False)  # restored after: CUDA args set it
    out = _plan("paper").stdout
    commands = [line for line in out.splitlines() if "python -m vtoken.bench trial" in line]
    assert commands and all("--device=cuda" in c for c in commands)
    assert all("--workers=1" in c for c in commands)  # one engine per GPU (workers split CPU cores)
    args = shlex.split(commands[0].split("python -m ", 1)[1])
    engine = json.loads(next(a for a in args if a.startswith("--engine="))[len("--engine="):])
    vt = device_engine_args(model_dir, {"arm": "vtoken", "policy": "h2o", "ratio": 0.5}, "cuda", **engine)
    assert vt["worker_cls"] == "vtoken.plugin.cuda.worker.VTokenGPUWorker" and vt["async_scheduling"] is False
    assert "kv_cache_memory_bytes" not in vt and vt["dtype"] == "auto" and vt["gpu_memory_utilization"] == 0.9


@pytest.mark.parametrize(("text", "named"), [
    ("trial: {pairs: 1}\n", ["pairs", "minimum"]),
    ("arms: [naive, vtokn]\n", ["vtokn"]),
    ("sla: {k: 1.05, c_ref: 3}\n", ["sla.c_ref", "trial.concurrency"]),
    ("arms: [naive, vtoken]\nbaseline: zipage\n", ["baseline", "zipage"]),
    ("trial: {admission: fifo}\n", ["fifo", "vllm", "projected"]),
    ("trial: {engine: {dtype: bf16}}\n", ["bf16", "float32", "bfloat16"]),  # named, never the CPU's choice
    ("workloads: [nope-s0]\nsensitivity: {workload: nope-s0}\n", ["workloads", "nope-s0"]),
    ("trials: {pairs: 5}\n", ["trials", "Additional properties"]),
    ("aa_control: vtoken_x\n", ["aa_control", "vtoken_x", "arm_variants"]),
    ("arm_variants: {zipage_aa: {arm: zipage}}\naa_control: zipage_aa\n", ["aa_control", "not the baseline"]),
    ("arm_variants: {naive_x: {arm: nope}}\n", ["nope"]),
    ("arm_variants: {vtoken: {arm: naive}}\n", ["arm_variants.vtoken", "must not be an arm name"]),
    ("operating_points: {enabled: true, workload: contract-256-s0, arms: [naive], concurrency: [8], "
     "points: [{ratio: 0.5, arm_settings: {zz: {}}}]}\n", ["operating_points.points[0].arm_settings.zz"]),
    ("decode_cost: {num_requests: 8, prompt_tokens: 512, output_tokens: 24, repeats: 1}\n", ["repeats", "minimum"]),
    ("trial: {capacity_search: 3}\n", ["capacity_search", "3", "boolean"]),
    ("trial: {one_wave: false}\n", ["trial.capacity_search", "needs trial.one_wave: true"]),
])
def test_bad_config_fails_before_any_job_naming_the_key(tmp_path, text, named):
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    proc = _snakemake("-n", "--cores", "1", "--configfile", str(bad))
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "Job stats" not in out
    for word in named:
        assert word in out, out


def test_the_dry_run_warns_about_a_grid_that_censors_a_compared_arm(tmp_path):
    # the grid {4, 8, 12} without the capacity search, H2O's main setup alone: vToken eager and
    # PagedEviction are feasible at its top
    cut = tmp_path / "cut.yaml"
    cut.write_text("trial: {concurrency: [4, 8, 12], capacity_search: false, policies: [h2o]}\n")
    proc = _snakemake("-n", "--cores", "1", "--configfile", str(cut))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    (line,) = [line for line in out.splitlines() if "grid check" in line]
    assert "grid top C = 12" in line
    for arm in ("naive", "vtoken", "vtoken_eager", "paged_eviction"):
        assert f"'{arm}' (from C = 17)" in line, line
    default = _plan("default")
    assert "grid check" not in default.stdout + default.stderr
    trials = [line for line in default.stdout.splitlines() if "python -m vtoken.bench trial" in line]
    assert trials and all("--workers=2" in c for c in trials)  # two one-thread workers per setup
    # the default's capacity: each main setup's swept arms searched beyond its grid (H2O {4, 8, 12},
    # Scissorhands {4, 8})
    searched = [c for c in trials if "--capacity-search" in c]
    (h2o,) = [c for c in searched if ".h2o.main" in c]
    (scissorhands,) = [c for c in searched if ".scissorhands.main" in c]
    assert len(searched) == 2 and "--concurrency=4,8,12 " in h2o and "--concurrency=4,8 " in scissorhands


def test_lint_is_clean():
    proc = _snakemake("--lint")
    assert proc.returncode == 0 and "Congratulations" in proc.stdout + proc.stderr, proc.stdout + proc.stderr


def test_snakefmt_is_clean():
    snakefmt = BIN / "snakefmt"
    if not snakefmt.exists():
        pytest.skip("snakefmt is not installed in this environment")
    proc = subprocess.run([str(snakefmt), "--check", "."], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """The smoke config end to end on the real engine (fresh trials: the raw folders of an
    earlier test-smoke run deleted, since the runner would resume from them), outputs under
    a temporary folder; the run's raw and processed data in data/*/test-smoke/."""
    out = tmp_path_factory.mktemp("smoke")
    shutil.rmtree(REPO / "data/raw/test-smoke", ignore_errors=True)
    args = ["--profile", "workflows/profiles/smoke", "--config", "run=test-smoke",
            f"figures_dir={out}/figures", f"tables_dir={out}/tables"]
    start = time.monotonic()
    proc = _snakemake(*args, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-5000:]
    return {"out": out, "args": args, "wall_s": time.monotonic() - start}


@pytest.mark.engine
def test_smoke_run_writes_every_figure_and_table(smoke):
    out = smoke["out"]
    for name in FIGURES:
        for ext in ("pdf", "png"):
            assert (out / "figures" / f"{name}.{ext}").stat().st_size > 1000, (name, ext)
    for name in TABLES:
        for ext in ("tex", "md", "csv"):
            text = (out / "tables" / f"{name}.{ext}").read_text(encoding="utf-8")
            assert len(text.splitlines()) >= 2, (name, ext)
    with open(out / "tables" / "table_claims.csv", newline="", encoding="utf-8") as f:
        claims = list(csv.DictReader(f))
    assert {row["claim_id"] for row in claims} == set(CLAIMS)
    for row in claims:  # every verdict from the fixed vocabulary; A/A rows carry a status instead
        v = row["verdict"]
        assert (v in verdicts.VERDICTS or v in verdicts.EXACT_VERDICTS or (row["claim_id"] == "plane" and v in
                                                                             verdicts.DOMINANCE)
                or v.startswith((verdicts.NOT_TESTABLE + ": ", verdicts.NOT_COMPARABLE + ": ",
                                 verdicts.NOT_AT_MODEL + ": "))
                or (row["claim_id"] == "capability" and v in verdicts.CAPABILITY)
                or (row["claim_id"] == "aa" and v == "") or v == verdicts.measured_in("extended")), row
        # a row this run did not measure names the profile that does, and carries no number
        assert row["profile"] == ("extended" if v == verdicts.measured_in("extended") else "test-smoke"), row
        assert v != verdicts.measured_in("extended") or row["estimate"] == "", row
    aa = [row for row in claims if row["claim_id"] == "aa" and row["claim"] == "A/A control: retained_blocks"]
    assert aa and all(row["aa"] == verdicts.AA_DETERMINISTIC for row in aa), aa  # two engines, one answer
    assert float(aa[0]["estimate"]) == 1.0
    # The smoke's baselines keep other budgets than its ratio-0.5 policy (96 tokens; no calibration), so the
    # strongest baseline is chosen among none: the row says so instead of a comparison decided by the budget.
    (best,) = [row for row in claims if row["claim_id"] == "vs_best"]
    assert best["verdict"].startswith(f"{verdicts.NOT_TESTABLE}: no reclamation baseline arm or variant within the "
                                      "equal-live-tokens rule in this setup (C = "), best
    plane = [row for row in claims if row["claim_id"] == "plane"]
    against = {row["comparison"].split(" vs ", 1)[1] for row in plane}
    # every baseline arm and variant, each budget partner too, and the mix of a family
    # whose two budgets bracket vToken's live tokens, if any (equal_live: named "A ~ B (interpolated)")
    assert {a for a in against if not a.endswith("(interpolated)")} == {
        "PagedEviction", "PagedEviction (policy scores)", "Zipage-style", "PagedEviction (budget 64)",
        "PagedEviction (policy scores, budget 64)", "Zipage-style (budget 56)"}, plane
    assert all(" ~ " in a for a in against if a.endswith("(interpolated)")), plane
    assert all(row["verdict"] != verdicts.ONE_SAMPLE or row["n_samples"] in ("", "0", "1") or row["claim_id"] == "aa"
               or float(row["ci_low"]) == float(row["ci_high"]) for row in claims)
    # our five policies (vk_norm included); the kvpress adapter (kvpress.py + its catalog) has its own policy_dropin rows
    policy = next(row for row in claims if row["claim_id"] == "policy_loc")
    assert policy["n"] == "5" and float(policy["estimate"]) == max(
        len(p.read_text().splitlines()) for p in (REPO / "vtoken/policies").glob("*.py")
        if p.name not in ("__init__.py", "base.py", "registry.py", "kvpress.py", "kvpress_catalog.py"))
    md = (out / "tables" / "table_claims.md").read_text(encoding="utf-8")
    assert all(claim in md for claim in ("27.2–72.3 %", "1.37×", "2× feasible", "< 1 %", "< 50 lines",
                                         "stock vLLM", "A/A control"))


@pytest.mark.engine
def test_deleting_one_figure_rebuilds_only_that_figure(smoke):
    figures = smoke["out"] / "figures"
    before = {p.name: p.stat().st_mtime_ns for p in figures.iterdir()}
    (figures / "fig07_memory.png").unlink()
    start = time.monotonic()
    proc = _snakemake("fig07_memory", *smoke["args"])  # the target first: --config takes every word after it
    wall = time.monotonic() - start
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    jobs = dict(re.findall(r"^(\w+)\s+(\d+)$", out.split("Job stats:")[1].strip().split("\n\n")[0], re.M))
    jobs.pop("job", None)
    jobs.pop("total", None)
    assert jobs == {"fig07_memory": "1"}, out
    after = {p.name: p.stat().st_mtime_ns for p in figures.iterdir()}
    assert set(after) == set(before)
    changed = {name for name in after if after[name] != before[name]}
    assert changed <= {"fig07_memory.png", "fig07_memory.pdf"} and "fig07_memory.png" in changed
    assert wall < 120, f"rebuilding one figure took {wall:.0f} s"


def test_table_format():
    sys.path.insert(0, str(REPO / "workflows/scripts"))
    try:
        import tablefmt
    finally:
        sys.path.pop(0)
    assert tablefmt.ci(1.234, 1.0, 1.5) == "1.23 [1.00, 1.50]"
    assert tablefmt.ci(1.234, float("nan"), float("nan")) == "1.23"
    assert tablefmt.ci(float("nan"), 0.0, 1.0) == "—"
    assert tablefmt.ci(1.0, 1.0, 1.0) == "1.00 (no spread)"  # a zero-width interval is one value, not a CI
    assert tablefmt.pct_change(0.6, 0.5, 0.7) == "-40.0 % [-50.0 %, -30.0 %]"


# Seaborn functions that compute an interval (bootstrap by default) unless errorbar=None, those
# that always do (never allowed), and those that only draw what they are given.
SNS_AGGREGATING = {"barplot", "pointplot", "lineplot", "catplot", "relplot"}
SNS_BOOTSTRAP = {"regplot", "lmplot", "residplot"}
SNS_DRAW_ONLY = {"scatterplot", "ecdfplot", "histplot", "stripplot", "swarmplot", "set_theme", "color_palette",
                 "despine", "move_legend"}


def _seaborn_violations(source: str, name: str) -> list[str]:
    """Seaborn calls in ``source`` that could compute an interval of their own."""
    import ast

    tree, out = ast.parse(source), []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "seaborn":
            out.append(f"{name}:{node.lineno}: from seaborn import ... (call it as sns.<function>)")
        if isinstance(node, ast.Import):
            out += [f"{name}:{node.lineno}: seaborn imported as {a.asname}" for a in node.names
                    if a.name.split(".")[0] == "seaborn" and a.asname != "sns"]
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "sns"):
            continue
        func, kws = node.func.attr, {k.arg: k.value for k in node.keywords}
        where = f"{name}:{node.lineno}: sns.{func}"
        if func in SNS_BOOTSTRAP:
            out.append(f"{where} always bootstraps an interval")
        elif func in SNS_AGGREGATING:
            value = kws.get("errorbar")
            if not (isinstance(value, ast.Constant) and value.value is None):
                out.append(f"{where} without errorbar=None")
            if "ci" in kws:
                out.append(f"{where} with ci=")
        elif func not in SNS_DRAW_ONLY:
            out.append(f"{where}: not classified in this test (does it compute an interval?)")
    return out


def test_figures_draw_through_seaborn_with_the_fixed_palette_and_no_seaborn_interval():
    sys.path.insert(0, str(REPO / "workflows/scripts"))
    try:
        import figstyle as fs
        import matplotlib.colors as mcolors
        import matplotlib.pyplot as plt
    finally:
        sys.path.pop(0)
    # The check itself fails on a seaborn interval.
    assert _seaborn_violations("import seaborn as sns\nsns.barplot(data=d, x='arm', y='v')", "bad")
    assert _seaborn_violations("sns.lineplot(data=d, x='a', y='b', errorbar=('ci', 95))", "bad")
    assert _seaborn_violations("sns.regplot(data=d, x='a', y='b')", "bad")
    assert _seaborn_violations("from seaborn import barplot", "bad")
    assert not _seaborn_violations("sns.pointplot(data=d, x='a', y='b', errorbar=None)", "good")
    scripts = sorted((REPO / "workflows/scripts").glob("*.py"))  # the figures and their shared modules
    assert {p.stem for p in scripts} >= set(FIGURES) | {"figstyle", "memquality"}
    problems = [v for p in scripts for v in _seaborn_violations(p.read_text(encoding="utf-8"), p.name)]
    assert not problems, "\n".join(problems)
    for p in scripts:  # every figure draws through seaborn (directly, through fs.bars or the memory-quality plane)
        if p.stem in FIGURES:
            assert re.search(r"\bsns\.\w+\(|\bfs\.bars\(|\bmq\.draw\(", p.read_text(encoding="utf-8")), p.name
    # One colour per arm, the same whichever arms a figure shows and in whatever order.
    assert len(set(fs.ARM_COLOURS.values())) == len(fs.ARM_COLOURS)
    everything = list(fs.ARM_COLOURS)
    for arms in (everything, everything[::-1], ["vtoken", "naive"], ["diffkv"]):
        assert fs.palette(arms) == {a: fs.ARM_COLOURS[a] for a in arms}
    assert fs.palette(["vtoken"])["vtoken"] == "#009E73"
    # The bars carry the arms' exact colours (seaborn's default desaturation off), no whisker of their own.
    fs.apply()
    fig, ax = plt.subplots()
    fs.bars(ax, everything, range(1, len(everything) + 1))
    faces = [mcolors.to_hex(patch.get_facecolor()) for patch in ax.patches]
    assert faces == [fs.ARM_COLOURS[a].lower() for a in everything]
    assert not ax.lines and not ax.collections
    plt.close(fig)


@pytest.mark.engine
def test_report_has_a_caption_per_figure_and_table(smoke, tmp_path):
    report = tmp_path / "report.html"
    proc = _snakemake("--report", str(report), *smoke["args"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    html = report.read_text(encoding="utf-8")
    for caption in ("Fig. 1:", "Fig. 7:", "Fig. 8:", "Fig. 9:", "Fig. 10:", "Fig. 11:", "Fig. 12:", "Baselines:",
                    "Memory-quality:",
                    "Table 1:", "Overheads:", "Claims:"):
        assert caption in html, caption
