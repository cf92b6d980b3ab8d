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

One token cap (``max_new_tokens``) for every model a study evaluates, at least as long as the longest
response any of its methods trains on (the study sets it: ``StudyConfig.eval_max_new_tokens``), so that a
method's reflection (a second answer after the first) counts at test time as it did in training, and a
method's own training budget never changes how it is measured. Completions are graded by this package's
reward (``edge_verl.reward.compute_score``), the one that trained them: the LAST box. Each completion also
records its first box's grade, its length and whether it hit the cap without the end token
(``Completion``), so a report can tell a right first answer from a right second one, and truncation.

Differs from verl's validation (``val-core/*``), which the study does not use for its numbers: that one
samples through the rollout with no per-problem seed (arrival order decides the draws), so two validations
of one checkpoint differ (measured SD 0.015 at step 0) and each method's cap was its own
``data.max_response_length``.
"""

from __future__ import annotations

import json
import math
import statistics
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional, Sequence

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


# Steps of Gumbel noise drawn at once per problem: a problem's noise is one stream from its own generator,
# drawn in chunks as its rows need them, so a long cap costs noise only for the steps some row reaches.
NOISE_CHUNK = 16


class GumbelNoise:
    """Gumbel noise times ``temperature`` for ``samples`` rows per problem, problem i's drawn from its own
    generator seeded with ``seeds[i]`` in chunks of NOISE_CHUNK steps: ``argmax(logits + noise)`` samples
    softmax(logits / temperature) exactly, and the noise of (problem, sample, step) is a function of the
    problem's seed alone (chunk k is always its generator's k-th draw), never of the batch, the cap or which
    other rows are still generating. A chunk is drawn for every problem at once, when a row first needs it.

    Rows are problem-major, sample-minor (row r: problem r // samples, sample r % samples)."""

    def __init__(self, seeds: Sequence[int], samples: int, vocab: int, temperature: float):
        import torch

        self.samples, self.vocab, self.temperature = samples, vocab, temperature
        self.generators = [torch.Generator().manual_seed(seed) for seed in seeds]
        self.chunks: list = []  # chunk k: (problems, samples, NOISE_CHUNK, vocab)

    def _draw(self, generator):
        import torch

        uniform = torch.rand((self.samples, NOISE_CHUNK, self.vocab), generator=generator, dtype=torch.float64)
        uniform = uniform.clamp(min=1e-300, max=1.0 - 1e-16)
        return (-torch.log(-torch.log(uniform)) * self.temperature).float()

    def at(self, rows: Sequence[int], step: int):
        """(len(rows), vocab) noise of ``rows`` at generation step ``step``."""
        import torch

        number, offset = divmod(step, NOISE_CHUNK)
        while len(self.chunks) <= number:
            self.chunks.append(torch.stack([self._draw(generator) for generator in self.generators]))
        index = torch.as_tensor(list(rows), dtype=torch.long)
        return self.chunks[number][index // self.samples, index % self.samples, offset]


def decode(model, prompts: Sequence[Sequence[int]], noise: Optional[GumbelNoise], eos_id: int, pad_id: int,
           max_new_tokens: int) -> list[list[int]]:
    """Completions of ``prompts`` (token ids), one token at a time: argmax of logits + the rows' noise at that
    step (``GumbelNoise``, or None for greedy), stopping a row at ``eos_id`` (kept) or at ``max_new_tokens``.

    The prompt is encoded once and each new token attends to the cached keys and values; a finished row leaves
    the batch (its cache rows are dropped), so a batch costs the tokens its rows generate, not its longest row
    times its size. Returns each row's generated ids; a row without ``eos_id`` hit the cap."""
    import torch

    ids, mask = _left_pad(prompts, pad_id)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    generated: list[list[int]] = [[] for _ in prompts]
    active = list(range(len(prompts)))
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True)
    cache = out.past_key_values
    for step in range(max_new_tokens):
        logits = out.logits[:, -1, :].float()
        if noise is not None:
            logits = logits + noise.at(active, step)[:, : logits.shape[-1]]
        tokens = logits.argmax(-1)
        keep = []
        for position, row in enumerate(active):
            generated[row].append(int(tokens[position]))
            if int(tokens[position]) != eos_id:
                keep.append(position)
        if not keep or step == max_new_tokens - 1:
            break
        if len(keep) < len(active):  # finished rows leave the batch and the cache
            index = torch.tensor(keep, dtype=torch.long)
            cache.batch_select_indices(index)
            mask, positions, tokens = mask[index], positions[index], tokens[index]
            active = [active[position] for position in keep]
        mask = torch.cat([mask, torch.ones((len(active), 1), dtype=mask.dtype)], dim=1)
        positions = positions[:, -1:] + 1
        out = model(input_ids=tokens[:, None], attention_mask=mask, position_ids=positions, past_key_values=cache, use_cache=True)
        cache = out.past_key_values
    return generated


def gumbel_noise(seed: int, samples: int, max_new_tokens: int, vocab: int, temperature: float):
    """(samples, max_new_tokens, vocab): the first ``max_new_tokens`` steps of one problem's ``GumbelNoise``."""
    import torch

    source = GumbelNoise([seed], samples, vocab, temperature)
    return torch.stack([source.at(range(samples), step) for step in range(max_new_tokens)], dim=1)


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


@dataclass(frozen=True)
class Completion:
    """What the evaluation keeps of one completion: graded by the reward (its LAST box, as in training) and by its
    first box alone (what the model answered before any reflection), its length in tokens (end token
    included), whether it hit the cap without the end token, and how many boxes it wrote (two or more: it
    answered again after its first answer)."""

    correct: float
    first_correct: float
    length: int
    capped: bool
    boxes: int


# Boxes counted per completion: enough to tell one answer from a reflection's second (a completion is at most
# the cap long; more boxes than this count as this many).
BOXES_COUNTED = 8


def _grader(data_source: str, tokenizer, eos_id: int, max_new_tokens: int):
    """grade(completion ids, answer) -> ``Completion``, by the package's reward: each distinct (text, answer)
    graded once (a trained model repeats its answers: most of an evaluation's samples are repeats)."""
    from edge_verl.reward import compute_score
    from edge_verl.reward.extract import last_boxed_spans

    scores: dict[tuple[str, str], float] = {}

    def score(text: str, answer: str) -> float:
        if (text, answer) not in scores:
            scores[(text, answer)] = float(compute_score(data_source, text, answer)["score"])
        return scores[(text, answer)]

    def grade(completion: Sequence[int], answer: str) -> Completion:
        text = tokenizer.decode(list(completion), skip_special_tokens=True)
        boxes = last_boxed_spans(text, BOXES_COUNTED)
        first = score(text[boxes[0][0] : boxes[0][1]], answer) if boxes else 0.0
        capped = len(completion) >= max_new_tokens and completion[-1] != eos_id
        return Completion(score(text, answer), first, len(completion), capped, len(boxes))

    return grade


# Per problem, from its greedy completion and (mean over) its samples: the keys of ``per_problem``.
GREEDY_FIELDS = {"greedy": "correct", "greedy_first": "first_correct", "greedy_length": "length", "greedy_capped": "capped"}
SAMPLED_FIELDS = {"sampled": "correct", "sampled_first": "first_correct", "sampled_length": "length",
                  "sampled_capped": "capped", "sampled_reflected": "reflected"}
# Means over problems reported beside the per-problem lists: summary key -> per-problem key.
SUMMARY = {"greedy_acc": "greedy", "greedy_first_acc": "greedy_first", "greedy_length": "greedy_length",
           "greedy_capped_frac": "greedy_capped", "gold_prob": "gold_prob", "sampled_acc": "sampled",
           "sampled_first_acc": "sampled_first", "sampled_length": "sampled_length", "sampled_capped_frac": "sampled_capped",
           "sampled_reflected_frac": "sampled_reflected"}


def _value(completion: Completion, field: str) -> float:
    if field == "reflected":
        return float(completion.boxes >= 2)
    return float(getattr(completion, field))


# transformers' from_pretrained is not thread-safe (measured, 5.10.4: two loads at once in two threads of the
# study's process left meta tensors in one, and the process's later loads un-tied the output head, so that every
# later evaluation scored a random head: gold probability ~1e-27): the study evaluates runs in threads, so models
# load one at a time, and each load is checked against its file.
_LOAD_LOCK = threading.Lock()


def load_model(model_dir: str | Path):
    """(model in eval mode, float32; its tokenizer) from a model folder, loaded one at a time in this process
    and checked to hold exactly the folder's tensors (``check_loaded``)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from edge_verl.integration.cpu.overrides import pin_numeric_path

    pin_numeric_path()  # the evaluation computes on the training runs' numeric path

    with _LOAD_LOCK:
        tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
        model = AutoModelForCausalLM.from_pretrained(str(model_dir), torch_dtype=torch.float32).eval()
        check_loaded(model, Path(model_dir))
    return model, tokenizer


def check_loaded(model, model_dir: Path) -> None:
    """Raise unless every tensor of the folder's safetensors files is the model's parameter of that name (in
    float32), and no parameter is left on the meta device; a tied output head must be the embedding."""
    import torch
    from safetensors.torch import load_file

    parameters = dict(model.named_parameters(remove_duplicate=False))
    meta = [name for name, tensor in parameters.items() if tensor.is_meta]
    if meta:
        raise RuntimeError(f"{model_dir}: parameters {meta[:3]} were not loaded (meta tensors)")
    for path in sorted(model_dir.glob("*.safetensors")):
        for name, tensor in load_file(str(path)).items():
            if name not in parameters or not torch.equal(parameters[name].detach(), tensor.float()):
                raise RuntimeError(f"{model_dir}: the loaded model's {name} is not the file's")
    if getattr(model.config, "tie_word_embeddings", False):
        head, embedding = model.get_output_embeddings().weight, model.get_input_embeddings().weight
        if not torch.equal(head, embedding):
            raise RuntimeError(f"{model_dir}: the output head is not tied to the embedding")


def sample_completions(model, tokenizer, prompts: Sequence[Sequence[int]], config: EvalConfig, first_index: int = 0) -> list[list[list[int]]]:
    """``config.samples`` completions of each prompt at ``config.temperature``, capped at ``config.max_new_tokens``:
    prompt k draws from the noise of problem ``first_index + k`` (``problem_seed``). Per prompt, its samples."""
    vocab = model.get_output_embeddings().weight.shape[0]
    noise = GumbelNoise([problem_seed(config.seed, first_index + offset) for offset in range(len(prompts))], config.samples, vocab,
                        config.temperature)
    repeated = [prompt for prompt in prompts for _ in range(config.samples)]  # problem-major, sample-minor
    completions = decode(model, repeated, noise, tokenizer.eos_token_id, tokenizer.pad_token_id, config.max_new_tokens)
    return [completions[offset * config.samples : (offset + 1) * config.samples] for offset in range(len(prompts))]


def evaluate_problems(model_dir: str | Path, problems: Sequence[Problem], config: EvalConfig, data_source: str = "edge_verl/study") -> dict:
    """Score the model in ``model_dir`` on ``problems``: per-problem lists (``GREEDY_FIELDS``, ``gold_prob``,
    ``SAMPLED_FIELDS``: the greedy completion's correctness by its last and by its first box, its length and
    whether it hit the cap; the same as means over the samples, and their share with a second box) and their
    means (``SUMMARY``), plus ``config``, ``n`` and the problems' digest.

    Deterministic: the same weights, problems and config give the same numbers, bit for bit, on one machine."""
    import torch

    if not problems:
        raise ValueError("evaluate_problems: no problems")
    model, tokenizer = load_model(model_dir)
    eos_id, pad_id = tokenizer.eos_token_id, tokenizer.pad_token_id
    grade = _grader(data_source, tokenizer, eos_id, config.max_new_tokens)
    per_problem: dict[str, list[float]] = {key: [] for key in (*GREEDY_FIELDS, "gold_prob", *SAMPLED_FIELDS)}
    with torch.inference_mode():
        for start in range(0, len(problems), config.batch_size):
            batch = problems[start : start + config.batch_size]
            prompts = [_prompt_ids(tokenizer, question) for question, _ in batch]
            golds = [tokenizer.encode(ANSWER_FORMAT.format(answer), add_special_tokens=False) + [eos_id] for _, answer in batch]
            for completion, (_, answer) in zip(decode(model, prompts, None, eos_id, pad_id, config.max_new_tokens), batch):
                graded = grade(completion, answer)
                for key, field in GREEDY_FIELDS.items():
                    per_problem[key].append(_value(graded, field))
            per_problem["gold_prob"].extend(math.exp(value) for value in gold_log_probs(model, tokenizer, prompts, golds))
            for samples, (_, answer) in zip(sample_completions(model, tokenizer, prompts, config, start), batch):
                graded = [grade(completion, answer) for completion in samples]
                for key, field in SAMPLED_FIELDS.items():
                    per_problem[key].append(statistics.fmean(_value(one, field) for one in graded))
    return {
        "n": len(problems),
        "problems_sha256": problems_digest(problems),
        "config": config.as_dict(),
        **{key: statistics.fmean(per_problem[source]) for key, source in SUMMARY.items()},
        "per_problem": per_problem,
    }
