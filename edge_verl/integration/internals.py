"""Every attribute of verl (and, for the CPU backend, of torch, megatron, mbridge, vLLM) that edge_verl
patches or relies on, on the books: one ``PatchTable`` per layer, and the one ``wrap`` that patches.

A table maps a module to attribute paths and the parameters relied on: for a function or method, its
leading parameters in order (the wrappers pass them through positionally); for a class, constructor fields
that must exist (built and read by keyword). An empty tuple checks existence only. What no parameter list
shows (how verl calls a function, a value copied from verl's code) follows the names as ``Relied`` checks
of the attribute's source or value (``edge_verl.source_checks``). ``patched`` lists what the layer
replaces, ``read`` what it calls or reads as it is. ``PatchTable.wrap`` refuses an attribute that is not in
``patched``, so a patch cannot exist without its entry; ``check_internals`` (the internals test and
``edge-verl doctor``) checks every entry against the installed packages, looking through the plugin's own
wrappers (``__wrapped__``) so that a patch does not hide an upstream change. A layer's ``optional``
packages (the CPU backend's megatron, mbridge and vLLM) are ones no install requires: an entry whose module
cannot be imported because one of them is not installed is reported as absent, not as changed; an
installed one whose modules fail or changed is a mismatch like any other.

Two layers: ``CORE`` (the plugin every verl process loads: estimators, trainer adapters, actor loss, agent
loop) below, and ``edge_verl.integration.cpu.CPU_BACKEND`` (``EDGE_VERL_CPU=1`` only). No verl import.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Callable, Collection, Mapping, Union

from edge_verl.source_checks import (
    Relied,
    calls_by_keyword,
    calls_only_if,
    calls_with_constant,
    clamps,
    contains_code,
    registry_of,
    sets_keys_before,
)


InternalsTable = Mapping[str, Mapping[str, tuple[Union[str, Relied], ...]]]
# The mark a replacement carries: the (module, path) entry it was installed under.
PATCH_MARK = "__edge_verl_patch__"

# verl's actor loss as the plugin's loss hook (integration/actor_loss.py) relies on it, each checked in verl's source by
# CORE below: ppo_loss passes exactly POLICY_LOSS_KEYWORDS to the policy loss by keyword (core_algos.PolicyLossFn),
# which clamps log(pi_theta / pi_old) to +-LOG_RATIO_CLAMP before exp; VANILLA_POLICY_LOSS is the
# ``policy_loss.loss_mode`` of plain PPO clipping (dual clip included), the only mode whose clipping GEC's per-origin
# ``vanilla_clip_frac`` recomputes; verl's trainers prefix the update's metrics with ACTOR_METRIC_PREFIX
# (``rename_dict``).
POLICY_LOSS_KEYWORDS = ("old_log_prob", "log_prob", "advantages", "response_mask", "loss_agg_mode", "config", "rollout_is_weights")
LOG_RATIO_CLAMP = 20.0
VANILLA_POLICY_LOSS = "vanilla"
ACTOR_METRIC_PREFIX = "actor"


class UnlistedPatch(RuntimeError):
    """An attribute was patched without an entry in its layer's table."""


def resolve(module: Any, path: str) -> Any:
    target = module
    for part in path.split("."):
        target = getattr(target, part)
    return target


