"""GEC inside verl's rollout, each branch forced in turn, on both trainers (1 training step each).

verl's own rollout dump (trainer.rollout_data_dir) shows the TRAINED responses and their final rewards;
GEC's metrics in metrics.jsonl show what was corrected and how many trained tokens were injected.
"""

import json

import pytest

from edge_verl.algorithms.gec import REFLECTION_PHRASE, injected_answer_text
from edge_verl.demo import task

pytestmark = pytest.mark.e2e

BRANCHES = {"regenerate": "[1,0,0]", "inject_answer": "[0,1,0]", "replace_solution": "[0,0,1]"}
EDA_KEYS = ("zero_variance_group_frac", "adv_var_before", "adv_var_after", "max_abs_adv", "entropy_ratio_min", "entropy_ratio_max")


def _read_dump(folder):
    files = sorted(folder.glob("*.jsonl"))
    assert files, f"no dump in {folder}"
    return [json.loads(line) for line in files[0].read_text().splitlines() if line.strip()]


def _gt(row):
    gts = row["gts"]
    return str(gts["ground_truth"] if isinstance(gts, dict) else gts)


@pytest.mark.parametrize("trainer", ["v1", "legacy"])
@pytest.mark.parametrize("branch", list(BRANCHES))
def test_forced_branch_trains_the_corrected_responses(run_cpu_demo, trainer, branch):
    validate = branch == "regenerate"

    def overrides(out):
        extra = [f"+algorithm.edge_gec.probabilities={BRANCHES[branch]}", f"trainer.rollout_data_dir={out / 'rollouts'}"]
        if validate:
            extra += ["trainer.val_before_train=True", f"trainer.validation_data_dir={out / 'validation'}"]
        return extra

    out, rows = run_cpu_demo(f"gec_{branch}_{trainer}", overrides=overrides, algorithm="edge", trainer=trainer, steps=1)
    metrics = rows[-1]
    dump = _read_dump(out / "rollouts")
    assert len(dump) == 64
    corrected = [row for row in dump if "Wait!" in row["output"] or row["output"].startswith("The digit to copy is")]
    assert metrics["edge_verl/gec/corrected"] == len(corrected) > 0
    assert metrics[f"edge_verl/gec/corrected_{branch}"] == len(corrected)
    assert metrics["edge_verl/gec/responses"] == 64
    for key in EDA_KEYS:
        assert f"edge_verl/edge_eda/{key}" in metrics
    # the demo's EDGE runs EDA in the reference's form: the actor loss reports the entropy term's share
    # (0 when every group ties after the corrections: no advantage, no gradient through either path)
    share = metrics["actor/edge_eda/entropy_grad_share"]
    assert 0.0 <= share < 1.0
    assert (share > 0.0) == (metrics["edge_verl/adv/zero_variance_group_frac"] < 1.0)
    assert metrics["edge_verl/adv/var"] == pytest.approx(metrics["edge_verl/edge_eda/adv_var_after"], rel=1e-5)
    untouched = [row for row in dump if row not in corrected]
    assert all(row["score"] == 1.0 for row in untouched), "only correct responses may stay as sampled"
    trained_tokens = metrics["response_length/mean"] * 64
    injected_tokens = metrics["edge_verl/gec/injected_token_frac"] * trained_tokens

    if branch == "inject_answer":
        for row in corrected:
            assert row["output"].endswith(injected_answer_text(_gt(row))), row["output"]
            assert row["score"] == 1.0
        # injected text (byte-level tokens) + EOS per corrected response
        expected = sum(len(injected_answer_text(_gt(row)).encode()) + 1 for row in corrected)
        assert injected_tokens == pytest.approx(expected, rel=1e-4)
    elif branch == "replace_solution":
        for row in corrected:
            assert row["output"] == task.make_solution(_gt(row)) and row["score"] == 1.0
        expected = sum(len(task.make_solution(_gt(row)).encode()) + 1 for row in corrected)
        assert injected_tokens == pytest.approx(expected, rel=1e-4)
    else:
        for row in corrected:
            assert REFLECTION_PHRASE in row["output"]
        assert injected_tokens == pytest.approx(len(REFLECTION_PHRASE.encode()) * len(corrected), rel=1e-4)
        assert "edge_verl/gec/regenerate_became_correct" in metrics
        validation = _read_dump(out / "validation")
        assert len(validation) == 32 and not any("Wait!" in row["output"] for row in validation)


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
    dump = _read_dump(out / "rollouts")
    assert len(dump) == 64
    for row in dump:  # decoded text: one character per byte token at most (EOS and partial UTF-8 differ)
        sampled, found, continued = row["output"].partition(REFLECTION_PHRASE)
        assert found and 0 < len(sampled) <= first and len(continued) <= budget, row["output"]
