"""OpenRLHF 0.11.2's actors with ``gepo`` / ``edge_eda``: subclasses that the launcher puts in OpenRLHF's place.

OpenRLHF has no hook for advantage estimators. Its ``train_ppo_ray`` looks its actor classes up when it runs:
``PolicyModelActor`` at the import of ``openrlhf.cli.train_ppo_ray`` (which the launcher executes afresh),
``PPOTrainer`` / ``PPOTrainerAsync`` inside ``train``. The launcher (``train_ppo_ray.py``) sets those three
module attributes, in its own process and for the run only, to the classes ``actor_classes()`` builds here;
Ray sends them to its workers like any actor class. No worker is patched: a worker runs these classes
because it was asked to create one (under ``ray job submit`` and on several nodes alike).

What each subclass changes (mixins below, over OpenRLHF's undecorated ``__ray_actor_class__``):
- trainer (``PPOTrainer``, and the async ``TrainingActor``): its experience maker becomes
  ``RemoteExperienceMaker`` + ``GroupEstimatorMaker`` (``gepo`` / ``edge_eda`` through the registry's estimators,
  ``edge_verl.estimators``; any other estimator is OpenRLHF's code); GEPO's thresholds go into every
  checkpoint's ``client_states`` and come back on resume; evaluation keeps the plugin's logs; with the GEC agent
  file, the sync trainer's samples generator sends ``rollout_labels.RolloutLabel``s (evaluation marked).
- ``GenerateSamplesActor`` (async): the same rollout labels; evaluation keeps the plugin's logs.
- ``PPOTrainerAsync``: creates the two actors above in place of OpenRLHF's.
- ``PolicyModelActor``: gains ``edge_verl_token_entropy`` (EDA's old-policy entropy).

Objects OpenRLHF creates inside a constructor (the experience maker, the samples generator) become edge_verl's
by their ``__class__``, set right after that constructor returns. Two module-level names OpenRLHF reads inside a
method remain (``compute_eval_metrics`` in ``evaluate`` / ``_run_eval``, the two actors ``PPOTrainerAsync.__init__``
creates), and the subclass calls OpenRLHF's method with that name bound to its own object in the namespace the
method reads (``globals_of``), for that call only: one is a function called mid-method, the others are Ray
actors created and started inside the constructor, so neither can be replaced afterwards; and not the module
attribute, because Ray sends an actor class by value and its methods then read a copy of their module's globals
(measured with Ray 2.55). Subclasses are built per OpenRLHF class (``subclass``) under the base class's name, so
that Ray's logs and OpenRLHF's messages read as before; every name used here is on the books in
``internals.py``, and another OpenRLHF version is refused.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import json
from functools import lru_cache
from typing import Any, Callable, Iterator

from edge_verl.openrlhf.estimators import (
    ENTROPY_METHOD,
    compute_edge_advantages,
    edge_verl_token_entropy,
    estimator_of,
    estimator_state,
    keeping_plugin_logs,
    state_key,
)
from edge_verl.openrlhf.internals import check_module_version
from edge_verl.openrlhf.options import run_options
from edge_verl.openrlhf.rollout_labels import LabellingRollouts, uses_gec_agent

EXPERIENCE_MAKER = "openrlhf.trainer.ppo_utils.experience_maker"
PPO_TRAINER = "openrlhf.trainer.ppo_trainer"
PPO_TRAINER_ASYNC = "openrlhf.trainer.ppo_trainer_async"
PPO_ACTOR = "openrlhf.trainer.ray.ppo_actor"


@contextlib.contextmanager
def globals_of(method: Callable, **wrappers: Callable[[Any], Any]) -> Iterator[None]:
    """Within the block, OpenRLHF's ``method`` reads ``wrapper(value)`` for each global name it reads
    (replaced in the namespace it actually reads, its ``__globals__``); each name must be one of them."""
    namespace = inspect.unwrap(getattr(method, "__func__", method)).__globals__
    missing = sorted(set(wrappers) - set(namespace))
    if missing:
        raise RuntimeError(f"{method.__qualname__} reads no global {missing}: not the OpenRLHF it was checked against")
    saved = {name: namespace[name] for name in wrappers}
    namespace.update({name: wrap(saved[name]) for name, wrap in wrappers.items()})
    try:
        yield
    finally:
        namespace.update(saved)


class GroupEstimatorMaker:
    """``RemoteExperienceMaker``: the registry's estimators through ``compute_edge_advantages``."""

    def compute_advantages_and_returns(self, experiences, **kwargs):
        if estimator_of(self.strategy.args) is None:
            return super().compute_advantages_and_returns(experiences, **kwargs)
        apply_length_penalties = importlib.import_module(EXPERIENCE_MAKER).apply_length_penalties
        return compute_edge_advantages(self, experiences, run_options(), apply_length_penalties)


def label_rollouts(owner: Any) -> None:
    """With edge_verl's GEC agent file, ``owner``'s samples generator (if it has one) sends ``RolloutLabel``s."""
    generator = getattr(owner, "samples_generator", None)
    if generator is not None and uses_gec_agent(owner.args):
        generator.__class__ = subclass(type(generator), LabellingRollouts)


