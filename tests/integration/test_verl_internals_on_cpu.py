"""Every verl internal the plugin relies on still exists with the parameters it relies on: an upgrade
breaks this test (and ``edge-verl doctor``), not a cluster run."""

from importlib import metadata

import pytest

from edge_verl.integration.cpu import CPU_BACKEND
from edge_verl.integration.internals import CORE, PATCH_MARK, PatchTable, UnlistedPatch, check_internals, find_internal_mismatches

pytestmark = pytest.mark.verl


def verl_from_source() -> bool:
    """verl is an editable install of a source checkout (scripts/setup_verl_main.sh: the by-hand run against
    verl's main branch, docs/verl-versions.md), not a release."""
    direct_url = metadata.distribution("verl").read_text("direct_url.json") or ""
    return '"editable": true' in direct_url.replace("'", '"')


def test_verl_is_the_pinned_release():
    if verl_from_source():
        assert metadata.version("verl").startswith("0.10.")  # upstream/verl/VERL_COMMIT's line
    else:
        assert metadata.version("verl") == "0.9.1"


@pytest.mark.parametrize("table", [CORE, CPU_BACKEND], ids=["core", "cpu_backend"])
def test_every_internal_exists_with_the_parameters_relied_on(table):
    # vLLM's entries are checked by tests/integration/test_vllm_cpu_on_cpu.py (vLLM's CPU build may be absent)
    entries = {module: paths for module, paths in table.entries().items() if not module.startswith("vllm")}
    assert find_internal_mismatches(entries) == []


def test_an_optional_package_that_is_not_installed_is_absent_and_one_that_changed_is_a_problem(tmp_path, monkeypatch):
    # Three modules of a layer: one needs an optional package that is not installed (absent: not checked), one
    # an optional package that is installed but lost a module, and one that package's attribute that is gone
    # (both problems, as for any internal); the same absence outside ``optional`` is a problem too.
    (tmp_path / "adapted_optional").mkdir()
    (tmp_path / "adapted_optional" / "__init__.py").write_text("def kept(x): return x\n")
    (tmp_path / "needs_absent.py").write_text("import absent_optional.core\n")
    (tmp_path / "needs_lost.py").write_text("import adapted_optional.lost\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    table = {
        "needs_absent": {"f": ()},
        "needs_lost": {"f": ()},
        "adapted_optional": {"kept": ("x",), "gone": ()},
    }
    report = check_internals(table, optional=("absent_optional", "adapted_optional"))
    assert report.absent == {"absent_optional": ["needs_absent"]}
    assert report.problems == [
        "needs_lost: cannot be imported (No module named 'adapted_optional.lost')",
        "adapted_optional.gone: missing",
    ]
    assert check_internals(table).problems == [
        "needs_absent: cannot be imported (No module named 'absent_optional')", *report.problems]


def test_an_unlisted_patch_is_refused_and_a_listed_one_recorded():
    import types

    module = types.ModuleType("some_module")
    module.listed = lambda x: x
    module.other = lambda x: x
    table = PatchTable("test layer", patched={"some_module": {"listed": ("x",)}})
    with pytest.raises(UnlistedPatch, match="some_module.other is patched but not listed"):
        table.wrap(module, "other", lambda original: original)
    original = module.listed
    table.wrap(module, "listed", lambda original: lambda x: original(x) + 1)
    table.wrap(module, "listed", lambda original: lambda x: original(x) + 1)  # once: a second call changes nothing
    assert module.listed(1) == 2 and module.listed.__wrapped__ is original
    assert table.applied == {("some_module", "listed")}


def test_a_function_bound_under_two_names_gets_one_adapter_per_binding():
    import types

    verls = lambda x: x  # noqa: E731
    first, second = types.ModuleType("first"), types.ModuleType("second")
    first.f = verls
    table = PatchTable("test layer", patched={"first": {"f": ("x",)}, "second": {"f": ("x",)}})
    table.wrap(first, "f", lambda original: lambda x: ("first", original(x)))
    second.f = first.f  # ``from first import f`` after the first patch
    table.wrap(second, "f", lambda original: lambda x: ("second", original(x)))
    assert first.f(1) == ("first", 1) and second.f(1) == ("second", 1)  # never one inside the other
    assert second.f.__wrapped__ is verls


