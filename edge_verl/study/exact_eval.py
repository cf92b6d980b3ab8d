"""Evaluation without sampling noise: a model folder scored on a fixed problem list, offline (transformers,
no verl, no Ray), the same way for every method of a study.

Three numbers per problem, each a deterministic function of the weights and the problem list:
- ``greedy``: 1 if the greedy completion grades correct;
- ``gold_prob``: the exact (teacher-forced) probability of the gold completion ``\\boxed{answer}`` + end of
  turn, the product of its token probabilities: an accuracy-like number with no sampling in it at all;
- ``sampled``: the fraction of ``samples`` completions at ``temperature`` that grade correct, drawn by
  Gumbel-max from noise seeded per problem (``problem_seed``): problem i's noise depends only on the
  evaluation seed and i, never on the batch it falls in, the other problems, or the method, so every method
  of one seed that evaluates the same weights reports the same numbers, and two methods face the same draws.

One token cap (``max_new_tokens``) for every model a study evaluates: a method's own training budget (GEC's
longer corrected responses) never changes how it is measured. Completions are graded by this package's
reward (``edge_verl.reward.compute_score``), the one that trained them.

Differs from verl's validation (``val-core/*``), which the study no longer uses for its numbers: that one
samples through the rollout with no per-problem seed (arrival order decides the draws), so two validations
of one checkpoint differ (measured SD 0.015 at step 0) and each method's cap was its own
``data.max_response_length``.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

# A problem as the evaluator takes it: (question, answer), the question as the chat's user message.
Problem = tuple[str, str]
ANSWER_FORMAT = "\\boxed{{{}}}"


@dataclass(frozen=True)
class EvalConfig:
    """How every model of a study is evaluated (validated; recorded in the report).

    max_new_tokens: the one token cap; samples / temperature: the seeded sampled accuracy; seed: the
    evaluation seed (the same for every method: it is not the training seed); batch_size: problems per
    forward pass (the results do not depend on it beyond float rounding of padded rows)."""

    max_new_tokens: int = 16
    samples: int = 4
    temperature: float = 1.0
    seed: int = 0
    batch_size: int = 128

    def __post_init__(self) -> None:
        for name in ("max_new_tokens", "samples", "batch_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r} must be an integer >= 1")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"seed={self.seed!r} must be an integer >= 0")
        if not (isinstance(self.temperature, (int, float)) and self.temperature > 0 and math.isfinite(self.temperature)):
            raise ValueError(f"temperature={self.temperature!r} must be > 0 (greedy accuracy is reported separately)")

    def as_dict(self) -> dict:
        return asdict(self)


def problems_digest(problems: Sequence[Problem]) -> str:
    """sha256 of the problem list (questions and answers, in order): an evaluation file says what it scored, so
    a changed split is re-evaluated instead of reported."""
    import hashlib

    return hashlib.sha256(json.dumps([list(problem) for problem in problems]).encode()).hexdigest()


def problem_seed(eval_seed: int, index: int) -> int:
    """The noise seed of problem ``index``: a function of the evaluation seed and the index alone."""
    return (eval_seed * 1_000_003 + index * 7_919 + 1) % (2**63 - 1)


def _prompt_ids(tokenizer, question: str) -> list[int]:
    ids = tokenizer.apply_chat_template([{"role": "user", "content": question}], add_generation_prompt=True, tokenize=True)
    return list(ids if isinstance(ids, list) else ids["input_ids"])


def _left_pad(rows: Sequence[Sequence[int]], pad_id: int):
    import torch

    width = max(len(row) for row in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for number, row in enumerate(rows):
        ids[number, width - len(row):] = torch.tensor(row, dtype=torch.long)
        mask[number, width - len(row):] = 1
    return ids, mask


def _logits(model, ids, mask):
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    return model(input_ids=ids, attention_mask=mask, position_ids=positions).logits.float()


def decode(model, prompts: Sequence[Sequence[int]], noise, eos_id: int, pad_id: int, max_new_tokens: int) -> list[list[int]]:
    """Completions of ``prompts`` (token ids), one token at a time: argmax of logits + ``noise[:, step]``
    (Gumbel noise scaled by the temperature, or None for greedy), stopping a row at ``eos_id`` (kept).
    The prompt is encoded once and each new token attends to the cached keys and values.

    noise: (B, max_new_tokens, V) or None. Returns each row's generated ids."""
    import torch

    ids, mask = _left_pad(prompts, pad_id)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    done = torch.zeros(len(prompts), dtype=torch.bool)
    generated: list[list[int]] = [[] for _ in prompts]
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True)
    for step in range(max_new_tokens):
        logits = out.logits[:, -1, :].float()
        if noise is not None:
            logits = logits + noise[:, step, : logits.shape[-1]]
        token = logits.argmax(-1)
        token = torch.where(done, torch.full_like(token, pad_id), token)
        for row in torch.nonzero(~done).flatten().tolist():
            generated[row].append(int(token[row]))
        done = done | (token == eos_id)
        if bool(done.all()) or step == max_new_tokens - 1:
            break
        # a finished row's later tokens are padding, masked out; positions go on counting real tokens
        mask = torch.cat([mask, (~done | (token == eos_id)).long()[:, None]], dim=1)
        positions = positions[:, -1:] + 1
        out = model(input_ids=token[:, None], attention_mask=mask, position_ids=positions,
                    past_key_values=out.past_key_values, use_cache=True)
    return generated


