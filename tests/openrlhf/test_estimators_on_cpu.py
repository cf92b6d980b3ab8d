"""gepo and edge_eda through OpenRLHF 0.11.2's own RemoteExperienceMaker.compute_advantages_and_returns (in the
subclass the launcher's trainer creates, edge_verl/openrlhf/actors.py), equal to edge_verl/algorithms on random batches; EDA's entropy from OpenRLHF's
real Actor.forward through its actor group's execute_batch; GEPO's thresholds through its checkpoint path."""

from __future__ import annotations

import json
import math
import shutil
import sys
from types import SimpleNamespace
from unittest.mock import MagicMock

import pytest
import torch
from transformers.modeling_outputs import CausalLMOutputWithPast

from edge_verl.estimators.edge_eda import compute_eda_advantages
from edge_verl.estimators.gepo import GepoThresholds, compute_gepo_advantages
from edge_verl.estimators.base import ESTIMATORS
from edge_verl.openrlhf import actors, estimators
from edge_verl.openrlhf.internals import PINNED_VERSION, check_version, find_mismatches
from edge_verl.openrlhf.options import ENV_VAR, OpenRlhfOptions
from edge_verl.openrlhf.train_ppo_ray import check_args
from tests.openrlhf.conftest import OPENRLHF_DIR, OPENRLHF_ROOT, load_launcher, use_package_folder

N = 4
VOCAB = 11


def run_args(estimator, n=N, clip_range=(-10.0, 10.0), init_coef=0.0, use_loss=False, prompts=2):
    return SimpleNamespace(
        rollout=SimpleNamespace(n_samples_per_prompt=n, temperature=0.6, batch_size=prompts),
        reward=SimpleNamespace(clip_range=clip_range, overlong_buffer_len=None, stop_properly_penalty_coef=None),
        algo=SimpleNamespace(
            advantage=SimpleNamespace(estimator=estimator, gamma=1.0, is_correction_level="off"),
            kl=SimpleNamespace(init_coef=init_coef, use_loss=use_loss),
        ),
        ds=SimpleNamespace(ring_attn_size=1, tensor_parallel_size=1),
        train=SimpleNamespace(agent_func_path=None),
        eval=SimpleNamespace(dataset=None, temperature=0.6),
        logger=SimpleNamespace(logging_steps=1),
        ckpt=SimpleNamespace(save_steps=1),
    )


class TableLM(torch.nn.Module):
    """Logits are a fixed per-token table (as in OpenRLHF's own entropy test)."""

    def __init__(self):
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(VOCAB, VOCAB, generator=torch.Generator().manual_seed(0)))

    def forward(self, input_ids, attention_mask=None, position_ids=None, **_):
        return CausalLMOutputWithPast(logits=self.table[input_ids])


@pytest.fixture
def orl(openrlhf_modules, monkeypatch, tmp_path):
    """The experience maker module, the launcher (with its actor group), and a maker factory (edge_verl's
    subclass for gepo / edge_eda, OpenRLHF's class otherwise)."""
    launcher = load_launcher(openrlhf_modules)
    maker_module = openrlhf_modules("openrlhf.trainer.ppo_utils.experience_maker")
    maker_cls = actors.experience_maker_class(maker_module.RemoteExperienceMaker)
    worker_cls = actors.subclass(launcher.BaseModelActor, actors.EdgePolicyActor)
    experience_cls = openrlhf_modules("openrlhf.trainer.ppo_utils.experience").Experience

    def options(values):
        path = tmp_path / f"options{len(list(tmp_path.iterdir()))}.json"
        path.write_text(json.dumps(values))
        monkeypatch.setenv(ENV_VAR, str(path))

    def make(estimator, temperature=0.6, **arg_overrides):
        maker_class = maker_cls if estimator in ESTIMATORS else maker_module.RemoteExperienceMaker
        maker = maker_class.__new__(maker_class)
        maker.strategy = SimpleNamespace(args=run_args(estimator, **arg_overrides))
        maker.advantage_estimator = estimator
        maker.kl_ctl = SimpleNamespace(value=0.0)
        # OpenRLHF's RayActorGroup over one actor worker, its execute_batch called in-process (Ray's place).
        worker = worker_cls.__new__(worker_cls)
        worker.actor = launcher.Actor(TableLM(), temperature=temperature)
        worker.actor.packing_samples = False
        worker.strategy = SimpleNamespace(ring_attn_group=None, is_rank_0=lambda: False)
        group = launcher.RayActorGroup.__new__(launcher.RayActorGroup)
        group._actor_handlers = [SimpleNamespace(execute_batch=SimpleNamespace(remote=worker.execute_batch))]
        group.duplicate_actors = 1
        maker.actor_model_group = group
        return maker

    return SimpleNamespace(module=maker_module, launcher=launcher, Experience=experience_cls, make=make, options=options)


