"""compute_score inside Ray: an async actor's executor threads (how verl's reward loop calls it) and a task."""

import asyncio
import time

import pytest
import ray

pytestmark = pytest.mark.verl

HOSTILE = "\\boxed{9^{9^{9^{9^{9^{9}}}}}}"
NEEDS_SYMPY = ("\\boxed{\\frac{\\sqrt{2}}{2}}", "\\frac{1}{\\sqrt{2}}")


@pytest.fixture(scope="module")
def ray_session():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@ray.remote
class AsyncGrader:
    async def grade(self, response, gold, timeout_s):
        from edge_verl.reward import compute_score

        loop = asyncio.get_running_loop()
        started = time.monotonic()
        result = await loop.run_in_executor(None, lambda: compute_score("m", response, gold, timeout_s=timeout_s))
        return result, time.monotonic() - started


@ray.remote
def grade_task(response, gold, timeout_s, wait_s):
    from edge_verl.reward import compute_score

    started = time.monotonic()
    return compute_score("m", response, gold, timeout_s=timeout_s, wait_s=wait_s), time.monotonic() - started


def test_deadline_holds_in_an_async_ray_actor(ray_session):
    actor = AsyncGrader.remote()
    ray.get(actor.grade.remote(*NEEDS_SYMPY, 30.0))  # warm the actor's pool
    hostile, normal = ray.get([actor.grade.remote(HOSTILE, "1", 2.0), actor.grade.remote(*NEEDS_SYMPY, 2.0)])
    assert hostile[0]["reason"] == "deadline" and hostile[1] <= 3.0
    assert normal[1] <= 3.0
    after, _ = ray.get(actor.grade.remote(*NEEDS_SYMPY, 5.0))
    assert after["score"] == 1.0


def test_deadline_holds_in_a_ray_task(ray_session):
    # a fresh process: the call first waits for its pool to warm up (bounded by wait_s), then the deadline
    result, seconds = ray.get(grade_task.remote(HOSTILE, "1", 2.0, 20.0))
    assert result["score"] == 0.0 and result["grader"] == "deadline" and seconds <= 20.0 + 2.0 + 1.0
