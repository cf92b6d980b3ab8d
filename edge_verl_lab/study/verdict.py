"""What a study may conclude: the baseline gate and the contrasts named in advance (pure; numbers in, verdicts out).

- **Gate.** A comparison of remedies for GRPO's collapse says something only if GRPO itself learned: in every
  seed, its final accuracy on the seen problems and its sampled training reward must exceed their starting
  values by at least ``margin``. When it fails, the report says the comparison is uninformative and prints
  no verdicts (the numbers stay, labelled).
- **Primary contrasts** (``PRIMARY_CONTRASTS``, named before any run): for each, the paired mean difference
  over seeds, its Student-t interval, the two-sided p-value and the minimum detectable difference (MDD) at
  80% power from the observed paired SD and n, and the sign count (seeds above, below, tied) with its exact
  two-sided sign-test p. The primary contrasts are one family and every further contrast (each other method
  against the baseline) another, each Holm-adjusted (``p_holm``); a verdict reads the adjusted p.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

from scipy import stats

from edge_verl_lab.reporting import difference_text, holm_adjust, minimum_detectable_difference, paired_difference, paired_p_value

BASELINE = "grpo"
# (method, against): EDGE-GRPO's and GEPO's headline claims against GRPO, then GEC's two controls against EDGE
# (is it the right answer, is it the gradient through the injected tokens).
PRIMARY_CONTRASTS = (("edge", "grpo"), ("eda", "grpo"), ("gepo", "grpo"), ("edge", "edge_placebo"), ("edge", "edge_masked"))
# EDA's forms against each other, in the further family where both rows ran: EDA's loss against GRPO comes from
# its unbounded advantages if clamping P_hat recovers it (eda - eda_clamped), from the entropy gradient if the
# detached form does (eda - eda_detached).
FURTHER_CONTRASTS = (("eda", "eda_clamped"), ("eda", "eda_detached"))
GATE_MARGIN = 0.02
POWER = 0.8

PerSeed = Mapping[str, float]  # seed (as a string) -> value


@dataclass(frozen=True)
class GateResult:
    passed: bool
    per_seed: dict[str, dict[str, float]]  # seed -> {seen_gain, reward_gain}
    reason: str

    def as_dict(self) -> dict:
        return {"passed": self.passed, "per_seed": self.per_seed, "reason": self.reason}


def baseline_gate(seen_start: PerSeed, seen_final: PerSeed, reward_start: PerSeed, reward_final: PerSeed,
                  margin: float = GATE_MARGIN) -> GateResult:
    """Did the baseline learn? Passes when, in every seed that has all four numbers, the final seen accuracy
    and the late sampled reward exceed their starting values by at least ``margin`` (and at least one seed
    has them). The reason names each failing seed."""
    if not margin >= 0:
        raise ValueError(f"margin={margin!r} must be >= 0")
    seeds = [seed for seed in seen_final if seed in seen_start and seed in reward_start and seed in reward_final]
    if not seeds:
        return GateResult(False, {}, f"no seed of {BASELINE} has its start and final numbers")
    per_seed, failing = {}, []
    for seed in seeds:
        gains = {"seen_gain": seen_final[seed] - seen_start[seed], "reward_gain": reward_final[seed] - reward_start[seed]}
        per_seed[seed] = gains
        short = [name for name, gain in gains.items() if not gain >= margin]
        if short:
            failing.append(f"seed {seed}: " + ", ".join(f"{name} {gains[name]:+.3f}" for name in short))
    if failing:
        return GateResult(False, per_seed, f"{BASELINE} did not learn by a margin of {margin:g} in every seed ({'; '.join(failing)})")
    return GateResult(True, per_seed, f"{BASELINE} learned in all {len(seeds)} seeds (seen accuracy and sampled reward up by >= {margin:g})")


def sign_counts(per_seed: PerSeed) -> dict:
    """How many paired differences are above, below and at 0, and the exact two-sided sign-test p of the
    nonzero ones (None without any): scipy's binomial test of ``above`` in n at 1/2, twice the rarer sign's tail
    capped at 1. 8 above, 0 below: 2 * 0.5^8 = 0.0078; 6 above, 2 below: 2 * (1 + 8 + 28) / 256 = 0.289."""
    above = sum(1 for value in per_seed.values() if value > 0)
    below = sum(1 for value in per_seed.values() if value < 0)
    n = above + below
    p = float(stats.binomtest(above, n, 0.5).pvalue) if n else None
    return {"above": above, "below": below, "tied": len(per_seed) - n, "p": p}


def contrast(values: Mapping[str, PerSeed], method: str, against: str, confidence: float = 0.95) -> Optional[dict]:
    """``method - against`` paired by seed: the paired difference's fields, ``p``, ``mdd`` and ``signs``
    (``sign_counts``); None when either method is missing or shares no seed."""
    if method not in values or against not in values:
        return None
    difference = paired_difference(values[method], values[against], confidence)
    if difference is None:
        return None
    mdd = minimum_detectable_difference(difference.std, difference.n, confidence, POWER) if difference.std is not None else None
    return {"method": method, "against": against, **difference.as_dict(), "p": paired_p_value(difference), "mdd": mdd,
            "signs": sign_counts(difference.per_seed)}


def contrasts(values: Mapping[str, PerSeed], methods: Sequence[str], confidence: float = 0.95) -> dict[str, list[dict]]:
    """{primary: [...], further: [...]}: the primary contrasts among ``methods``, then every other method
    against the baseline not already primary and ``FURTHER_CONTRASTS``; each list one family, its p-values
    Holm-adjusted (``p_holm``)."""
    primary = [found for method, against in PRIMARY_CONTRASTS
               if method in methods and against in methods and (found := contrast(values, method, against, confidence))]
    named = set(PRIMARY_CONTRASTS)
    further = [found for method in methods
               if method != BASELINE and (method, BASELINE) not in named and (found := contrast(values, method, BASELINE, confidence))]
    further += [found for method, against in FURTHER_CONTRASTS
                if method in methods and against in methods and (found := contrast(values, method, against, confidence))]
    for family in (primary, further):
        adjusted = holm_adjust({(entry["method"], entry["against"]): entry["p"] for entry in family})
        for entry in family:
            entry["p_holm"] = adjusted[entry["method"], entry["against"]]
    return {"primary": primary, "further": further}


def verdict_direction(entry: dict, gate: GateResult, p_key: str = "p_holm", alpha: float = 0.05) -> str:
    """What a contrast concludes: "uninformative" when the gate failed; "undecided" without an interval (one
    paired seed); "above" / "below" when the (adjusted) p is below ``alpha``; else "none" (no difference detected)."""
    if not gate.passed:
        return "uninformative"
    p = entry.get(p_key)
    if p is None:
        return "undecided"
    if p < alpha:
        return "above" if entry["mean"] > 0 else "below"
    return "none"


def verdict_text(entry: dict, gate: GateResult, p_key: str = "p_holm", alpha: float = 0.05) -> str:
    """One line per contrast, from its ``verdict_direction``: "uninformative: the baseline did not learn", "no
    interval (1 paired seed)", "<method> above / below <against>", or "no difference detected (MDD x)"."""
    direction = verdict_direction(entry, gate, p_key, alpha)
    if direction == "uninformative":
        return "uninformative: the baseline did not learn"
    if direction == "undecided":
        return f"no interval ({entry['n']} paired seed)"
    if direction in ("above", "below"):
        return f"{entry['method']} {direction} {entry['against']}"
    mdd = entry.get("mdd")
    return "no difference detected" + (f" (detectable: |Δ| >= {mdd:.3f})" if mdd is not None else "")


def judge(entry: dict, gate: GateResult) -> dict:
    """Set a contrast's ``direction`` and ``verdict`` (read from its Holm-adjusted p); returns the entry."""
    entry.update(direction=verdict_direction(entry, gate), verdict=verdict_text(entry, gate))
    return entry


def contrast_cells(entry: dict) -> list[str]:
    """One contrast's table row: name, Δ [interval], MDD, p, Holm-adjusted p, signs (sign-test p), verdict."""
    def number(value: Optional[float]) -> str:
        return f"{value:.3f}" if value is not None else "-"

    signs = entry.get("signs")
    sign_cell = f"{signs['above']}↑ {signs['below']}↓" + (f" {signs['tied']}=" if signs["tied"] else "") + f" (p {number(signs['p'])})" if signs else "-"
    return [f"{entry['method']} − {entry['against']}", difference_text(entry, 3), number(entry["mdd"]), number(entry["p"]),
            number(entry.get("p_holm")), sign_cell, entry["verdict"]]


CONTRAST_HEADER = ["contrast", "Δ [95% CI]", "MDD (80% power)", "p", "p (Holm)", "seeds above/below (sign test)", "verdict"]
