# lm-eval quality table (vtoken.bench.lmeval.run): held-out ShareGPT questions, each arm at each
# budget behind vLLM's server, lm-eval's local-completions model; ROUGE-L against the data set's
# reply (continuation) and against the full arm's output (fidelity), with lm-eval's standard
# error, and the retained blocks per request while it ran; fig_lmeval puts the runs on the
# memory-quality plane. In `all` only with lmeval.enabled (the extended profile);
# `snakemake --cores all table_lmeval fig_lmeval` runs them in any profile. Paths and helpers live in common.smk.


rule lmeval_data:
    input:
        sharegpt=SHAREGPT_PROVENANCE,
        model=MODEL_PROVENANCE,
    output:
        jsonl=LMEVAL_DATA["continuation"],
    log:
        f"logs/{RUN}/lmeval/data.log",
    conda:
        ENV_FILE
    resources:
        runtime=10,
    params:
        num=config["lmeval"]["num_docs"],
        model=lambda wildcards, input: os.path.dirname(input.model),
        sharegpt=lambda wildcards, input: os.path.dirname(input.sharegpt),
    shell:
        "python -m vtoken.bench.lmeval.data continuation {output.jsonl:q} --num {params.num} "
        "--model-dir {params.model:q} --sharegpt-dir {params.sharegpt:q} > {log} 2>&1"


# The fidelity task's references: the full arm's outputs (its run is the one without budget).
rule lmeval_fidelity_data:
    input:
        continuation=LMEVAL_DATA["continuation"],
        full=LMEVAL_RESULT.format(run=lmeval_grid.FULL),
    output:
        jsonl=LMEVAL_DATA["fidelity"],
    log:
        f"logs/{RUN}/lmeval/fidelity_data.log",
    conda:
        ENV_FILE
    resources:
        runtime=10,
    params:
        samples=lambda wildcards, input: os.path.join(
            os.path.dirname(input.full), "samples_sharegpt_continuation.jsonl"
        ),
    shell:
        "python -m vtoken.bench.lmeval.data fidelity {output.jsonl:q} --continuation {input.continuation:q} "
        "--samples {params.samples:q} > {log} 2>&1"


rule lmeval_run:
    input:
        unpack(lmeval_inputs),
    output:
        results=LMEVAL_RESULT,
    log:
        f"logs/{RUN}/lmeval/{{run}}.log",
    conda:
        ENV_FILE
    threads: ENGINE_THREADS
    resources:
        engine=1,
        gpu=1 if config["device"] == "cuda" else 0,
        runtime=60,
    params:
        args=lmeval_args,
        out=lambda wildcards, output: os.path.dirname(output.results),
    shell:
        "python -m vtoken.bench.lmeval.run {params.args} --out {params.out:q} > {log} 2>&1"


rule table_lmeval:
    input:
        results=expand(LMEVAL_RESULT, run=LMEVAL_RUNS),
        fmt="workflows/scripts/tablefmt.py",
    output:
        tex=LMEVAL_TABLE[0],
        md=LMEVAL_TABLE[1],
        csv=report(
            LMEVAL_TABLE[2],
            caption="../report/table_lmeval.rst",
            category="Tables",
            labels={
                "table": "lm-eval",
                "content": "Quality per arm and budget (lm-eval)",
            },
        ),
    log:
        f"logs/{RUN}/tables/table_lmeval.log",
    conda:
        ENV_FILE
    resources:
        runtime=10,
    params:
        arms=config["arms"],
    script:
        "../scripts/table_lmeval.py"


rule fig_lmeval:
    input:
        table=LMEVAL_TABLE[2],
        style="workflows/scripts/figstyle.py",
        plane="workflows/scripts/memquality.py",
    output:
        pdf=LMEVAL_FIGURE[0],
        png=report(
            LMEVAL_FIGURE[1],
            caption="../report/fig_lmeval.rst",
            category="Figures",
            labels={
                "figure": "Fig. lm-eval",
                "content": "lm-eval quality against retained blocks",
            },
        ),
    log:
        f"logs/{RUN}/figures/fig_lmeval.log",
    conda:
        ENV_FILE
    resources:
        runtime=10,
    params:
        arms=config["arms"],
        max_gen_toks=config["lmeval"]["max_gen_toks"],
    script:
        "../scripts/fig_lmeval.py"
