# One smoke generation on the real engine: a few ShareGPT prompts, greedy decoding.


rule smoke_generate:
    input:
        model=MODEL_PROVENANCE,
        sharegpt=SHAREGPT_PROVENANCE,
    output:
        generations=SMOKE_GENERATIONS,
    log:
        "logs/smoke/generate.log",
    conda:
        ENV_FILE
    resources:
        engine=1,
    params:
        model_dir=lambda wildcards, input: os.path.dirname(input.model),
        sharegpt_dir=lambda wildcards, input: os.path.dirname(input.sharegpt),
        num_prompts=config["smoke"]["num_prompts"],
        max_tokens=config["smoke"]["max_tokens"],
        dtype=config["trial"]["engine"]["dtype"],
    script:
        "../scripts/smoke_generate.py"
