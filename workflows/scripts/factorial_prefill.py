"""The factorial's prefill phase: RULER runs -> frontiers and equal-memory levels
(``vtoken.bench.lmeval.ruler_factorial``, ``vtoken.bench.analysis.factorial``)."""

import logging
from pathlib import Path

from vtoken.bench.analysis import factorial, process
from vtoken.bench.lmeval import ruler_factorial

smk = snakemake  # noqa: F821
logging.basicConfig(filename=smk.log[0], level=logging.INFO)
points = ruler_factorial.points(smk.input.results, dict(smk.params.mechanisms), int(smk.params.num_concurrent))
process.write_csv(factorial.frontiers(points), Path(smk.output.frontiers))
process.write_csv(factorial.equal_memory(points), Path(smk.output.equal_memory))
logging.info("%d document points of %d runs", len(points), len(smk.input.results))
