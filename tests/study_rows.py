"""Metrics rows for hand-written study runs: every training statistic a study report reads for a method,
at a filler value, so that a test sets by hand only the numbers it checks (the report refuses a run that
lacks a metric its columns name: tests/test_study.py checks that refusal)."""

from edge_verl.methods import get_method
from edge_verl_lab.study.config import eda_form_of, method_of

FILLER = 0.5
# What every run of the study logs (verl's own and advantage_stats), and what GEC / EDA / GEPO runs add.
COMMON = ("critic/score/mean", "actor/entropy", "response_length/mean", "edge_verl/adv/var", "edge_verl/adv/zero_variance_group_frac",
          "edge_verl/adv/all_wrong_group_frac", "edge_verl/adv/all_right_group_frac")
GEC = ("edge_verl/gec/sampled/score_mean", "edge_verl/gec/sampled/entropy", "edge_verl/gec/sampled/adv_var",
       "edge_verl/gec/sampled/zero_variance_group_frac", "edge_verl/gec/sampled/all_wrong_group_frac",
       "edge_verl/gec/sampled/all_right_group_frac", "edge_verl/gec/injected_token_frac")
ESTIMATOR = {"edge_eda": ("edge_verl/edge_eda/adv_var_before",), "gepo": ("edge_verl/gepo/adv_var_before",), "grpo": ()}
EDA_GRADIENT_FORM = ("actor/edge_eda/entropy_grad_share",)  # a study row running EDA's gradient form (not *_detached)


def logged_metrics(method: str) -> tuple[str, ...]:
    found = get_method(method_of(method))
    gradient = EDA_GRADIENT_FORM if found.eda and eda_form_of(method) == "gradient" else ()
    return COMMON + ESTIMATOR[found.estimator] + (GEC if found.gec else ()) + gradient


def training_row(method: str, step: int, **values: float) -> dict:
    """One training step's row of a ``method`` run: ``values`` (metric name with '/' written '__') over fillers."""
    row = {"step": step, **{metric: FILLER for metric in logged_metrics(method)}}
    row.update({name.replace("__", "/"): value for name, value in values.items()})
    return row
