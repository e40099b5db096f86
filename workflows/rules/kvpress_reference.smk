# kvpress's own pipeline as the reference for its presses in the engine
# (vtoken.bench.kvpress_ref): the RULER documents of one cell through kvpress's pipeline on the HF
# model (one job per press: kvpress's answer, its per-head sets replayed, the adapter's consensus),
# then through the engine with the vToken arm and the press in mode prefill_once (one job per
# press, one engine per ratio; `none`: the engine without eviction), then the table. In `all`
# only with kvpress.reference.enabled (the kvpress config and the extended profile);
# `snakemake --cores all kvpress_reference` runs it in any profile.


wildcard_constraints:
    kpress="|".join(["none"] + KVPRESS_REF["presses"]),


rule kvpress_reference_hf:
    input:
        data=KVPRESS_REF_DATA,
        model=MODEL_PROVENANCE,
    output:
        f"{KVPRESS_REF_DIR}/hf_{{kpress}}.jsonl",
    log:
        f"logs/{RUN}/kvpress_reference/hf_{{kpress}}.log",
    conda:
        ENV_FILE
    threads: ENGINE_THREADS
    resources:
        runtime=30,
    params:
        args=KVPRESS_REF_ARGS,
        model=lambda wildcards, input: os.path.dirname(input.model),
    shell:
        "python -m vtoken.bench.kvpress_ref hf {input.data:q} {output:q} --presses {wildcards.kpress} "
        "{params.args} --model-dir {params.model:q} > {log} 2>&1"


rule kvpress_reference_engine:
    input:
        hf=kvpress_ref_hf,
        model=MODEL_PROVENANCE,
    output:
        f"{KVPRESS_REF_DIR}/engine_{{kpress}}.jsonl",
    log:
        f"logs/{RUN}/kvpress_reference/engine_{{kpress}}.log",
    conda:
        ENV_FILE
    threads: ENGINE_THREADS
    resources:
        engine=1,
        runtime=30,
    params:
        args=KVPRESS_REF_ARGS,
        model=lambda wildcards, input: os.path.dirname(input.model),
    shell:
        "python -m vtoken.bench.kvpress_ref engine {input.hf:q} {output:q} --press {wildcards.kpress} "
        "{params.args} --model-dir {params.model:q} > {log} 2>&1"


rule kvpress_reference:
    input:
        hf=expand(
            f"{KVPRESS_REF_DIR}/hf_{{kpress}}.jsonl", kpress=KVPRESS_REF["presses"]
        ),
        engine=expand(
            f"{KVPRESS_REF_DIR}/engine_{{kpress}}.jsonl",
            kpress=["none"] + KVPRESS_REF["presses"],
        ),
        fmt="workflows/scripts/tablefmt.py",
    output:
        tex=KVPRESS_REF_TABLE[0],
        md=KVPRESS_REF_TABLE[1],
        csv=report(
            KVPRESS_REF_TABLE[2],
            caption="../report/kvpress_reference.rst",
            category="Tables",
            labels={
                "table": "kvpress reference",
                "content": "kvpress's own pipeline against vToken in the engine, per press and ratio",
            },
        ),
    log:
        f"logs/{RUN}/tables/kvpress_reference.log",
    conda:
        ENV_FILE
    resources:
        runtime=10,
    script:
        "../scripts/table_kvpress_reference.py"
