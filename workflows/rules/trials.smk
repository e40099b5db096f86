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
    # Every core: Snakemake sets OMP_NUM_THREADS to a job's threads, and one engine job runs
    # at a time (the engine resource); with threads 1 the CPU engine ran 1.5x slower. A
    # callable, so that commands without --cores (--unlock) parse.
    threads: lambda wildcards: workflow.cores
    resources:
        engine=1,
        gpu=1 if config["device"] == "cuda" else 0,
        runtime=config["trial_runtime_min"],
    params:
        args=trial_args,
    shell:
        "python -m vtoken.bench trial {params.args} --done={output.done:q} --no-process --no-progress > {log} 2>&1"


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
    threads: lambda wildcards: workflow.cores
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
        setups=[s.row() for s in SETUPS.values()],
        baseline=config["baseline"],
        sla=config["sla"],
        seed=TRIAL["seed"],
    script:
        "../scripts/process_run.py"