def test_every_core_patch_is_applied_when_verl_loads_its_modules():
    import importlib

    # A module that binds ppo_loss by name holds the plugin's wrapper already when it was imported after
    # verl.workers.utils.losses; its own entry is applied only when it was imported before the plugin loaded.
    importers = {"verl.workers.engine_workers", "verl.trainer.distillation.losses"}
    for module_name in CORE.patched:
        module = importlib.import_module(module_name)
        if module_name in importers:
            assert hasattr(module.ppo_loss, PATCH_MARK)
    listed = {(module, path) for module, paths in CORE.patched.items() for path in paths if module not in importers}
    assert listed <= CORE.applied <= listed | {(module, "ppo_loss") for module in importers}


def test_a_changed_signature_is_caught_even_behind_the_plugins_wrapper(monkeypatch):
    from verl.trainer.ppo.v1 import trainer_base

    def _compute_advantage(self, batch):  # an upgrade that dropped ``metrics``
        return batch

    monkeypatch.setattr(trainer_base.PPOTrainer, "_compute_advantage", _compute_advantage)
    problems = find_internal_mismatches({"verl.trainer.ppo.v1.trainer_base": CORE.entries()["verl.trainer.ppo.v1.trainer_base"]})
    assert problems == [
        "verl.trainer.ppo.v1.trainer_base.PPOTrainer._compute_advantage(self, batch): "
        "expected leading parameters (self, batch, metrics)"
    ]


def test_a_removed_class_field_and_a_missing_attribute_are_caught(monkeypatch):
    from dataclasses import dataclass

    from verl.trainer.ppo.v1 import trainer_base

    @dataclass
    class KVBatchMeta:  # an upgrade that renamed ``tags``
        keys: list
        labels: list
        partition_id: str

    monkeypatch.setattr(trainer_base, "KVBatchMeta", KVBatchMeta)
    monkeypatch.delattr(trainer_base.tq, "kv_batch_get")
    problems = find_internal_mismatches({"verl.trainer.ppo.v1.trainer_base": CORE.entries()["verl.trainer.ppo.v1.trainer_base"]})
    assert "verl.trainer.ppo.v1.trainer_base.tq.kv_batch_get: missing" in problems
    assert any(line.startswith("verl.trainer.ppo.v1.trainer_base.KVBatchMeta: fields ['tags'] missing") for line in problems)


def test_hooks_are_installed_on_the_verl_modules():
    from verl.experimental.agent_loop import agent_loop
    from verl.trainer.ppo import ray_trainer
    from verl.trainer.ppo.v1 import trainer_base, utils

    assert getattr(ray_trainer.compute_advantage, PATCH_MARK) == ("verl.trainer.ppo.ray_trainer", "compute_advantage")
    assert getattr(utils.compute_advantage, PATCH_MARK) == ("verl.trainer.ppo.v1.utils", "compute_advantage")
    assert utils.compute_advantage.__wrapped__ is ray_trainer.compute_advantage.__wrapped__  # both wrap verl's own
    assert hasattr(trainer_base.PPOTrainer._compute_advantage, PATCH_MARK)
    assert not hasattr(trainer_base.PPOTrainer.fit, PATCH_MARK)  # the v1 adapter needs no current run
    assert hasattr(ray_trainer.RayPPOTrainer._save_checkpoint, PATCH_MARK)
    assert hasattr(agent_loop.AgentLoopManager.generate_sequences, PATCH_MARK)


def test_a_changed_behaviour_behind_unchanged_parameters_is_caught(monkeypatch):
    import torch
    from verl.trainer.ppo import core_algos
    from verl.workers.utils import losses

    def ppo_loss(config, model_output, data, dp_group=None):  # an upgrade: positional call, token count set after it
        config.global_batch_info["dp_size"] = data["dp_size"]
        loss = policy_loss_fn(data["old_log_probs"], model_output["log_probs"], data["advantages"], response_mask=None,
                              loss_agg_mode="token-mean", config=config, rollout_is_weights=None)
        config.global_batch_info["batch_num_tokens"] = data["batch_num_tokens"]
        return loss

    def compute_policy_loss_vanilla(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config, rollout_is_weights):
        negative_approx_kl = log_prob - old_log_prob
        negative_approx_kl = torch.clamp(negative_approx_kl, min=-10.0, max=10.0)  # a new bound the plugin does not copy
        return negative_approx_kl

    policy_loss_fn = None
    monkeypatch.setattr(losses, "ppo_loss", ppo_loss)
    monkeypatch.setattr(core_algos, "compute_policy_loss_vanilla", compute_policy_loss_vanilla)
    monkeypatch.setitem(core_algos.POLICY_LOSS_REGISTRY, "mine", lambda old_log_prob, log_prob, advantages: None)
    entries = CORE.entries()
    problems = find_internal_mismatches({name: entries[name] for name in ("verl.workers.utils.losses", "verl.trainer.ppo.core_algos")})
    expected = [
        "['batch_num_tokens'] not assigned before the call of policy_loss_fn",
        "passes 3 positional and the keywords ['response_mask', 'loss_agg_mode', 'config', 'rollout_is_weights']",
        "'mine' takes ('old_log_prob', 'log_prob', 'advantages')",
        "clamps to [-10.0, 10.0], the plugin's copy is [-20.0, 20.0]",
    ]
    assert len(problems) == len(expected) and all(sum(text in line for line in problems) == 1 for text in expected), problems