def random_step(Experience, groups=3, seed=0, widths=(5, 7, 3)):
    """groups * N samples in micro-batches of different widths, samples shuffled across them (``index``)."""
    generator = torch.Generator().manual_seed(seed)
    total = groups * N
    order = torch.randperm(total, generator=generator).tolist()
    experiences, start = [], 0
    sizes = [total // len(widths)] * len(widths)
    for width, size in zip(widths, sizes):
        index = order[start : start + size]
        start += size
        lengths = torch.randint(1, width + 1, (size,), generator=generator)
        mask = (torch.arange(width)[None, :] < lengths[:, None]).long()
        experiences.append(Experience(
            index=index,
            sequences=torch.randint(0, VOCAB, (size, width + 3), generator=generator),
            attention_mask=torch.ones(size, width + 3, dtype=torch.long),
            action_mask=mask,
            action_log_probs=-torch.rand(size, width, generator=generator) * 3 * mask,
            rewards=torch.randint(0, 2, (size,), generator=generator).float(),
            kl=torch.zeros(size, width),
            info={},
        ))
    return experiences


def by_position(experiences, name, width):
    """(B, width) of a per-token field in the original sample order, zero-padded on the right."""
    total = sum(len(e.index) for e in experiences)
    out = torch.zeros(total, width)
    for e in experiences:
        values = getattr(e, name).float()
        out[e.index, : values.shape[1]] = values
    return out


def test_gepo_worked_example_through_openrlhf(orl):
    # GEPO.md: group entropies {1, 2, 3} -> mu = 2, sigma = 0.8165, H_low = 1.8367, H_high = 2.2449.
    # Each group has rewards [1, 0]: A = +-0.5 / std([1, 0]) = +-0.5 / 0.70711 = +-0.70711 (unbiased std, eps 1e-6).
    # Group H=1: the positive one * 0.5 = 0.35355; H=3: the negative one * 0.2 = -0.14142; the rest unchanged.
    orl.options({})
    maker = orl.make("gepo", n=2)
    entropies = torch.tensor([1.0, 1.0, 2.0, 2.0, 3.0, 3.0])
    experience = orl.Experience(
        index=list(range(6)), action_mask=torch.ones(6, 2, dtype=torch.long),
        action_log_probs=-entropies[:, None].expand(6, 2).clone(),
        rewards=torch.tensor([1.0, 0.0, 1.0, 0.0, 1.0, 0.0]), kl=torch.zeros(6, 2), info={},
    )
    (result,) = maker.compute_advantages_and_returns([experience])
    a = 0.5 / math.sqrt(0.5)
    expected = torch.tensor([0.5 * a, -a, a, -a, a, -0.2 * a])
    torch.testing.assert_close(result.advantages, expected[:, None].expand(6, 2), atol=1e-5, rtol=0)
    torch.testing.assert_close(result.returns, result.advantages)
    thresholds = getattr(maker, estimators.state_key(ESTIMATORS["gepo"]))
    assert thresholds.h_low == pytest.approx(2 - 0.2 * math.sqrt(2 / 3)) and thresholds.num_updates == 1


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gepo_equals_algorithms_on_random_batches(orl, seed):
    orl.options({"gepo": {"alpha_low": 0.6, "beta_low": 0.1}})
    maker = orl.make("gepo")
    reference_thresholds = GepoThresholds()
    for step in range(2):  # two steps: the EMA carries over
        experiences = random_step(orl.Experience, seed=10 * seed + step)
        width = max(e.action_mask.shape[1] for e in experiences)
        scores = torch.zeros(12)
        for e in experiences:
            scores[e.index] = e.rewards
        mask, log_probs = by_position(experiences, "action_mask", width), by_position(experiences, "action_log_probs", width)
        results = maker.compute_advantages_and_returns(experiences)
        expected = compute_gepo_advantages(
            scores, log_probs, mask, torch.arange(12) // N, 3, torch.ones(12, dtype=torch.bool), reference_thresholds,
            alpha_low=0.6, beta_low=0.1,
        )
        torch.testing.assert_close(by_position(results, "advantages", width), expected.advantages)
    # Equal up to float32 summation order (OpenRLHF's rows are shuffled across micro-batches).
    state, reference = getattr(maker, estimators.state_key(ESTIMATORS["gepo"])).state_dict(), reference_thresholds.state_dict()
    assert state.pop("num_updates") == reference.pop("num_updates") == 2 and state.pop("init") == reference.pop("init")
    assert state == pytest.approx(reference, rel=1e-6)


def test_edge_eda_equals_algorithms_with_the_actor_entropy(orl):
    orl.options({"edge_eda": {"ratio_clamp": [0.2, 5.0]}})
    maker = orl.make("edge_eda", temperature=0.6)
    experiences = random_step(orl.Experience, seed=5)
    width = max(e.action_mask.shape[1] for e in experiences)
    # The old policy's entropy as OpenRLHF's Actor defines it: the temperature-scaled table logits of the
    # tokens before each action position (Actor.forward drops the last position; actions are the tail).
    entropy = torch.zeros(12, width)
    for e in experiences:
        logits = TableLM()(e.sequences).logits / 0.6
        token_entropy = torch.distributions.Categorical(logits=logits).entropy()[:, :-1]
        a = e.action_mask.shape[1]
        entropy[e.index, :a] = token_entropy[:, -a:] * e.action_mask
    scores = torch.zeros(12)
    for e in experiences:
        scores[e.index] = e.rewards
    mask = by_position(experiences, "action_mask", width)
    results = maker.compute_advantages_and_returns(experiences)
    expected = compute_eda_advantages(scores, entropy, mask, torch.arange(12) // N, 3, torch.ones(12, dtype=torch.bool),
                                      ratio_clamp=(0.2, 5.0))
    torch.testing.assert_close(by_position(results, "advantages", width), expected.advantages, atol=1e-5, rtol=1e-5)
    assert not torch.equal(expected.advantages, expected.outcome_advantages[:, None] * mask)  # entropy mattered


def test_dump_dir_saves_each_computation_with_its_inputs_and_options(orl, tmp_path):
    for estimator, section in (("edge_eda", {"ratio_clamp": [0.2, 5.0]}), ("gepo", {"alpha_low": 0.6})):
        folder = tmp_path / estimator
        orl.options({estimator: section, "dump": {"dir": str(folder)}})
        maker = orl.make(estimator)
        for seed in (1, 2):
            maker.compute_advantages_and_returns(random_step(orl.Experience, seed=seed))
        assert sorted(path.name for path in folder.iterdir()) == ["advantages_00001.pt", "advantages_00002.pt"]
        for name in ("advantages_00001.pt", "advantages_00002.pt"):  # the second GEPO step from the dumped thresholds
            dumped = torch.load(folder / name, weights_only=False)
            torch.testing.assert_close(dumped["advantages"], estimators.recompute_dumped(dumped).advantages)
            assert {key: dumped["options"][key] for key in section} == {k: (tuple(v) if isinstance(v, list) else v) for k, v in section.items()}
            # rewards by position, rows by experience: the same samples
            assert torch.equal(dumped["rewards"][dumped["positions"]], dumped["scores"])
        if estimator == "gepo":
            assert dumped["state_before"]["num_updates"] == 1


def test_reward_clamp_applies_to_rewards_not_advantages(orl):
    # Rewards [20, 0, 0, 0] clamped to (-10, 10) -> [10, 0, 0, 0]; GRPO A of the first = 7.5 / std = 7.5 / 5 = 1.5.
    # EDA then divides by P_hat; a low-entropy response's |A| may exceed 10 and is NOT capped (OpenRLHF's clamp would).
    orl.options({})
    maker = orl.make("gepo", n=4)
    experience = orl.Experience(index=[0, 1, 2, 3], action_mask=torch.ones(4, 1, dtype=torch.long),
                                action_log_probs=-torch.ones(4, 1), rewards=torch.tensor([20.0, 0, 0, 0]),
                                kl=torch.zeros(4, 1), info={})
    (result,) = maker.compute_advantages_and_returns([experience])
    # One group: mu = 1 = H_low's candidate centre, sigma = 0, no strict inequality holds -> unchanged GRPO A.
    torch.testing.assert_close(result.advantages[:, 0], torch.tensor([1.5, -0.5, -0.5, -0.5]), atol=1e-5, rtol=0)


def test_other_estimators_run_openrlhfs_own_code(orl):
    orl.options({})
    maker = orl.make("group_norm", n=4)
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0])
    experience = orl.Experience(index=[0, 1, 2, 3], action_mask=torch.ones(4, 2), kl=torch.zeros(4, 2), rewards=rewards, info={})
    maker.strategy.args.algo.advantage.no_std_norm = True
    (result,) = maker.compute_advantages_and_returns([experience])
    reference = (rewards - rewards.mean()) / (rewards.std() + 1e-9)  # OpenRLHF's group_norm
    torch.testing.assert_close(result.advantages, reference[:, None].expand(4, 2))
    assert not hasattr(maker, estimators.state_key(ESTIMATORS["gepo"]))


