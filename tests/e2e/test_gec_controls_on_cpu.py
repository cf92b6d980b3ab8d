"""The reviewers' controls of GEC in verl's real pipeline (the demo's tiny model, 1 training step each), on
both trainers: what each switch must measurably do, and the per-origin diagnostics of the actor update.

- injected_loss=masked: 0 gradient share through GEC's injected tokens (phrase, answer), the rest sums to 1;
- injected_loss=sft: the NLL term is logged and the surrogate's share through injected tokens is 0;
- answer_source=placebo: every injected answer / solution grades 0 against the row's gold;
- first_attempt=drop: a corrected response starts with the phrase / the injected answer.
masked runs on both trainers (v1 here, legacy with the placebo); sft on the legacy trainer here and in the
Megatron EDGE-SFT recipe (test_megatron_on_cpu.py); placebo and drop act in the agent loop, which both trainers share,
so one legacy run draws all three branches with them (the v1 trainer's GEC plumbing: the other v1 runs).
The demo's step has 2 mini-batches; with 2 PPO epochs, no learning-rate warm-up (whose first step has lr 0)
and a narrow clip range the ratios move away from 1 and some updates are clipped, so the ratio and clip
statistics are not trivially 1 and 0.
"""

import pytest

from edge_verl.algorithms.gec import ANSWER_TEMPLATE, REFLECTION_PHRASE, injected_answer_text
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
# the inject_answer branch's sentence, up to its answer
ANSWER_MARK = ANSWER_TEMPLATE.split("{answer}")[0].strip()


@pytest.mark.parametrize("trainer", ["v1", "legacy"])
def test_masked_and_sft_take_the_injected_tokens_out_of_the_surrogate(run_cpu_demo, trainer):
    mode = "masked" if trainer == "v1" else "sft"  # masked on legacy: the placebo run below
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


def test_placebo_and_drop_in_every_branch(run_cpu_demo):
    # One run, the three branches drawn in thirds (each occurs among the ~57 wrong responses of 64): placebo
    # answers and solutions grade 0 against the row's gold, drop leaves no first attempt before the injected
    # text, masked gives the injected tokens no gradient, and validation is never corrected.
    controls = (
        "+algorithm.edge_gec.probabilities=[0.34,0.33,0.33]", "+algorithm.edge_gec.answer_source=placebo",
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
    answered = [row for row in dump if ANSWER_MARK in row["output"]]
    replaced = [row for row in _corrected(dump) if row not in regenerated and row not in answered]
    assert len(regenerated) == metrics["edge_verl/gec/corrected_regenerate"] > 0
    assert len(answered) == metrics["edge_verl/gec/corrected_inject_answer"] > 0
    assert len(replaced) == metrics["edge_verl/gec/corrected_replace_solution"] > 0
    for row in regenerated:  # drop: the continuation follows the phrase alone
        assert row["output"].startswith(REFLECTION_PHRASE), row["output"]
    for row in answered:  # the placebo never grades right against this row's gold; drop: the response IS the sentence
        assert row["score"] == 0.0 and row["output"] != injected_answer_text(ground_truth(row)), row
        assert row["output"].lstrip().startswith("Wait!") and row["output"].count("\\boxed") == 1, row["output"]
    for row in replaced:  # another problem's solution, graded against this row's gold
        assert row["score"] == 0.0 and row["output"] != task.make_solution(ground_truth(row)), row
    for origin in INJECTED:  # masked: the phrase, the answer and the solution get no gradient
        assert metrics.get(f"actor/gec/{origin}/grad_share", 0.0) == 0.0, origin
    for origin in ("phrase", "answer", "solution", "continuation", "sampled"):
        assert metrics[f"actor/gec/{origin}/token_share"] > 0, origin
    validation = read_dump(out / "validation")  # never corrected, whatever the controls
    assert len(validation) == 32 and not any("Wait!" in row["output"] for row in validation)