def test_the_actor_metric_prefix_is_checked_in_both_trainers_update(monkeypatch):
    from verl.trainer.ppo import ray_trainer

    def _update_actor(self, batch):  # an upgrade that logs the actor's metrics under another prefix
        return rename_dict(batch, "policy/")  # noqa: F821

    monkeypatch.setattr(ray_trainer.RayPPOTrainer, "_update_actor", _update_actor)
    problems = find_internal_mismatches({"verl.trainer.ppo.ray_trainer": CORE.entries()["verl.trainer.ppo.ray_trainer"]})
    assert problems == ["verl.trainer.ppo.ray_trainer.RayPPOTrainer._update_actor: calls rename_dict(..., 'actor/'): no call of rename_dict with 'actor/'"]


def test_what_a_placebo_rewarded_as_gold_relies_on_is_checked(monkeypatch):
    # An upgrade in which the reward loop scores every response, the batch takes the union of the responses'
    # extra-info keys, the naive manager logs a float reward as "score", and a colocated reward model also
    # streams: each would lose the twin's reward or its keys, and each is named.
    from verl.experimental.agent_loop import agent_loop
    from verl.experimental.reward_loop import reward_loop
    from verl.experimental.reward_loop.reward_manager import naive

    async def _compute_score(self, outputs, kwargs):
        final_output = outputs[-1]
        result = await self.reward_loop_worker_handles[0].compute_score.remote(final_output)
        final_output.reward_score = result["reward_score"]

    def _postprocess(self, inputs, input_non_tensor_batch=None, validate=False):
        reward_extra_infos = [input.extra_fields.get("reward_extra_info", {}) for input in inputs]
        return sorted({key for info in reward_extra_infos for key in info})

    async def run_single(self, data):
        reward_extra_info, score = {}, 1.0
        reward_extra_info["score"] = score
        return {"reward_score": score, "reward_extra_info": reward_extra_info}

    monkeypatch.setattr(agent_loop.AgentLoopWorker, "_compute_score", _compute_score)
    monkeypatch.setattr(agent_loop.AgentLoopWorker, "_postprocess", _postprocess)
    monkeypatch.setattr(naive.NaiveRewardManager, "run_single", run_single)
    monkeypatch.setattr(reward_loop.RewardLoopManager, "reward_loop_worker_handles", property(lambda self: self.reward_loop_workers))
    entries = CORE.entries()
    modules = ("verl.experimental.agent_loop.agent_loop", "verl.experimental.reward_loop.reward_manager.naive", "verl.experimental.reward_loop.reward_loop")
    problems = find_internal_mismatches({name: entries[name] for name in modules})
    expected = [
        "AgentLoopWorker._compute_score: calls *.compute_score.remote only if final_output.reward_score is None: calls "
        "*.compute_score.remote outside `if final_output.reward_score is None`",
        "AgentLoopWorker._postprocess: contains `reward_extra_keys = list(reward_extra_infos[0].keys())`: no",
        "NaiveRewardManager.run_single: contains `reward_extra_info['acc'] = score`: no",
        "RewardLoopManager.reward_loop_worker_handles: contains `not self.config.reward.reward_model.enable or",
    ]
    assert all(sum(text in line for line in problems) == 1 for text in expected), problems
    # the mutated naive manager keeps none of the 7 lines relied on; the batch still reads each response's info
    assert sum("NaiveRewardManager.run_single" in line for line in problems) == 7 and len(problems) == 10, problems