def gumbel_noise(seed: int, samples: int, max_new_tokens: int, vocab: int, temperature: float):
    """(samples, max_new_tokens, vocab) Gumbel noise times ``temperature``: argmax(logits + it) samples
    softmax(logits / temperature) exactly."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    uniform = torch.rand((samples, max_new_tokens, vocab), generator=generator, dtype=torch.float64)
    uniform = uniform.clamp(min=1e-300, max=1.0 - 1e-16)
    return (-torch.log(-torch.log(uniform)) * temperature).float()


def gold_log_probs(model, tokenizer, prompts: Sequence[Sequence[int]], golds: Sequence[Sequence[int]]) -> list[float]:
    """log P(gold completion | prompt) under ``model``, teacher-forced, one per row."""
    import torch

    rows = [list(prompt) + list(gold) for prompt, gold in zip(prompts, golds)]
    ids, mask = _left_pad(rows, tokenizer.pad_token_id)
    log_probs = torch.log_softmax(_logits(model, ids, mask), dim=-1)
    width = ids.shape[1]
    totals = []
    for row, gold in enumerate(golds):
        start = width - len(gold)  # the gold's tokens are the row's last len(gold) (left padding)
        targets = ids[row, start:]
        predicted = log_probs[row, start - 1 : width - 1, :]
        totals.append(float(predicted.gather(-1, targets[:, None]).sum()))
    return totals


def _grader(data_source: str, tokenizer):
    """grade(completion ids, answer) -> 0/1 by the package's reward, each distinct (text, answer) graded once
    (a trained model repeats its answers: most of an evaluation's samples are repeats)."""
    from edge_verl.reward import compute_score

    graded: dict[tuple[str, str], float] = {}

    def grade(completion: Sequence[int], answer: str) -> float:
        key = (tokenizer.decode(list(completion), skip_special_tokens=True), answer)
        if key not in graded:
            graded[key] = float(compute_score(data_source, key[0], answer)["score"])
        return graded[key]

    return grade


def evaluate_problems(model_dir: str | Path, problems: Sequence[Problem], config: EvalConfig, data_source: str = "edge_verl/study") -> dict:
    """Score the model in ``model_dir`` on ``problems``: per-problem lists ``greedy``, ``gold_prob``,
    ``sampled`` and their means (``greedy_acc``, ``gold_prob``, ``sampled_acc``), plus ``config`` and ``n``.

    Deterministic: the same weights, problems and config give the same numbers, bit for bit, on one machine."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not problems:
        raise ValueError("evaluate_problems: no problems")
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), torch_dtype=torch.float32).eval()
    eos_id, pad_id = tokenizer.eos_token_id, tokenizer.pad_token_id
    vocab = model.get_output_embeddings().weight.shape[0]
    grade = _grader(data_source, tokenizer)
    greedy, gold_prob, sampled = [], [], []
    with torch.inference_mode():
        for start in range(0, len(problems), config.batch_size):
            batch = problems[start : start + config.batch_size]
            prompts = [_prompt_ids(tokenizer, question) for question, _ in batch]
            golds = [tokenizer.encode(ANSWER_FORMAT.format(answer), add_special_tokens=False) + [eos_id] for _, answer in batch]
            for completion, (_, answer) in zip(decode(model, prompts, None, eos_id, pad_id, config.max_new_tokens), batch):
                greedy.append(grade(completion, answer))
            gold_prob.extend(math.exp(value) for value in gold_log_probs(model, tokenizer, prompts, golds))
            noise = torch.cat([
                gumbel_noise(problem_seed(config.seed, start + offset), config.samples, config.max_new_tokens, vocab, config.temperature)
                for offset in range(len(batch))
            ])  # rows: problem-major, sample-minor
            repeated = [prompt for prompt in prompts for _ in range(config.samples)]
            completions = decode(model, repeated, noise, eos_id, pad_id, config.max_new_tokens)
            for offset, (_, answer) in enumerate(batch):
                mine = completions[offset * config.samples : (offset + 1) * config.samples]
                sampled.append(sum(grade(c, answer) for c in mine) / config.samples)
    return {
        "n": len(problems),
        "problems_sha256": problems_digest(problems),
        "config": config.as_dict(),
        "greedy_acc": statistics.fmean(greedy),
        "gold_prob": statistics.fmean(gold_prob),
        "sampled_acc": statistics.fmean(sampled),
        "per_problem": {"greedy": greedy, "gold_prob": gold_prob, "sampled": sampled},
    }
