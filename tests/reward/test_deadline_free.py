"""A number answered against a number is decided in the caller, by text: no grading worker, so no deadline, can
change its reward. This is what makes a run on numeric golds (the demo's and the study's tasks, most of MATH)
independent of how loaded the machine is (docs/reproducibility.md)."""

from hypothesis import given, settings
from hypothesis import strategies as st

from edge_verl.reward.score import compute_score

integers = st.integers(min_value=-10**12, max_value=10**12)
decimals = st.decimals(min_value=-10**6, max_value=10**6, places=3, allow_nan=False, allow_infinity=False)


@settings(max_examples=300, deadline=None)
@given(answer=st.one_of(integers.map(str), decimals.map(str)), gold=st.one_of(integers.map(str), integers))
def test_a_number_against_a_numeric_gold_never_reaches_a_grading_worker(answer, gold):
    result = compute_score("t", f"so \\boxed{{{answer}}}", gold, timeout_s=1e-9, wait_s=1e-9)
    assert result["grader"] == "caller", result
    assert result["score"] == float(float(answer) == float(gold))


def test_a_digit_answer_is_graded_the_same_with_a_deadline_no_worker_could_meet():
    # timeout_s and wait_s of a nanosecond: any answer a worker had to grade would come back as a deadline or wait
    for answer, gold, score in (("7", "7", 1.0), ("8", "7", 0.0), ("07", "7", 1.0), ("-3", "3", 0.0), ("7.0", 7, 1.0)):
        result = compute_score("t", f"\\boxed{{{answer}}}", gold, timeout_s=1e-9, wait_s=1e-9)
        assert (result["score"], result["grader"]) == (score, "caller")
