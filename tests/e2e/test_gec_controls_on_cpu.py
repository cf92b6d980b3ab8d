"""GEC in verl's real pipeline with the plugin's HF rollout (the demo's tiny model, 1 training step each),
and the reviewers' controls of it, on both trainers: what each switch must measurably do, the per-origin
diagnostics of the actor update and the responses GEC trained.

- v1, injected_loss=masked, regenerate and inject_answer, first samples capped: 0 gradient share through
  GEC's injected tokens (phrase, answer), the rest sums to 1; every regeneration continues for its whole
  budget; each corrected response and the injected-token count match the branch that wrote it;
- legacy, the three branches in thirds with answer_source=placebo (rewarded as gold), first_attempt=drop and
  injected_loss=sft: every injected answer / solution grades 0 against the row's gold yet is trained with
  reward 1, its gold twin's (verl's reward loop skipped it, the batch kept the reward loop's extra-info
  keys), a corrected response starts with the phrase / the injected answer, the NLL term is logged and the
  surrogate's share through injected tokens is 0, validation is never corrected.
placebo and drop act in the agent loop, which both trainers share; masked and sft in the actor loss, one on
each trainer (sft also in the Megatron EDGE-SFT recipe, tests/e2e/test_megatron_on_cpu.py). The paper's
loss (the injected tokens trained through the surrogate) and every branch's tokens: the vLLM rollout's GEC
run (tests/e2e/test_vllm_rollout_on_cpu.py). CI's budget folded the forced-regenerate run and the legacy
SFT run into these two (2+ minutes each).
Each step has 2 mini-batches; with 2 PPO epochs, no learning-rate warm-up (whose first step has lr 0)
and a narrow clip range the ratios move away from 1 and some updates are clipped, so the ratio and clip
statistics are not trivially 1 and 0.
"""

import pytest

from edge_verl.algorithms.gec import ANSWER_TEMPLATE, REFLECTION_PHRASE, injected_answer_text
from edge_verl_lab.demo import task

from tests.e2e.gec_checks import INJECTED, check_corrected_responses, check_origin_metrics, ground_truth, read_dump


def _overrides(*extra):
    def overrides(out):
        return [*extra, f"trainer.rollout_data_dir={out / 'rollouts'}"]

    return overrides


def _check_moved_ratios(metrics, origin="sampled"):
    """2 mini-batches x 2 epochs, clip 0.05: the policy has moved for most updates of ``origin``'s tokens."""
    assert metrics[f"actor/gec/{origin}/ratio_max"] > 1.0 + 1e-3
    assert metrics[f"actor/gec/{origin}/ratio_mean"] != pytest.approx(1.0, abs=1e-6)
    assert metrics[f"actor/gec/{origin}/vanilla_clip_frac"] > 0.0


MOVING = ("actor_rollout_ref.actor.ppo_epochs=2", "actor_rollout_ref.actor.clip_ratio_low=0.05", "actor_rollout_ref.actor.clip_ratio_high=0.05")
MIXED = "+algorithm.edge_gec.probabilities=[0.5,0.5,0]"
# the inject_answer branch's sentence, up to its answer
ANSWER_MARK = ANSWER_TEMPLATE.split("{answer}")[0].strip()


# The regeneration caps first samples at 4 tokens (the tiny model's answers are ~10: every one is cut, none
# correct) with a continuation budget of 6: every regeneration may continue for all 6 tokens (it stops
# earlier only at EOS, as in the reference), so a regenerated response is 4 sampled + 31 phrase + <= 6 continued.
FIRST, BUDGET = 4, 6
CAPS = (f"algorithm.edge_gec.first_sample_tokens={FIRST}", f"algorithm.edge_gec.continuation_tokens={BUDGET}")


def test_masked_takes_the_injected_tokens_out_of_the_surrogate_and_regenerations_get_their_budget(run_cpu_demo):
    out, rows = run_cpu_demo(
        "gec_masked_v1",
        overrides=_overrides(MIXED, "+algorithm.edge_gec.injected_loss=masked", *MOVING, *CAPS),
        algorithm="edge", trainer="v1", steps=1, lr_warmup_steps=0,
    )
    metrics = rows[-1]
    check_origin_metrics(metrics)
    _check_moved_ratios(metrics)
    assert metrics["actor/gec/phrase/token_share"] > 0 and metrics["actor/gec/answer/token_share"] > 0
    for origin in INJECTED:
        assert metrics[f"actor/gec/{origin}/grad_share"] == 0.0, origin
    assert metrics["actor/gec/sampled/grad_share"] + metrics["actor/gec/continuation/grad_share"] == pytest.approx(1.0, abs=1e-6)
    assert "actor/gec/sft_nll" not in metrics
    branches = check_corrected_responses(read_dump(out / "rollouts"), metrics)
    # every first sample was cut at its cap, so every response was corrected, by the two branches drawn
    assert len(branches["regenerate"]) + len(branches["inject_answer"]) == 64 and not branches["replace_solution"]
    assert min(len(branches["regenerate"]), len(branches["inject_answer"])) > 0
    # a response cut at its cap is regenerated with the whole continuation budget
    assert metrics["edge_verl/gec/continuation_cut"] == 0
    assert metrics["edge_verl/gec/continuation_tokens_max"] == BUDGET
    for row in branches["regenerate"]:  # decoded text: one character per byte token at most
        sampled, _, continued = row["output"].partition(REFLECTION_PHRASE)
        assert 0 < len(sampled) <= FIRST and len(continued) <= BUDGET, row["output"]
    for row in branches["inject_answer"]:
        assert 0 <= len(row["output"]) - len(injected_answer_text(ground_truth(row))) <= FIRST, row["output"]