@dataclass
class PatchTable:
    """What one layer of the plugin patches and reads (see module docstring); ``applied``: the entries
    patched in this process so far."""

    layer: str
    patched: InternalsTable
    read: InternalsTable = field(default_factory=dict)
    optional: tuple[str, ...] = ()  # top-level packages no install requires (see the module docstring)
    applied: set[tuple[str, str]] = field(default_factory=set)

    def entries(self) -> dict[str, dict[str, tuple[Union[str, Relied], ...]]]:
        """``patched`` and ``read`` as one table (what must exist with these parameters and behaviours)."""
        merged: dict[str, dict[str, tuple[Union[str, Relied], ...]]] = {}
        for table in (self.patched, self.read):
            for module_name, attributes in table.items():
                merged.setdefault(module_name, {}).update(attributes)
        return merged

    def count(self) -> int:
        return sum(len(attributes) for attributes in self.patched.values())

    def wrap(self, module: ModuleType, path: str, make: Callable[[Any], Any]) -> None:
        """Replace ``module.<path>`` by ``make(original)``, once per process.

        ``original`` is always the upstream object: when the attribute already holds this layer's
        replacement installed under ANOTHER entry (a function bound under two names, e.g. verl's
        ``compute_advantage`` in ``ray_trainer`` and ``v1.utils``), that replacement's ``__wrapped__`` is
        wrapped, so each binding gets its own adapter and none runs inside another. A function keeps the
        original's metadata (``functools.wraps``); any replacement carries ``__wrapped__`` and the mark.
        """
        key = (module.__name__, path)
        if path not in self.patched.get(module.__name__, {}):
            raise UnlistedPatch(f"{self.layer}: {module.__name__}.{path} is patched but not listed in its table")
        owner_path, _, name = path.rpartition(".")
        owner = resolve(module, owner_path) if owner_path else module
        original = getattr(owner, name)
        mark = getattr(original, PATCH_MARK, None)
        if mark == key:
            return
        if mark is not None:
            original = original.__wrapped__
        replacement = make(original)
        if inspect.isfunction(replacement):
            replacement = functools.wraps(original)(replacement)
        else:
            replacement.__wrapped__ = original
        setattr(replacement, PATCH_MARK, key)
        setattr(owner, name, replacement)
        self.applied.add(key)


def signature_problem(qualified_name: str, target: Any, expected: tuple[str, ...]) -> str | None:
    """Why ``target`` does not offer the ``expected`` parameters (None when it does)."""
    if not expected:
        return None
    try:
        parameters = list(inspect.signature(target).parameters)
    except (TypeError, ValueError) as error:
        return f"{qualified_name}: signature unreadable ({error})"
    if inspect.isclass(target):
        missing = [name for name in expected if name not in parameters]
        return f"{qualified_name}: fields {missing} missing (has {parameters})" if missing else None
    if parameters[: len(expected)] != list(expected):
        return f"{qualified_name}{inspect.signature(target)}: expected leading parameters ({', '.join(expected)})"
    return None


@dataclass(frozen=True)
class InternalsReport:
    """What ``check_internals`` found: ``problems``, one line per internal that is missing, cannot be imported
    or changed its parameters or behaviour; ``absent``, each optional package that is not installed -> the
    modules whose entries were therefore not checked."""

    problems: list[str]
    absent: dict[str, list[str]]


def uninstalled_optional(error: ImportError, optional: Collection[str]) -> str | None:
    """The optional package whose absence made an import fail, or None: a failure of what is installed."""
    if not isinstance(error, ModuleNotFoundError) or not error.name:
        return None
    package = error.name.split(".")[0]
    return package if package in optional and importlib.util.find_spec(package) is None else None


def check_internals(table: InternalsTable, optional: Collection[str] = ()) -> InternalsReport:
    """Every entry of ``table`` against the installed packages; a module that cannot be imported only because
    one of the ``optional`` packages is not installed is absent, not a problem."""
    problems: list[str] = []
    absent: dict[str, list[str]] = {}
    for module_name, attributes in table.items():
        try:
            module = importlib.import_module(module_name)
        except ImportError as error:
            package = uninstalled_optional(error, optional)
            if package is None:
                problems.append(f"{module_name}: cannot be imported ({error})")
            else:
                absent.setdefault(package, []).append(module_name)
            continue
        for path, expected in attributes.items():
            qualified_name = f"{module_name}.{path}"
            try:
                target = resolve(module, path)
            except AttributeError:
                problems.append(f"{qualified_name}: missing")
                continue
            parameters = tuple(item for item in expected if isinstance(item, str))
            problem = signature_problem(qualified_name, target, parameters)
            if problem is not None:
                problems.append(problem)
            for relied in (item for item in expected if isinstance(item, Relied)):
                problem = relied.check(inspect.unwrap(target))
                if problem is not None:
                    problems.append(f"{qualified_name}: {relied.what}: {problem}")
    return InternalsReport(problems, absent)


