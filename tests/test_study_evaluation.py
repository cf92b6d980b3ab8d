"""The study's noise-free evaluation (edge_verl_lab/study/exact_eval.py), its starting-point calibration and the
power statistics of its report (edge_verl_lab/reporting.py): offline, a tiny model built here, seconds."""

from __future__ import annotations

import math
import random

import pytest
import torch

from edge_verl_lab.demo import task as tasks
from edge_verl_lab.reporting import PairedDifference, holm_adjust, minimum_detectable_difference, paired_difference, paired_p_value
from edge_verl_lab.demo.run import DemoConfig, build_warm_model, model_recipe
from edge_verl_lab.study.calibrate import Calibration, measure_start
from edge_verl_lab.study.verdict import PRIMARY_CONTRASTS, baseline_gate, contrasts, verdict_text
from edge_verl_lab.study.exact_eval import (
    NOISE_CHUNK,
    Completion,
    EvalConfig,
    GumbelNoise,
    _grader,
    decode,
    evaluate_problems,
    gold_log_probs,
    gumbel_noise,
    problem_seed,
)


@pytest.fixture(scope="module")
def warm_model(tmp_path_factory):
    # 70 warm-start steps on pair (its misconception warm start, cut short): right on a few problems, wrong on most.
    folder = tmp_path_factory.mktemp("pair_model")
    return build_warm_model(model_recipe(DemoConfig(task="pair", seed=1, warm_start_steps=70, out=folder)), folder)


def _problems(split: str, count: int) -> list[tuple[str, str]]:
    the_task = tasks.get_task("pair")
    chosen = the_task.heldout_problems if split == "heldout" else the_task.train_problems
    return [(question, answer) for question, answer, _ in chosen[:count]]


# --- the pair task -----------------------------------------------------------------------------------------

def test_pair_answers_follow_the_rule_and_held_out_strings_are_never_trained():
    the_task = tasks.get_task("pair")
    assert (len(the_task.train_problems), len(the_task.heldout_problems)) == (4000, 3000)
    for question, answer, solution in the_task.train_problems + the_task.heldout_problems:
        digits = question.split()[1]
        assert len(digits) == 8 and set(digits) == set(answer) and answer == "".join(sorted(set(digits)))
        assert solution.endswith(f"\\boxed{{{answer}}}")
    assert not {q for q, _, _ in the_task.train_problems} & {q for q, _, _ in the_task.heldout_problems}
    # the rule, not the strings, carries: every one of the 45 answers occurs in both splits
    assert {a for _, a, _ in the_task.train_problems} == {a for _, a, _ in the_task.heldout_problems}
    assert len({a for _, a, _ in the_task.heldout_problems}) == 45


# --- sampling and teacher forcing ------------------------------------------------------------------------------

def test_gumbel_max_samples_the_softmax():
    # argmax(logits + Gumbel) ~ softmax(logits): logits log(0.7), log(0.2), log(0.1) over 20000 draws.
    noise = gumbel_noise(seed=3, samples=20000, max_new_tokens=1, vocab=3, temperature=1.0)[:, 0, :]
    logits = torch.log(torch.tensor([0.7, 0.2, 0.1]))
    counts = torch.bincount((logits + noise).argmax(-1), minlength=3).double() / 20000
    torch.testing.assert_close(counts, torch.tensor([0.7, 0.2, 0.1], dtype=torch.float64), atol=0.015, rtol=0)


def test_a_problems_noise_depends_on_the_seed_and_its_index_only():
    assert problem_seed(0, 5) == problem_seed(0, 5)
    assert len({problem_seed(seed, index) for seed in range(3) for index in range(100)}) == 300
    torch.testing.assert_close(gumbel_noise(problem_seed(0, 5), 2, 4, 7, 1.0), gumbel_noise(problem_seed(0, 5), 2, 4, 7, 1.0))


