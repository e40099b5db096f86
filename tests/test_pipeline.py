"""The Snakemake workflow parses, validates its config and plans the default run."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))


def _snakemake(*args, cwd=REPO):
    return subprocess.run([SNAKEMAKE, *args], cwd=cwd, capture_output=True, text=True, timeout=300)


def test_dry_run_plans_the_default_pipeline():
    proc = _snakemake("-n", "--forceall", "--cores", "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for rule in ("model_asset", "sharegpt_asset", "smoke_generate", "all"):
        assert rule in proc.stdout


def test_bad_config_fails_before_any_job(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("model_dir: m\nsharegpt_dir: s\nsmoke: {num_prompts: 0, max_tokens: 8}\n")
    proc = _snakemake("-n", "--cores", "1", "--configfile", str(bad))
    assert proc.returncode != 0
    assert "num_prompts" in proc.stdout + proc.stderr and "minimum" in proc.stdout + proc.stderr


def test_lint_is_clean(tmp_path):
    proc = _snakemake("--lint")
    assert proc.returncode == 0 and "Congratulations" in proc.stdout + proc.stderr, proc.stdout + proc.stderr
