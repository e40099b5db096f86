"""The claims table as data: each headline claim of the paper checked against one run's processed
tables, vToken against the strongest reclamation baseline, the A/A control beside every comparison.

One row per claim and setup: the measured value with its 95 % CI, n (pairs) and the number of
distinct request samples, the A/A status of the same metric (``verdicts.aa_status``) and a verdict
from the fixed vocabulary of ``verdicts`` (never a zero-width interval printed as a CI; a claim the
grid cannot test says why). A comparison between arms whose live tokens per request differ beyond
``verdicts.equal_live_tokens`` reads "not comparable: live tokens X vs Y"; a strongest baseline
interpolated between two of its budgets (``equal_live``) is named with both. Every row names the
profile (run) that measured it. ``ClaimsTable.build`` assembles the rows in the table's order: the
main setups' claims (this module), then the plane, the paper's numbers, the A/A control, exactness,
overheads, RULER, the factorial and the policies (``claims_sections``). Arm and setup names in the
rows' texts come from the ``label`` and ``title`` callables the caller gives (the figures' style).
The workflow script ``table_claims.py`` only reads the inputs and renders these rows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pandas as pd

from vtoken.bench.analysis import claims, lookup, verdicts
from vtoken.bench.analysis.claims_sections import MoreClaims
from vtoken.bench.analysis.equal_live import is_mix
from vtoken.bench.analysis.text import ci, pct_change

BEYOND = "vtoken_pressure"  # vToken beyond the paper: swept like the paper's arm, reported beside it
EAGER = "vtoken_eager"  # every plan that frees a block, every step, the tail block left alone
ROW_COLUMNS = ["claim_id", "claim", "profile", "setup", "comparison", "measured", "n", "n_excluded", "n_samples",
               "estimate", "ci_low", "ci_high", "unit", "aa", "verdict"]


@dataclass
class ClaimsInputs:
    """What the claims table reads: one run's processed tables and the settings it names."""

    summary: pd.DataFrame
    setups: pd.DataFrame
    comparisons: pd.DataFrame
    feasibility: pd.DataFrame
    best_baseline: pd.DataFrame
    exactness: pd.DataFrame
    plane: pd.DataFrame
    equal_memory: pd.DataFrame
    baseline: str
    aa_arm: str | None
    run: str
    sla: dict
    factorial: dict
    budget: int | None
    decode_cost: pd.DataFrame = field(default_factory=pd.DataFrame)
    decode_cost_enabled: bool = False
    ruler: pd.DataFrame = field(default_factory=pd.DataFrame)
    kvpress: pd.DataFrame = field(default_factory=pd.DataFrame)
    policy_lines: dict = field(default_factory=dict)  # policy file stem -> lines
    adapter_lines: dict = field(default_factory=dict)  # kvpress adapter file name -> lines