def test_run_checks_name_the_bad_value():
    options = OpenRlhfOptions()
    with pytest.raises(ValueError, match="n_samples_per_prompt=1 must be >= 2"):
        check_args(run_args("gepo", n=1), options)
    with pytest.raises(ValueError, match=r"init_coef=0.01\): add --algo.kl.use_loss"):
        check_args(run_args("edge_eda", init_coef=0.01), options)
    check_args(run_args("edge_eda", init_coef=0.01, use_loss=True), options)
    check_args(run_args("group_norm", n=1), options)  # not ours: nothing checked
    # GEPO's thresholds come from the spread of a step's group entropies: one prompt per step is refused, EDA is defined on it
    with pytest.raises(ValueError, match=r"--rollout.batch_size=1: gepo needs at least 2 prompt groups per step; its thresholds"):
        check_args(run_args("gepo", prompts=1), options)
    check_args(run_args("edge_eda", prompts=1), options)
    with pytest.raises(ValueError, match="entropy_gradient=True needs"):
        check_args(run_args("edge_eda"), OpenRlhfOptions.from_mapping({"edge_eda": {"entropy_gradient": True}}))


def test_gepo_thresholds_survive_openrlhfs_checkpoint_path(orl, openrlhf_modules):
    trainer_module = openrlhf_modules("openrlhf.trainer.ppo_trainer")
    trainer_cls = actors.subclass(trainer_module.BasePPOTrainer, actors.EdgeTrainer)
    orl.options({})

    class ActorGroup:  # the checkpoint writer: keeps what save_checkpoint was given
        saved = []

        def async_run_method(self, method_name, **kwargs):
            self.saved.append((method_name, kwargs))
            return []

    def trainer(maker):
        t = trainer_cls.__new__(trainer_cls)
        t.args, t.experience_maker, t.actor_model_group, t.critic_model_group = maker.strategy.args, maker, ActorGroup(), None
        t.wandb_logger = t.tensorboard_logger = None
        t.best_eval_metric_key, t.best_eval_metric_value, t._latest_eval_metric_value = "", float("-inf"), None
        return t

    first, resumed, uninterrupted = orl.make("gepo"), orl.make("gepo"), orl.make("gepo")
    for maker in (first, uninterrupted):
        maker.compute_advantages_and_returns(random_step(orl.Experience, seed=1))
    trainer(first).save_logs_and_checkpoints(1, {}, {"episode": 0, "global_step": 1})
    method, saved = ActorGroup.saved[-1]
    assert method == "save_checkpoint" and estimators.state_key(ESTIMATORS["gepo"]) in saved["client_states"]
    trainer(resumed).restore_best_checkpoint_state(saved["client_states"])
    assert getattr(resumed, estimators.state_key(ESTIMATORS["gepo"])).state_dict() == getattr(first, estimators.state_key(ESTIMATORS["gepo"])).state_dict()
    # Resumed == uninterrupted on the next step.
    step_a, step_b = random_step(orl.Experience, seed=2), random_step(orl.Experience, seed=2)
    for a, b in zip(resumed.compute_advantages_and_returns(step_a), uninterrupted.compute_advantages_and_returns(step_b)):
        torch.testing.assert_close(a.advantages, b.advantages)
    with pytest.raises(ValueError, match="without the GEPO thresholds"):
        trainer(orl.make("gepo")).restore_best_checkpoint_state({"global_step": 3})


