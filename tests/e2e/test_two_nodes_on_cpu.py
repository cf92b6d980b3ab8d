"""The plugin across two Ray nodes (``two_nodes.py``: two network namespaces on this machine, one address each):
verl's v1 trainer with ``trainer.nnodes=2``, one CPU worker per node, its FSDP group, agent-loop and reward workers
on both nodes, and the driver in the head's namespace, as ``edge-verl demo --ray-address`` runs it.

- EDGE (EDA's gradient form + GEC, its three branches reached) 3 steps on two nodes is the same run as on one node
  of two workers: every metric but timing, every sampled response, the final weights.
- GEPO on two nodes loses node B after step 2's checkpoint: the run ends in bounded time, naming the node; with
  node B back, the same command resumed gives the run of GEPO trained uninterrupted (on one node of two workers), its
  thresholds' EMA continuing from the checkpoint's state.
- The one-node runs of EDGE and GEPO train two at a time on one cluster (the study's way), so each pair also shows
  a run unchanged by another job beside it (tests/e2e/test_study_on_cpu.py trains GRPO and GEPO twice).
- Node B's raylet starts with none of the plugin's settings: the driver's (``EDGE_VERL_CPU``, a non-default
  ``EDGE_VERL_REWARD_TIMEOUT``) reach its workers through the job's runtime env and are in effect there.
- Node B started from a Python without the plugin: the run is refused before its TaskRunner starts, naming the node.
"""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
import subprocess
import sys
import time
from pathlib import Path

import pytest

from edge_verl_lab.demo.run import DemoConfig, build_warm_model, model_recipe, run_environment
from edge_verl_lab.same_run import final_weights, read_rows, run_differences
from tests.e2e import two_nodes

pytestmark = [pytest.mark.multinode, pytest.mark.skipif(two_nodes.skip_reason() is not None, reason=str(two_nodes.skip_reason()))]

STEPS = 3
HEAD, WORKER = two_nodes.ADDRESSES
# A non-default plugin setting on the driver only (the reward pool's grading timeout; default 5 s).
SETTING, SETTING_VALUE = "EDGE_VERL_REWARD_TIMEOUT", "7"
# A lost node must end the run within this (Ray's health check marks it dead in ~15-30 s, the driver's watch then
# gives verl NODE_LOSS_GRACE_S = 30 s to fail by itself).
LOST_NODE_BOUND_S = 150
# Every process of a node talks gloo over the namespaces' link.
GLOO = {"GLOO_SOCKET_IFNAME": two_nodes.INTERFACE}


def _config(root: Path, method: str, name: str, **options) -> DemoConfig:
    out = root / name
    return DemoConfig(algorithm=method, steps=STEPS, out=out, model_dir=root / "model", save_final_weights=True,
                      extra_overrides=[f"trainer.rollout_data_dir={out / 'rollouts'}"], **options)


def _driver(config: DemoConfig, node: two_nodes.Node) -> list[str]:
    """``config``'s demo run, its driver in ``node``'s namespace (as a user runs it on the head node). Run it outside
    the checkout: Ray puts the driver's working directory on every worker's sys.path, and the checkout's
    edge_verl.egg-info there would give a node without the plugin its entry point (docs/multinode.md)."""
    fields = {name: (str(value) if isinstance(value, Path) else value) for name, value in vars(config).items()}
    code = ("import json, sys; from edge_verl_lab.demo.run import DemoConfig, run_demo; "
            "sys.exit(run_demo(DemoConfig(**json.loads(sys.argv[1])))['returncode'])")
    return node.command([sys.executable, "-c", code, json.dumps(fields)])


def _environment() -> dict[str, str]:
    return {**os.environ, **GLOO, SETTING: SETTING_VALUE}


