"""The reviewers' controls of GEC in verl's real pipeline (the demo's tiny model, 1 training step each), on
both trainers: what each switch must measurably do, and the per-origin diagnostics of the actor update.

- injected_loss=masked: 0 gradient share through GEC's injected tokens (phrase, answer), the rest sums to 1;
- injected_loss=sft: the NLL term is logged and the surrogate's share through injected tokens is 0;
- answer_source=placebo: every injected answer / solution grades 0 against the row's gold;
- first_attempt=drop: a corrected response starts with the phrase / the injected answer.
The demo's step has 2 mini-batches; with 2 PPO epochs, no learning-rate warm-up (whose first step has lr 0)
and a narrow clip range the ratios move away from 1 and some updates are clipped, so the ratio and clip
statistics are not trivially 1 and 0.
"""

import pytest

from edge_verl.algorithms.gec import REFLECTION_PHRASE, injected_answer_text
from edge_verl.demo import task

from tests.e2e.gec_checks import INJECTED, check_forced_branch_run, check_origin_metrics, forced_branch_overrides, ground_truth, read_dump


def _overrides(*extra):
    def overrides(out):
        return [*extra, f"trainer.rollout_data_dir={out / 'rollouts'}"]

    return overrides


def _check_moved_ratios(metrics):
    """2 mini-batches x 2 epochs, clip 0.05: the policy has moved for most updates."""
    assert metrics["actor/gec/sampled/ratio_max"] > 1.0 + 1e-3
    assert metrics["actor/gec/sampled/ratio_mean"] != pytest.approx(1.0, abs=1e-6)
    assert metrics["actor/gec/sampled/clip_frac"] > 0.0


MOVING = ("actor_rollout_ref.actor.ppo_epochs=2", "actor_rollout_ref.actor.clip_ratio_low=0.05", "actor_rollout_ref.actor.clip_ratio_high=0.05")
MIXED = "+algorithm.edge_gec.probabilities=[0.5,0.5,0]"


@pytest.mark.parametrize("trainer", ["v1", "legacy"])
def test_masked_and_sft_take_the_injected_tokens_out_of_the_surrogate(run_cpu_demo, trainer):
    mode = "masked" if trainer == "v1" else "sft"  # each control on one trainer here, the other in test_gec_on_cpu
    out, rows = run_cpu_demo(
        f"gec_{mode}_{trainer}",
        overrides=_overrides(MIXED, f"+algorithm.edge_gec.injected_loss={mode}", *MOVING),
        algorithm="edge", trainer=trainer, steps=1, lr_warmup_steps=0,
    )
    metrics = rows[-1]
    check_origin_metrics(metrics)
    _check_moved_ratios(metrics)
    assert metrics["actor/gec/phrase/token_share"] > 0 and metrics["actor/gec/answer/token_share"] > 0
    for origin in INJECTED:
        assert metrics[f"actor/gec/{origin}/grad_share"] == 0.0, origin
    assert metrics["actor/gec/sampled/grad_share"] + metrics["actor/gec/continuation/grad_share"] == pytest.approx(1.0, abs=1e-6)
    assert ("actor/gec/sft_nll" in metrics) == (mode == "sft")
    if mode == "sft":
        assert metrics["actor/gec/sft_nll"] > 0


@pytest.mark.parametrize("trainer, probabilities, first_attempt", [("v1", "[0,1,0]", "drop"), ("legacy", "[0,0.5,0.5]", "keep")])
def test_placebo_injects_another_problems_answer_that_grades_zero(run_cpu_demo, trainer, probabilities, first_attempt):
    out, rows = run_cpu_demo(
        f"gec_placebo_{trainer}",
        overrides=_overrides(
            f"+algorithm.edge_gec.probabilities={probabilities}",
            "+algorithm.edge_gec.answer_source=placebo",
            f"+algorithm.edge_gec.first_attempt={first_attempt}",
        ),
        algorithm="edge", trainer=trainer, steps=1,
    )
    metrics = rows[-1]
    check_origin_metrics(metrics)
    dump = read_dump(out / "rollouts")
    corrected = [row for row in dump if "Wait!" in row["output"] or row["output"].startswith("The digit to copy is")]
    assert len(corrected) == metrics["edge_verl/gec/corrected"] > 0
    for row in corrected:
        assert row["score"] == 0.0, row  # the placebo never grades right against this row's gold
        assert row["output"] != task.make_solution(ground_truth(row))
        assert not row["output"].endswith(injected_answer_text(ground_truth(row)))
        if first_attempt == "drop":  # the response IS the injected text: no first attempt before it
            assert row["output"].startswith("\nWait!") and row["output"].count("\\boxed") == 1, row["output"]
    assert metrics["edge_verl/gec/regenerate_became_correct"] == 0
    # the trained rewards of corrected responses are 0: the sampled-only statistics are those of the batch
    assert metrics["edge_verl/gec/sampled/zero_variance_group_frac"] == pytest.approx(metrics["edge_verl/gec/final/zero_variance_group_frac"])


def test_drop_first_attempt_regenerates_from_the_phrase_alone_on_the_legacy_trainer(run_cpu_demo):
    forced = forced_branch_overrides("regenerate", validate=True)
    controls = ("+algorithm.edge_gec.first_attempt=drop", "+algorithm.edge_gec.injected_loss=masked")
    out, rows = run_cpu_demo(
        "gec_drop_regenerate_legacy", overrides=lambda out: [*forced(out), *controls], algorithm="edge", trainer="legacy", steps=1
    )
    metrics = rows[-1]
    check_forced_branch_run(out, metrics, "regenerate", validate=True)  # what every forced regeneration shows
    check_origin_metrics(metrics)
    corrected = [row for row in read_dump(out / "rollouts") if REFLECTION_PHRASE in row["output"]]
    assert len(corrected) == metrics["edge_verl/gec/corrected_regenerate"] > 0
    for row in corrected:
        assert row["output"].startswith(REFLECTION_PHRASE), row["output"]
    assert metrics["actor/gec/phrase/token_share"] > 0 and metrics.get("actor/gec/phrase/grad_share", 0.0) == 0.0
    assert metrics["actor/gec/continuation/token_share"] > 0