def test_teacher_forced_log_prob_equals_the_unpadded_chain_rule(warm_model):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(warm_model))
    model = AutoModelForCausalLM.from_pretrained(str(warm_model)).eval()
    # prompts of different lengths, so the batch is left-padded
    prompts = [tokenizer.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=True)
               for q in ("Pair 22266626", "Pair 6")]
    prompts = [list(p if isinstance(p, list) else p["input_ids"]) for p in prompts]
    golds = [tokenizer.encode("\\boxed{26}", add_special_tokens=False) + [tokenizer.eos_token_id],
             tokenizer.encode("\\boxed{6}", add_special_tokens=False) + [tokenizer.eos_token_id]]
    with torch.inference_mode():
        batched = gold_log_probs(model, tokenizer, prompts, golds)
        for prompt, gold, value in zip(prompts, golds, batched):
            # slow reference: sum over gold tokens of log p(token | everything before it), one unpadded row
            ids = torch.tensor([prompt + gold])
            log_probs = torch.log_softmax(model(input_ids=ids).logits[0].float(), -1)
            expected = sum(float(log_probs[len(prompt) - 1 + k, token]) for k, token in enumerate(gold))
            assert value == pytest.approx(expected, abs=1e-4)
            assert value < 0


def test_greedy_decoding_stops_at_the_end_token_and_respects_the_cap(warm_model):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(warm_model))
    model = AutoModelForCausalLM.from_pretrained(str(warm_model)).eval()
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "Pair 22266626"}], add_generation_prompt=True, tokenize=True)
    prompt = list(prompt if isinstance(prompt, list) else prompt["input_ids"])
    with torch.inference_mode():
        for cap in (1, 3, 16):
            (generated,) = decode(model, [prompt], None, tokenizer.eos_token_id, tokenizer.pad_token_id, cap)
            assert 1 <= len(generated) <= cap
            assert tokenizer.eos_token_id not in generated[:-1]


def _model_and_prompts(folder, questions):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    model = AutoModelForCausalLM.from_pretrained(str(folder)).eval()
    prompts = [tokenizer.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=True)
               for q in questions]
    return tokenizer, model, [list(p if isinstance(p, list) else p["input_ids"]) for p in prompts]


def test_batched_decoding_with_finished_rows_leaving_equals_a_slow_uncached_decode(warm_model):
    # pair's prompts all have one length (no padding); at T=3 the rows babble, so they finish at different steps
    # and past NOISE_CHUNK: the batch shrinks as rows end, and the noise of later chunks is drawn on demand
    questions = [q for q, _ in _problems("train", 6)]
    tokenizer, model, prompts = _model_and_prompts(warm_model, questions)
    seeds = [problem_seed(0, index) for index in range(len(prompts))]
    cap = NOISE_CHUNK * 2 + 5
    with torch.inference_mode():
        batched = decode(model, prompts, GumbelNoise(seeds, 1, 259, 3.0), tokenizer.eos_token_id, tokenizer.pad_token_id, cap)
        for prompt, seed, got in zip(prompts, seeds, batched):
            # slow reference: the whole sequence through the model at every step, no cache, one row
            noise, ids = gumbel_noise(seed, 1, cap, 259, 3.0)[0], list(prompt)
            expected = []
            for step in range(cap):
                logits = model(input_ids=torch.tensor([ids])).logits[0, -1].float() + noise[step]
                expected.append(int(logits.argmax()))
                ids.append(expected[-1])
                if expected[-1] == tokenizer.eos_token_id:
                    break
            assert got == expected
    lengths = [len(row) for row in batched]
    assert len(set(lengths)) > 1 and max(lengths) > NOISE_CHUNK, lengths  # the test exercised what it claims