def test_installed_openrlhf_matches_every_table_entry(tmp_path):
    assert find_mismatches(OPENRLHF_DIR) == []
    # A release whose evaluate no longer calls compute_eval_metrics by that name is caught
    shutil.copytree(OPENRLHF_DIR, tmp_path / "openrlhf")
    trainer = tmp_path / "openrlhf" / "trainer" / "ppo_trainer.py"
    source = trainer.read_text()
    assert source.count("logs = compute_eval_metrics(") == 1
    trainer.write_text(source.replace("logs = compute_eval_metrics(", "logs = eval_metrics("))
    assert find_mismatches(tmp_path / "openrlhf") == [
        "openrlhf/trainer/ppo_trainer.py: PPOTrainer.evaluate does not read the global(s) ['compute_eval_metrics']"]


def test_any_other_openrlhf_version_is_refused(openrlhf_modules, tmp_path, monkeypatch):
    with pytest.raises(RuntimeError, match=rf"pinned to openrlhf=={PINNED_VERSION}.*found openrlhf '0.12.0'"):
        check_version("0.12.0")
    # The same code under a dist-info that says 0.11.1: the patch refuses it before touching anything.
    shutil.copytree(OPENRLHF_DIR, tmp_path / "openrlhf")
    info = tmp_path / "openrlhf-0.11.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: openrlhf\nVersion: 0.11.1\n")
    use_package_folder(monkeypatch, tmp_path / "openrlhf")
    load_launcher(openrlhf_modules)
    maker_module = openrlhf_modules("openrlhf.trainer.ppo_utils.experience_maker")
    assert str(tmp_path) in maker_module.__file__
    with pytest.raises(RuntimeError, match="found openrlhf '0.11.1'"):
        actors.experience_maker_class(maker_module.RemoteExperienceMaker)
    assert OPENRLHF_ROOT.is_dir()


