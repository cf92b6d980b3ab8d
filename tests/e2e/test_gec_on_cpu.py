"""GEC inside verl's rollout (the plugin's HF rollout), the regenerate branch forced (1 training step); what
a forced run must show is in tests/e2e/gec_checks.py (the vLLM rollout's GEC run checks every branch's
tokens in one run)."""

from edge_verl.algorithms.gec import REFLECTION_PHRASE

from tests.e2e.gec_checks import check_forced_branch_run, check_origin_metrics, forced_branch_overrides, has_gradient, read_dump


# On the v1 trainer, regenerate in the paper's loss. The regeneration caps first samples at 4 tokens (the tiny
# model's answers are ~10: every one is cut, none correct) with a continuation budget of 6: every regeneration
# may continue for all 6 tokens (it stops earlier only at EOS, as in the reference), so a trained response is
# 4 sampled + 31 phrase + <= 6 continued. The other branches: the vLLM rollout's GEC run checks every branch's
# tokens response by response (test_vllm_rollout_on_cpu.py), the legacy placebo run draws all three with the
# placebo and the masked control, and the SFT control runs in test_gec_controls_on_cpu.py (legacy) and the
# Megatron EDGE-SFT recipe (test_megatron_on_cpu.py); a forced inject_answer run with SFT on v1 (2 minutes of
# CI) checked nothing those do not.
FIRST, BUDGET = 4, 6
CAPS = (f"algorithm.edge_gec.first_sample_tokens={FIRST}", f"algorithm.edge_gec.continuation_tokens={BUDGET}")


def test_forced_regeneration_trains_the_corrected_responses(run_cpu_demo):
    forced = forced_branch_overrides("regenerate", validate=True)
    out, rows = run_cpu_demo("gec_regenerate_v1", overrides=lambda out: [*forced(out), *CAPS], algorithm="edge", trainer="v1", steps=1)
    metrics = rows[-1]
    check_forced_branch_run(out, metrics, "regenerate", validate=True)
    check_origin_metrics(metrics)
    assert metrics["actor/gec/phrase/token_share"] > 0
    check_full_continuation(out, metrics)
    # the paper's loss: the injected tokens are trained through the surrogate (when there is a gradient)
    assert "actor/gec/sft_nll" not in metrics
    assert (metrics.get("actor/gec/phrase/grad_share", 0.0) > 0) == has_gradient(metrics)


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