def test_a_completion_is_graded_by_its_last_box_and_its_first_box_is_kept(warm_model):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(warm_model))
    eos = tokenizer.eos_token_id
    grade = _grader("edge_verl/demo_pair", tokenizer, eos, max_new_tokens=64)

    def ids(text, end=True):
        return tokenizer.encode(text, add_special_tokens=False) + ([eos] if end else [])

    reflected = ids("\\boxed{62} Wait! Something is wrong here. \\boxed{26}")
    # wrong first answer, right second one: the reward (last box) says right, the first box wrong; 2 boxes
    assert grade(reflected, "26") == Completion(1.0, 0.0, len(reflected), False, 2)
    # the other way round: right first, wrong last
    swapped = grade(ids("\\boxed{26} Wait! \\boxed{62}"), "26")
    assert (swapped.correct, swapped.first_correct) == (0.0, 1.0)
    one = ids("\\boxed{26}")
    assert grade(one, "26") == Completion(1.0, 1.0, 11, False, 1)  # 10 byte tokens + the end token
    # no end token at the cap: capped; the same length WITH the end token is not
    babble = ids("x" * 64, end=False)
    assert grade(babble, "26") == Completion(0.0, 0.0, 64, True, 0)
    assert not grade(ids("x" * 63), "26").capped


def test_the_evaluation_summarises_every_per_problem_list(warm_model):
    problems = _problems("heldout", 12)
    result = evaluate_problems(warm_model, problems, EvalConfig(samples=3, batch_size=5, max_new_tokens=24))
    per_problem = result["per_problem"]
    assert all(len(values) == 12 for values in per_problem.values())
    # the means are of the per-problem lists; a sample's length is at most the cap and at least one token
    assert result["sampled_first_acc"] == pytest.approx(sum(per_problem["sampled_first"]) / 12)
    assert result["greedy_capped_frac"] == pytest.approx(sum(per_problem["greedy_capped"]) / 12)
    assert all(1 <= length <= 24 for length in per_problem["greedy_length"] + per_problem["sampled_length"])
    assert all(0 <= value <= 1 for key in ("sampled_capped", "sampled_reflected", "sampled_first") for value in per_problem[key])


# --- the evaluation ------------------------------------------------------------------------------------------

def test_two_evaluations_of_one_checkpoint_give_identical_numbers(warm_model):
    problems = _problems("heldout", 24)
    config = EvalConfig(samples=4, batch_size=8)
    first, second = evaluate_problems(warm_model, problems, config), evaluate_problems(warm_model, problems, config)
    assert first == second
    for key in ("greedy_acc", "gold_prob", "sampled_acc"):
        assert 0 <= first[key] <= 1 and math.isfinite(first[key])
    assert first["n"] == 24 and first["config"]["max_new_tokens"] == 16


def test_a_problems_numbers_do_not_depend_on_the_other_problems_or_their_order(warm_model):
    # batch_size 1: no padding, so the only thing that could couple problems is the noise (it must not)
    problems = _problems("train", 6)
    config = EvalConfig(samples=8, batch_size=1)
    alone = evaluate_problems(warm_model, problems, config)["per_problem"]
    order = [5, 0, 3, 1, 4, 2]
    shuffled = evaluate_problems(warm_model, [problems[i] for i in order], config)["per_problem"]
    # the noise follows the position in the list: problem i keeps problem_seed(seed, i) only in its own slot,
    # so greedy and gold_prob (no noise) match problem by problem, sampled by slot under the same draws
    for slot, index in enumerate(order):
        assert shuffled["greedy"][slot] == alone["greedy"][index]
        assert shuffled["gold_prob"][slot] == pytest.approx(alone["gold_prob"][index], rel=1e-6)


def test_another_evaluation_seed_draws_other_samples(warm_model):
    problems = _problems("train", 32)
    base = evaluate_problems(warm_model, problems, EvalConfig(samples=8, seed=0))
    other = evaluate_problems(warm_model, problems, EvalConfig(samples=8, seed=1))
    assert base["greedy_acc"] == other["greedy_acc"] and base["gold_prob"] == other["gold_prob"]
    assert base["per_problem"]["sampled"] != other["per_problem"]["sampled"]


@pytest.mark.parametrize("bad", [{"max_new_tokens": 0}, {"samples": 0}, {"temperature": 0.0}, {"temperature": float("nan")},
                                 {"seed": -1}, {"batch_size": True}])
