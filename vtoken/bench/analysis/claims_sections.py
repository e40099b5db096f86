"""The claims table's rows beyond the main setups' claims (``claims_table``): the memory-quality
plane, every number of the paper in its stated setting, the A/A control, exactness, the token
table's overheads, RULER's prefill-heavy runs, the factorial's equal-memory claims and the
policies' size and drop-in claims. A mixin of ``claims_table.ClaimsTable``: it reads the same
inputs and helpers (``self.i``, ``self.add``, ``self.fmt``, ...)."""

from __future__ import annotations

import pandas as pd

from vtoken.bench.analysis import claims, factorial, lookup, stats, verdicts
from vtoken.bench.analysis.text import ci, pct_change
from vtoken.policies.kvpress_catalog import REDUCTION

AA_METRICS = ("retained_blocks", "sla_throughput", "feasible_c", "output_tok_per_s", "e2e_p95_s", "rouge_l_mean")
GRID_METRICS = ("sla_throughput", "feasible_c")
FACTORIAL_ARMS = ("vtoken_limit", "vtoken_eager", "vtoken")  # the token mechanisms the capability rows read
# The tail row's reading of the equivalence status of open / packed blocks against margins.blocks.
TAIL_VERDICT = {"worse": "the open tail costs blocks (beyond the margin)",
                "equivalent": "no tail effect (within the margin)",
                "better": "the open tail holds fewer blocks (beyond the margin)"}


