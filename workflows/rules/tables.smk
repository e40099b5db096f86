# Tables: one rule per table (its name is its target), LaTeX + Markdown + CSV from the
# same processed rows; the CSV goes into the HTML report with its caption.


rule table1_main:
    input:
        summary=PROCESSED["summary"],
        setups=PROCESSED["setups"],
        comparisons=PROCESSED["comparisons"],
        fmt="workflows/scripts/tablefmt.py",
    output:
        tex=f"{TAB_DIR}/table1_main.tex",
        md=f"{TAB_DIR}/table1_main.md",
        csv=report(
            f"{TAB_DIR}/table1_main.csv",
            caption="../report/table1_main.rst",
            category="Tables",
            labels={"table": "Table 1", "content": "Main results"},
        ),
    log:
        f"logs/{RUN}/tables/table1_main.log",
    conda:
        ENV_FILE
    resources:
        runtime=10,
    params:
        **PLOT_PARAMS,
    script:
        "../scripts/table1_main.py"


rule table_overhead:
    input:
        summary=PROCESSED["summary"],
        setups=PROCESSED["setups"],
        trials=PROCESSED["trials"],
        fmt="workflows/scripts/tablefmt.py",
    output:
        tex=f"{TAB_DIR}/table_overhead.tex",
        md=f"{TAB_DIR}/table_overhead.md",
        csv=report(
            f"{TAB_DIR}/table_overhead.csv",
            caption="../report/table_overhead.rst",
            category="Tables",
            labels={"table": "Overheads", "content": "Reclamation overheads"},
        ),
    log:
        f"logs/{RUN}/tables/table_overhead.log",
    conda:
        ENV_FILE
    resources:
        runtime=10,
    params:
        **PLOT_PARAMS,
    script:
        "../scripts/table_overhead.py"


rule table_packing:
    input:
        summary=PROCESSED["summary"],
        setups=PROCESSED["setups"],
        comparisons=PROCESSED["comparisons"],
        fmt="workflows/scripts/tablefmt.py",
    output:
        tex=f"{TAB_DIR}/table_packing.tex",
        md=f"{TAB_DIR}/table_packing.md",
        csv=report(
            f"{TAB_DIR}/table_packing.csv",
            caption="../report/table_packing.rst",
            category="Tables",
            labels={
                "table": "Packing",
                "content": "What packing costs, where tokens die",
            },
        ),
    log:
        f"logs/{RUN}/tables/table_packing.log",
    conda:
        ENV_FILE
    resources:
        runtime=10,
    params:
        **PLOT_PARAMS,
    script:
        "../scripts/table_packing.py"


rule table_claims:
    input:
        summary=PROCESSED["summary"],
        setups=PROCESSED["setups"],
        comparisons=PROCESSED["comparisons"],
        feasibility=PROCESSED["feasibility"],
        best_baseline=PROCESSED["best_baseline"],
        plane=PROCESSED["plane"],
        equal_memory=PROCESSED["equal_memory"],
        exactness=PROCESSED["exactness"],
        decode_cost=(
            f"{PROCESSED_DIR}/decode_cost.csv"
            if config["decode_cost"]["enabled"]
            else []
        ),
        ruler=RULER_TABLE[2] if config["ruler"]["enabled"] else [],
        kvpress=f"{TAB_DIR}/table_kvpress.csv",
        kvpress_adapter=KVPRESS_FILES,
        policies=POLICY_FILES,
        fmt="workflows/scripts/tablefmt.py",
    output:
        tex=f"{TAB_DIR}/table_claims.tex",
        md=f"{TAB_DIR}/table_claims.md",
        csv=report(
            f"{TAB_DIR}/table_claims.csv",
            caption="../report/table_claims.rst",
            category="Tables",
            labels={"table": "Claims", "content": "Headline claims checked"},
        ),
    log:
        f"logs/{RUN}/tables/table_claims.log",
    conda:
        ENV_FILE
    resources:
        runtime=10,
    params:
        **PLOT_PARAMS,
        ruler_enabled=config["ruler"]["enabled"],
        factorial=config["factorial"],
        budget=config["trial"]["budget"],
    script:
        "../scripts/table_claims.py"


rule table_theta_f:
    input:
        setups=PROCESSED["setups"],
        comparisons=PROCESSED["comparisons"],
        selected=SELECTED,
        selection=SELECTED.removesuffix(".json") + ".csv",
        fmt="workflows/scripts/tablefmt.py",
    output:
        tex=f"{TAB_DIR}/table_theta_f.tex",
        md=f"{TAB_DIR}/table_theta_f.md",
        csv=report(
            f"{TAB_DIR}/table_theta_f.csv",
            caption="../report/table_theta_f.rst",
            category="Tables",
            labels={
                "table": "θ_F",
                "content": "θ_F and watermark selected on held-out samples",
            },
        ),
    log:
        f"logs/{RUN}/tables/table_theta_f.log",
    conda:
        ENV_FILE
    resources:
        runtime=10,
    params:
        **PLOT_PARAMS,
    script:
        "../scripts/table_theta_f.py"