def _train(config: DemoConfig, node: two_nodes.Node) -> Path:
    result = subprocess.run(_driver(config, node), env=_environment(), cwd=config.out.parent, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, (config.out / "verl.log").read_text()[-6000:]
    return config.out


def _log_record(run: Path, prefix: str) -> dict:
    """The JSON of the log line ``edge-verl <prefix>: {...}`` (integration/cluster.py)."""
    lines = [line for line in (run / "verl.log").read_text().splitlines() if line.startswith(f"edge-verl {prefix}: ")]
    assert lines, f"no 'edge-verl {prefix}' line in {run / 'verl.log'}"
    return json.loads(lines[-1].split(": ", 1)[1])


def _cluster(worker_python: str = sys.executable, gpus_per_node: int = 1, nodes: int = 2) -> two_nodes.TwoNodeCluster:
    head_env = {**run_environment("hf"), **GLOO}
    # node B: the CPU environment without any of the plugin's settings (EDGE_VERL_*): they must come from the driver
    worker_env = {name: value for name, value in head_env.items() if not name.startswith("EDGE_VERL_")}
    return two_nodes.TwoNodeCluster("edgevn", head_env, worker_env, worker_python, gpus_per_node, nodes)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """({name: run folder}, notes): "edge_two" and "gepo_two" (two nodes; GEPO lost node B after step 2 and was
    resumed), "edge_one" and "gepo_one" (one node, two workers each, trained two at a time); the notes: the
    interrupted attempt's exit code, seconds from the loss to its end, log and rows."""
    root = tmp_path_factory.mktemp("two_nodes")
    config = _config(root, "grpo", "unused")
    build_warm_model(model_recipe(config), config.model_dir)
    folders, notes = {}, {}
    with _cluster() as cluster:
        two = {"ray_address": cluster.address, "nnodes": 2}
        folders["edge_two"] = _train(_config(root, "edge", "edge_two", **two), cluster.head)
        gepo = _config(root, "gepo", "gepo_two", save_freq=1, **two)
        process = subprocess.Popen(_driver(gepo, cluster.head), env=_environment(), cwd=root, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
        # after step 2's checkpoint and its metrics row (verl saves a step before it logs it: a node lost in between
        # takes the TaskRunner's unlogged row with it, and the resumed run starts after that step)
        marker, logged = gepo.out / "checkpoints" / "latest_checkpointed_iteration.txt", gepo.out / "verl_metrics.jsonl"
        while not (marker.exists() and marker.read_text().strip() == "2" and logged.exists() and '{"step":2,' in logged.read_text()):
            assert process.poll() is None, (gepo.out / "verl.log").read_text()[-6000:]
            time.sleep(0.5)
        cluster.worker.kill()
        lost = time.monotonic()
        notes["returncode"] = process.wait(timeout=600)
        notes["seconds"] = time.monotonic() - lost
        notes["log"] = (gepo.out / "verl.log").read_text()
        notes["rows_before"] = read_rows(gepo.out / "metrics.jsonl")
        cluster.worker.start_ray(cluster.address)
        folders["gepo_two"] = _train(_config(root, "gepo", "gepo_two", save_freq=1, resume=True, **two), cluster.head)
    with _cluster(gpus_per_node=4, nodes=1) as cluster, ThreadPoolExecutor(max_workers=2) as pool:
        one = {"ray_address": cluster.address, "workers_per_node": 2}
        pair = [_config(root, "edge", "edge_one", **one), _config(root, "gepo", "gepo_one", save_freq=1, **one)]
        folders.update(zip(("edge_one", "gepo_one"), pool.map(lambda config: _train(config, cluster.head), pair)))
    return folders, notes


def test_edge_on_two_nodes_has_workers_on_both_and_is_the_run_of_one_node(runs):
    folders, _ = runs
    placement = _log_record(folders["edge_two"], "placement")
    for role in ("WorkerDict", "AgentLoopWorkerTQ", "RewardLoopWorker"):
        assert sorted(address for name, addresses in placement.items() if name.endswith(role) for address in addresses) == [HEAD, WORKER], placement
    assert set(_log_record(folders["edge_one"], "placement")["create_colocated_worker_cls.<locals>.WorkerDict"]) == {HEAD}
    assert len(read_rows(folders["edge_two"] / "metrics.jsonl")) == STEPS and final_weights(folders["edge_two"]) is not None
    rows = read_rows(folders["edge_two"] / "metrics.jsonl")
    for branch in ("regenerate", "inject_answer", "replace_solution"):  # GEC at work, each of its branches
        assert sum(row[f"edge_verl/gec/corrected_{branch}"] for row in rows) > 0, branch
    assert run_differences(folders["edge_two"], folders["edge_one"]) == []


def test_the_drivers_settings_reach_node_b_and_are_in_effect_there(runs):
    folders, _ = runs
    nodes = _log_record(folders["edge_two"], "nodes")
    assert sorted(nodes) == [HEAD, WORKER]
    for address in (HEAD, WORKER):
        assert nodes[address]["settings"][SETTING] == SETTING_VALUE
        assert nodes[address]["in_effect"]["reward_timeout_s"] == float(SETTING_VALUE)
        assert nodes[address]["in_effect"]["cpu_backend"] is True  # EDGE_VERL_CPU=1, the driver's too


def test_a_lost_node_ends_the_run_in_bounded_time_naming_it(runs):
    _, notes = runs
    assert notes["returncode"] != 0
    assert notes["seconds"] < LOST_NODE_BOUND_S, notes["seconds"]
    assert f"node {WORKER} was lost during the run" in notes["log"]
    assert [row["step"] for row in notes["rows_before"]][:2] == [1, 2]  # what the lost attempt logged is kept


def test_the_resumed_run_after_a_lost_node_is_the_uninterrupted_run(runs):
    folders, _ = runs
    rows = read_rows(folders["gepo_two"] / "metrics.jsonl")
    assert [row["step"] for row in rows] == list(range(1, STEPS + 1))
    assert run_differences(folders["gepo_two"], folders["gepo_one"]) == []
    # GEPO's thresholds came back from step 2's checkpoint: step 3's EMA continues from the saved state,
    # H_3 = (1 - 0.01) * H_2 + 0.01 * candidate_3 (GEPO's default rate), its third update
    saved = json.loads((folders["gepo_two"] / "checkpoints" / "global_step_2" / "edge_verl_state.json").read_text())["gepo_thresholds"]
    assert saved["num_updates"] == 2 and saved["h_low"] == pytest.approx(rows[1]["edge_verl/gepo/h_low"], rel=1e-12)
    step3 = rows[2]
    for bound in ("low", "high"):
        expected = 0.99 * saved[f"h_{bound}"] + 0.01 * step3[f"edge_verl/gepo/candidate_h_{bound}"]
        assert step3[f"edge_verl/gepo/h_{bound}"] == pytest.approx(expected, rel=1e-9), bound
    assert step3["edge_verl/gepo/ema_updates"] == 3


def test_a_node_without_the_plugin_is_refused_at_start_naming_it(tmp_path):
    python = two_nodes.python_without_plugin(tmp_path / "python_without_plugin")
    with _cluster(worker_python=python) as cluster:
        config = _config(tmp_path, "gepo", "refused", nnodes=2, ray_address=cluster.address)
        build_warm_model(model_recipe(config), config.model_dir)
        result = subprocess.run(_driver(config, cluster.head), env=_environment(), cwd=tmp_path, capture_output=True, text=True,
                                timeout=600)
    log = (config.out / "verl.log").read_text()
    assert result.returncode != 0
    assert "edge-verl cluster: 1 of 2 node(s) cannot run this run" in log
    refusal = next(line for line in log.splitlines() if line.strip().startswith(f"node {WORKER}"))
    assert "verl runs there without the plugin" in refusal and python in refusal and "pip install" in refusal
    assert "Training Progress" not in log and "TaskRunner" not in log  # refused before the TaskRunner started