class ClaimsTable(MoreClaims):
    """Builds the claims table's rows (module docstring).

    Args:
        inputs: the processed tables and settings.
        label: an arm's (or a mix's) name in the texts.
        title: a setup's name in the texts ('model / workload / policy').
    """

    def __init__(self, inputs: ClaimsInputs, label: Callable[[str], str] = str,
                 title: Callable[[pd.DataFrame, str], str] | None = None) -> None:
        self.i, self.label = inputs, label
        self.title = (lambda setups, name: name) if title is None else title
        self.rows: list[dict] = []
        self.vs = f"vToken vs {label(inputs.baseline)}"
        self.treated = {"vtoken": self.vs, EAGER: f"{label(EAGER)} vs {label(inputs.baseline)}",
                        BEYOND: f"{label(BEYOND)} vs {label(inputs.baseline)}"}
        self.c_ref = int(inputs.sla["c_ref"])
        self.mains = lookup.main_setups(inputs.setups)

    def build(self) -> pd.DataFrame:
        """Every row, in the table's order."""
        for section in (self._main_claims, self._not_in_this_run, self._pool_capacity, self._ratio_sweep,
                        self._vs_best, self._plane, self._paper, self._aa, self._exactness, self._indirection,
                        self._indirection_e2e, self._ruler, self._factorial, self._policy_size, self._policy_dropin):
            section()
        return pd.DataFrame(self.rows, columns=ROW_COLUMNS)

    # ---------------------------------------------------------------- helpers
    def add(self, claim_id, claim, setup, comparison, measured, n=None, n_samples=None, est=None, lo=None, hi=None,
            unit="", verdict="", aa="", n_excluded=None, profile=None) -> None:
        self.rows.append({"claim_id": claim_id, "claim": claim, "profile": profile or self.i.run, "setup": setup,
                          "comparison": comparison, "measured": measured, "n": n, "n_excluded": n_excluded,
                          "n_samples": n_samples, "estimate": est, "ci_low": lo, "ci_high": hi, "unit": unit,
                          "aa": aa, "verdict": verdict})

    def fmt(self, comp, kind: str) -> str:
        """A comparison as text: ratios as % change ("pct") or ×, differences as ±. A zero-width
        interval is not printed as one: every pair gave the same value."""
        if not pd.isna(comp.ci_low) and abs(comp.ci_high - comp.ci_low) <= verdicts.TOLERANCE * max(1.0, abs(comp.estimate)):
            one = pd.Series({"estimate": comp.estimate, "ci_low": float("nan"), "ci_high": float("nan")})
            return self.fmt(one, kind) + f" in each of {int(comp.n)} pairs (no spread, no interval)"
        if kind == "pct":
            return pct_change(comp.estimate, comp.ci_low, comp.ci_high)
        if kind == "difference":
            return ci(comp.estimate, comp.ci_low, comp.ci_high, "{:+.3f}")
        return ci(comp.estimate, comp.ci_low, comp.ci_high) + "×"

    @staticmethod
    def n_samples(comp):
        return None if comp is None or pd.isna(comp.get("n_samples")) else int(comp.n_samples)

    def comparison(self, setup, metric, arm, c):
        return lookup.comparison(self.i.comparisons, setup, metric, arm, c)

    # A grid metric the A/A arm cannot measure (it runs at C_ref only), read through the latency it
    # bounds: the SLA bound is k x that latency at C_ref, so the machine's noise on it moves the bound.
    BOUNDED_BY = {"sla_throughput": "e2e_p95_s", "sla_throughput_interp": "e2e_p95_s",
                  "sla_throughput_tpot": "tpot_p95_s"}

    def aa_of(self, setup, metric, c) -> str:
        """A/A status of ``metric`` in ``setup`` at C (None: a grid metric; an SLA throughput takes
        the A/A of the latency it bounds, at C_ref, and says so)."""
        if self.i.aa_arm is None:
            return "no A/A arm in this run"
        comp = self.comparison(setup, metric, self.i.aa_arm, c)
        via = ""
        if comp is None and metric in self.BOUNDED_BY:
            metric, c, via = self.BOUNDED_BY[metric], self.c_ref, f" (A/A of {self.BOUNDED_BY[metric]} at C_ref)"
            comp = self.comparison(setup, metric, self.i.aa_arm, c)
        if comp is None:
            return "A/A not measured"
        null = 0.0 if comp.kind == "difference" else 1.0
        status = verdicts.aa_status(comp.estimate, comp.ci_low, comp.ci_high, n=int(comp.n),
                                    deterministic=bool(comp.deterministic), null=null)
        return (status if comp.deterministic else f"{ci(comp.estimate, comp.ci_low, comp.ci_high)}: {status}") + via

    @staticmethod
    def judged(comp, claim, untestable=None, live=None) -> str:
        """The verdict of ``claim`` on a comparison (``claims.decide``); ``live``: (the compared
        arm's, its reference's) live tokens, refused outside the equal-live-tokens rule; a
        comparison that left pairs out is untestable (``claims.left_out_reason``)."""
        return claims.decide(claim, comp, untestable or claims.left_out_reason(comp, claim), live)

    def live_tokens(self, setup, arm, c, reference=None):
        """(``arm``'s, ``reference``'s (default: the baseline's) live tokens per request at C), or
        None when either was not measured there."""
        reference = reference or self.i.baseline
        live = lookup.at(self.i.summary, setup, "live_tokens", c)
        if arm not in live.index or reference not in live.index or live.loc[[arm, reference], "mean"].isna().any():
            return None
        return live.loc[arm, "mean"], live.loc[reference, "mean"]

    @staticmethod
    def live_pair(*values):
        """(an arm's, its reference's) live tokens as floats, or None when either is missing."""
        return None if any(verdicts.is_missing(v) for v in values) else tuple(float(v) for v in values)

    def comparison_row(self, claim_id, setup, where, comp, c, kind, untestable=None, comparison=None, arm="vtoken",
                       claim=None) -> None:
        claim = claim or claims.CLAIMS[claim_id]
        verdict = self.judged(comp, claim, untestable, self.live_tokens(setup, arm, c or self.c_ref))
        shown = "—" if untestable or comp is None or pd.isna(comp.estimate) else self.fmt(comp, kind)
        self.add(claim_id, claim.statement, where, comparison or self.vs, shown, None if comp is None else int(comp.n),
                 self.n_samples(comp), None if comp is None else comp.estimate,
                 None if comp is None else comp.ci_low, None if comp is None else comp.ci_high, claim.unit, verdict,
                 self.aa_of(setup, claim.metric, c), claims.left_out(comp))

    def equal_budget(self, live) -> tuple[str, bool | None]:
        """(text, holds): (an arm's, the baseline's) live tokens against each other; holds None when
        not measured."""
        if live is None:
            return "not measured", None
        got, ref = live
        return (f"{got:.1f} vs {self.label(self.i.baseline)}'s {ref:.1f} live tokens per request (equal within "
                f"x{1 + verdicts.LIVE_SHARE:g})"), verdicts.equal_live_tokens(*live)

    def capacity_untestable(self, setup, arm=None):
        """Why feasible concurrency cannot be compared in ``setup`` (None: it can; ``claims``)."""
        feas = self.i.feasibility
        return claims.capacity_untestable(feas[feas.setup == setup] if len(feas) else feas, self.i.baseline,
                                          self.label(self.i.baseline), arm, None if arm is None else self.label(arm))

    def sla_untestable(self, setup):
        """Why SLA-constrained throughput cannot be compared in ``setup`` (None: it can; ``claims``)."""
        return claims.sla_untestable(lookup.grid(self.i.setups, setup), self.c_ref)

    def capacity(self, setup, arm):
        """(comparison, claim, kind) of ``arm``'s feasible C against the baseline, in the unit the paper
        states it (``claims.capacity_reading``)."""
        cap = self.comparison(setup, "feasible_c", arm, None)
        if cap is None or self.capacity_untestable(setup, arm):
            return cap, claims.CLAIMS["capacity"], "ratio"
        feas = self.i.feasibility
        return claims.capacity_reading(feas[feas.setup == setup], cap, arm, self.i.baseline)

    # --------------------------------------------------------------- sections
    def _main_claims(self) -> None:
        s = self.i.setups
        for setup in self.mains:
            title, c, grid = self.title(s, setup), lookup.max_c(s, setup), lookup.grid(s, setup)
            for arm in [a for a in self.treated if a in lookup.swept_arms(s, setup)]:
                vs = self.treated[arm]
                for at in sorted({self.c_ref, c}):
                    comp = self.comparison(setup, "retained_blocks", arm, at)
                    self.comparison_row("retained", setup, f"{title}, {lookup.pool_text(s, setup)}, C = {at}", comp,
                                        at, "pct", comparison=vs, arm=arm)
                sla = self.i.sla
                self.comparison_row("sla", setup, f"{title}, grid {grid}, C_ref = {self.c_ref}, k = {sla['k']} on "
                                    f"{sla['latency']}", self.comparison(setup, "sla_throughput", arm, None), None,
                                    "ratio", self.sla_untestable(setup), comparison=vs, arm=arm)
                self.comparison_row("sla_interp", setup, f"{title}, grid {grid} read between its C, C_ref = "
                                    f"{self.c_ref}, k = {sla['k']} on {sla['latency']}",
                                    self.comparison(setup, "sla_throughput_interp", arm, None), None, "ratio",
                                    self.sla_untestable(setup), comparison=vs, arm=arm)
                self.comparison_row("sla_tpot", setup, f"{title}, grid {grid}, C_ref = {self.c_ref}, k = "
                                    f"{sla['k_tpot']} on p95 TPOT", self.comparison(setup, "sla_throughput_tpot", arm,
                                                                                    None),
                                    None, "ratio", self.sla_untestable(setup), comparison=vs, arm=arm)
                comp, claim, kind = self.capacity(setup, arm)
                self.comparison_row("capacity", setup, f"{title}, {lookup.pool_text(s, setup)}, "
                                    f"{lookup.capacity_text(s, setup)}", comp,
                                    None, kind, self.capacity_untestable(setup, arm), comparison=vs, arm=arm,
                                    claim=claim)

    # Claims the default profile does not measure: named, with the profile that does.
    NOT_IN_THIS_RUN = (("capacity", "the second, larger pool (the paper's second budget)", "pool"),
                       ("retained", "the second workload (ShareGPT, the data's own reply lengths)", None),
                       ("retained", "block-size sensitivity at equal usable tokens (B = 16, 32, 64)", "block_size"),
                       ("retained", "the eviction-ratio sweep (r = 0.3, 0.5, 0.7 per policy)", "ratio"))

    def _not_in_this_run(self) -> None:
        s = self.i.setups
        for claim_id, what, role in self.NOT_IN_THIS_RUN:
            present = role is not None and (s.role == role).any()
            if claim_id == "retained" and role is None:
                present = s[s.role == "main"].workload.nunique() > 1
            if not present:
                self.add(claim_id, claims.CLAIMS[claim_id].statement + f" -- {what}", "—", self.vs, "—",
                         verdict=verdicts.measured_in("extended"), profile="extended")

    def _pool_capacity(self) -> None:
        s = self.i.setups
        for setup in s[s.role == "pool"].setup:
            title = self.title(s, setup)
            comp, claim, kind = self.capacity(setup, "vtoken")
            self.comparison_row("capacity", setup, f"{title}, {lookup.pool_text(s, setup)}, "
                                f"{lookup.capacity_text(s, setup)}", comp, None,
                                kind, self.capacity_untestable(setup, "vtoken"), claim=claim)

    def _ratio_sweep(self) -> None:
        s = self.i.setups
        for setup in s[s.role == "ratio"].setup:  # each setting at each policy x r
            title, c = self.title(s, setup), lookup.max_c(s, setup)
            row = s.set_index("setup").loc[setup]
            for arm in [a for a in self.treated if a in str(row.arms).split(",")]:
                where = f"{title}, eviction ratio r = {row.ratio:g}, {lookup.pool_text(s, setup)}, C = {c}"
                self.comparison_row("retained", setup, where, self.comparison(setup, "retained_blocks", arm, c), c,
                                    "pct", comparison=self.treated[arm], arm=arm)

    def _vs_best(self) -> None:
        """Each vToken setting vs the strongest baseline (``process.best_baseline``'s rule)."""
        best, s, base = self.i.best_baseline, self.i.setups, self.i.baseline
        for setup in self.mains:
            title = self.title(s, setup)
            part = best[best.setup == setup] if len(best) else best
            if not len(part) or part.baseline.isna().all():  # nothing chosen: process.best_baseline says why
                why = part.selected_by.iloc[0] if len(part) else "no vToken arm ran in this setup"
                self.add("vs_best", "vToken vs the strongest reclamation baseline", title, "—", "—",
                         verdict=self.judged(None, claims.BEST_CLAIMS["retained_blocks"], why))
                continue
            chosen = part[part.baseline.notna()]
            name, c = chosen.baseline.iloc[0], int(chosen.chosen_at.iloc[0])  # chosen and reported at one C
            text, holds = self.equal_budget(self.live_pair(chosen.baseline_live_tokens.iloc[0],
                                                           chosen.reference_live_tokens.iloc[0]))
            self.add("vs_best", f"one budget: {self.label(name)} keeps {self.label(base)}'s live tokens",
                     f"{title}, C = {c}", f"{self.label(name)} vs {self.label(base)}", text, unit="tokens",
                     verdict="" if holds is None else verdicts.exact_verdict(holds))
            for arm in [a for a in self.treated if a in set(part.arm)]:
                self._vs_best_arm(setup, title, part[part.arm == arm], arm, name, c)

    def _vs_best_arm(self, setup, title, mine, arm, name, c) -> None:
        grid_metrics = ("sla_throughput", "feasible_c")
        for metric, claim in claims.BEST_CLAIMS.items():
            m = mine[(mine.metric == metric) & (mine.concurrency.isna() | (mine.concurrency == c))]
            comp = m.iloc[0] if len(m) else None
            untestable = {"feasible_c": lambda x: self.capacity_untestable(x, arm),
                          "sla_throughput": self.sla_untestable}.get(metric, lambda _: None)(setup)
            if untestable is None and comp is None and metric in grid_metrics and is_mix(name):
                untestable = (f"{self.label(name)} is two budgets interpolated to equal live tokens: capacity and "
                              "SLA throughput are not linear in live tokens, so a mix has none")
            if untestable is None and comp is None and metric in grid_metrics:
                untestable = (f"{self.label(name)} runs at C_ref only in this profile (its grid metrics: profile "
                              "extended)")
            where = title + ("" if metric in grid_metrics else f", C = {c}")
            # the treated arm against the chosen baseline: both at equal live tokens, or no verdict
            verdict = self.judged(comp, claim, untestable,
                                  self.live_pair(mine.arm_live_tokens.iloc[0], mine.baseline_live_tokens.iloc[0]))
            self.add("vs_best", f"{self.label(arm)} vs the strongest baseline ({self.label(name)}): {claim.statement}",
                     where, f"{self.label(arm)} vs {self.label(name)} ({mine.selected_by.iloc[0]})",
                     "—" if untestable or comp is None else self.fmt(comp, claim.unit),
                     None if comp is None else int(comp.n), self.n_samples(comp),
                     None if comp is None else comp.estimate, None if comp is None else comp.ci_low,
                     None if comp is None else comp.ci_high, claim.unit, verdict, n_excluded=claims.left_out(comp))