# Third-party policies: kvpress's scorers per press (kvpress, the extended profile).
rule table_kvpress:
    input:
        summary=PROCESSED["summary"],
        setups=PROCESSED["setups"],
        comparisons=PROCESSED["comparisons"],
        exactness=PROCESSED["exactness"],
        fmt="workflows/scripts/tablefmt.py",
    output:
        tex=f"{TAB_DIR}/table_kvpress.tex",
        md=f"{TAB_DIR}/table_kvpress.md",
        csv=report(
            f"{TAB_DIR}/table_kvpress.csv",
            caption="../report/table_kvpress.rst",
            category="Tables",
            labels={
                "table": "kvpress",
                "content": "kvpress's scorers as vToken policies, per press",
            },
        ),
    log:
        f"logs/{RUN}/tables/table_kvpress.log",
    conda:
        ENV_FILE
    resources:
        runtime=10,
    params:
        **PLOT_PARAMS,
    script:
        "../scripts/table_kvpress.py"


rule table_equal_memory:
    input:
        equal_memory=PROCESSED["equal_memory"],
        exactness=PROCESSED["factorial_exactness"],
        fmt="workflows/scripts/tablefmt.py",
    output:
        tex=f"{TAB_DIR}/table_equal_memory.tex",
        md=f"{TAB_DIR}/table_equal_memory.md",
        csv=report(
            f"{TAB_DIR}/table_equal_memory.csv",
            caption="../report/table_equal_memory.rst",
            category="Tables",
            labels={
                "table": "Equal memory",
                "content": "Token vs block granularity at equal memory, per scorer and phase",
            },
        ),
    log:
        f"logs/{RUN}/tables/table_equal_memory.log",
    conda:
        ENV_FILE
    resources:
        runtime=10,
    params:
        **PLOT_PARAMS,
    script:
        "../scripts/table_equal_memory.py"


rule table_forced_quality:
    input:
        frontiers=PROCESSED["frontiers"],
        fmt="workflows/scripts/tablefmt.py",
    output:
        tex=f"{TAB_DIR}/table_forced_quality.tex",
        md=f"{TAB_DIR}/table_forced_quality.md",
        csv=report(
            f"{TAB_DIR}/table_forced_quality.csv",
            caption="../report/table_forced_quality.rst",
            category="Tables",
            labels={
                "table": "Forced quality",
                "content": "Teacher-forced quality vs Native per factorial cell",
            },
        ),
    log:
        f"logs/{RUN}/tables/table_forced_quality.log",
    conda:
        ENV_FILE
    resources:
        runtime=10,
    params:
        **PLOT_PARAMS,
    script:
        "../scripts/table_forced_quality.py"


rule table_capacity:
    input:
        capacity=PROCESSED["capacity"],
        setups=PROCESSED["setups"],
        fmt="workflows/scripts/tablefmt.py",
    output:
        tex=f"{TAB_DIR}/table_capacity.tex",
        md=f"{TAB_DIR}/table_capacity.md",
        csv=report(
            f"{TAB_DIR}/table_capacity.csv",
            caption="../report/table_capacity.rst",
            category="Tables",
            labels={
                "table": "Capacity",
                "content": "Feasible C as measured intervals",
            },
        ),
    log:
        f"logs/{RUN}/tables/table_capacity.log",
    conda:
        ENV_FILE
    resources:
        runtime=10,
    params:
        **PLOT_PARAMS,
    script:
        "../scripts/table_capacity.py"


rule table_summary:
    input:
        claims=f"{TAB_DIR}/table_claims.csv",
        capacity=PROCESSED["capacity"],
        setups=PROCESSED["setups"],
        fmt="workflows/scripts/tablefmt.py",
    output:
        tex=f"{TAB_DIR}/table_summary.tex",
        md=f"{TAB_DIR}/table_summary.md",
        csv=report(
            f"{TAB_DIR}/table_summary.csv",
            caption="../report/table_summary.rst",
            category="Tables",
            labels={"table": "Summary", "content": "What this run shows"},
        ),
    log:
        f"logs/{RUN}/tables/table_summary.log",
    conda:
        ENV_FILE
    resources:
        runtime=10,
    params:
        **PLOT_PARAMS,
    script:
        "../scripts/table_summary.py"
