"""GEC inside verl's rollout (the plugin's HF rollout), each branch forced in turn (1 training step each);
what each run must show is in tests/e2e/gec_checks.py (the vLLM rollout's runs check the same)."""

import pytest

from edge_verl.algorithms.gec import REFLECTION_PHRASE

from tests.e2e.gec_checks import check_forced_branch_run, check_origin_metrics, forced_branch_overrides, has_gradient, read_dump


# Every branch on the v1 trainer, in the paper's loss except inject_answer, which trains its injected answer
# with the SFT control (edge_gec.injected_loss=sft; masked on v1 and both on the legacy trainer are in
# test_gec_controls_on_cpu.py, whose legacy regeneration also runs these checks).
RUNS = {"regenerate": (), "inject_answer": ("+algorithm.edge_gec.injected_loss=sft",), "replace_solution": ()}


@pytest.mark.parametrize("branch", list(RUNS))
def test_forced_branch_trains_the_corrected_responses(run_cpu_demo, branch):
    validate = branch == "regenerate"
    forced = forced_branch_overrides(branch, validate)
    out, rows = run_cpu_demo(f"gec_{branch}_v1", overrides=lambda out: [*forced(out), *RUNS[branch]], algorithm="edge", trainer="v1", steps=1)
    metrics = rows[-1]
    check_forced_branch_run(out, metrics, branch, validate)
    check_origin_metrics(metrics)
    injected = {"regenerate": "phrase", "inject_answer": "answer", "replace_solution": "solution"}[branch]
    assert metrics[f"actor/gec/{injected}/token_share"] > 0
    if RUNS[branch]:  # the SFT control: the NLL term, and no surrogate gradient through the answer
        assert metrics["actor/gec/sft_nll"] > 0 and metrics.get("actor/gec/answer/grad_share", 0.0) == 0.0
    else:  # the paper's loss: the injected tokens are trained through the surrogate (when there is a gradient)
        assert "actor/gec/sft_nll" not in metrics
        assert (metrics.get(f"actor/gec/{injected}/grad_share", 0.0) > 0) == has_gradient(metrics)


def test_a_response_truncated_at_its_cap_is_regenerated_with_the_full_continuation(run_cpu_demo):
    # First samples capped at 4 tokens (the tiny model's answers are ~10: every one is cut, none correct),
    # continuation budget 6: every regeneration may continue for all 6 tokens (it stops earlier only at EOS,
    # as in the reference), so a trained response is 4 sampled + 31 phrase + at most 6 continued tokens.
    first, budget, phrase = 4, 6, len(REFLECTION_PHRASE.encode())

    def overrides(out):
        return [
            "+algorithm.edge_gec.probabilities=[1,0,0]",
            f"algorithm.edge_gec.first_sample_tokens={first}",  # the demo sets both: no "+"
            f"algorithm.edge_gec.continuation_tokens={budget}",
            f"trainer.rollout_data_dir={out / 'rollouts'}",
        ]

    out, rows = run_cpu_demo("gec_full_continuation", overrides=overrides, algorithm="edge", steps=1)
    metrics = rows[-1]
    assert metrics["edge_verl/gec/corrected_regenerate"] == 64
    assert metrics["edge_verl/gec/continuation_cut"] == 0  # every regeneration had its whole budget
    assert metrics["edge_verl/gec/continuation_tokens_max"] == budget
    assert first + phrase < metrics["response_length/mean"] <= first + phrase + budget
    dump = read_dump(out / "rollouts")
    assert len(dump) == 64
    for row in dump:  # decoded text: one character per byte token at most (EOS and partial UTF-8 differ)
        sampled, found, continued = row["output"].partition(REFLECTION_PHRASE)
        assert found and 0 < len(sampled) <= first and len(continued) <= budget, row["output"]
