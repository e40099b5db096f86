# vToken artifact pipeline. `snakemake --cores all` reproduces the embedded default;
# rules live in workflows/rules/, scripts in workflows/scripts/, config in workflows/config/.
from snakemake.utils import min_version

min_version("9.0")


configfile: "workflows/config/config.yaml"


include: "workflows/rules/common.smk"
include: "workflows/rules/assets.smk"
include: "workflows/rules/smoke.smk"


rule all:
    input:
        model=MODEL_PROVENANCE,
        sharegpt=SHAREGPT_PROVENANCE,
        smoke=SMOKE_GENERATIONS,
    default_target: True
