# RULER through lm-eval, offline, at a pool that presses (vtoken.bench.lmeval.ruler,
# vtoken.bench.grid.ruler): the documents of each cell (task x length), Native's screen, every
# arm at each kept fraction behind vLLM's server with the cell's pressing pool, the table and
# the figure (score and retained blocks against the fraction of the prompt kept). In `all` only
# with ruler.enabled (the extended profile); `snakemake --cores all fig_ruler` runs it in any
# profile. Paths and helpers live in common.smk.


rule ruler_data:
    input:
        model=MODEL_PROVENANCE,
        nltk=NLTK_PROVENANCE,
    output:
        jsonl=RULER_DATA,
    log:
        f"logs/{RUN}/ruler/data_{{cell}}.log",
    conda:
        ENV_FILE
    resources:
        runtime=10,
    params:
        task=lambda wildcards: wildcards.cell.rpartition("-")[0],
        length=lambda wildcards: wildcards.cell.rpartition("-")[2],
        num=config["ruler"]["num_docs"],
        seed=config["trial"]["seed"],
        model=lambda wildcards, input: os.path.dirname(input.model),
        nltk=lambda wildcards, input: os.path.dirname(input.nltk),
    shell:
        "python -m vtoken.bench.lmeval.ruler {params.task} {params.length} {output.jsonl:q} --num {params.num} "
        "--seed {params.seed} --model-dir {params.model:q} --nltk-dir {params.nltk:q} > {log} 2>&1"


rule ruler_run:
    input:
        data=RULER_DATA,
        model=MODEL_PROVENANCE,
    output:
        results=RULER_RESULT,
    log:
        f"logs/{RUN}/ruler/{{cell}}/{{rrun}}.log",
    conda:
        ENV_FILE
    threads: ENGINE_THREADS
    resources:
        engine=1,
        gpu=1 if config["device"] == "cuda" else 0,
        runtime=60,
    params:
        args=ruler_args,
        out=lambda wildcards, output: os.path.dirname(output.results),
    shell:
        "python -m vtoken.bench.lmeval.run {params.args} --out {params.out:q} > {log} 2>&1"


rule table_ruler_screen:
    input:
        results=expand(RULER_RESULT, cell=RULER_SCREEN_CELLS, rrun=ruler_grid.FULL),
        fmt="workflows/scripts/tablefmt.py",
    output:
        tex=RULER_SCREEN_TABLE[0],
        md=RULER_SCREEN_TABLE[1],
        csv=report(
            RULER_SCREEN_TABLE[2],
            caption="../report/table_ruler_screen.rst",
            category="Tables",
            labels={
                "table": "RULER screen",
                "content": "Native per RULER task and length against chance",
            },
        ),
    log:
        f"logs/{RUN}/tables/table_ruler_screen.log",
    conda:
        ENV_FILE
    resources:
        runtime=10,
    params:
        min_margin=config["ruler"]["min_margin"],
    script:
        "../scripts/table_ruler_screen.py"


rule table_ruler:
    input:
        results=expand(RULER_RESULT, cell=RULER_CELLS, rrun=RULER_RUNS),
        fmt="workflows/scripts/tablefmt.py",
    output:
        tex=RULER_TABLE[0],
        md=RULER_TABLE[1],
        csv=report(
            RULER_TABLE[2],
            caption="../report/table_ruler.rst",
            category="Tables",
            labels={
                "table": "RULER",
                "content": "RULER score and retained blocks per arm and kept fraction",
            },
        ),
    log:
        f"logs/{RUN}/tables/table_ruler.log",
    conda:
        ENV_FILE
    resources:
        runtime=10,
    params:
        **PLOT_PARAMS,
        ruler_arms=config["ruler"]["arms"],
        min_margin=config["ruler"]["min_margin"],
    script:
        "../scripts/table_ruler.py"


rule fig_ruler:
    input:
        table=RULER_TABLE[2],
        style="workflows/scripts/figstyle.py",
    output:
        pdf=RULER_FIGURE[0],
        png=report(
            RULER_FIGURE[1],
            caption="../report/fig_ruler.rst",
            category="Figures",
            labels={
                "figure": "Fig. RULER",
                "content": "RULER score and retained blocks against the fraction kept",
            },
        ),
    log:
        f"logs/{RUN}/figures/fig_ruler.log",
    conda:
        ENV_FILE
    resources:
        runtime=10,
    params:
        **PLOT_PARAMS,
        ruler_arms=config["ruler"]["arms"],
        c_press=config["ruler"]["c_press"],
        num_concurrent=config["ruler"]["num_concurrent"],
    script:
        "../scripts/fig_ruler.py"
