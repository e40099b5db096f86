# Figures: one rule per figure (its name is its target), PDF + PNG, each reading the
# processed tables only; the PNG goes into the HTML report with its caption.


rule fig01_low_util:
    input:
        summary=PROCESSED["summary"],
        setups=PROCESSED["setups"],
        comparisons=PROCESSED["comparisons"],
        style="workflows/scripts/figstyle.py",
    output:
        pdf=f"{FIG_DIR}/fig01_low_util.pdf",
        png=report(
            f"{FIG_DIR}/fig01_low_util.png",
            caption="../report/fig01_low_util.rst",
            category="Figures",
            labels={
                "figure": "Fig. 1",
                "content": "Low-utilisation blocks under token-level eviction",
            },
        ),
    log:
        f"logs/{RUN}/figures/fig01_low_util.log",
    conda:
        ENV_FILE
    resources:
        runtime=10,
    params:
        **PLOT_PARAMS,
    script:
        "../scripts/fig01_low_util.py"


rule fig07_memory:
    input:
        summary=PROCESSED["summary"],
        setups=PROCESSED["setups"],
        comparisons=PROCESSED["comparisons"],
        style="workflows/scripts/figstyle.py",
    output:
        pdf=f"{FIG_DIR}/fig07_memory.pdf",
        png=report(
            f"{FIG_DIR}/fig07_memory.png",
            caption="../report/fig07_memory.rst",
            category="Figures",
            labels={
                "figure": "Fig. 7",
                "content": "Memory efficiency: retained blocks and effective KV usage",
            },
        ),
    log:
        f"logs/{RUN}/figures/fig07_memory.log",
    conda:
        ENV_FILE
    resources:
        runtime=10,
    params:
        **PLOT_PARAMS,
    script:
        "../scripts/fig07_memory.py"


rule fig08_sla_frontier:
    input:
        summary=PROCESSED["summary"],
        setups=PROCESSED["setups"],
        comparisons=PROCESSED["comparisons"],
        sla=PROCESSED["sla"],
        sla_tpot=PROCESSED["sla_tpot"],
        style="workflows/scripts/figstyle.py",
    output:
        pdf=f"{FIG_DIR}/fig08_sla_frontier.pdf",
        png=report(
            f"{FIG_DIR}/fig08_sla_frontier.png",
            caption="../report/fig08_sla_frontier.rst",
            category="Figures",
            labels={
                "figure": "Fig. 8",
                "content": "SLA-constrained throughput frontier",
            },
        ),
    log:
        f"logs/{RUN}/figures/fig08_sla_frontier.log",
    conda:
        ENV_FILE
    resources:
        runtime=10,
    params:
        **PLOT_PARAMS,
    script:
        "../scripts/fig08_sla_frontier.py"


rule fig09_capacity:
    input:
        summary=PROCESSED["summary"],
        setups=PROCESSED["setups"],
        comparisons=PROCESSED["comparisons"],
        feasibility=PROCESSED["feasibility"],
        style="workflows/scripts/figstyle.py",
    output:
        pdf=f"{FIG_DIR}/fig09_capacity.pdf",
        png=report(
            f"{FIG_DIR}/fig09_capacity.png",
            caption="../report/fig09_capacity.rst",
            category="Figures",
            labels={
                "figure": "Fig. 9",
                "content": "Capacity frontier: feasible concurrency under a fixed pool",
            },
        ),
    log:
        f"logs/{RUN}/figures/fig09_capacity.log",
    conda:
        ENV_FILE
    resources:
        runtime=10,
    params:
        **PLOT_PARAMS,
    script:
        "../scripts/fig09_capacity.py"