class EdgeTrainer:
    """``BasePPOTrainer`` subclasses (``PPOTrainer``, the async ``TrainingActor``)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # BasePPOTrainer.__init__ made OpenRLHF's experience maker; it becomes ours before anything calls it
        self.experience_maker.__class__ = experience_maker_class(type(self.experience_maker))
        label_rollouts(self)  # the sync trainer's samples generator (the async one is GenerateSamplesActor's)

    def save_logs_and_checkpoints(self, global_step, logs_dict=None, client_states=None):
        state = estimator_state(self.experience_maker, run_options())
        if state is not None and client_states is not None:
            client_states[state_key(estimator_of(self.experience_maker.strategy.args))] = state.state_dict()
        return super().save_logs_and_checkpoints(global_step, logs_dict, client_states)

    def restore_best_checkpoint_state(self, checkpoint_states):
        super().restore_best_checkpoint_state(checkpoint_states)
        options = run_options()
        state = estimator_state(self.experience_maker, options)
        if state is None:
            return
        entry = estimator_of(self.experience_maker.strategy.args)
        key, label = state_key(entry), entry.state_label or f"{entry.name} state"
        states = checkpoint_states or {}
        if key in states:
            state.load_state_dict(states[key])
            print(f"edge_verl: {label} restored at global_step {states.get('global_step')}: "
                  f"{json.dumps(state.state_dict(), sort_keys=True)}", flush=True)
        elif states.get("global_step", 0) > 0 and not entry.resume_without_state(options.estimator(entry.name)):
            raise ValueError(
                f"Resuming a {entry.name} run at global_step {states['global_step']} from a checkpoint without the "
                f"{label} ({key!r} in client_states): it was not saved by edge_verl's launcher. Set "
                f"{entry.name}.resume_without_state=true in the EDGE_VERL_OPENRLHF options to start them afresh."
            )

    def evaluate(self, global_step, **generate_kwargs):
        """The sync trainer's evaluation (OpenRLHF's, which logs it), with the plugin's eval logs added."""
        evaluate = super().evaluate
        with globals_of(evaluate, compute_eval_metrics=keeping_plugin_logs):
            return evaluate(global_step, **generate_kwargs)


class EdgeGenerateSamples:
    """The async ``GenerateSamplesActor``: rollout labels with GEC; its evaluation keeps the plugin's logs."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        label_rollouts(self)

    def _run_eval(self):
        run_eval = super()._run_eval
        with globals_of(run_eval, compute_eval_metrics=keeping_plugin_logs):
            return run_eval()


class EdgeAsyncTrainer:
    """``PPOTrainerAsync``: creates edge_verl's ``TrainingActor`` and ``GenerateSamplesActor``."""

    def __init__(self, *args, **kwargs):
        init = super().__init__
        with globals_of(init, TrainingActor=lambda actor: remote_subclass(actor, EdgeTrainer),
                        GenerateSamplesActor=lambda actor: remote_subclass(actor, EdgeGenerateSamples)):
            init(*args, **kwargs)


class EdgePolicyActor:
    """``PolicyModelActor``: EDA's old-policy token entropy (run by the trainer through ``execute_batch``)."""


setattr(EdgePolicyActor, ENTROPY_METHOD, edge_verl_token_entropy)


def undecorated(actor: Any) -> type:
    """The class under a Ray actor class (``__ray_actor_class__``), or the class itself."""
    return getattr(actor, "__ray_actor_class__", actor)


@lru_cache(maxsize=None)
def subclass(base: type, mixin: type) -> type:
    """``mixin`` over OpenRLHF's ``base``, under the base's name (Ray's logs and OpenRLHF's messages unchanged);
    refused unless ``base`` comes from the pinned OpenRLHF."""
    check_module_version(importlib.import_module(base.__module__))
    return type(base.__name__, (mixin, base), {"__module__": __name__, "__qualname__": f"{mixin.__name__}.{base.__name__}"})


def experience_maker_class(base: type) -> type:
    return subclass(base, GroupEstimatorMaker)


@lru_cache(maxsize=None)
def remote_subclass(actor: Any, mixin: type) -> Any:
    """The Ray actor class of ``subclass(OpenRLHF's class, mixin)``, with the Ray options OpenRLHF gave it."""
    import ray

    cls = subclass(undecorated(actor), mixin)
    options = dict(getattr(actor, "_default_options", None) or {})
    return ray.remote(**options)(cls) if options else ray.remote(cls)


def actor_classes() -> dict[tuple[Any, str], Any]:
    """(OpenRLHF module, attribute) -> the actor class the launcher puts there for a run."""
    trainer, trainer_async, policy = (importlib.import_module(m) for m in (PPO_TRAINER, PPO_TRAINER_ASYNC, PPO_ACTOR))
    return {
        (trainer, "PPOTrainer"): remote_subclass(trainer.PPOTrainer, EdgeTrainer),
        (trainer_async, "PPOTrainerAsync"): remote_subclass(trainer_async.PPOTrainerAsync, EdgeAsyncTrainer),
        (policy, "PolicyModelActor"): remote_subclass(policy.PolicyModelActor, EdgePolicyActor),
    }
