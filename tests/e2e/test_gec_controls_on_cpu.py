"""The reviewers' controls of GEC in verl's real pipeline (the demo's tiny model, 1 training step each), on
both trainers: what each switch must measurably do, and the per-origin diagnostics of the actor update.

- injected_loss=masked: 0 gradient share through GEC's injected tokens (phrase, answer), the rest sums to 1;
- injected_loss=sft: the NLL term is logged and the surrogate's share through injected tokens is 0;
- answer_source=placebo: every injected answer / solution grades 0 against the row's gold;
- first_attempt=drop: a corrected response starts with the phrase / the injected answer.
Each control runs on both trainers: masked (v1 here, legacy with the placebo), sft (legacy here, v1 in
test_gec_on_cpu.py's inject_answer run), placebo and drop (v1 and legacy here).
The demo's step has 2 mini-batches; with 2 PPO epochs, no learning-rate warm-up (whose first step has lr 0)
and a narrow clip range the ratios move away from 1 and some updates are clipped, so the ratio and clip
statistics are not trivially 1 and 0.
"""

import pytest

from edge_verl.algorithms.gec import REFLECTION_PHRASE, injected_answer_text
from edge_verl.demo import task

from tests.e2e.gec_checks import INJECTED, check_origin_metrics, ground_truth, read_dump


def _overrides(*extra):
    def overrides(out):
        return [*extra, f"trainer.rollout_data_dir={out / 'rollouts'}"]

    return overrides


def _check_moved_ratios(metrics):
    """2 mini-batches x 2 epochs, clip 0.05: the policy has moved for most updates."""
    assert metrics["actor/gec/sampled/ratio_max"] > 1.0 + 1e-3
    assert metrics["actor/gec/sampled/ratio_mean"] != pytest.approx(1.0, abs=1e-6)
    assert metrics["actor/gec/sampled/vanilla_clip_frac"] > 0.0


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


def _corrected(dump):
    return [row for row in dump if "Wait!" in row["output"] or row["output"].startswith("The digit to copy is")]


def test_placebo_answers_grade_zero_and_drop_leaves_the_injected_text_alone(run_cpu_demo):
    out, rows = run_cpu_demo(
        "gec_placebo_drop_v1",
        overrides=_overrides(
            "+algorithm.edge_gec.probabilities=[0,1,0]",
            "+algorithm.edge_gec.answer_source=placebo",
            "+algorithm.edge_gec.first_attempt=drop",
        ),
        algorithm="edge", trainer="v1", steps=1,
    )
    metrics = rows[-1]
    check_origin_metrics(metrics)
    corrected = _corrected(read_dump(out / "rollouts"))
    assert len(corrected) == metrics["edge_verl/gec/corrected_inject_answer"] > 0
    for row in corrected:
        assert row["score"] == 0.0, row  # the placebo never grades right against this row's gold
        assert row["output"] != injected_answer_text(ground_truth(row))
        # drop: the response IS the injected sentence, with no first attempt before it
        assert row["output"].lstrip().startswith("Wait!") and row["output"].count("\\boxed") == 1, row["output"]
    assert metrics["actor/gec/answer/token_share"] > 0 and metrics["actor/gec/sampled/token_share"] > 0
    # corrected responses keep their reward 0: the statistics as sampled are those of the batch
    assert metrics["edge_verl/gec/sampled/zero_variance_group_frac"] == pytest.approx(metrics["edge_verl/gec/final/zero_variance_group_frac"])


def test_placebo_solutions_and_dropped_regenerations_on_the_legacy_trainer(run_cpu_demo):
    controls = (
        "+algorithm.edge_gec.probabilities=[0.5,0,0.5]", "+algorithm.edge_gec.answer_source=placebo",
        "+algorithm.edge_gec.first_attempt=drop", "+algorithm.edge_gec.injected_loss=masked",
        "trainer.val_before_train=True",
    )
    out, rows = run_cpu_demo(
        "gec_placebo_drop_legacy",
        overrides=lambda out: [*_overrides(*controls)(out), f"trainer.validation_data_dir={out / 'validation'}"],
        algorithm="edge", trainer="legacy", steps=1,
    )
    metrics = rows[-1]
    check_origin_metrics(metrics)
    dump = read_dump(out / "rollouts")
    regenerated = [row for row in dump if REFLECTION_PHRASE in row["output"]]
    replaced = [row for row in _corrected(dump) if row not in regenerated]
    assert len(regenerated) == metrics["edge_verl/gec/corrected_regenerate"] > 0
    assert len(replaced) == metrics["edge_verl/gec/corrected_replace_solution"] > 0
    for row in regenerated:  # drop: the continuation follows the phrase alone
        assert row["output"].startswith(REFLECTION_PHRASE), row["output"]
    for row in replaced:  # another problem's solution, graded against this row's gold
        assert row["score"] == 0.0 and row["output"] != task.make_solution(ground_truth(row)), row
    for origin in INJECTED:  # masked: the phrase and the solution get no gradient
        assert metrics.get(f"actor/gec/{origin}/grad_share", 0.0) == 0.0, origin
    assert metrics["actor/gec/phrase/token_share"] > 0 and metrics["actor/gec/solution/token_share"] > 0
    assert metrics["actor/gec/continuation/token_share"] > 0
    validation = read_dump(out / "validation")  # never corrected, whatever the controls
    assert len(validation) == 32 and not any("Wait!" in row["output"] for row in validation)