def test_eval_config_refuses_bad_values_by_name(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        EvalConfig(**bad)


def test_calibration_measures_the_start_of_a_warm_model(warm_model):
    measured = measure_start(warm_model, "pair", 0.6, problems=32)
    assert measured["problems"] == 32
    assert 0 <= measured["p0"] <= 1 and 0 <= measured["all_wrong_group_frac"] <= 1
    # a problem with no correct sample among 8 has sampled accuracy 0; p0 <= 1 - all-wrong share
    assert measured["p0"] <= 1 - measured["all_wrong_group_frac"] + 1e-12
    # every wrong sample is regenerated once: (1 - p0) of the 32 x 8 samples
    assert measured["regenerated"] == round((1 - measured["p0"]) * 32 * 8)
    line = Calibration("pair", 1, 70, 1.0, 0.6, **measured).line()
    assert "p0" in line and "seed 1" in line and "1.00 gold" in line and "T=0.6" in line and "regenerate success" in line


# --- the reflect task ----------------------------------------------------------------------------------------

def test_a_reflection_follows_only_a_wrong_first_answer_and_uses_gecs_phrase():
    from edge_verl.algorithms.gec import REFLECTION_PHRASE

    habit = tasks.Reflection(rate=1.0, correct=1.0)
    rng = random.Random(0)
    assert habit.completion(rng, "26", "26") == "\\boxed{26}"  # a right answer: never again
    assert habit.completion(rng, "62", "26") == "\\boxed{62}" + REFLECTION_PHRASE + " \\boxed{26}"
    # correct=0: the second answer repeats the first; rate=0: no reflection at all
    assert tasks.Reflection(1.0, 0.0).completion(rng, "62", "26").endswith("\\boxed{62}")
    assert tasks.Reflection(0.0, 1.0).completion(rng, "62", "26") == "\\boxed{62}"
    with pytest.raises(ValueError, match="rate"):
        tasks.Reflection(1.5, 0.5)


def test_the_reflect_warm_start_teaches_the_habit_at_its_rates():
    # reflect: gold 0.12; a wrong first answer is followed by a reflection in 0.3 of the examples, whose second
    # answer is the gold in 0.45: expected reflection share 0.88 * 0.3 = 0.264, right second answers 0.45 of them
    the_task = tasks.get_task("reflect")
    examples = tasks.warm_start_draw(the_task)(random.Random(0), 20000)
    reflected = [completion for _, completion in examples if "Wait!" in completion]
    assert len(reflected) / 20000 == pytest.approx(0.88 * 0.3, abs=0.012)
    answers = dict((q, a) for q, a, _ in the_task.train_problems)
    second_right = [c for q, c in examples if "Wait!" in c and c.endswith("{" + answers[q] + "}")]
    assert len(second_right) / len(reflected) == pytest.approx(0.45, abs=0.025)
    # pair's draw is untouched by the new completions: the same examples as a plain boxed answer
    pair = tasks.warm_start_draw(tasks.get_task("pair"))(random.Random(0), 50)
    assert all(completion.startswith("\\boxed{") and completion.count("boxed") == 1 for _, completion in pair)


# --- power ---------------------------------------------------------------------------------------------------

def test_minimum_detectable_difference_by_hand():
    # n = 4, paired SD 0.02: t(0.975, 3) = 3.1824, t(0.8, 3) = 0.9785; (3.1824 + 0.9785) * 0.02 / sqrt(4) = 0.04161
    assert minimum_detectable_difference(0.02, 4) == pytest.approx(0.04161, abs=1e-4)
    assert minimum_detectable_difference(0.02, 1) is None
    # more pairs, smaller MDD
    assert minimum_detectable_difference(0.02, 16) < minimum_detectable_difference(0.02, 4)


def test_paired_p_value_matches_the_t_distribution():
    # differences 1, 2, 3: mean 2, sd 1, t = 2 / (1 / sqrt 3) = 3.4641, df 2: two-sided p = 1 - t / sqrt(t^2 + 2) = 0.0742
    difference = paired_difference({"1": 1.0, "2": 2.0, "3": 3.0}, {"1": 0.0, "2": 0.0, "3": 0.0})
    assert paired_p_value(difference) == pytest.approx(1 - 3.4641 / math.sqrt(3.4641**2 + 2), abs=1e-4)
    assert paired_p_value(PairedDifference({"1": 0.5}, 0.5, None, 1, 0.95, None)) is None
    same = paired_difference({"1": 1.0, "2": 1.0}, {"1": 0.0, "2": 0.0})
    assert paired_p_value(same) == 0.0


def test_holm_adjustment_by_hand():
    # sorted 0.01, 0.03, 0.04 of m = 3: 0.03, 0.06, max(0.06, 0.04) = 0.06
    assert holm_adjust({"a": 0.01, "b": 0.04, "c": 0.03, "d": None}) == pytest.approx({"a": 0.03, "b": 0.06, "c": 0.06, "d": None})
    assert holm_adjust({"a": 0.6, "b": 0.7}) == {"a": 1.0, "b": 1.0}


def test_holm_never_lowers_a_p_value_and_keeps_the_order():
    rng = random.Random(0)
    for _ in range(200):
        raw = {str(k): rng.random() for k in range(rng.randrange(1, 8))}
        adjusted = holm_adjust(raw)
        assert all(adjusted[k] >= raw[k] and adjusted[k] <= 1 for k in raw)
        ranked = sorted(raw, key=raw.get)
        assert [adjusted[k] for k in ranked] == sorted(adjusted[k] for k in ranked)


def test_study_calibrate_prints_p0_per_seed_and_runs_nothing_else(tmp_path, capsys, monkeypatch):
    from edge_verl.cli import main
    from edge_verl_lab.study import calibrate

    # an untrained model babbles to every cap: 16 problems keep its regenerations (8 x 64 tokens each) cheap
    monkeypatch.setattr(calibrate, "CALIBRATION_PROBLEMS", 16)

    assert main(["study", "--task", "pair", "--seeds", "1", "--calibrate", "0", "--out", str(tmp_path)]) == 0
    (line,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("pair")]
    # an untrained model writes no boxed pair: p0 0, every group all wrong; the task's gold share is recorded
    assert "seed 1" in line and "warm start    0 steps, 0.16 gold, T=0.6: p0 0.000, all-wrong groups (K=8) 1.00" in line
    assert not (tmp_path / "runs").exists() and (tmp_path / "calibration" / "pair_seed1_warm0_gold0.16").is_dir()
    assert main(["study", "--task", "pair", "--seeds", "1", "--calibrate", "-1", "--out", str(tmp_path)]) == 2
    for bad in ("0", "1.5"):
        assert main(["study", "--task", "pair", "--seeds", "1", "--calibrate", "0", "--warm-correct-fraction", bad,
                     "--out", str(tmp_path)]) == 2


# --- the gate and the contrasts (edge_verl_lab/study/verdict.py) --------------------------------------------------

def test_the_gate_passes_only_when_the_baseline_learned_in_every_seed():
    start = {"1": 0.10, "2": 0.10}
    learned = baseline_gate(start, {"1": 0.20, "2": 0.15}, {"1": 0.06, "2": 0.05}, {"1": 0.12, "2": 0.08})
    assert learned.passed and learned.per_seed["2"] == pytest.approx({"seen_gain": 0.05, "reward_gain": 0.03})
    # seed 2's reward rose by 0.01 < 0.02: the gate fails and names it
    flat = baseline_gate(start, {"1": 0.20, "2": 0.15}, {"1": 0.06, "2": 0.05}, {"1": 0.12, "2": 0.06})
    assert not flat.passed and "seed 2: reward_gain +0.010" in flat.reason
    assert not baseline_gate({}, {}, {}, {}).passed
    with pytest.raises(ValueError, match="margin"):
        baseline_gate(start, start, start, start, margin=float("nan"))


def test_contrasts_are_named_in_advance_and_each_family_holm_adjusted():
    # edge - grpo = 0.05, 0.07, 0.06 per seed: mean 0.06, sd 0.01; eda - grpo = 0.01, -0.01, 0.0
    values = {
        "grpo": {"1": 0.10, "2": 0.20, "3": 0.30},
        "edge": {"1": 0.15, "2": 0.27, "3": 0.36},
        "eda": {"1": 0.11, "2": 0.19, "3": 0.30},
        "gec": {"1": 0.12, "2": 0.22, "3": 0.33},
        "edge_sft_injected": {"1": 0.10, "2": 0.25, "3": 0.29},
    }
    found = contrasts(values, list(values))
    assert [(e["method"], e["against"]) for e in found["primary"]] == [("edge", "grpo"), ("eda", "grpo")]
    edge = found["primary"][0]
    assert edge["mean"] == pytest.approx(0.06) and edge["std"] == pytest.approx(0.01)
    # MDD = (t(0.975, 2) + t(0.8, 2)) * 0.01 / sqrt 3 = (4.3027 + 1.0607) * 0.005774 = 0.03097
    assert edge["mdd"] == pytest.approx(0.03097, abs=1e-4)
    assert [e["method"] for e in found["further"]] == ["gec", "edge_sft_injected"]
    # Holm within each family of two: the smaller p doubled, the larger as is (raised to the running max)
    for family in (found["primary"], found["further"]):
        low, high = sorted(family, key=lambda e: e["p"])
        assert low["p_holm"] == pytest.approx(min(1.0, 2 * low["p"])) and high["p_holm"] == pytest.approx(max(high["p"], low["p_holm"]))
    # edge above grpo in all 3 seeds: sign test 2 * 0.5^3 = 0.25; eda 0.01, -0.01, 0.0: one each way, one tied
    assert edge["signs"] == {"above": 3, "below": 0, "tied": 0, "p": pytest.approx(0.25)}
    assert found["primary"][1]["signs"] == {"above": 1, "below": 1, "tied": 1, "p": 1.0}
    assert all((m, a) in PRIMARY_CONTRASTS for m, a in ((e["method"], e["against"]) for e in found["primary"]))


@pytest.mark.parametrize("above, below, expected", [(8, 0, 2 / 256), (6, 2, 2 * (1 + 8 + 28) / 256), (4, 4, 1.0), (0, 0, None)])
def test_the_sign_test_by_hand(above, below, expected):
    from edge_verl_lab.study.verdict import sign_counts

    per_seed = {str(i): 0.1 for i in range(above)} | {str(100 + i): -0.1 for i in range(below)} | {"tied": 0.0}
    found = sign_counts(per_seed)
    assert (found["above"], found["below"], found["tied"]) == (above, below, 1)
    assert found["p"] == (pytest.approx(expected) if expected is not None else None)


def test_no_verdict_without_a_learning_baseline():
    # the verdict reads the Holm-adjusted p: a raw p of 0.001 adjusted to 0.4 is no difference
    entry = {"method": "edge", "against": "grpo", "mean": 0.06, "p": 0.001, "p_holm": 0.001, "mdd": 0.03, "n": 3}
    learned = baseline_gate({"1": 0.1}, {"1": 0.2}, {"1": 0.1}, {"1": 0.2})
    failed = baseline_gate({"1": 0.1}, {"1": 0.1}, {"1": 0.1}, {"1": 0.1})
    assert verdict_text(entry, learned) == "edge above grpo"
    assert verdict_text(entry, failed).startswith("uninformative")
    assert verdict_text({**entry, "p_holm": 0.4}, learned) == "no difference detected (detectable: |Δ| >= 0.030)"


# --- the misconception warm start and a stale evaluation ------------------------------------------------------

def test_the_warm_start_teaches_the_task_s_misconception_in_the_wrong_share_of_its_examples():
    from edge_verl_lab.demo import tiny

    class Recording:  # the real tokenizer, recording every target it is asked to encode
        def __init__(self, tokenizer):
            self.tokenizer, self.targets = tokenizer, []

        def __getattr__(self, name):
            return getattr(self.tokenizer, name)

        def encode(self, text, **kwargs):
            self.targets.append(text)
            return self.tokenizer.encode(text, **kwargs)

    import tempfile
    with tempfile.TemporaryDirectory() as folder:
        tokenizer = Recording(tiny.build_tokenizer(folder))
        model = tiny.build_model(tokenizer.tokenizer, seed=0)
        tiny.warm_start(model, tokenizer, tasks.warm_start_draw(tasks.get_task("pair"), correct_fraction=0.25), "{}", steps=10, seed=3)
    golds = {answer for _, answer in tasks.get_task("pair").warm_start_problems()}
    answers = [target[len("\\boxed{"):-1] for target in tokenizer.targets]
    assert len(answers) == 10 * 32
    right = sum(answer in golds for answer in answers)
    # every target is a gold answer or a reversed one ("26" -> "62": larger digit first), about 1 in 4 gold
    assert all(answer in golds or answer[::-1] in golds for answer in answers)
    assert 0.15 < right / len(answers) < 0.35


def test_a_finished_run_with_a_stale_evaluation_is_evaluated_again_from_its_final_weights(tmp_path):
    import json
    import shutil

    from edge_verl_lab.demo.run import final_weights
    from edge_verl_lab.study.runner import EVAL_FILE, StudyConfig, StudyError, evaluation_is_current, reevaluate

    config = StudyConfig(task="copy", methods=("grpo",), seeds=(1,), steps=2, evaluation="exact", eval_samples=1, out=tmp_path)
    demo = config.demo_config("grpo", 1)
    model = build_warm_model(model_recipe(DemoConfig(task="copy", seed=1, warm_start_steps=1, out=tmp_path)), tmp_path / "model")
    shutil.copytree(model, final_weights(demo))
    evaluation = config.run_folder("grpo", 1) / EVAL_FILE
    assert not evaluation_is_current(config, evaluation) and reevaluate(config, "grpo", 1)
    first = json.loads(evaluation.read_text())
    assert first["heldout"]["n"] == 10 and evaluation_is_current(config, evaluation)
    assert not reevaluate(config, "grpo", 1), "a current evaluation is kept"
    first["heldout"]["problems_sha256"] = "another split"
    evaluation.write_text(json.dumps(first))
    assert reevaluate(config, "grpo", 1) and json.loads(evaluation.read_text()) == {**first, "heldout": {
        **first["heldout"], "problems_sha256": json.loads(evaluation.read_text())["heldout"]["problems_sha256"]}}
    evaluation.write_text("{}")
    shutil.rmtree(final_weights(demo))
    with pytest.raises(StudyError, match="final weights"):
        reevaluate(config, "grpo", 1)


def test_models_load_one_at_a_time_and_each_is_its_folder_s_tensors(warm_model, tmp_path):
    # transformers' from_pretrained in two threads at once left meta tensors and un-tied heads (measured): the study
    # evaluates its runs in threads, so loads take a lock, and each loaded model is checked against its files
    import threading

    import torch

    from edge_verl_lab.study.exact_eval import check_loaded, load_model

    errors, heads = [], []

    def load():
        try:
            model, _ = load_model(warm_model)
            heads.append(model.get_output_embeddings().weight.detach().clone())
        except Exception as error:  # noqa: BLE001  (the test reports any)
            errors.append(error)

    threads = [threading.Thread(target=load) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and len(heads) == 4 and all(torch.equal(head, heads[0]) for head in heads)
    model, _ = load_model(warm_model)
    with torch.no_grad():
        model.get_output_embeddings().weight[0, 0] += 1.0  # tied: the embedding moves with it, the file does not
    with pytest.raises(RuntimeError, match="is not the file's"):
        check_loaded(model, warm_model)