rule fig10_block_demand:
    input:
        summary=PROCESSED["summary"],
        setups=PROCESSED["setups"],
        style="workflows/scripts/figstyle.py",
    output:
        pdf=f"{FIG_DIR}/fig10_block_demand.pdf",
        png=report(
            f"{FIG_DIR}/fig10_block_demand.png",
            caption="../report/fig10_block_demand.rst",
            category="Figures",
            labels={
                "figure": "Fig. 10",
                "content": "KV-block demand normalised by the usable budget, against C",
            },
        ),
    log:
        f"logs/{RUN}/figures/fig10_block_demand.log",
    conda:
        ENV_FILE
    resources:
        runtime=10,
    params:
        **PLOT_PARAMS,
    script:
        "../scripts/fig10_block_demand.py"


rule fig11_overhead:
    input:
        summary=PROCESSED["summary"],
        setups=PROCESSED["setups"],
        comparisons=PROCESSED["comparisons"],
        style="workflows/scripts/figstyle.py",
    output:
        pdf=f"{FIG_DIR}/fig11_overhead.pdf",
        png=report(
            f"{FIG_DIR}/fig11_overhead.png",
            caption="../report/fig11_overhead.rst",
            category="Figures",
            labels={"figure": "Fig. 11", "content": "Reclamation overhead"},
        ),
    log:
        f"logs/{RUN}/figures/fig11_overhead.log",
    conda:
        ENV_FILE
    resources:
        runtime=10,
    params:
        **PLOT_PARAMS,
    script:
        "../scripts/fig11_overhead.py"


rule fig12_sensitivity:
    input:
        selected=SELECTED,
        setups=PROCESSED["setups"],
        comparisons=PROCESSED["comparisons"],
        style="workflows/scripts/figstyle.py",
    output:
        pdf=f"{FIG_DIR}/fig12_sensitivity.pdf",
        png=report(
            f"{FIG_DIR}/fig12_sensitivity.png",
            caption="../report/fig12_sensitivity.rst",
            category="Figures",
            labels={
                "figure": "Fig. 12",
                "content": "Sensitivity to block size, eviction ratio and θ_F",
            },
        ),
    log:
        f"logs/{RUN}/figures/fig12_sensitivity.log",
    conda:
        ENV_FILE
    resources:
        runtime=10,
    params:
        **PLOT_PARAMS,
        sensitivity=config["sensitivity"],
    script:
        "../scripts/fig12_sensitivity.py"


# The paper's eviction-ratio sweep per policy (ratio_sweep, the extended profile).
rule fig_ratio_sweep:
    input:
        summary=PROCESSED["summary"],
        setups=PROCESSED["setups"],
        comparisons=PROCESSED["comparisons"],
        style="workflows/scripts/figstyle.py",
    output:
        pdf=f"{FIG_DIR}/fig_ratio_sweep.pdf",
        png=report(
            f"{FIG_DIR}/fig_ratio_sweep.png",
            caption="../report/fig_ratio_sweep.rst",
            category="Figures",
            labels={
                "figure": "Fig. ratio",
                "content": "Retained blocks and quality over the eviction ratio, per policy",
            },
        ),
    log:
        f"logs/{RUN}/figures/fig_ratio_sweep.log",
    conda:
        ENV_FILE
    resources:
        runtime=10,
    params:
        **PLOT_PARAMS,
    script:
        "../scripts/fig_ratio_sweep.py"


rule fig_baselines:
    input:
        summary=PROCESSED["summary"],
        setups=PROCESSED["setups"],
        comparisons=PROCESSED["comparisons"],
        style="workflows/scripts/figstyle.py",
        plane="workflows/scripts/memquality.py",
    output:
        pdf=f"{FIG_DIR}/fig_baselines.pdf",
        png=report(
            f"{FIG_DIR}/fig_baselines.png",
            caption="../report/fig_baselines.rst",
            category="Figures",
            labels={"figure": "Baselines", "content": "Every arm side by side"},
        ),
    log:
        f"logs/{RUN}/figures/fig_baselines.log",
    conda:
        ENV_FILE
    resources:
        runtime=10,
    params:
        **PLOT_PARAMS,
    script:
        "../scripts/fig_baselines.py"


