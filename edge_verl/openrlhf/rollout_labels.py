"""Which rollout a GEC call belongs to, told by the trainer instead of guessed by the agent executor.

OpenRLHF 0.11.2 calls an agent executor as ``execute(prompt, label, sampling_params, ...)``: nothing says whether
the call samples for training or for evaluation, or which prompt of the run it samples (a prompt's n samples are
n identical calls on one engine). With edge_verl's GEC agent file, the launcher's trainer puts its samples
generator under ``LabellingRollouts``, which sends every label to the engines as a ``RolloutLabel``: the
dataset's label, whether the dispatch is evaluation (inside OpenRLHF's ``generate_eval_samples``), and the
prompt's number in the run's stream of training prompts (OpenRLHF takes prompts from its dataloader in order,
replacements of dynamically filtered prompts included). The GEC executor never corrects a call marked as
evaluation, whatever its temperature, names a group by its prompt's number and text, and a response by its own
tokens (``ResponseKeys``): no arrival order, no engine assignment. A label that reaches the executor unmarked
(the agent file used without edge_verl's launcher) is refused by the executor.

The numbering restarts at 0 when a run resumes from a checkpoint; a group's name also holds its prompt's text, so
two groups of one run share a name only if they sample the same prompt at the same position of both streams.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

GEC_AGENT_FILE = str(Path(__file__).with_name("gec_agent.py"))
EVALUATING = "_edge_verl_evaluating"
DISPATCHED = "_edge_verl_training_prompts"


@dataclass(frozen=True)
class RolloutLabel:
    """A dataset label as the GEC executor receives it: ``label`` (the dataset's), ``evaluation`` (sampled by
    OpenRLHF's evaluation), ``prompt`` (the prompt's number among the run's training prompts; -1 in evaluation),
    ``size`` (how many samples of the prompt this dispatch asks for: its group size)."""

    label: Any
    evaluation: bool
    prompt: int
    size: int

    @property
    def group(self) -> str:
        return "eval" if self.evaluation else f"prompt{self.prompt}"


class LabellingRollouts:
    """Over OpenRLHF's ``SamplesGenerator``: every label it dispatches becomes a ``RolloutLabel``."""

    def generate_eval_samples(self, **generate_kwargs):
        setattr(self, EVALUATING, True)
        try:
            return super().generate_eval_samples(**generate_kwargs)
        finally:
            setattr(self, EVALUATING, False)

    def _dispatch_prompts_to_vllm(self, prompts, labels, *, images=None, **generate_kwargs):
        # the group size as OpenRLHF's _dispatch_prompts_to_vllm reads it
        size = generate_kwargs.get("n_samples_per_prompt", self.args.rollout.n_samples_per_prompt)
        marked = self.rollout_labels(labels, size)
        return super()._dispatch_prompts_to_vllm(prompts, marked, images=images, **generate_kwargs)

    def rollout_labels(self, labels: Sequence[Any], size: int) -> list[RolloutLabel]:
        if getattr(self, EVALUATING, False):
            return [RolloutLabel(label, evaluation=True, prompt=-1, size=size) for label in labels]
        start = getattr(self, DISPATCHED, 0)
        setattr(self, DISPATCHED, start + len(labels))
        return [RolloutLabel(label, evaluation=False, prompt=start + i, size=size) for i, label in enumerate(labels)]


def uses_gec_agent(args: Any) -> bool:
    """Whether OpenRLHF's (hierarchized) ``--train.agent_func_path`` is edge_verl's GEC agent file."""
    agent = args.train.agent_func_path
    return bool(agent) and Path(agent).resolve() == Path(GEC_AGENT_FILE).resolve()


def prompt_digest(prompt: str) -> str:
    return hashlib.sha256(prompt.encode("utf-8", errors="replace")).hexdigest()[:16]


class ResponseKeys:
    """A response's name within its group: (sha256 of its tokens, how many identical responses of the group came
    before it). Identical responses are interchangeable, so which of them gets which occurrence number changes
    nothing: the group's decisions are a function of its responses, not of their order. A group's record is
    dropped once its ``size`` responses are named."""

    def __init__(self) -> None:
        self._groups: dict[str, Counter] = {}

    def key(self, group: str, tokens: Sequence[int], size: int) -> tuple[str, int]:
        seen = self._groups.setdefault(group, Counter())
        digest = hashlib.sha256(",".join(map(str, tokens)).encode()).hexdigest()[:16]
        occurrence = seen[digest]
        seen[digest] += 1
        if sum(seen.values()) >= size:
            del self._groups[group]
        return digest, occurrence

    @property
    def open_groups(self) -> frozenset[str]:
        return frozenset(self._groups)


def unwrap(label: Any) -> tuple[Any, Optional[RolloutLabel]]:
    """(the dataset's label, the mark or None)."""
    return (label.label, label) if isinstance(label, RolloutLabel) else (label, None)
