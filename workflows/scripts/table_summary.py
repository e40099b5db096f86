"""What the run shows, in one table (``vtoken.bench.analysis.summary``): the paper's headline claims
and the review's question with this run's estimate, interval and verdict, read off the claims table
and the capacity table. The README quotes it."""

import logging

import figstyle as fs
import pandas as pd
import tablefmt

from vtoken.bench.analysis.summary import summary

smk = snakemake  # noqa: F821
logging.basicConfig(filename=smk.log[0], level=logging.INFO)
fs.use_variants(smk.params.variants, smk.params.variant_labels)
claims, capacity, setups = pd.read_csv(smk.input.claims), fs.read(smk.input.capacity), fs.read(smk.input.setups)
if len(capacity):
    capacity = capacity.assign(setup=[fs.setup_title(setups, s) for s in capacity.setup])
raw = summary(claims, capacity, fs.label)
caption = (f"What this run (profile {smk.params.run}) shows: each row is a row of table_claims (or of "
           "table_capacity for the capacity against the block mechanism), estimate and 95 % CI over pairs, read by "
           "the rule that table states. The last rows are the A/A control: how much a second engine of the same "
           "arm moves each timing metric on this machine; a timing row is readable only where that interval is "
           "narrow.")
tablefmt.write(raw, raw, dict(smk.output.items()), caption, "tab:summary")
logging.info("%d rows", len(raw))