rule fig_theta_f:
    input:
        setups=PROCESSED["setups"],
        comparisons=PROCESSED["comparisons"],
        selected=SELECTED,
        style="workflows/scripts/figstyle.py",
    output:
        pdf=f"{FIG_DIR}/fig_theta_f.pdf",
        png=report(
            f"{FIG_DIR}/fig_theta_f.png",
            caption="../report/fig_theta_f.rst",
            category="Figures",
            labels={
                "figure": "θ_F",
                "content": "θ_F and watermark selected on held-out samples",
            },
        ),
    log:
        f"logs/{RUN}/figures/fig_theta_f.log",
    conda:
        ENV_FILE
    resources:
        runtime=10,
    params:
        **PLOT_PARAMS,
    script:
        "../scripts/fig_theta_f.py"


rule fig_memory_quality:
    input:
        summary=PROCESSED["summary"],
        setups=PROCESSED["setups"],
        style="workflows/scripts/figstyle.py",
        plane="workflows/scripts/memquality.py",
    output:
        pdf=f"{FIG_DIR}/fig_memory_quality.pdf",
        png=report(
            f"{FIG_DIR}/fig_memory_quality.png",
            caption="../report/fig_memory_quality.rst",
            category="Figures",
            labels={
                "figure": "Memory-quality",
                "content": "What each arm's memory saving costs in quality",
            },
        ),
    log:
        f"logs/{RUN}/figures/fig_memory_quality.log",
    conda:
        ENV_FILE
    resources:
        runtime=10,
    params:
        **PLOT_PARAMS,
    script:
        "../scripts/fig_memory_quality.py"


rule fig_compaction_frontier:
    input:
        summary=PROCESSED["summary"],
        setups=PROCESSED["setups"],
        comparisons=PROCESSED["comparisons"],
        style="workflows/scripts/figstyle.py",
    output:
        pdf=f"{FIG_DIR}/fig_compaction_frontier.pdf",
        png=report(
            f"{FIG_DIR}/fig_compaction_frontier.png",
            caption="../report/fig_compaction_frontier.rst",
            category="Figures",
            labels={
                "figure": "Fig. frontier",
                "content": "vToken's retained blocks against tokens moved and step time, eager to lazy",
            },
        ),
    log:
        f"logs/{RUN}/figures/fig_compaction_frontier.log",
    conda:
        ENV_FILE
    resources:
        runtime=10,
    params:
        **PLOT_PARAMS,
    script:
        "../scripts/fig_compaction_frontier.py"


rule fig_factorial:
    input:
        frontiers=PROCESSED["frontiers"],
        style="workflows/scripts/figstyle.py",
    output:
        pdf=f"{FIG_DIR}/fig_factorial.pdf",
        png=report(
            f"{FIG_DIR}/fig_factorial.png",
            caption="../report/fig_factorial.rst",
            category="Figures",
            labels={
                "figure": "Fig. factorial",
                "content": "Memory-quality frontiers per mechanism, scorer and phase",
            },
        ),
    log:
        f"logs/{RUN}/figures/fig_factorial.log",
    conda:
        ENV_FILE
    resources:
        runtime=10,
    params:
        **PLOT_PARAMS,
        c_press=(config["pool"]["c_press"] or [None])[0],
        ruler_c_press=config["ruler"]["c_press"],
    script:
        "../scripts/fig_factorial.py"


rule fig_forced_curve:
    input:
        curve=PROCESSED["forced_curve"],
        setups=PROCESSED["setups"],
        style="workflows/scripts/figstyle.py",
    output:
        pdf=f"{FIG_DIR}/fig_forced_curve.pdf",
        png=report(
            f"{FIG_DIR}/fig_forced_curve.png",
            caption="../report/fig_forced_curve.rst",
            category="Figures",
            labels={
                "figure": "Fig. forced curve",
                "content": "Teacher-forced KL from Native per output position",
            },
        ),
    log:
        f"logs/{RUN}/figures/fig_forced_curve.log",
    conda:
        ENV_FILE
    resources:
        runtime=10,
    params:
        **PLOT_PARAMS,
    script:
        "../scripts/fig_forced_curve.py"
