"""GEC inside verl's rollout (the plugin's HF rollout), each branch forced in turn (1 training step each);
what each run must show is in tests/e2e/gec_checks.py (the vLLM rollout's runs check the same)."""

import pytest

from edge_verl.algorithms.gec import REFLECTION_PHRASE

from tests.e2e.gec_checks import BRANCHES, check_forced_branch_run, forced_branch_overrides, read_dump


# Every branch on the v1 trainer; on the legacy trainer the branch that calls the rollout server again (what
# differs there is the trainer side, sample numbering and metrics, which any branch exercises).
RUNS = [*((branch, "v1") for branch in BRANCHES), ("regenerate", "legacy")]


@pytest.mark.parametrize("branch, trainer", RUNS)
def test_forced_branch_trains_the_corrected_responses(run_cpu_demo, trainer, branch):
    validate = branch == "regenerate"
    out, rows = run_cpu_demo(
        f"gec_{branch}_{trainer}", overrides=forced_branch_overrides(branch, validate), algorithm="edge", trainer=trainer, steps=1
    )
    check_forced_branch_run(out, rows[-1], branch, validate)


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
