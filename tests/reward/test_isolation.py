"""The grading deadline is enforced from outside the grader, in any calling context."""

import os
import re
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from edge_verl.reward import compute_score
from edge_verl.reward.grade import compare_by_text
from edge_verl.reward.checks import CORRECT_SYMBOLIC, HOSTILE_ANSWERS, run_load
from edge_verl.reward.pool import GraderUnavailable, GradingPool, get_pool

HOSTILE = "\\boxed{9^{9^{9^{9^{9^{9}}}}}}"  # math-verify never returns on this (power tower)
NEEDS_SYMPY = ("\\boxed{\\frac{\\sqrt{2}}{2}}", "\\frac{1}{\\sqrt{2}}")  # decided by math-verify, not by text
TIMEOUT = 2.0
SLACK = 1.0


def _timed(response, gold):
    started = time.monotonic()
    result = compute_score("math", response, gold, timeout_s=TIMEOUT)
    return result, time.monotonic() - started


def test_hostile_input_is_cut_at_the_deadline_and_the_next_call_is_graded():
    get_pool().wait_ready()
    result, seconds = _timed(HOSTILE, "1")
    assert result["reason"] == "deadline" and seconds <= TIMEOUT + SLACK
    result, seconds = _timed(*NEEDS_SYMPY)
    assert result["score"] == 1.0, result


def test_correct_answers_survive_more_hostile_answers_than_workers():
    # 10 hostile answers (more than the pool's cap of 8 processes, 5x its 2 workers) first in line, then 18
    # correct ones that only a grading worker can decide, all at once from 28 threads.
    for answer, gold in CORRECT_SYMBOLIC:
        assert compare_by_text([answer], [gold]).decided is None, (answer, gold)
    get_pool().wait_ready()
    result = run_load(hostile=10, correct=18, timeout_s=TIMEOUT, wait_s=60.0)
    assert result.correct_lost == 0, result.of("correct")
    assert all(call.score == 0.0 and call.grader == "deadline" for call in result.of("hostile")), result.of("hostile")
    assert max(call.seconds for call in result.calls) <= result.bound_s + SLACK
    # the pool has recovered: killed workers were replaced, nothing stays poisoned
    get_pool().wait_ready()
    with ThreadPoolExecutor(max_workers=8) as executor:
        after = list(executor.map(lambda _: compute_score("math", *NEEDS_SYMPY, timeout_s=TIMEOUT), range(16)))
    assert all(result["score"] == 1.0 for result in after), after


def _request(pred, gold):
    comparison = compare_by_text([pred], [gold])
    return {"preds": list(comparison.preds), "golds": list(comparison.golds)}


@pytest.fixture
def one_worker_pool():
    pool = GradingPool(size=1, max_size=1)
    assert pool.wait_ready()
    yield pool
    pool.close()


def _queued_behind_a_hostile_answer(pool, hostile_timeout_s, timeout_s, wait_s):
    """A correct answer submitted 0.2 s after a hostile one took the pool's only worker:
    (the hostile call's outcome, the correct call's reply and outcome, seconds the correct call took)."""
    with ThreadPoolExecutor(max_workers=1) as executor:
        hostile = executor.submit(pool.grade, _request(HOSTILE_ANSWERS[0], "1"), hostile_timeout_s, 30.0)
        time.sleep(0.2)
        started = time.monotonic()
        reply, outcome = pool.grade(_request(*CORRECT_SYMBOLIC[0]), timeout_s, wait_s)
        seconds = time.monotonic() - started
        return hostile.result()[1], reply, outcome, seconds


def test_the_deadline_starts_when_a_worker_takes_the_answer(one_worker_pool):
    # One worker, held by a hostile answer for its 2 s deadline; a correct answer queued behind it with a
    # 0.5 s deadline is still graded: the ~1.8 s it waited are not its grading time.
    hostile, reply, outcome, seconds = _queued_behind_a_hostile_answer(one_worker_pool, 2.0, 0.5, 30.0)
    assert hostile == "deadline"
    assert outcome == "worker" and reply["correct"] is True and seconds >= 1.5, (reply, outcome, seconds)


def test_waiting_for_a_worker_is_bounded_separately_with_its_own_reason(one_worker_pool):
    hostile, reply, outcome, seconds = _queued_behind_a_hostile_answer(one_worker_pool, 3.0, 5.0, 0.5)
    assert hostile == "deadline"
    assert outcome == "waiting" and reply == {} and 0.5 <= seconds <= 0.5 + SLACK


