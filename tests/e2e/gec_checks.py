"""What a GEC run must show, whichever rollout served it (tests/e2e/test_gec_controls_on_cpu.py with the
plugin's HF rollout, tests/e2e/test_vllm_rollout_on_cpu.py with verl's vLLM rollout).

verl's own rollout dump (trainer.rollout_data_dir) shows the TRAINED responses and their final rewards;
GEC's metrics show what was corrected and how many trained tokens were injected. With the recorder
(tests/e2e/gec_recorder.py) the token layout of every response is checked against the token ids the
rollout server itself returned.
"""

import json
from collections import Counter

import pytest

from edge_verl.algorithms.gec import ORIGINS, REFLECTION_PHRASE, injected_answer_text, strip_end_tokens
from edge_verl_lab.demo import task

BRANCHES = ("regenerate", "inject_answer", "replace_solution")  # the order of edge_gec.probabilities
INJECTED = ("phrase", "answer", "solution")  # the origins GEC wrote (edge_verl.algorithms.gec.NOT_SAMPLED)
EDA_KEYS = (
    "zero_variance_group_frac", "adv_var_before", "adv_var_after", "max_abs_adv", "entropy_ratio_min", "entropy_ratio_max",
    "abs_adv_p1", "abs_adv_p50", "abs_adv_p99", "entropy_ratio_p1", "entropy_ratio_p50", "entropy_ratio_p99",
)


def read_dump(folder):
    files = sorted(folder.glob("*.jsonl"))
    assert files, f"no dump in {folder}"
    return [json.loads(line) for line in files[0].read_text().splitlines() if line.strip()]


def ground_truth(row):
    gts = row["gts"]
    return str(gts["ground_truth"] if isinstance(gts, dict) else gts)


def check_corrected_responses(dump, metrics):
    """The trained responses of a 1-step GEC run with the paper's answer source and first attempts kept
    (``dump``: verl's rollout dump): each corrected response is classified by the text its branch writes,
    the per-branch counts are GEC's, the injected-token count is the sum of what each branch injected, and a
    response left as sampled is a correct one."""
    assert len(dump) == 64
    regenerated = [row for row in dump if REFLECTION_PHRASE in row["output"]]
    answered = [row for row in dump if row["output"].endswith(injected_answer_text(ground_truth(row)))]
    replaced = [row for row in dump if row["output"] == task.make_solution(ground_truth(row)) and row not in answered]
    assert metrics["edge_verl/gec/responses"] == 64
    assert metrics["edge_verl/gec/corrected_regenerate"] == len(regenerated)
    assert metrics["edge_verl/gec/corrected_inject_answer"] == len(answered)
    assert metrics["edge_verl/gec/corrected_replace_solution"] == len(replaced)
    assert metrics["edge_verl/gec/corrected"] == len(regenerated) + len(answered) + len(replaced) > 0
    assert all(row["score"] == 1.0 for row in answered + replaced), "an injected gold answer grades right"
    corrected = regenerated + answered + replaced
    assert all(row["score"] == 1.0 for row in dump if row not in corrected), "only correct responses may stay as sampled"
    if regenerated:
        assert "edge_verl/gec/regenerate_became_correct" in metrics
    for key in EDA_KEYS:
        assert f"edge_verl/edge_eda/{key}" in metrics
    # the demo's EDGE runs EDA in the reference's form: the actor loss reports the entropy term's share
    # (0 when every group ties after the corrections: no advantage, no gradient through either path)
    share = metrics["actor/edge_eda/entropy_grad_share"]
    assert 0.0 <= share < 1.0
    assert (share > 0.0) == (metrics["edge_verl/edge_eda/zero_variance_group_frac"] < 1.0)
    # byte-level tokens: the phrase per regeneration; the answer sentence or the solution + EOS per injection
    trained_tokens = metrics["response_length/mean"] * 64
    injected_tokens = metrics["edge_verl/gec/injected_token_frac"] * trained_tokens
    expected = len(REFLECTION_PHRASE.encode()) * len(regenerated)
    expected += sum(len(injected_answer_text(ground_truth(row)).encode()) + 1 for row in answered)
    expected += sum(len(task.make_solution(ground_truth(row)).encode()) + 1 for row in replaced)
    assert injected_tokens == pytest.approx(expected, rel=1e-4)
    return {"regenerate": regenerated, "inject_answer": answered, "replace_solution": replaced}


