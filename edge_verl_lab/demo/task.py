"""The demo's tasks, as data: small problems with a verifiable digit answer, in verl's RL parquet format.

- ``copy`` (the demo's default): repeat a digit ("Copy 777777777777" -> 7). A tiny model warm-started on
  the answer format with random digits starts near 10% accuracy and GRPO lifts it within a few dozen
  steps, so a CPU run shows learning rather than only "it ran".
- ``addmod``: the last digit of a sum ("Add 3 5 mod 10" -> 8), a collapse-regime task: after the same warm
  start the tiny model answers ~5% of the problems (measured), so most groups of 8 samples are all wrong
  and GRPO's advantage is zero for them -- close to the Hard-1K regime both papers target. But it is 100
  unrelated facts to this model, with no rule that carries to the held-out pairs: measured, GRPO's sampled
  reward never rose on it.
- ``pair`` (the study's task): the two digits of a string written with two ("Pair 22266626" -> 26, smaller
  first), a rule that carries to 3000 held-out strings (4000 train). Its warm start teaches a misconception:
  the right digits, in the wrong order (larger first) in 84% of its examples, for 300 steps, so the model
  answers with the right digits and mostly the wrong order: p0 6.2-9.4% and 57-69% all-wrong groups at K = 8
  over seeds 1-4 (``edge-verl study --task pair --calibrate``), greedy accuracy ~0, the collapse regime. The
  order is one rule shared by every problem, so what GRPO learns from the few groups with a right answer
  carries to the others and to held-out strings. (Warm-started on gold answers instead, with p0 set by a
  short warm start (75 steps), its samples were a quarter malformed and GRPO's sampled reward stayed flat in
  20 steps: measured, seed 1.)

- ``max`` (a mixture's easier part): the larger digit of the same strings ("Max 22266626" -> 6), held out
  the same way as pair (the same 3000 strings). Its warm start teaches the smaller digit in part of its
  examples (misconception ``other_digit``), so the model starts uncertain between the two digits, a
  higher-entropy regime than pair's confidently wrong order.
- ``mix`` (a ``Mixture``, GEPO's setting): pair and max in one batch, each problem under its own part's
  data source, so verl validates each part separately and the plugin's per-source statistics
  (``+algorithm.edge_metrics.per_source=True``) split every training statistic by part.

Every task has TRAINING problems (the warm start and the RL training sets draw from these only) and
HELD-OUT problems, never used by either: the two validation sets, ``<data source>/seen`` (a fixed sample
of the training problems, as many as are held out) and ``<data source>/heldout``, are separate data
sources in verl's ``val-core`` metrics. Rows carry the answer
and a reference solution in ``extra_info`` (the fields GEC needs), like the real data preparation.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from edge_verl.algorithms.gec import REFLECTION_PHRASE

ANSWER_FORMAT = "\\boxed{{{}}}"
# A problem: (question, answer, reference solution ending in the boxed answer, like the papers' data).
Problem = tuple[str, str, str]


# Answers of ~11 byte tokens (\\boxed{26} and the end token): 16 leaves room.
DEFAULT_SAMPLE_TOKENS = 16


@dataclass(frozen=True)
class Reflection:
    """A warm start's reflection habit, weak and unreliable as EDGE-GRPO's premise has it for a base model: after
    a WRONG first answer, in ``rate`` of the examples the completion goes on with GEC's reflection phrase and a
    second answer, the gold in ``correct`` of those and the first answer again otherwise; a right first answer
    is never followed by one. The phrase is GEC's own (``edge_verl.algorithms.gec.REFLECTION_PHRASE``), so GEC's
    regenerate branch (first answer + phrase + a sampled continuation) meets the habit the warm start taught."""

    rate: float
    correct: float

    def __post_init__(self) -> None:
        for name in ("rate", "correct"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
                raise ValueError(f"reflection {name}={value!r} must be in [0, 1]")

    def completion(self, rng: random.Random, first: str, answer: str) -> str:
        """The completion a warm-start example teaches for first answer ``first`` to a problem whose gold is
        ``answer``: one box, or after a wrong one sometimes the phrase and a second box (draws from ``rng`` only
        after a wrong first answer)."""
        text = ANSWER_FORMAT.format(first)
        if first == answer or rng.random() >= self.rate:
            return text
        second = answer if rng.random() < self.correct else first
        return f"{text}{REFLECTION_PHRASE} {ANSWER_FORMAT.format(second)}"

    def as_list(self) -> list[float]:
        return [self.rate, self.correct]


@dataclass(frozen=True)
class Task:
    """One task: its name, verl ``data_source`` and its training and held-out problems (disjoint)."""

    name: str
    description: str
    data_source: str
    train_problems: tuple[Problem, ...]
    heldout_problems: tuple[Problem, ...]
    # The demo's warm start for this task (DemoConfig.warm_start_steps / warm_start_correct_fraction when not
    # given): supervised steps on the answer format, the gold answer in ``warm_start_correct_fraction`` of the
    # examples and otherwise the task's ``misconception`` (a name in MISCONCEPTIONS; None: a random digit).
    # Together they set the starting accuracy, measured by edge_verl_lab/study/calibrate.py
    # (``edge-verl study --calibrate``).
    warm_start_steps: int = 50
    warm_start_correct_fraction: float = 1.0
    misconception: str | None = None
    # The warm start's reflection habit (None: answers once): after a wrong first answer, sometimes the reflection
    # phrase and a second answer.
    reflection: "Reflection | None" = None
    # The sampled response's token cap (DemoConfig.sample_tokens): room for the answer, and for a reflection.
    sample_tokens: int = DEFAULT_SAMPLE_TOKENS

    def __post_init__(self) -> None:
        if not self.train_problems or not self.heldout_problems:
            raise ValueError(f"task {self.name}: needs training and held-out problems")
        if self.misconception is not None and self.misconception not in MISCONCEPTIONS:
            raise ValueError(f"task {self.name}: misconception={self.misconception!r}; defined: {', '.join(MISCONCEPTIONS)}")
        if not 0 < self.warm_start_correct_fraction <= 1:
            raise ValueError(f"task {self.name}: warm_start_correct_fraction={self.warm_start_correct_fraction!r} must be in (0, 1]")
        if isinstance(self.sample_tokens, bool) or not isinstance(self.sample_tokens, int) or self.sample_tokens < 1:
            raise ValueError(f"task {self.name}: sample_tokens={self.sample_tokens!r} must be an integer >= 1")
        shared = {q for q, _, _ in self.train_problems} & {q for q, _, _ in self.heldout_problems}
        if shared:
            raise ValueError(f"task {self.name}: held-out problems also in training: {sorted(shared)[:3]}")

    def validation_source(self, split: str) -> str:
        """The ``data_source`` of validation split ``split`` (``seen`` or ``heldout``)."""
        if split not in VALIDATION_SPLITS:
            raise ValueError(f"split={split!r}; allowed: {', '.join(VALIDATION_SPLITS)}")
        return f"{self.data_source}/{split}"

    def seen_problems(self) -> tuple[Problem, ...]:
        """The ``seen`` validation split: as many training problems as there are held-out ones, at most
        ``SEEN_MAX`` (all of them when there are fewer), drawn once with ``SEEN_SEED``."""
        count = min(len(self.heldout_problems), SEEN_MAX)
        if len(self.train_problems) <= count:
            return self.train_problems
        return tuple(random.Random(SEEN_SEED).sample(self.train_problems, count))

    def warm_start_problems(self) -> list[tuple[str, str]]:
        """(question, answer) pairs the warm start may see: the training problems only."""
        return [(question, answer) for question, answer, _ in self.train_problems]


@dataclass(frozen=True)
class Mixture:
    """Tasks trained in one batch (GEPO's setting: prompts from tasks in different entropy regimes), each
    problem under its PART's data source: training rows are drawn uniformly from the union of the parts'
    training problems (so each part's share is its share of them), validation holds every part's seen and
    held-out sets under the part's own sources, and the warm start draws from the union too, teaching each
    part's problems with that part's gold share and misconception for ``warm_start_steps`` steps in all."""

    name: str
    description: str
    data_source: str
    part_names: tuple[str, ...]
    warm_start_steps: int
    # Each part's gold share in the mixture's warm start (None: the part's own warm_start_correct_fraction):
    # sharing the warm start with another task moves a part's starting accuracy, so the mixture sets it.
    part_gold: tuple[float, ...] | None = None
    # per part (part_gold, Task.misconception): the mixture has none of its own
    warm_start_correct_fraction = None
    misconception = None
    reflection = None  # per part (Task.reflection)

    def __post_init__(self) -> None:
        if len(self.part_names) < 2 or len(set(self.part_names)) != len(self.part_names):
            raise ValueError(f"mixture {self.name}: needs two or more distinct parts, got {self.part_names!r}")
        sources = [part.data_source for part in self.parts]
        if len(set(sources)) != len(sources):
            raise ValueError(f"mixture {self.name}: two parts share a data source ({sources})")
        if self.part_gold is not None and (len(self.part_gold) != len(self.part_names) or not all(0 < g <= 1 for g in self.part_gold)):
            raise ValueError(f"mixture {self.name}: part_gold={self.part_gold!r} needs one share in (0, 1] per part")

    @property
    def parts(self) -> tuple[Task, ...]:
        found = []
        for name in self.part_names:
            part = TASKS.get(name)
            if not isinstance(part, Task):
                raise ValueError(f"mixture {self.name}: part {name!r} is not a task (a mixture's parts are tasks)")
            found.append(part)
        return tuple(found)

    @property
    def sample_tokens(self) -> int:
        """The longest of the parts' sample caps: one cap for the batch."""
        return max(part.sample_tokens for part in self.parts)

    @property
    def train_problems(self) -> tuple[Problem, ...]:
        return tuple(problem for part in self.parts for problem in part.train_problems)

    @property
    def heldout_problems(self) -> tuple[Problem, ...]:
        return tuple(problem for part in self.parts for problem in part.heldout_problems)

    def seen_problems(self) -> tuple[Problem, ...]:
        return tuple(problem for part in self.parts for problem in part.seen_problems())

    def validation_source(self, split: str) -> str:
        raise ValueError(f"mixture {self.name} validates each part under its own data source "
                         f"({', '.join(part.validation_source(split) for part in self.parts)}), none of its own")

    def warm_start_problems(self) -> list[tuple[str, str]]:
        return [(question, answer) for question, answer, _ in self.train_problems]


AnyTask = Task | Mixture


def parts(the_task: AnyTask) -> tuple[Task, ...]:
    """The tasks whose problems ``the_task`` holds: a mixture's parts, else the task itself."""
    return the_task.parts if isinstance(the_task, Mixture) else (the_task,)


def part_ranges(the_task: AnyTask, split: str) -> list[tuple[Task, int, int]]:
    """(part, start, stop) of each part's problems in the task's ``split`` list (``seen_problems()`` or
    ``heldout_problems``, where a mixture lists its parts' in order): a mixture's evaluation per part."""
    if split not in VALIDATION_SPLITS:
        raise ValueError(f"split={split!r}; allowed: {', '.join(VALIDATION_SPLITS)}")
    ranges, start = [], 0
    for part in parts(the_task):
        size = len(part.seen_problems() if split == "seen" else part.heldout_problems)
        ranges.append((part, start, start + size))
        start += size
    return ranges


def gold_shares(the_task: AnyTask, correct_fraction: float | None = None) -> list[float]:
    """The warm start's share of gold answers for each of ``parts(the_task)``: ``correct_fraction`` when given
    (a task only), else a mixture's ``part_gold`` (or its parts' own) and a task's own."""
    if correct_fraction is not None and isinstance(the_task, Mixture):
        raise ValueError(f"mixture {the_task.name}: its warm start uses each part's gold share; correct_fraction must be None")
    if correct_fraction is not None:
        return [correct_fraction]
    if isinstance(the_task, Mixture):
        return [part.warm_start_correct_fraction if the_task.part_gold is None else the_task.part_gold[number]
                for number, part in enumerate(the_task.parts)]
    return [the_task.warm_start_correct_fraction]


def warm_start_draw(the_task: AnyTask, correct_fraction: float | None = None):
    """The warm start's examples: ``draw(rng, k)`` -> k (question, completion) pairs from the task's training
    problems, the completion teaching the gold answer with probability ``correct_fraction`` (None: each part's
    own ``warm_start_correct_fraction``), else the part's misconception (none: a random digit), boxed, and for
    a part with a ``Reflection`` habit sometimes a second answer after a wrong one. For a task without one this
    draws exactly what the warm start drew before mixtures existed (the same random numbers in the same order)."""
    fractions = gold_shares(the_task, correct_fraction)
    chosen = parts(the_task)
    problems = [(question, answer, number) for number, part in enumerate(chosen) for question, answer, _ in part.train_problems]
    wrongs = [None if part.misconception is None else MISCONCEPTIONS[part.misconception] for part in chosen]

    reflections = [part.reflection for part in chosen]

    def draw(rng: random.Random, k: int) -> list[tuple[str, str]]:
        examples = []
        for question, answer, number in rng.choices(problems, k=k):
            if rng.random() < fractions[number]:
                taught = answer
            else:
                taught = wrongs[number](question, answer) if wrongs[number] is not None else str(rng.randrange(10))
            reflection = reflections[number]
            completion = ANSWER_FORMAT.format(taught) if reflection is None else reflection.completion(rng, taught, answer)
            examples.append((question, completion))
        return examples

    return draw


# What a warm start may teach instead of the gold answer (Task.misconception): a wrong rule that RL has to
# unlearn, the same on every problem, so that the starting accuracy is low everywhere while the problem stays
# learnable by a rule that carries to held-out problems.
MISCONCEPTIONS = {
    # the answer's characters in reverse order: for pair, the larger digit first ("26" -> "62")
    "reversed": lambda question, answer: answer[::-1],
    # the question's other digit: for max, the smaller digit ("Max 22266626", 6 -> 2)
    "other_digit": lambda question, answer: next(d for d in question.split()[-1] if d != answer),
}
VALIDATION_SPLITS = ("seen", "heldout")
SEEN_SEED = 7
# The seen split only tells whether training fitted the training problems (the study's baseline gate); the
# held-out split carries the comparisons and is the larger one where a task has more (pair: 3000 vs 1000).
SEEN_MAX = 1000


def _copy_problem(digit: int, repeat: int) -> Problem:
    answer = str(digit)
    return f"Copy {answer * repeat}", answer, f"The digit to copy is {answer}. {ANSWER_FORMAT.format(answer)}"


def _addmod_problem(a: int, b: int) -> Problem:
    answer = str((a + b) % 10)
    solution = f"{a} + {b} = {a + b}, whose last digit is {answer}. {ANSWER_FORMAT.format(answer)}"
    return f"Add {a} {b} mod 10", answer, solution


# addmod holds out 20 of its 100 (a, b) pairs, drawn once with this seed: the same split for every run.
ADDMOD_SPLIT_SEED = 2026
ADDMOD_HELDOUT = 20


def _addmod_split() -> tuple[tuple[Problem, ...], tuple[Problem, ...]]:
    pairs = [(a, b) for a in range(10) for b in range(10)]
    random.Random(ADDMOD_SPLIT_SEED).shuffle(pairs)
    heldout, train = sorted(pairs[:ADDMOD_HELDOUT]), sorted(pairs[ADDMOD_HELDOUT:])
    return tuple(_addmod_problem(a, b) for a, b in train), tuple(_addmod_problem(a, b) for a, b in heldout)


_ADDMOD_TRAIN, _ADDMOD_HELDOUT = _addmod_split()


def _pair_problem(digits: str) -> Problem:
    low, high = min(digits), max(digits)
    answer = low + high
    return f"Pair {digits}", answer, f"The two digits of {digits}, smaller first, are {answer}. {ANSWER_FORMAT.format(answer)}"


# pair: every 8-digit string written with exactly two distinct digits (45 pairs x 254 strings), shuffled once
# with this seed; 4000 train and 3000 are held out (disjoint strings; every pair occurs in both): 3000 so that the
# sampling SE of a held-out accuracy, sqrt(p (1 - p) / n) for problems answered all-or-nothing, stays below 0.01
# (0.0091 at p = 0.5). The first 1000 held-out strings are those of the split's first form (1000).
PAIR_SPLIT_SEED = 2027
PAIR_LENGTH = 8
PAIR_TRAIN, PAIR_HELDOUT = 4000, 3000


def _pair_strings() -> list[str]:
    strings = []
    for low in range(10):
        for high in range(low + 1, 10):
            for bits in range(1, 2**PAIR_LENGTH - 1):  # neither all-low nor all-high
                strings.append("".join(str(high if bits >> k & 1 else low) for k in range(PAIR_LENGTH)))
    return strings


def _pair_split() -> tuple[tuple[Problem, ...], tuple[Problem, ...]]:
    strings = _pair_strings()
    random.Random(PAIR_SPLIT_SEED).shuffle(strings)
    problems = [_pair_problem(digits) for digits in strings[: PAIR_TRAIN + PAIR_HELDOUT]]
    return tuple(problems[:PAIR_TRAIN]), tuple(problems[PAIR_TRAIN:])


_PAIR_TRAIN, _PAIR_HELDOUT = _pair_split()
# reflect's warm start, chosen by ``edge-verl study --task reflect --calibrate`` at the study's T = 0.6 over seeds
# 1-8 (600 steps; 64-token continuations): p0 0.029-0.121 (median 0.066), all-wrong groups at K=8 0.48-0.86
# (median 0.66), samples that reflect 0.03-0.14, GEC's regenerate branch right in 0.22-0.42 of the wrong samples
# (median 0.30). Measured beside it: gold 0.16 with a right second answer in 0.5 of reflections (600 steps, seeds
# 1-8): p0 0.06-0.19, success 0.21-0.57; at 300 steps, seeds 1-2 or 1-4: a right second answer in 0.4 gave p0
# 0.012-0.034 and success 0.04-0.06, 0.6 gave p0 0.02-0.15 and success 0.08-0.48, 0.8 gave p0 0.08-0.21 and
# success 0.14-0.65: at 300 steps seeds differed more than settings; 600 steps made them agree.
REFLECT_WARM_START_STEPS = 600
REFLECT_GOLD = 0.12
REFLECT_HABIT = Reflection(rate=0.3, correct=0.45)
# max's warm-start share of gold answers and the mixture's warm-start length (measured by
# ``edge-verl study --task mix --calibrate``; docs/study.md).
MAX_GOLD = 0.5
MIX_WARM_START_STEPS = 500
MIX_PART_GOLD = (0.10, 0.5)


def _max_problem(pair_problem: Problem) -> Problem:
    digits = pair_problem[0].split()[-1]
    answer = max(digits)
    return f"Max {digits}", answer, f"The larger digit of {digits} is {answer}. {ANSWER_FORMAT.format(answer)}"


# max: pair's strings under pair's split, so a string held out of one part is held out of the other too.
_MAX_TRAIN, _MAX_HELDOUT = (tuple(map(_max_problem, problems)) for problems in (_PAIR_TRAIN, _PAIR_HELDOUT))
TASKS: dict[str, Task] = {
    task.name: task
    for task in (
        # Held out: the same digits written 8 times instead of 12, prompts the model never saw.
        Task("copy", "repeat a digit (the demo's default; ~12% accurate after the warm start)", "edge_verl/demo_copy",
             tuple(_copy_problem(d, 12) for d in range(10)), tuple(_copy_problem(d, 8) for d in range(10))),
        Task("addmod", "last digit of a + b (collapse regime: ~5% accurate after the warm start)", "edge_verl/demo_addmod",
             _ADDMOD_TRAIN, _ADDMOD_HELDOUT),
        # A rule (the set of digits of the string, smaller first) that carries to the 3000 held-out strings; the
        # warm start teaches the digits well and the order mostly wrong (gold in 16% of its examples): p0 6.2-9.4%,
        # 57-69% all-wrong groups at K=8 over seeds 1-4 (measured by edge_verl_lab/study/calibrate.py).
        Task("pair", "the two digits of a two-digit string, smaller first (warm start: mostly the wrong order)",
             "edge_verl/demo_pair", _PAIR_TRAIN, _PAIR_HELDOUT, warm_start_steps=300, warm_start_correct_fraction=0.16,
             misconception="reversed"),
        # pair's problems under a warm start with a weak reflection habit (Reflection): after a wrong first answer,
        # sometimes GEC's phrase and a second answer, now and then right: GEC's regenerate branch can succeed,
        # and a policy can learn to reflect. 64 tokens hold an answer, the phrase (31 byte tokens) and a second.
        Task("reflect", "pair, warm-started with a weak habit of answering again after a wrong answer",
             "edge_verl/demo_reflect", _PAIR_TRAIN, _PAIR_HELDOUT, warm_start_steps=REFLECT_WARM_START_STEPS,
             warm_start_correct_fraction=REFLECT_GOLD, misconception="reversed", reflection=REFLECT_HABIT, sample_tokens=64),
        # pair's strings, the larger digit: warm-started with the smaller one in part of its examples.
        Task("max", "the larger digit of a two-digit string (warm start: often the smaller one)", "edge_verl/demo_max",
             _MAX_TRAIN, _MAX_HELDOUT, warm_start_steps=300, warm_start_correct_fraction=MAX_GOLD, misconception="other_digit"),
    )
}
MIXTURES: dict[str, Mixture] = {
    mixture.name: mixture
    for mixture in (
        Mixture("mix", "pair and max in one batch (GEPO's setting: two entropy regimes)", "edge_verl/demo_mix", ("pair", "max"),
                warm_start_steps=MIX_WARM_START_STEPS, part_gold=MIX_PART_GOLD),
    )
}
TASK_NAMES = (*TASKS, *MIXTURES)
DEFAULT_TASK = "copy"


def get_task(name: str) -> AnyTask:
    task = TASKS.get(name) or MIXTURES.get(name)
    if task is None:
        raise ValueError(f"task {name!r} is not defined; defined: {', '.join(TASK_NAMES)} (edge_verl_lab/demo/task.py)")
    return task


def _row(task_source: str, index: int, split: str, problem: Problem, agent_name: str | None) -> dict:
    question, answer, solution = problem
    row = {
        "data_source": task_source,
        "prompt": [{"role": "user", "content": question}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": answer},
        "extra_info": {"index": index, "split": split, "answer": answer, "solution": solution},
    }
    if agent_name is not None:
        row["agent_name"] = agent_name
    return row


def training_rows(task: AnyTask, count: int, seed: int, agent_name: str | None = None, split: str = "train") -> list[dict]:
    """``count`` rows drawn (seeded) from the task's training problems (a mixture's: the union of its parts',
    each row under its part's data source), labelled ``split`` in ``extra_info``; ``agent_name`` (e.g.
    "edge_gec") selects verl's agent loop for every row (training data only: validation must run the
    default loop)."""
    rng = random.Random(seed)
    pool = [(part.data_source, problem) for part in parts(task) for problem in part.train_problems]
    rows = []
    for index in range(count):
        source, problem = pool[rng.randrange(len(pool))]
        rows.append(_row(source, index, split, problem, agent_name))
    return rows


def validation_rows(task: AnyTask, split: str) -> list[dict]:
    """Every problem of one validation split once (``seen``: training problems, ``Task.seen_problems``;
    ``heldout``: the others), under its own data source (a mixture: each part's), never marked for GEC."""
    rows = []
    for part in parts(task):
        problems = part.seen_problems() if split == "seen" else part.heldout_problems
        source = part.validation_source(split)
        rows += [_row(source, index, split, problem, None) for index, problem in enumerate(problems)]
    return rows


# --- the copy task under its historical names (tests, evaluation slices and e2e runs read these) -------------

COPY = TASKS["copy"]
DATA_SOURCE = COPY.data_source


def make_problem(digit: int) -> tuple[str, str]:
    question, answer, _ = _copy_problem(digit, 12)
    return question, answer


def make_solution(answer: str) -> str:
    """The reference solution of a copy row (ends in the boxed answer, like the papers' data)."""
    return _copy_problem(int(answer), 12)[2]


def problems() -> list[tuple[str, str]]:
    """Every distinct (question, answer) training pair of the copy task."""
    return COPY.warm_start_problems()


def make_rows(count: int, seed: int, split: str, agent_name: str | None = None) -> list[dict]:
    """``count`` copy rows in verl's RL format (split: the ``extra_info`` label), drawn from its training
    problems as ``training_rows`` does."""
    return training_rows(COPY, count, seed, agent_name, split)


def write_parquet(rows: list[dict], path: str | Path) -> Path:
    import pandas as pd

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_parquet(path, index=False)
    return path
