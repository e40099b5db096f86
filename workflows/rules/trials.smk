# Paired trials on the real engine, one job per setup (every arm, pair and C of it), and
# their processing into the tidy tables that every figure and table reads.


# A setup's output is its completion marker, written by the runner once every planned trial
# exists (atomically: temporary file + rename). The raw folder data/raw/<run>/<setup>/ is
# not a Snakemake output, so Snakemake never deletes it: a job killed at any point (SIGKILL,
# a SLURM time-out) or failed leaves its finished trials, and the rerun runs only the rest.
rule trials:
    input:
        unpack(trial_inputs),
    output:
        done=DONE_PATTERN,
    log:
        f"logs/{RUN}/trials/{{setup}}.log",
    conda:
        ENV_FILE
    # Every core (ENGINE_THREADS, common.smk): Snakemake sets OMP_NUM_THREADS to a job's threads,
    # and one engine job runs at a time (the engine resource); the job deals its cores among
    # trial.workers processes (TRIAL_WORKERS), each running its own pairs.
    threads: ENGINE_THREADS
    resources:
        engine=1,
        gpu=1 if config["device"] == "cuda" else 0,
        runtime=config["trial_runtime_min"],
    params:
        args=trial_args,
        workers=TRIAL_WORKERS,
    shell:
        "python -m vtoken.bench trial {params.args} --done={output.done:q} --workers={params.workers} --no-process "
        "--no-progress > {log} 2>&1"


# θ_F and watermark chosen on the held-out pairs of the `select` setup
# (vtoken.bench.analysis.selection): the setting with the best vtoken / naive select_metric; every
# other setup's trials read it (--vtoken-file), so they wait for it.
if SELECT_SETUP:

    localrules:
        select_theta_f,  # seconds of pandas: on the Snakemake host, not a cluster job

    rule select_theta_f:
        input:
            done=DONE_PATTERN.format(setup=SELECT_SETUP),
        output:
            selected=SELECTED,
            table=SELECTED.removesuffix(".json") + ".csv",
        log:
            f"logs/{RUN}/select_theta_f.log",
        conda:
            ENV_FILE
        resources:
            runtime=10,
        params:
            raw=lambda wildcards, input: input.done.removesuffix(".done.json"),
            variants=json.dumps(grid.selection_variants(config)),
            metric=config["theta_f"]["select_metric"],
            baseline=config["baseline"],
        shell:
            "python -m vtoken.bench.analysis.selection {params.raw:q} {output.selected:q} --variants {params.variants:q} "
            "--metric {params.metric} --baseline {params.baseline} > {log} 2>&1"


# The end-to-end cost of the plugin's indirection: the decode step of `full` through the
# plugin against stock vLLM's, in this run, on this machine (benchmarks/decode_step.py;
# each repeat its own prompts, arms in alternating order). The claims table reads it.
rule decode_cost:
    input:
        unpack(decode_cost_inputs),
    output:
        csv=f"{PROCESSED_DIR}/decode_cost.csv",
    log:
        f"logs/{RUN}/decode_cost.log",
    conda:
        ENV_FILE
    threads: ENGINE_THREADS
    resources:
        engine=1,
        gpu=1 if config["device"] == "cuda" else 0,
        runtime=30,
    params:
        args=decode_cost_args,
    shell:
        "python -m benchmarks.decode_step {params.args} --csv {output.csv} > {log} 2>&1"


# Reads the trials each setup's marker lists (exactly the planned ones, from their folders).
rule process:
    input:
        done=SETUP_DONE,
    output:
        **PROCESSED,
    log:
        f"logs/{RUN}/process.log",
    conda:
        ENV_FILE
    resources:
        runtime=30,
    params:
        setups=[
            s.row()
            | {
                "num_gpu_blocks": grid_pool.pool_blocks(config, s),
                "capacity_search": job_args.searches_capacity(config, s),
            }
            for s in SETUPS.values()
        ],
        baseline=config["baseline"],
        sla=config["sla"],
        seed=TRIAL["seed"],
        k_tpot=config["sla"]["k_tpot"],
        budget_partners=grid.budget_partners(config),
        margins=config["factorial"]["margins"],
    script:
        "../scripts/process_run.py"