class MoreClaims:
    """Sections of the claims table (module docstring)."""

    def _plane(self) -> None:
        plane, s = self.i.plane, self.i.setups
        for setup in self.mains:  # each vToken setting vs each baseline arm and variant
            title = self.title(s, setup)
            for r in (plane[plane.setup == setup] if len(plane) else plane).itertuples():
                self.add("plane", f"memory–quality plane: {self.label(r.arm)} vs {self.label(r.baseline)}",
                         f"{title}, C = {int(r.concurrency)}", f"{self.label(r.arm)} vs {self.label(r.baseline)}",
                         self._plane_text(r), None if pd.isna(r.n) else int(r.n),
                         None if pd.isna(r.n_samples) else int(r.n_samples), r.memory_estimate, r.memory_ci_low,
                         r.memory_ci_high, "ratio / difference", r.verdict)

    def _plane_text(self, r) -> str:
        """Both axes of a memory-quality comparison as text."""
        def axis(prefix, kind):
            comp = pd.Series({"estimate": getattr(r, f"{prefix}_estimate"), "ci_low": getattr(r, f"{prefix}_ci_low"),
                              "ci_high": getattr(r, f"{prefix}_ci_high"), "n": r.n})
            return "not measured" if pd.isna(comp.estimate) else self.fmt(comp, kind)
        live = "" if pd.isna(r.live_tokens) else f"; live tokens {r.live_tokens:.1f} vs {r.baseline_live_tokens:.1f}"
        if live and str(r.equal_live_tokens) != "True":
            live += " (outside the equal-live-tokens rule: the budget differs, not only the mechanism)"
        return (f"blocks {axis('memory', 'pct')} ({r.memory}); ROUGE-L vs Native {axis('quality', 'difference')} "
                f"({r.quality}){live}")

    def _paper_comparison(self, number, setup, c):
        """(vToken's comparison for one paper number in ``setup`` (at C for a per-trial metric), why it
        cannot be read in the number's unit or None)."""
        if number.metric == "feasible_c":
            comp, claim, _ = self.capacity(setup, "vtoken")
            if claim is not claims.CLAIMS["capacity"]:
                return comp, ("the paper states a ratio, undefined here: an arm is feasible at no C of the grid in "
                              "some pair (the capacity row gives the difference)")
            return comp, None
        at = None if number.metric.startswith("sla") else c
        return self.comparison(setup, number.metric, "vtoken", at), None

    def _paper(self) -> None:
        s = self.i.setups
        by_setup = s.set_index("setup")
        prefix_setups = list(s[s.role == "prefix"].setup)
        for number in claims.PAPER_NUMBERS:  # every paper number, with its setting and the setups that test it
            text = f"{number.statement} ({number.setting.text()})" + (f"; {number.note}" if number.note else "")
            candidates = prefix_setups if number.role == "prefix" else self.mains
            if number.role == "prefix" and not candidates:
                self.add("paper", text, "—", self.vs, "—", verdict=verdicts.measured_in("extended"),
                         profile="extended")
                continue
            why = {x: claims.setting_verdict(number, {**by_setup.loc[x].to_dict(), "setup": x}) for x in candidates}
            tested = [x for x in candidates if why[x] is None]
            if not tested:
                policy = number.setting.policy
                verdict = (f"{verdicts.NOT_TESTABLE}: no main setup runs policy {policy} in this run"
                           if policy and policy not in set(by_setup.loc[candidates, "policy"]) else
                           next(iter(why.values())))
                self.add("paper", text, "—", self.vs, "—", verdict=verdict)
                continue
            for setup in tested:
                self._paper_row(number, text, setup, by_setup)

    def _paper_row(self, number, text, setup, by_setup) -> None:
        s = self.i.setups
        c = lookup.max_c(s, setup)
        comp, unreadable = self._paper_comparison(number, setup, c)
        untestable = unreadable or {"feasible_c": lambda x: self.capacity_untestable(x, "vtoken"),
                                    "sla_throughput": self.sla_untestable}.get(number.metric, lambda _: None)(setup)
        per_trial = number.metric not in GRID_METRICS
        degree = by_setup.loc[setup].get("prefix_degree")
        where = (self.title(s, setup) + (f", C = {c}" if per_trial else "")
                 + ("" if number.role != "prefix" or pd.isna(degree) else f", sharing degree {int(degree)}"))
        kind = "pct" if number.metric.startswith("retained") else "ratio"
        self.add("paper", text, where, self.vs + " (does it reach the paper's number?)",
                 "—" if untestable or comp is None or pd.isna(comp.estimate) else self.fmt(comp, kind),
                 None if comp is None else int(comp.n), self.n_samples(comp), None if comp is None else comp.estimate,
                 None if comp is None else comp.ci_low, None if comp is None else comp.ci_high, number.unit,
                 self.judged(comp, number, untestable,
                             self.live_tokens(setup, "vtoken", c if per_trial else self.c_ref)),
                 n_excluded=claims.left_out(comp))

    def _aa(self) -> None:
        s, aa_arm, base = self.i.setups, self.i.aa_arm, self.i.baseline
        for setup in self.mains:  # the A/A control itself, every headline metric, where it runs
            title, c = self.title(s, setup), lookup.shared_c(s, setup)
            for metric in AA_METRICS:
                at = None if metric in GRID_METRICS else c
                comp = self.comparison(setup, metric, aa_arm, at) if aa_arm else None
                where = title + ("" if at is None else f", C = {c}")
                if comp is None or pd.isna(comp.estimate):
                    why = "A/A not measured" if aa_arm else "no A/A arm in this run"
                    if aa_arm and at is None and aa_arm not in lookup.swept_arms(s, setup):
                        why = f"A/A not measured: {aa_arm} runs at C_ref only, a grid metric needs the whole grid"
                    if metric == "feasible_c" and self.capacity_untestable(setup):
                        why = f"not measured: {self.capacity_untestable(setup)}"
                    self.add("aa", f"A/A control: {metric}", where, f"{aa_arm} vs {base}", "—", verdict="", aa=why)
                    continue
                kind = "difference" if comp.kind == "difference" else "ratio"
                self.add("aa", f"A/A control: {metric}", where, f"{aa_arm} vs {base} (second engine, same settings)",
                         self.fmt(comp, kind), int(comp.n), self.n_samples(comp), comp.estimate, comp.ci_low,
                         comp.ci_high, kind, "", self.aa_of(setup, metric, at))

    def _exactness(self) -> None:
        exact, s = self.i.exactness, self.i.setups
        checked = exact[exact.checked.astype(bool)] if len(exact) else exact
        statement = claims.CLAIMS["exactness"].statement
        for setup in self.mains:
            title = self.title(s, setup)
            part = checked[checked.setup == setup] if len(checked) else checked
            skipped = int((~exact[exact.setup == setup].checked.astype(bool)).sum()) if len(exact) else 0
            if not len(part):
                self.add("exactness", statement, title, "naive, holefill, vtoken", "—",
                         verdict=f"{verdicts.NOT_TESTABLE}: fewer than two of naive, holefill, vtoken ran")
                continue
            same = int(part.identical.astype(bool).sum())
            differing = part[~part.identical.astype(bool)]
            text = f"identical on {same} of {len(part)} checked requests ({skipped} skipped: preempted)"
            if len(differing):
                text += "; differ: " + ", ".join(f"C{int(r.concurrency)}/p{int(r.pair)}/r{int(r.req_index)} "
                                                 f"({r.differing_arms})" for r in differing.head(5).itertuples())
            self.add("exactness", statement, title, "naive, holefill, vtoken (token hashes)", text, len(part),
                     int(part.pair.nunique()), unit="requests", verdict=verdicts.exact_verdict(len(differing) == 0))

    def _indirection(self) -> None:
        s, claim = self.i.setups, claims.CLAIMS["indirection"]
        for setup in self.mains:
            title, c = self.title(s, setup), lookup.max_c(s, setup)
            r = lookup.at(self.i.summary, setup, "indirection_share", c)
            where = (f"{title}, C = {c}, vToken arm: slot assignment, slot_mapping rewrite and token-view build "
                     "(attention over the view is inside the attention time, not counted)")
            if "vtoken" not in r.index or pd.isna(r.loc["vtoken", "mean"]):
                self.add("indirection", claim.statement, where, "share of run time", "—",
                         verdict=self.judged(None, claim))
                continue
            m = r.loc["vtoken"]
            ns = int(m.n_samples) if "n_samples" in m and not pd.isna(m.n_samples) else 0
            share = pd.Series({"estimate": m["mean"], "ci_low": m.ci_low, "ci_high": m.ci_high, "n": int(m.n),
                               "n_samples": ns})
            self.add("indirection", claim.statement, where, "share of run time (mean over pairs)",
                     f"{ci(100 * m['mean'], 100 * m.ci_low, 100 * m.ci_high)} %", int(m.n), ns, m["mean"], m.ci_low,
                     m.ci_high, claim.unit, self.judged(share, claim))

    def _indirection_e2e(self) -> None:
        claim, decode = claims.CLAIMS["indirection_e2e"], self.i.decode_cost
        comparison = "Native through the plugin vs stock vLLM"
        if len(decode) and {"full", "stock"} <= set(decode.arm):
            wide = decode.pivot(index="repeat", columns="arm", values="median_step_s")
            res = stats.paired_ci(wide["full"], wide["stock"], "ratio")
            first = decode.iloc[0].to_dict()
            comp = pd.Series({"estimate": res.estimate, "ci_low": res.ci_low, "ci_high": res.ci_high, "n": res.n,
                              "n_samples": res.n if first["prompts"] == "distinct per repeat" else 1, "kind": "ratio"})
            where = (f"{int(first['num_requests'])} requests × {int(first['prompt_tokens'])} prompt tokens, "
                     f"{first['dtype']}, median decode step per repeat ({first['prompts']}), arms alternating")
            self.add("indirection_e2e", claim.statement, where, comparison,
                     f"{pct_change(res.estimate, res.ci_low, res.ci_high)} per decode step", res.n,
                     self.n_samples(comp), res.estimate, res.ci_low, res.ci_high, claim.unit, self.judged(comp, claim))
        elif not self.i.decode_cost_enabled:
            self.add("indirection_e2e", claim.statement, "—", comparison, "—", verdict=verdicts.measured_in("extended"),
                     profile="extended")
        else:
            self.add("indirection_e2e", claim.statement, "—", comparison, "—",
                     verdict=self.judged(None, claim, "the decode-cost measurement did not run"))

    def _ruler(self) -> None:
        """RULER through lm-eval at a pressing pool: retained blocks in the prefill-heavy regime and exact
        eviction on RULER's answers, per cell, policy and kept fraction. One lm-eval run per arm: its
        intervals are over requests, not replicates, so the row has no CI verdict."""
        ruler, statement = self.i.ruler, claims.CLAIMS["retained"].statement
        if not len(ruler):
            self.add("retained", statement, "RULER, prefill-heavy, pressing pool (lm-eval run)", self.vs, "—",
                     verdict=verdicts.measured_in("extended"), profile="extended")
            return
        kept_cells = ruler[ruler.native_informative.astype(bool) & ruler.policy.notna()]
        for (cell, policy, kept), g in kept_cells.groupby(["cell", "policy", "kept"]):
            arms = g.set_index("arm")
            if not {"naive", "vtoken"} <= set(arms.index):
                continue
            nv, vt = arms.loc["naive"], arms.loc["vtoken"]
            where = f"RULER {cell} / {policy}, {kept:.0%} of the prompt kept, pressing pool (lm-eval run)"
            change = vt.retained_blocks / nv.retained_blocks - 1
            self.add("retained", statement, where, self.vs,
                     f"{change:+.1%} ({vt.retained_blocks:.1f} [{vt.retained_blocks_ci_low:.1f}, "
                     f"{vt.retained_blocks_ci_high:.1f}] vs {nv.retained_blocks:.1f} [{nv.retained_blocks_ci_low:.1f}, "
                     f"{nv.retained_blocks_ci_high:.1f}] blocks per request, intervals over requests of one run)",
                     1, 1, 1 + change, None, None, "ratio", verdicts.ONE_SAMPLE)
            self.add("exactness", claims.CLAIMS["exactness"].statement, where, self.vs,
                     f"score {vt.score:.3f} = {nv.score:.3f}; every answer identical (table_ruler's check)", int(vt.n),
                     int(vt.n), verdict=verdicts.EXACT_HOLDS)

    def _factorial(self) -> None:
        """The review's sentence per scorer and phase: retained blocks without a token table at the same
        policy and budget, then the capability claim off the primary equal-memory test."""
        equal = self.i.equal_memory
        if not len(equal):
            for cid in ("without_table", "capability"):
                self.add(cid, claims.CLAIMS[cid].statement, "factorial (config key factorial)", "—", "—",
                         verdict=verdicts.measured_in("default"))
            return
        for (scorer, phase, treatment, reference), g in equal.groupby(["scorer", "phase", "treatment", "reference"]):
            if treatment not in FACTORIAL_ARMS:
                continue
            where = f"factorial, {scorer}, {phase} phase, " + (
                f"C = {self.i.factorial['concurrency']}, Native's continuation forced" if phase == "decode" else
                "RULER, the prompt pruned, the answer forced")
            if g.axis.isin([factorial.TAIL_BLOCKS, factorial.TAIL_QUALITY]).all():
                self._tail(g, where, treatment, reference)
                continue
            self._without_table(g, where, f"{self.label(reference)} vs {self.label(treatment)}")
            self._capability(g, where, treatment, reference)

    def _without_table(self, g, where: str, vs: str) -> None:
        same = g[g.axis == factorial.SAME_BUDGET_BLOCKS]
        budgets = sorted(set(same.level_budget.dropna().astype(int)))
        if not budgets:
            return
        budget = self.i.budget if self.i.budget in budgets else budgets[len(budgets) // 2]
        at = g[g.level_budget == budget].set_index("axis")
        b, q = at.loc[factorial.SAME_BUDGET_BLOCKS], at.loc[factorial.SAME_BUDGET_QUALITY]
        live = self.live_pair(b.get("reference_live_tokens"), b.get("treatment_live_tokens"))  # block, token
        live_text = "" if live is None else f"; live tokens {live[0]:.1f} (block) vs {live[1]:.1f} (token)"
        claim = claims.CLAIMS["without_table"]
        if pd.isna(b.estimate):  # fewer than 2 pairs
            self.add("without_table", claim.statement, where, vs, "—", int(b.n), verdict=verdicts.ONE_SAMPLE)
            return
        inv = (1 / b.estimate, 1 / b.ci_high, 1 / b.ci_low)  # block / token
        comp = {"estimate": inv[0], "ci_low": inv[1], "ci_high": inv[2], "n": int(b.n), "n_samples": b.n_samples}
        kl = ci(-q.estimate, -q.ci_high, -q.ci_low, "{:+.4f}") if pd.notna(q.estimate) else "—"
        self.add("without_table", claim.statement, where, vs,
                 f"budget {budget}: retained blocks ×{ci(*inv, '{:.3f}')} without the table; KL vs Native per token "
                 f"there {kl} (block − token){live_text}", int(b.n), int(b.n_samples), *inv, "ratio",
                 claims.decide(claim, comp, live_tokens=live))

    def _tail(self, g, where: str, treatment: str, reference: str) -> None:
        """The tail's own effect at each budget both ran: open / packed blocks and the KL difference."""
        claim, vs = claims.CLAIMS["tail"], f"{self.label(treatment)} vs {self.label(reference)}"
        kl = g[g.axis == factorial.TAIL_QUALITY].set_index("level_budget")
        for r in g[g.axis == factorial.TAIL_BLOCKS].itertuples():
            if pd.isna(r.estimate):
                self.add("tail", claim.statement, where, vs, f"budget {int(r.level_budget)}: —", int(r.n),
                         verdict=verdicts.ONE_SAMPLE)
                continue
            q = kl.loc[r.level_budget] if r.level_budget in kl.index else None
            kl_text = "—" if q is None or pd.isna(q.estimate) else ci(q.estimate, q.ci_low, q.ci_high, "{:+.4f}")
            self.add("tail", claim.statement, where, vs,
                     f"budget {int(r.level_budget)}: retained blocks ×{ci(r.estimate, r.ci_low, r.ci_high, '{:.3f}')} "
                     f"with the tail open (margin ×{r.margin:g}); KL vs Native per token {kl_text} (open − packed); "
                     f"live tokens {r.treatment_live_tokens:.1f} vs {r.reference_live_tokens:.1f}", int(r.n),
                     int(r.n_samples) if pd.notna(r.n_samples) else None, r.estimate, r.ci_low, r.ci_high, "ratio",
                     TAIL_VERDICT.get(r.status, verdicts.NOT_RESOLVED))

    def _capability(self, g, where: str, treatment: str, reference: str) -> None:
        verdict, row = factorial.capability(g)
        statement, vs = claims.CLAIMS["capability"].statement, f"{self.label(treatment)} vs {self.label(reference)}"
        if row is None:
            self.add("capability", statement, where, vs, "no primary test", verdict=verdicts.NOT_COMPARABLE)
            return
        value = "—" if pd.isna(row.estimate) else ci(row.estimate, row.ci_low, row.ci_high, "{:+.4f}")
        measured = (f"mean KL gap {self.label(treatment)} − {self.label(reference)} over the common memory range "
                    f"{value} nats/token (margin ±{row.margin:g}; power {row.power:.2f} at the margin)"
                    if pd.notna(row.estimate) else row.reason)
        horizontal = g[g.axis == factorial.PRIMARY_BLOCKS]
        if len(horizontal) and pd.notna(horizontal.iloc[0].estimate):
            h = horizontal.iloc[0]
            measured += (f"; blocks {self.label(treatment)} / {self.label(reference)} at equal quality "
                         f"×{ci(h.estimate, h.ci_low, h.ci_high, '{:.3f}')} (margin ×{h.margin:g}; power "
                         f"{h.power:.2f}): {h.verdict}")
        if verdict in (factorial.SUPPORTED, factorial.REFUTED):  # scoped to what was tested
            measured += f"; a verdict on {self.label(treatment)} at these budgets, not on token tables in general"
        self.add("capability", statement, where, vs, measured, int(row.n),
                 int(row.n_samples) if pd.notna(row.n_samples) else None, row.estimate, row.ci_low, row.ci_high,
                 "difference", verdict)

    def _policy_size(self) -> None:
        lines = self.i.policy_lines
        worst = max(lines, key=lines.get)
        self.add("policy_loc", claims.CLAIMS["policy_loc"].statement, "vtoken/policies/: " + ", ".join(
            f"{k} {v}" for k, v in sorted(lines.items())) + " lines (shared interface base.py not counted)",
            "exact count", f"{lines[worst]} lines ({worst})", len(lines), None, float(lines[worst]), None, None,
            "lines", verdicts.exact_verdict(lines[worst] < claims.POLICY_LINES))

    def _policy_dropin(self) -> None:
        kvpress, base = self.i.kvpress, self.i.baseline
        size = " + ".join(f"{name} {n} lines" for name, n in self.i.adapter_lines.items())
        statement = claims.CLAIMS["policy_dropin"].statement
        presses = kvpress[kvpress.arm == "vtoken"] if "exact_checked" in kvpress else kvpress.iloc[:0]
        for p in presses.itertuples():
            ref = kvpress[(kvpress.press == p.press) & (kvpress.arm == base)].iloc[0]
            checked, same = int(ref.exact_checked), int(ref.exact_identical)
            ratio = ci(p.retained_ratio, p.retained_ratio_ci_low, p.retained_ratio_ci_high)
            self.add("policy_dropin", statement, f"{p.setup}, C = {int(p.concurrency)}", self.vs,
                     f"kvpress:{p.press} unchanged through one adapter ({size}), mode "
                     f"{getattr(p, 'mode', 'continuous')}, reduction {getattr(p, 'reduction', REDUCTION)}; identical on "
                     f"{same} of {checked} checked requests; retained blocks vToken / {self.label(base)} {ratio}",
                     checked, None, unit="requests",
                     verdict=verdicts.exact_verdict(same == checked) if checked else verdicts.NOT_TESTABLE)
        if not len(presses):
            self.add("policy_dropin", statement + f" (adapter: {size})", "—", self.vs, "—",
                     verdict=verdicts.measured_in("extended"), profile="extended")
