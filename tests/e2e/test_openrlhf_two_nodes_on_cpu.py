"""OpenRLHF's launcher on two Ray nodes (tests/e2e/two_nodes.py: network namespaces on this machine), one training
step: its start-up check finds edge_verl on both nodes, and the launcher's EDGE_VERL_* settings in effect on node B,
whose raylet started without any (the inputs, launcher and environment of test_openrlhf_train_ppo_ray_on_cpu.py).
Its own file: the scheduler runs the two-node tests as one unit beside the e2e chain (tests/conftest.py)."""

from __future__ import annotations

import json

import pytest

from tests.e2e import two_nodes
from tests.e2e.test_openrlhf_train_ppo_ray_on_cpu import REAL, VENV_PYTHON, build_inputs, cpu_environment, train


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    return build_inputs(tmp_path_factory.mktemp("openrlhf_inputs"), max_positions=2048)


@pytest.mark.multinode
@pytest.mark.skipif(two_nodes.skip_reason() is not None, reason=str(two_nodes.skip_reason()))
@pytest.mark.parametrize("parts", [REAL])
def test_the_launcher_checks_every_node_of_a_two_node_cluster_and_its_settings_reach_them(inputs, tmp_path, parts):
    # two Ray nodes of OpenRLHF's environment (tests/e2e/two_nodes.py), node B's raylet without any of the plugin's
    # settings; the launcher on the head with a non-default one (the reward's grading timeout, default 5 s)
    head_env = {**cpu_environment(), "GLOO_SOCKET_IFNAME": two_nodes.INTERFACE}
    worker_env = {name: value for name, value in head_env.items() if not name.startswith("EDGE_VERL_")}
    cluster = two_nodes.TwoNodeCluster("edgevo", head_env, worker_env, str(VENV_PYTHON), gpus_per_node=2, python=str(VENV_PYTHON))
    with cluster:
        run = train(inputs, tmp_path / "two_nodes", "gepo", 1, {"gepo": {}}, node=cluster.head,
                    env={"RAY_ADDRESS": cluster.address, "EDGE_VERL_REWARD_TIMEOUT": "7", "GLOO_SOCKET_IFNAME": two_nodes.INTERFACE})
    assert sorted(run["metrics"]) == [1] and "gepo/h_low" in run["metrics"][1]
    nodes = json.loads(next(line for line in run["log"].splitlines() if line.startswith("edge-verl nodes: ")).split(": ", 1)[1])
    assert sorted(nodes) == list(two_nodes.ADDRESSES)
    for report in nodes.values():  # the launcher's edge_verl on both nodes, and its settings in effect there
        assert "problem" not in report and {"gepo", "edge_eda"} <= set(report["estimators"])
        assert report["settings"]["EDGE_VERL_REWARD_TIMEOUT"] == "7" and report["in_effect"]["reward_timeout_s"] == 7.0
        assert report["settings"]["EDGE_VERL_OPENRLHF_CPU"] == "1" and report["settings"]["EDGE_VERL_OPENRLHF_OPTIONS"]
    assert "edge-verl placement: " in run["log"]