def check_token_accounting(records, dump, tokenizer, first_sample_tokens):
    """Every response GEC returned is built from the server's own token ids, never re-tokenised text.

    ``records``: one per response, from tests/e2e/gec_recorder.py: the prompt ids, each server call (the
    prompt ids sent, max_tokens asked, token ids returned), the final response ids and GEC's record.
    """
    eos = tokenizer.eos_token_id
    phrase = tokenizer.encode(REFLECTION_PHRASE, add_special_tokens=False)
    assert len(records) == len(dump) == 64
    branches = Counter()
    for record in records:
        calls, response, info = record["calls"], record["response_ids"], record["gec"]
        first = calls[0]
        sampled = first["token_ids"]
        # the first sample: the prompt as given, capped at first_sample_tokens, nothing after an EOS
        assert first["prompt_ids"] == record["prompt_ids"] and first["max_tokens"] == first_sample_tokens
        assert 0 < len(sampled) <= first_sample_tokens and eos not in sampled[:-1]
        assert info["original_length"] == len(sampled)
        body = strip_end_tokens(sampled, {eos, *tokenizer.all_special_ids})  # as the loop strips them
        span = (info["injected_start"], info["injected_end"])
        branches[info["branch"]] += 1
        if info["branch"] is None:
            assert len(calls) == 1 and response == sampled and span == (0, 0)
            continue
        assert record["response_mask"] == [1] * len(response)
        if info["branch"] == "regenerate":
            assert len(calls) == 2
            continued = calls[1]
            # the continuation is asked for after the sampled body and the phrase's tokens, and is kept whole
            assert continued["prompt_ids"] == record["prompt_ids"] + body + phrase
            assert continued["max_tokens"] == info["continuation_budget"]
            assert len(continued["token_ids"]) == info["continuation_tokens"] <= info["continuation_budget"]
            assert response == body + phrase + continued["token_ids"]
            assert span == (len(body), len(body) + len(phrase))
        elif info["branch"] == "inject_answer":
            answer = tokenizer.encode(injected_answer_text(record["ground_truth"]), add_special_tokens=False)
            assert len(calls) == 1 and response == body + answer + [eos]
            assert span == (len(body), len(response))
        else:
            solution = tokenizer.encode(task.make_solution(record["ground_truth"]), add_special_tokens=False)
            assert len(calls) == 1 and response == solution + [eos] and span == (0, len(response))
    # the responses recorded are the responses trained (verl's dump decodes them without special tokens)
    decoded = Counter(tokenizer.decode(record["response_ids"], skip_special_tokens=True) for record in records)
    assert decoded == Counter(row["output"] for row in dump)
    return branches


def has_gradient(metrics):
    """Some group's rewards differ after the corrections: the surrogate has a gradient (with every group tied,
    every advantage is 0 and no gradient share is defined)."""
    return metrics["edge_verl/gec/final/zero_variance_group_frac"] < 1.0


def check_origin_metrics(metrics):
    """Every origin has a token share and (when there is a gradient) a gradient share; each set sums to 1;
    the injected tokens' share equals GEC's count of them; the sampled-only statistics are logged."""
    statistics = ("token_share", "grad_share") if has_gradient(metrics) else ("token_share",)
    for statistic in statistics:
        shares = [metrics[f"actor/gec/{origin}/{statistic}"] for origin in ORIGINS]
        assert sum(shares) == pytest.approx(1.0, abs=1e-5), (statistic, shares)
        assert all(0.0 <= share <= 1.0 for share in shares)
    if not has_gradient(metrics):
        assert not any(key.endswith("/grad_share") for key in metrics if key.startswith("actor/gec/"))
    assert metrics["actor/gec/sampled/token_share"] > 0
    injected_share = sum(metrics[f"actor/gec/{origin}/token_share"] for origin in INJECTED)
    assert injected_share == pytest.approx(metrics["edge_verl/gec/injected_token_frac"], rel=1e-3)
    for key in ("adv_var", "zero_variance_group_frac", "adv_var_uncorrected"):
        assert f"edge_verl/gec/sampled/{key}" in metrics
    check_sampled_outcomes(metrics)
    assert not any(key.rsplit("/", 1)[-1].startswith("_") for key in metrics if key.startswith("actor/gec/"))


def check_sampled_outcomes(metrics):
    """The responses as sampled, before GEC: a correction only ever turns a wrong response right, so the
    sampled reward is at most the trained one; the all-wrong groups are GEC's own count of them; the
    first attempts' entropy is logged (actor/entropy includes the injected text)."""
    sampled = {key.rsplit("/", 1)[-1]: value for key, value in metrics.items() if key.startswith("edge_verl/gec/sampled/")}
    assert sampled["score_mean"] == pytest.approx(sampled["correct_frac"])  # 0/1 rewards
    assert sampled["score_mean"] <= metrics["critic/score/mean"] + 1e-6
    for key in ("correct_frac", "all_wrong_group_frac", "all_right_group_frac"):
        assert 0.0 <= sampled[key] <= 1.0, key
    assert (sampled["all_wrong_group_frac"] > 0) == (metrics["edge_verl/gec/all_wrong_groups"] > 0)
    assert sampled["all_wrong_group_frac"] + sampled["all_right_group_frac"] <= sampled["zero_variance_group_frac"] + 1e-6
    assert 0.0 < sampled["entropy"] < 10.0
