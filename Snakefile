# vToken artifact pipeline. `snakemake --cores all` reproduces the embedded default;
# rules live in workflows/rules/, scripts in workflows/scripts/, config in workflows/config/
# (validated by workflows/schemas/), profiles in workflows/profiles/. Targets: all (default),
# figures, tables, reviewer, and every figure / table rule by name (docs/artifact-appendix.md).
from snakemake.utils import min_version

min_version("9.0")


configfile: "workflows/config/config.yaml"


report: "workflows/report/workflow.rst"


include: "workflows/rules/common.smk"


wildcard_constraints:
    setup=SETUP_PATTERN,
    run=LMEVAL_RUN_PATTERN,
    cell=RULER_CELL_PATTERN,
    rrun=RULER_RUN_PATTERN,


include: "workflows/rules/assets.smk"
include: "workflows/rules/smoke.smk"
include: "workflows/rules/trials.smk"
include: "workflows/rules/figures.smk"
include: "workflows/rules/tables.smk"
include: "workflows/rules/serving.smk"
include: "workflows/rules/lmeval.smk"
include: "workflows/rules/ruler.smk"
include: "workflows/rules/kvpress_reference.smk"


# Cheap rules (seconds each: figures, tables, the θ_F pick, serving tables) run on the host
# that runs Snakemake, not as cluster jobs: on SLURM each job costs submission and polling
# (about 10 s + the poll interval) for a few seconds of work. Locally this changes nothing.
localrules:
    fig01_low_util,
    fig07_memory,
    fig08_sla_frontier,
    fig09_capacity,
    fig10_block_demand,
    fig11_overhead,
    fig12_sensitivity,
    fig_ratio_sweep,
    fig_compaction_frontier,
    fig_baselines,
    fig_theta_f,
    fig_memory_quality,
    fig_factorial,
    fig_forced_curve,
    table1_main,
    table_overhead,
    table_packing,
    table_claims,
    table_theta_f,
    table_kvpress,
    table_equal_memory,
    table_forced_quality,
    table_capacity,
    serving_tables,
    fig_serving,
    table_lmeval,
    fig_lmeval,
    table_ruler_screen,
    table_ruler,
    fig_ruler,
    kvpress_reference,


rule all:
    default_target: True
    input:
        figures=[f for name in FIGURES for f in figure_files(name)],
        tables=[f for name in TABLES for f in table_files(name)],
        serving=SERVING_FIGURE if config["serving"]["enabled"] else [],
        lmeval=LMEVAL_TABLE + LMEVAL_FIGURE if config["lmeval"]["enabled"] else [],
        ruler=(
            RULER_SCREEN_TABLE + RULER_TABLE + RULER_FIGURE
            if config["ruler"]["enabled"]
            else []
        ),
        kvpress_reference=KVPRESS_REF_TABLE if KVPRESS_REF["enabled"] else [],


rule figures:
    input:
        [f for name in FIGURES for f in figure_files(name)],
        SERVING_FIGURE if config["serving"]["enabled"] else [],
        LMEVAL_FIGURE if config["lmeval"]["enabled"] else [],
        RULER_FIGURE if config["ruler"]["enabled"] else [],


rule tables:
    input:
        [f for name in TABLES for f in table_files(name)],
        LMEVAL_TABLE if config["lmeval"]["enabled"] else [],
        RULER_SCREEN_TABLE + RULER_TABLE if config["ruler"]["enabled"] else [],


# Reviewers: every arm side by side, and each headline claim checked with its CI.
rule reviewer:
    input:
        baselines=figure_files("fig_baselines"),
        claims=table_files("table_claims") + table_files("table_capacity"),
        factorial=figure_files("fig_factorial")
        + figure_files("fig_forced_curve")
        + table_files("table_equal_memory")
        + table_files("table_forced_quality"),
        ruler=RULER_FIGURE if config["ruler"]["enabled"] else [],