def find_internal_mismatches(table: InternalsTable) -> list[str]:
    """One line per internal in ``table`` that is missing, cannot be imported or whose parameters changed."""
    return check_internals(table).problems


def _core_table() -> "PatchTable":
    """``CORE``, built on first use: the CPU plugin imports this module before anything else, with nothing imported
    that it may have to hide (``cpu/plugin.py``)."""
    _ADVANTAGE = ("data", "adv_estimator", "gamma", "lam", "num_repeat", "norm_adv_by_std_in_grpo", "config")
    _PPO_LOSS = ("config", "model_output", "data", "dp_group")
    # The actor loss's metric keys reach the trainer prefixed by verl's rename_dict (the hook writes gec/..., edge_eda/...).
    _PREFIXES_ACTOR_METRICS = calls_with_constant("rename_dict", f"{ACTOR_METRIC_PREFIX}/")
    # GEC's placebo rewarded as gold (rollout.naive_reward, preflight.check_placebo_reward): the agent loop
    # skips its reward loop for a response whose reward_score is set; the batch takes every response's extra-info
    # keys from the first; the naive manager builds the reward function's extra_info and turns its result into
    # reward_score and reward_extra_info as mirrored; verl scores in the agent loop only without a reward model
    # (legacy: ray_trainer's enable_agent_reward_loop; v1: the reward loop manager's handles), and the v1 trainer
    # turns a set reward_score into rm_scores.
    _REWARD_ONLY_IF_UNSET = calls_only_if(".compute_score.remote", "final_output.reward_score is None")
    _EXTRA_INFO_KEYS_OF_FIRST = (
        contains_code("reward_extra_infos = [input.extra_fields.get('reward_extra_info', {}) for input in inputs]"),
        contains_code("reward_extra_keys = list(reward_extra_infos[0].keys())"),
    )
    _NAIVE_REWARD = (
        contains_code("extra_info.update(tool_extra_fields.items())"),
        contains_code("extra_info['num_turns'] = num_turns"),
        contains_code("extra_info['rollout_reward_scores'] = rollout_reward_scores"),
        contains_code("response_str = await self.loop.run_in_executor(None, lambda: self.tokenizer.decode(valid_response_ids, skip_special_tokens=True))"),
        contains_code("reward_extra_info[key] = value"),
        contains_code("reward_extra_info['acc'] = score"),
        contains_code("return {'reward_score': reward, 'reward_extra_info': reward_extra_info}"),
    )

    return PatchTable(
        layer="core plugin",
        patched={
            "verl.utils.config": {"validate_config": ("config", "use_reference_policy", "use_critic")},
            # the driver's job runtime env, which the plugin's settings join (integration/cluster.py)
            "verl.trainer.constants_ppo": {"get_ppo_ray_runtime_env": ("config",)},
            # legacy trainer (integration/legacy_trainer.py, LegacyAdapter)
            "verl.trainer.ppo.ray_trainer": {
                "compute_advantage": _ADVANTAGE,
                "compute_data_metrics": ("batch", "use_critic"),
                "RayPPOTrainer._compute_old_log_prob": ("self", "batch"),
                "RayPPOTrainer._update_actor": ("self", "batch", _PREFIXES_ACTOR_METRICS),
                "RayPPOTrainer._load_checkpoint": ("self",),
                "RayPPOTrainer._save_checkpoint": ("self",),
                "RayPPOTrainer.fit": ("self",),
            },
            # v1 trainer (integration/v1_trainer.py, V1Adapter)
            "verl.trainer.ppo.v1.utils": {"compute_advantage": _ADVANTAGE},
            "verl.trainer.ppo.v1.trainer_base": {
                "PPOTrainer._compute_advantage": ("self", "batch", "metrics"),
                "PPOTrainer._compute_metrics": ("self", "batch", "metrics"),
                "PPOTrainer._update_actor": ("self", "batch", "metrics", _PREFIXES_ACTOR_METRICS),
                "PPOTrainer._load_checkpoint": ("self",),
                "PPOTrainer._save_checkpoint": ("self",),
                "PPOTrainer._build_replay_buffer": ("self",),
            },
            # the agent loops (legacy: the sample index column; rollout.py: a seed per response, every agent loop)
            "verl.experimental.agent_loop.agent_loop": {
                "AgentLoopManager.generate_sequences": ("self", "prompts"),
                "AgentLoopWorker._run_agent_loop": ("self", "sampling_params", "trajectory"),
            },
            # v1's update batch in (prompt, sample index) order, not completion order (v1_trainer.py)
            "verl.trainer.ppo.v1.replay_buffer": {"ReplayBuffer.sample": ("self", "global_steps", "partition_id", "batch_size")},
            # the actor loss (integration/actor_loss.py), and the modules that bind ppo_loss by name at import.
            # The policy-loss wrapper reads config.global_batch_info's token count and dp size (GEC's SFT term),
            # which ppo_loss sets per micro-batch before it calls the policy loss.
            "verl.workers.utils.losses": {
                "ppo_loss": (
                    *_PPO_LOSS,
                    sets_keys_before("config.global_batch_info", ("dp_size", "batch_num_tokens"), "policy_loss_fn"),
                    calls_by_keyword("policy_loss_fn", POLICY_LOSS_KEYWORDS),
                ),
                "get_policy_loss_fn": ("name",),
            },
            "verl.workers.engine_workers": {"ppo_loss": _PPO_LOSS},
            # the tiled head behind verl's fused-kernel seam (integration/fused_head.py): verl's torch-backend forward
            # installed for the plugin's backend name, and the class that forward builds its head from
            "verl.models.transformers.monkey_patch": {"patch_forward_with_backends": ("model", "use_fused_kernels", "fused_kernels_backend")},
            "verl.utils.experimental.torch_functional": {"FusedLinearForPPO": ("chunk_size", "impl_backend")},
            "verl.trainer.distillation.losses": {"ppo_loss": _PPO_LOSS},
        },
        read={
            "verl.trainer.ppo.core_algos": {
                "register_adv_est": ("name_or_enum",),
                "get_adv_estimator_fn": ("name_or_enum",),
                "ADV_ESTIMATOR_REGISTRY": (),
                "POLICY_LOSS_REGISTRY": (registry_of(POLICY_LOSS_KEYWORDS, **{VANILLA_POLICY_LOSS: "compute_policy_loss_vanilla"}),),
                # GEC's per-origin ratio statistics recompute verl's ratio, and its vanilla_clip_frac verl's clipping
                "compute_policy_loss_vanilla": (*POLICY_LOSS_KEYWORDS, clamps("negative_approx_kl", -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)),
            },
            # what the loss hook reads of the actor config (clip range and dual clip for vanilla_clip_frac)
            "verl.workers.config.actor": {
                "ActorConfig": ("global_batch_info", "clip_ratio", "clip_ratio_low", "clip_ratio_high", "clip_ratio_c", "policy_loss"),
            },
            "verl.trainer.ppo.v1.replay_buffer": {
                "tq.kv_batch_get": ("keys", "partition_id", "select_fields"),
            },
            "verl.trainer.ppo.v1.trainer_base": {
                "tq.kv_batch_get": ("keys", "partition_id", "select_fields"),
                "tq.kv_batch_put": ("keys", "partition_id", "fields"),
                "KVBatchMeta": ("keys", "tags", "partition_id"),
            },
            "verl.experimental.agent_loop.agent_loop": {
                "register": ("agent_name",),
                "_agent_loop_registry": (),
                "AgentLoopOutput": ("prompt_ids", "response_ids", "response_mask", "response_logprobs", "reward_score", "extra_fields"),
                "AgentLoopOutput.as_dict": ("self", contains_code("rm_scores[-1] = reward_score")),
                "LLMServerClient.generate": ("self", "request_id", "prompt_ids", "sampling_params"),
                "AgentLoopWorker._compute_score": ("self", "outputs", "kwargs", _REWARD_ONLY_IF_UNSET),
                "AgentLoopWorker._postprocess": ("self", "inputs", *_EXTRA_INFO_KEYS_OF_FIRST),
            },
            "verl.experimental.reward_loop.reward_manager.naive": {"NaiveRewardManager.run_single": ("self", "data", *_NAIVE_REWARD)},
            "verl.experimental.reward_loop.reward_loop": {
                "RewardLoopManager.reward_loop_worker_handles": (
                    contains_code("not self.config.reward.reward_model.enable or self.config.reward.reward_model.enable_resource_pool"),
                ),
            },
            "verl.trainer.ppo.ray_trainer": {
                "RayPPOTrainer.init_workers": ("self", contains_code("enable_agent_reward_loop = not self.use_rm or self.config.reward.reward_model.enable_resource_pool")),
            },
            "verl.workers.config.reward": {"RewardManagerConfig": ("source", "name"), "RewardModelConfig": ("enable", "enable_resource_pool")},
            "verl.experimental.agent_loop.single_turn_agent_loop": {"SingleTurnAgentLoop.run": ("self", "sampling_params")},
            # the GEC loop's end tokens: the model's generation config, read as verl's HFModelConfig reads it
            "verl.utils.model": {"get_generation_config": ("model", "trust_remote_code")},
            "verl.utils.fs": {"copy_to_local": ("src",)},
            "verl.trainer.ppo.reward": {
                "get_custom_reward_fn": ("config",),
                # the naive manager's reward function is the run's custom one, as GEC's
                "load_reward_manager": ("config", "tokenizer", contains_code("compute_score = get_custom_reward_fn(config)")),
            },
            "verl.workers.utils.padding": {"no_padding_2_padding": ("tensor", "data"), "response_to_nested": ("tensor", "response_mask")},
            "verl.utils.tensordict_utils": {"get_non_tensor_data": ("data", "key", "default")},
            # the fused forward looks the head's class up at call time, with the backend the model was marked with;
            # apply_monkey_patch hands the engine's backend to patch_forward_with_backends by keyword
            "verl.models.transformers.dense_common": {
                "forward_with_torch_backend": (
                    "self", "input_ids",
                    contains_code("from verl.utils.experimental.torch_functional import FusedLinearForPPO"),
                    contains_code("fused_linear_for_ppo = FusedLinearForPPO(impl_backend=getattr(self, '_verl_fused_kernels_backend', 'torch'))"),
                ),
            },
            "verl.models.transformers.monkey_patch": {
                "apply_monkey_patch": (
                    "model",
                    contains_code("patch_forward_with_backends(model, use_fused_kernels=use_fused_kernels, fused_kernels_backend=fused_kernels_backend)"),
                ),
            },
            "verl.utils.metric": {"Metric": ("aggregation", "value"), "AggregationType": ()},
            # Ray's hooks run after ray.init (integration/cluster.py: the nodes checked and watched in the driver)
            "ray._private.worker": {"_post_init_hooks": ()},
        },
    )


def __getattr__(name: str) -> Any:
    """``CORE`` is built once, when first imported (``_core_table``)."""
    if name == "CORE":
        globals()["CORE"] = table = _core_table()
        return table
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
