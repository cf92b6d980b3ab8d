"""GEC inside verl's rollout (the plugin's HF rollout), each branch forced in turn (1 training step each);
what each run must show is in tests/e2e/gec_checks.py (the vLLM rollout's GEC run checks every branch's
tokens in one run)."""

import pytest

from edge_verl.algorithms.gec import REFLECTION_PHRASE

from tests.e2e.gec_checks import check_forced_branch_run, check_origin_metrics, forced_branch_overrides, has_gradient, read_dump


# On the v1 trainer: regenerate in the paper's loss, and inject_answer trained with the SFT control
# (edge_gec.injected_loss=sft); masked on v1 and the legacy trainer's GEC runs are in test_gec_controls_on_cpu.py.
# The regeneration also caps first samples at 4 tokens (the tiny model's answers are ~10: every one is cut,
# none correct) with a continuation budget of 6: every regeneration may continue for all 6 tokens (it stops
# earlier only at EOS, as in the reference), so a trained response is 4 sampled + 31 phrase + <= 6 continued.
FIRST, BUDGET = 4, 6
RUNS = {
    "regenerate": (f"algorithm.edge_gec.first_sample_tokens={FIRST}", f"algorithm.edge_gec.continuation_tokens={BUDGET}"),
    "inject_answer": ("+algorithm.edge_gec.injected_loss=sft",),
}
# replace_solution with the gold solution: the vLLM rollout's GEC run (test_vllm_rollout_on_cpu.py) checks
# its tokens response by response, and the legacy placebo run its placebo variant (test_gec_controls_on_cpu.py).


@pytest.mark.parametrize("branch", list(RUNS))
def test_forced_branch_trains_the_corrected_responses(run_cpu_demo, branch):
    validate = branch == "regenerate"
    forced = forced_branch_overrides(branch, validate)
    out, rows = run_cpu_demo(f"gec_{branch}_v1", overrides=lambda out: [*forced(out), *RUNS[branch]], algorithm="edge", trainer="v1", steps=1)
    metrics = rows[-1]
    check_forced_branch_run(out, metrics, branch, validate)
    check_origin_metrics(metrics)
    injected = {"regenerate": "phrase", "inject_answer": "answer"}[branch]
    assert metrics[f"actor/gec/{injected}/token_share"] > 0
    if branch == "regenerate":
        check_full_continuation(out, metrics)
    if branch == "inject_answer":  # the SFT control: the NLL term, and no surrogate gradient through the answer
        assert metrics["actor/gec/sft_nll"] > 0 and metrics.get("actor/gec/answer/grad_share", 0.0) == 0.0
    else:  # the paper's loss: the injected tokens are trained through the surrogate (when there is a gradient)
        assert "actor/gec/sft_nll" not in metrics
        assert (metrics.get(f"actor/gec/{injected}/grad_share", 0.0) > 0) == has_gradient(metrics)


def check_full_continuation(out, metrics):
    """A response truncated at its cap is regenerated with the whole continuation budget."""
    phrase = len(REFLECTION_PHRASE.encode())
    assert metrics["edge_verl/gec/corrected_regenerate"] == 64
    assert metrics["edge_verl/gec/continuation_cut"] == 0  # every regeneration had its whole budget
    assert metrics["edge_verl/gec/continuation_tokens_max"] == BUDGET
    assert FIRST + phrase < metrics["response_length/mean"] <= FIRST + phrase + BUDGET
    dump = read_dump(out / "rollouts")
    assert len(dump) == 64
    for row in dump:  # decoded text: one character per byte token at most (EOS and partial UTF-8 differ)
        sampled, found, continued = row["output"].partition(REFLECTION_PHRASE)
        assert found and 0 < len(sampled) <= FIRST and len(continued) <= BUDGET, row["output"]