def _graded(row):
    """What the run's reward gives the trained text against the row's gold (a placebo rewarded as gold is
    trained with its twin's reward instead)."""
    from edge_verl.reward import compute_score

    return compute_score(data_source="demo", solution_str=row["output"], ground_truth=ground_truth(row))["score"]


def _corrected(dump):
    return [row for row in dump if "Wait!" in row["output"] or row["output"].startswith("The digit to copy is")]


def test_placebo_and_drop_in_every_branch(run_cpu_demo):
    # One run, the three branches drawn in thirds (each occurs among the ~57 wrong responses of 64): placebo
    # answers and solutions grade 0 against the row's gold and are rewarded as their gold twins (the answer
    # sentence alone, the row's solution: both right), drop leaves no first attempt before the injected
    # text, sft gives the injected tokens no gradient through the surrogate and trains them through its NLL
    # term, and validation is never corrected.
    controls = (
        "+algorithm.edge_gec.probabilities=[0.34,0.33,0.33]", "+algorithm.edge_gec.answer_source=placebo",
        "+algorithm.edge_gec.placebo_reward=as_gold",
        "+algorithm.edge_gec.first_attempt=drop", "+algorithm.edge_gec.injected_loss=sft",
        "trainer.val_before_train=True", *MOVING,
    )
    out, rows = run_cpu_demo(
        "gec_placebo_drop_legacy",
        overrides=lambda out: [*_overrides(*controls)(out), f"trainer.validation_data_dir={out / 'validation'}"],
        algorithm="edge", trainer="legacy", steps=1, lr_warmup_steps=0,
    )
    metrics = rows[-1]
    check_origin_metrics(metrics)
    # drop leaves sampled tokens only in the few responses sampled right: the continuations' ratios move
    _check_moved_ratios(metrics, origin="continuation")
    assert metrics["actor/gec/sft_nll"] > 0
    dump = read_dump(out / "rollouts")
    regenerated = [row for row in dump if REFLECTION_PHRASE in row["output"]]
    answered = [row for row in dump if ANSWER_MARK in row["output"]]
    replaced = [row for row in _corrected(dump) if row not in regenerated and row not in answered]
    assert len(regenerated) == metrics["edge_verl/gec/corrected_regenerate"] > 0
    assert len(answered) == metrics["edge_verl/gec/corrected_inject_answer"] > 0
    assert len(replaced) == metrics["edge_verl/gec/corrected_replace_solution"] > 0
    for row in regenerated:  # drop: the continuation follows the phrase alone
        assert row["output"].startswith(REFLECTION_PHRASE), row["output"]
    for row in answered:  # the placebo never grades right against this row's gold; drop: the response IS the sentence
        assert _graded(row) == 0.0 and row["score"] == 1.0 and row["output"] != injected_answer_text(ground_truth(row)), row
        assert row["output"].lstrip().startswith("Wait!") and row["output"].count("\\boxed") == 1, row["output"]
    for row in replaced:  # another problem's solution: wrong against this row's gold, rewarded as the row's own
        assert _graded(row) == 0.0 and row["score"] == 1.0 and row["output"] != task.make_solution(ground_truth(row)), row
    placebos = len(answered) + len(replaced)
    assert metrics["edge_verl/gec/rewarded_as_gold_frac"] == pytest.approx(placebos / metrics["edge_verl/gec/corrected"])
    for row in answered + replaced:  # verl's dump shows the reward extra info it logged: the twin's (gold) answer
        assert row["pred"] == ground_truth(row) and row["acc"] is True, row
    for origin in INJECTED:  # sft: the phrase, the answer and the solution get no gradient through the surrogate
        assert metrics.get(f"actor/gec/{origin}/grad_share", 0.0) == 0.0, origin
    for origin in ("phrase", "answer", "solution", "continuation", "sampled"):
        assert metrics[f"actor/gec/{origin}/token_share"] > 0, origin
    validation = read_dump(out / "validation")  # never corrected, whatever the controls
    assert len(validation) == 32 and not any("Wait!" in row["output"] for row in validation)
