"""edge_verl/nodes.py, installation.py and integration/cluster.py in-process: which settings travel, what a node's
probe reports, which nodes are refused and why, the lost-node watch. The real two-node runs:
tests/e2e/test_two_nodes_on_cpu.py (verl) and tests/e2e/test_openrlhf_train_ppo_ray_on_cpu.py (OpenRLHF)."""

from __future__ import annotations

import json
import os
import threading

import pytest
from omegaconf import OmegaConf

from edge_verl import nodes
from edge_verl.installation import code_digest, installation_report
from edge_verl.integration import cluster

REFERENCE = {"version": "0.1.0", "digest": "abc", "estimators": ["edge_eda", "gepo"], "hooks": ["verl.utils.config"]}
SETTINGS = {"EDGE_VERL_CPU": "1", "EDGE_VERL_REWARD_TIMEOUT": "7"}


def _report(**changes):
    return {"hostname": "b", "python": "/env/bin/python", "settings": dict(SETTINGS), **REFERENCE, **changes}


def test_only_the_plugins_variables_travel():
    environ = {"EDGE_VERL_CPU": "1", "EDGE_VERL_REWARD_TIMEOUT": "7", "PATH": "/bin", "VERL_PLATFORM": "cpu", "EDGE_VERLX": "no"}
    assert nodes.travelling_settings(environ) == SETTINGS


def test_the_drivers_settings_join_verls_runtime_env_and_a_value_set_there_wins(monkeypatch):
    monkeypatch.setenv("EDGE_VERL_REWARD_TIMEOUT", "7")
    monkeypatch.setenv("EDGE_VERL_FEATURE_MODULES", "mine")
    wrapped = cluster.runtime_env_with_settings(lambda config=None: {"env_vars": {"TOKENIZERS_PARALLELISM": "true", "EDGE_VERL_FEATURE_MODULES": "set"}})
    env_vars = wrapped()["env_vars"]
    assert env_vars["EDGE_VERL_REWARD_TIMEOUT"] == "7" and env_vars["TOKENIZERS_PARALLELISM"] == "true"
    assert env_vars["EDGE_VERL_FEATURE_MODULES"] == "set"
    assert cluster.runtime_env_with_settings(lambda config=None: {})()["env_vars"]["EDGE_VERL_REWARD_TIMEOUT"] == "7"


def test_nodes_that_run_the_drivers_plugin_with_the_jobs_settings_pass():
    assert nodes.node_problems(REFERENCE, SETTINGS, {"10.0.0.1": _report(), "10.0.0.2": _report()}) == []


@pytest.mark.parametrize(
    ("report", "expected"),
    [
        ({"problem": "verl runs there without the plugin: edge_verl is not installed"}, "verl runs there without the plugin"),
        ({"version": "0.0.9"}, "version '0.0.9' (driver: '0.1.0')"),
        ({"digest": "def"}, "digest 'def' (driver: 'abc')"),  # same version, other code: a checkout out of sync
        ({"estimators": ["gepo"]}, "estimators ['gepo']"),
        ({"hooks": []}, "hooks []"),
        ({"settings": {**SETTINGS, "EDGE_VERL_REWARD_WAIT": "1"}}, "EDGE_VERL_REWARD_WAIT='1' (the job's: None)"),
        ({"settings": {"EDGE_VERL_CPU": "1"}}, "EDGE_VERL_REWARD_TIMEOUT=None (the job's: '7')"),
    ],
    ids=["no-plugin", "version", "code", "estimators", "hooks", "setting-on-node-only", "setting-missing"],
)
def test_a_node_is_refused_naming_its_address_python_and_what_differs(report, expected):
    problems = nodes.node_problems(REFERENCE, SETTINGS, {"10.0.0.1": _report(), "10.0.0.2": _report(**report)})
    assert len(problems) == 1
    assert problems[0].startswith("node 10.0.0.2 (b, /env/bin/python): ") and expected in problems[0]
    if "settings" not in report:
        assert "pip install --no-deps edge-verl==0.1.0" in problems[0]


def test_the_probe_reports_this_process_plugin_as_the_driver_sees_it():
    report = nodes.node_probe("verl")()  # the closure Ray ships to each node, run here
    assert "problem" not in report
    assert {key: report[key] for key in nodes.COMPARED} == {key: installation_report()[key] for key in nodes.COMPARED}
    assert {"edge_eda", "gepo"} <= set(report["estimators"]) and "verl.utils.config" in report["hooks"]
    assert report["settings"] == nodes.travelling_settings()
    openrlhf = nodes.node_probe("openrlhf")()  # OpenRLHF's side: no verl, the plugin's own registry
    assert "problem" not in openrlhf and openrlhf["hooks"] == [] and {"edge_eda", "gepo"} <= set(openrlhf["estimators"])


def test_the_code_digest_follows_every_code_file(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "sub" / "c.yaml").write_text("k: v\n")
    (tmp_path / "notes.txt").write_text("not code")
    first = code_digest(tmp_path)
    (tmp_path / "notes.txt").write_text("still not code")
    assert code_digest(tmp_path) == first
    (tmp_path / "sub" / "c.yaml").write_text("k: w\n")
    assert code_digest(tmp_path) != first


