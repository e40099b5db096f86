# Helpers and paths shared by all rule files. The config is validated before any job runs.
import os

from snakemake.utils import validate


validate(config, "../schemas/config.schema.yaml")

MODEL_DIR = config["model_dir"]
SHAREGPT_DIR = config["sharegpt_dir"]
MODEL_PROVENANCE = f"{MODEL_DIR}/provenance.json"
SHAREGPT_PROVENANCE = f"{SHAREGPT_DIR}/provenance.json"
SMOKE_GENERATIONS = "data/raw/smoke/generations.jsonl"
# Software environment for `--use-conda` runs (GPU clusters); the CPU default uses .venv.
ENV_FILE = "../../environment.yml"
