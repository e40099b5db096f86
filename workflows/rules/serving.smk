# The serving experiment (vtoken.bench.harness.serving): each arm of `serving.arms` behind vLLM's
# OpenAI server at the first main setup's budget, pool and block size, driven by vLLM's own
# benchmark client at the Poisson rates of `serving.rates`, paired trials; its tables and figure.
# In `all` only with serving.enabled (the extended profile); `snakemake --cores all fig_serving`
# runs it in any profile. Its paths and helpers live in common.smk.
# Like a setup's trials: the output is the completion marker; finished trials survive a kill
# and a rerun runs only the rest (the raw folders are not Snakemake outputs).
rule serving_trials:
    input:
        unpack(serving_inputs),
    output:
        done=SERVING_DONE,
    log:
        f"logs/{RUN}/serving/trials.log",
    conda:
        ENV_FILE
    threads: ENGINE_THREADS
    resources:
        engine=1,
        gpu=1 if config["device"] == "cuda" else 0,
        runtime=config["trial_runtime_min"],
    params:
        args=serving_args,
    shell:
        "python -m vtoken.bench serving {params.args} --done={output.done:q} --no-process --no-progress > {log} 2>&1"


rule serving_tables:
    input:
        done=SERVING_DONE,
    output:
        **SERVING_TABLES,
    log:
        f"logs/{RUN}/serving/tables.log",
    conda:
        ENV_FILE
    resources:
        runtime=10,
    params:
        out_dir=lambda wildcards, output: os.path.dirname(output.serving_trials),
    shell:
        "python -m vtoken.bench.analysis.serving_tables {input.done:q} --out-dir {params.out_dir:q} > {log} 2>&1"


rule fig_serving:
    input:
        summary=SERVING_TABLES["serving_summary"],
        comparisons=SERVING_TABLES["serving_comparisons"],
        style="workflows/scripts/figstyle.py",
    output:
        pdf=SERVING_FIGURE[0],
        png=report(
            SERVING_FIGURE[1],
            caption="../report/fig_serving.rst",
            category="Figures",
            labels={"figure": "Fig. serving", "content": "Arms behind vLLM's server"},
        ),
    log:
        f"logs/{RUN}/figures/fig_serving.log",
    conda:
        ENV_FILE
    resources:
        runtime=10,
    params:
        arms=config["arms"],
        baseline=config["baseline"],
    script:
        "../scripts/fig_serving.py"