class _Nodes:
    """``ray`` as NodeWatch reads it: two nodes, the second lost once ``lose`` is set."""

    def __init__(self):
        self.lose = threading.Event()

    def nodes(self):
        return [{"NodeID": "a", "NodeManagerAddress": "10.0.0.1", "Alive": True, "Resources": {"CPU": 1}},
                {"NodeID": "b", "NodeManagerAddress": "10.0.0.2", "Alive": not self.lose.is_set(), "Resources": {"CPU": 1}}]


def test_a_lost_node_ends_the_driver_after_the_grace_naming_the_node(monkeypatch):
    monkeypatch.setattr(nodes, "print_placement", lambda ray_module: None)
    ended = threading.Event()
    codes = []
    fake = _Nodes()
    watch = nodes.NodeWatch(fake, poll_s=0.01, grace_s=0.05, end=lambda code: (codes.append(code), ended.set()))
    assert not ended.wait(0.1) and watch.lost is None  # both alive: nothing happens
    fake.lose.set()
    assert ended.wait(5)
    assert codes == [nodes.EXIT_CODE]
    assert "node 10.0.0.2 was lost during the run" in watch.lost and "trainer.resume_mode=auto" in watch.lost


def test_a_run_that_ends_within_the_grace_is_not_ended_by_the_watch():
    codes = []
    fake = _Nodes()
    watch = nodes.NodeWatch(fake, poll_s=0.01, grace_s=5, end=codes.append)
    fake.lose.set()
    for _ in range(500):
        if watch.lost:
            break
        threading.Event().wait(0.01)
    watch.stop()  # verl failed by itself within the grace: the driver exits its own way
    threading.Event().wait(0.1)
    assert watch.lost and codes == []


def test_only_a_run_that_uses_the_plugin_is_checked_after_ray_init():
    hooks = cluster.post_init_hooks()
    saved = list(hooks)
    # a run this process started before (a test of the e2e tier beside it on one xdist worker) armed it already
    hooks[:] = [hook for hook in saved if hook is not cluster._after_ray_init]
    before = list(hooks)
    try:
        cluster.arm(OmegaConf.create({"algorithm": {"adv_estimator": "grpo"}}))
        assert hooks == before
        cluster.arm(OmegaConf.create({"algorithm": {"adv_estimator": "gepo"}}))
        cluster.arm(OmegaConf.create({"algorithm": {"adv_estimator": "gepo"}}))
        assert hooks == [*before, cluster._after_ray_init]
    finally:
        hooks[:] = saved


def test_a_submitted_jobs_own_settings_are_not_passed_again(monkeypatch):
    # `ray job submit --runtime-env-json` gives the driver its settings and every worker of the job too; Ray refuses
    # a ray.init runtime env that sets one of them again ("Failed to merge the Job's runtime env")
    job = json.dumps({"runtime_env": {"env_vars": {"EDGE_VERL_REWARD_WAIT": "9"}}})
    environ = {"EDGE_VERL_REWARD_TIMEOUT": "7", "EDGE_VERL_REWARD_WAIT": "9", nodes.JOB_CONFIG_VARIABLE: job}
    assert nodes.settings_to_pass(environ) == {"EDGE_VERL_REWARD_TIMEOUT": "7"}
    assert nodes.settings_to_pass({"EDGE_VERL_REWARD_WAIT": "9"}) == {"EDGE_VERL_REWARD_WAIT": "9"}
    monkeypatch.setattr(os, "environ", environ)
    assert cluster.runtime_env_with_settings(lambda config=None: {})()["env_vars"] == {"EDGE_VERL_REWARD_TIMEOUT": "7"}


def test_a_node_lost_between_two_polls_is_named_by_the_drivers_last_look_at_exit():
    # verl's driver may fail before the watch's next poll (its TaskRunner ran on the lost node): the exit's look
    # (check_now) names the node; with every node alive it says nothing
    fake = _Nodes()
    watch = nodes.NodeWatch(fake, poll_s=3600, grace_s=5, end=lambda code: None)
    assert watch.check_now() is None
    fake.lose.set()
    assert "node 10.0.0.2 was lost during the run" in watch.check_now()
    watch.stop()


def test_a_node_whose_raylet_takes_no_connection_is_named_at_exit_before_ray_reports_it_dead():
    # killed moments ago: Ray still reports it alive, but its raylet's port takes no connection
    import socket

    with socket.socket() as listening, socket.socket() as closed:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        closed.bind(("127.0.0.1", 0))  # bound, never listening: a connection is refused
        ports = {"a": listening.getsockname()[1], "b": closed.getsockname()[1]}

        class Raylets(_Nodes):
            def nodes(self):
                return [{**node, "NodeManagerAddress": "127.0.0.1", "NodeManagerPort": ports[node["NodeID"]]} for node in super().nodes()]

        watch = nodes.NodeWatch(Raylets(), poll_s=3600, grace_s=5, end=lambda code: None)
        lost = watch.check_now()
        watch.stop()
    assert lost is not None and "node 127.0.0.1 was lost" in lost and "does not answer" in lost