def test_compute_score_reports_waiting_for_a_worker(monkeypatch, one_worker_pool):
    import edge_verl.reward.score as score

    monkeypatch.setattr(score, "get_pool", lambda: one_worker_pool)
    with ThreadPoolExecutor(max_workers=1) as executor:
        executor.submit(compute_score, "m", HOSTILE, "1", timeout_s=2.0)
        time.sleep(0.2)
        result = compute_score("m", *NEEDS_SYMPY, timeout_s=2.0, wait_s=0.3)
    assert result == {"score": 0.0, "acc": False, "pred": "\\frac{\\sqrt{2}}{2}", "reason": "waiting_for_grader", "grader": "waiting"}


def test_a_worker_that_cannot_import_its_dependencies_fails_loudly_after_bounded_retries(tmp_path):
    broken = tmp_path / "math_verify"
    broken.mkdir()
    (broken / "__init__.py").write_text("raise ImportError('simulated: math_verify is broken in this environment')\n")
    started = time.monotonic()
    pool = GradingPool(size=2, startup_attempts=3, env={"PYTHONPATH": str(tmp_path)})
    try:
        with pytest.raises(GraderUnavailable) as raised:
            pool.grade(_request(*CORRECT_SYMBOLIC[0]), 5.0, 60.0)
        assert time.monotonic() - started < 30.0
        message = str(raised.value)
        assert "simulated: math_verify is broken" in message and "ImportError" in message
        # 3 attempts in a row; the 2 workers start concurrently, so one more may fail alongside the third
        assert re.search(r"failed to start [34] times in a row", message) and 3 <= pool.counters.start_failures <= 4
        started_before = pool.counters.started
        time.sleep(1.5)
        assert pool.counters.started == started_before <= 4  # no endless respawning
        with pytest.raises(GraderUnavailable):  # every later call says so at once
            pool.grade(_request(*CORRECT_SYMBOLIC[0]), 5.0, 60.0)
        with pytest.raises(GraderUnavailable):
            pool.wait_ready(5.0)
    finally:
        pool.close()


def test_pool_options_are_validated():
    with pytest.raises(ValueError, match="max_size"):
        GradingPool(size=3, max_size=2)
    with pytest.raises(ValueError, match="startup_attempts"):
        GradingPool(size=1, startup_attempts=0)


def test_no_alarm_is_touched_in_the_callers_thread():
    fired = []
    previous = signal.signal(signal.SIGALRM, lambda *_: fired.append(True))
    try:
        signal.alarm(30)
        compute_score("math", HOSTILE, "1", timeout_s=1.0)
        compute_score("math", *NEEDS_SYMPY)
        remaining = signal.alarm(0)
        assert 0 < remaining <= 30 and not fired
    finally:
        signal.signal(signal.SIGALRM, previous)


def test_a_worker_killed_from_outside_is_replaced_without_failing_calls():
    pool = get_pool()
    pool.wait_ready()
    for pid in pool.worker_pids():
        os.kill(pid, signal.SIGKILL)
    time.sleep(0.2)
    result = compute_score("math", *NEEDS_SYMPY, timeout_s=10.0)
    assert result["score"] == 1.0, result


def test_calls_from_an_asyncio_executor_thread_like_verls_reward_loop():
    import asyncio

    async def grade_in_executor():
        loop = asyncio.get_running_loop()
        return await asyncio.gather(
            loop.run_in_executor(None, lambda: _timed(HOSTILE, "1")),
            loop.run_in_executor(None, lambda: _timed(*NEEDS_SYMPY)),
        )

    (hostile, hostile_s), (normal, normal_s) = asyncio.run(grade_in_executor())
    assert hostile["score"] == 0.0 and hostile_s <= TIMEOUT + SLACK
    assert normal_s <= TIMEOUT + SLACK


def test_worker_imports_only_what_grading_needs():
    code = (
        "import sys, edge_verl.reward.worker, edge_verl.reward.grade, math_verify, sympy; "
        "heavy = [m for m in ('torch', 'verl', 'ray', 'numpy.random', 'transformers') if m in sys.modules]; "
        "print(heavy)"
    )
    output = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert output.strip() == "[]"


def test_threads_share_one_pool():
    pools = []
    threads = [threading.Thread(target=lambda: pools.append(id(get_pool()))) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(pools)) == 1
