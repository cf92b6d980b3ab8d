"""The grading deadline is enforced from outside the grader, in any calling context."""

import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from edge_verl.reward import compute_score
from edge_verl.reward.pool import get_pool

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


def test_eight_threads_mixing_hostile_and_normal_calls_all_respect_the_deadline():
    get_pool().wait_ready()
    calls = [(HOSTILE, "1")] * 3 + [NEEDS_SYMPY] * 13
    with ThreadPoolExecutor(max_workers=8) as executor:
        outcomes = list(executor.map(lambda call: _timed(*call), calls))
    for (result, seconds), (response, _) in zip(outcomes, calls):
        assert seconds <= TIMEOUT + SLACK, (response, seconds)
        if response == HOSTILE:
            assert result["score"] == 0.0
        else:  # graded, or (only while both workers were held by hostile inputs) cut at the deadline
            assert result["score"] == 1.0 or result["reason"] == "deadline", result
    # the pool has recovered: killed workers were replaced, nothing stays poisoned
    get_pool().wait_ready()
    with ThreadPoolExecutor(max_workers=8) as executor:
        after = list(executor.map(lambda _: compute_score("math", *NEEDS_SYMPY, timeout_s=TIMEOUT), range(16)))
    assert all(result["score"] == 1.0 for result in after), after


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