@pytest.mark.parametrize("estimator", ["gepo", "edge_eda"])
def test_openrlhfs_own_group_reward_std_is_kept(orl, estimator):
    # the same shuffled micro-batches through OpenRLHF's own estimator (group_norm) and through the plugin's: the
    # group_reward_std OpenRLHF logs for every estimator is the same number per sample
    orl.options({})
    own = orl.module.RemoteExperienceMaker.compute_advantages_and_returns
    reference = own(orl.make("group_norm"), random_step(orl.Experience, seed=3))
    ours = orl.make(estimator).compute_advantages_and_returns(random_step(orl.Experience, seed=3))
    for mine, theirs in zip(ours, reference):
        torch.testing.assert_close(mine.info["group_reward_std"], theirs.info["group_reward_std"])
    assert any(float(e.info["group_reward_std"].max()) > 0 for e in ours)


def test_evaluation_keeps_openrlhfs_metrics_and_adds_the_plugins_logs(openrlhf_modules, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray.util.queue", MagicMock())  # the async trainer's queue (the fake ray has none)
    load_launcher(openrlhf_modules)  # the trainers import OpenRLHF's Actor through it
    trainer_module = openrlhf_modules("openrlhf.trainer.ppo_trainer")
    async_module = openrlhf_modules("openrlhf.trainer.ppo_trainer_async")
    own = trainer_module.compute_eval_metrics

    # 2 prompts x 2 samples; GEC's executor logs eval = 1 and corrected = 0 for every eval sample, the reward
    # function the grader's outcome; OpenRLHF's own info keys (response_clip_ratio, reward) are not the plugin's
    def sample(prompt, reward, corrected, caller):
        info = {"response_clip_ratio": torch.tensor([False]), "reward": torch.tensor([reward]),
                "edge_verl/gec/eval": torch.tensor([1.0]), "edge_verl/gec/corrected": torch.tensor([corrected]),
                "edge_verl/grader/caller": torch.tensor([caller])}
        return SimpleNamespace(prompts=[prompt], rewards=torch.tensor([reward]), response_length=torch.tensor([10]),
                               truncated=torch.tensor([False]), info=info)

    samples = [sample("p1", 1.0, 0.0, 1.0), sample("p1", 0.0, 0.0, 1.0), sample("p2", 0.0, 0.0, 0.0), sample("p2", 0.0, 0.0, 1.0)]
    loader = [(["math", "math"], ["p1", "p2"], ["a", "b"], [None, None])]
    expected = {**own(loader, samples, 2), "edge_verl/gec/corrected": 0.0, "edge_verl/gec/eval": 1.0,
                "edge_verl/grader/caller": 0.75}  # OpenRLHF's (pass1 of math: (0.5 + 0) / 2) + the plugin's means
    assert expected["eval_math_pass1"] == 0.25

    # The sync trainer's evaluate and the async generator's _run_eval, OpenRLHF's own methods in the subclasses
    trainer_cls = actors.subclass(trainer_module.PPOTrainer, actors.EdgeTrainer)
    trainer = trainer_cls.__new__(trainer_cls)
    trainer.samples_generator = SimpleNamespace(generate_eval_samples=lambda **_: samples)
    trainer.eval_dataloader, trainer.wandb_logger, trainer.tensorboard_logger = loader, None, None
    assert trainer.evaluate(3, n_samples_per_prompt=2) == expected
    generator_cls = actors.subclass(async_module.GenerateSamplesActor, actors.EdgeGenerateSamples)
    generator = generator_cls.__new__(generator_cls)
    generator.samples_generator = SimpleNamespace(generate_eval_samples=lambda **_: samples)
    generator.eval_dataloader, generator.generate_kwargs = loader, {}
    generator.args = SimpleNamespace(eval=SimpleNamespace(temperature=0.1, n_samples_per_prompt=2))
    assert generator._run_eval() == expected
    # ... and only while they run: OpenRLHF's module functions are OpenRLHF's again
    assert trainer_module.compute_eval_metrics is own and async_module.compute_eval_metrics is own
    assert estimators.keeping_plugin_logs(own)(loader, [], 2) == {}  # OpenRLHF's answer to no samples


def test_globals_of_refuses_a_name_the_method_does_not_read():
    def method():
        return None

    with pytest.raises(RuntimeError, match=r"reads no global \['NotThere'\]"):
        with actors.globals_of(method, NotThere=lambda value: value):
            pass
