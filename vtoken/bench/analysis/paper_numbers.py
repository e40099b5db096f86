"""Every headline number of the vToken paper, with the setting the paper gives for it and the
metric of ours that tests it (review objection 2: inconsistent headline ranges).

Source: the paper's summaries as collected in shared/research/literature.md §1.6 (no code or
full text of the paper was found; where a summary does not say which policy, model or
workload produced a number, ``setting`` says "not stated"). Each end of a range is its own
number: the claim read from it is "vToken reaches this effect" -- ``threshold`` in the
estimate's units (a ratio vToken / Naive-Evict, paired per pair), ``direction`` the side that
counts as reaching it. ``policy`` names the only policy whose setups test the number (None:
the paper does not tie it to one, so every policy's main setup tests it). ``role`` is the
setups that can test it: "main" (the main setups' trials), "prefix" (Table 1's
prefix-sharing setups).
"""

from __future__ import annotations

from dataclasses import dataclass

NOT_STATED = "not stated"


@dataclass(frozen=True)
class PaperNumber:
    """One number of the paper (module docstring)."""

    key: str
    text: str
    metric: str
    direction: str
    threshold: float
    model: str = NOT_STATED
    workload: str = NOT_STATED
    policy: str | None = None
    role: str = "main"
    note: str = ""

    @property
    def claimed(self) -> tuple[float | None, float | None]:
        """The range ``verdicts.verdict`` reads: reaching the threshold, unbounded beyond it."""
        return (None, self.threshold) if self.direction == "lower" else (self.threshold, None)

    @property
    def setting(self) -> str:
        policy = self.policy or NOT_STATED
        return f"paper: policy {policy}, model {self.model}, workload {self.workload}"


NUMBERS = (
    PaperNumber("retained_low", "retained blocks −27.2 % (low end of −27.2…−72.3 %)", "retained_blocks", "lower",
                1 - 0.272, note="the summaries place the smallest effect where retention is structured (H2O)"),
    PaperNumber("retained_high", "retained blocks −72.3 % (high end of −27.2…−72.3 %)", "retained_blocks", "lower",
                1 - 0.723, note="the summaries place the largest effect where liveness is scattered"),
    PaperNumber("kv_util_llama", "effective KV usage +21.88 %", "packing_efficiency", "higher", 1.2188,
                model="Llama-3.1-8B"),
    PaperNumber("kv_util_mistral", "effective KV usage +21.67 %", "packing_efficiency", "higher", 1.2167,
                model="Mistral-7B"),
    PaperNumber("sla_max", "SLA-constrained throughput up to 1.37×", "sla_throughput", "higher", 1.37),
    PaperNumber("sla_mistral_low", "SLA throughput +9.9 % (low end of +9.9…+37.3 %)", "sla_throughput", "higher",
                1.099, model="Mistral-7B"),
    PaperNumber("sla_mistral_high", "SLA throughput +37.3 % (high end of +9.9…+37.3 %)", "sla_throughput", "higher",
                1.373, model="Mistral-7B"),
    PaperNumber("sla_llama", "SLA throughput +18.9 % (average)", "sla_throughput", "higher", 1.189,
                model="Llama-3.1-8B"),
    PaperNumber("sla_scissorhands_low", "SLA throughput +33.3 % (low end of +33.3…+103.7 %)", "sla_throughput",
                "higher", 1.333, policy="scissorhands"),
    PaperNumber("sla_scissorhands_high", "SLA throughput +103.7 % (high end of +33.3…+103.7 %)", "sla_throughput",
                "higher", 2.037, policy="scissorhands"),
    PaperNumber("capacity_llama_035", "feasible C 5 → 8 (+60 %) at KV utilisation 0.35", "feasible_c", "higher",
                1.6, model="Llama-3.1-8B"),
    PaperNumber("capacity_llama_050", "feasible C 11 → 22 (2×) at KV utilisation 0.50", "feasible_c", "higher",
                2.0, model="Llama-3.1-8B"),
    PaperNumber("capacity_qwen", "feasible C 3 → 6 (2×)", "feasible_c", "higher", 2.0, model="Qwen2.5-14B"),
    PaperNumber("prefix_private_low", "private-suffix retained blocks −28.6 % (Table 1, low end)",
                "retained_private_blocks", "lower", 1 - 0.286, role="prefix"),
    PaperNumber("prefix_degree8_blocks", "retained blocks −42.2 % at sharing degree 8 (Table 1)",
                "retained_private_blocks", "lower", 1 - 0.422, role="prefix"),
    PaperNumber("prefix_degree8_throughput", "throughput +146.5 % at sharing degree 8 (Table 1)",
                "output_tok_per_s", "higher", 2.465, role="prefix"),
)


def tested_by(number: PaperNumber, policy: str) -> bool:
    """Whether a setup of ``policy`` tests ``number`` (a number tied to one policy is tested
    by that policy's setups only)."""
    return number.policy is None or number.policy == policy
