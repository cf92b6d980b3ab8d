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
