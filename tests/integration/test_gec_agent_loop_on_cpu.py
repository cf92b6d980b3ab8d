"""Pieces of the edge_gec agent loop that need verl's agent-loop module but no rollout."""

import asyncio

import pytest

from omegaconf import OmegaConf

from edge_verl.algorithms.gec import REFLECTION_PHRASE, CorrectionRecord, injected_answer_text
from edge_verl.algorithms.gec_rendezvous import GroupRendezvous
from edge_verl.integration.rollout import check_gec_supported, group_rendezvous

pytestmark = pytest.mark.verl


async def _group(rendezvous, uid, verdicts, timeout_s=5.0):
    """All responses of one group report, in the order given (index, correct), and wait together."""
    size = len(verdicts)
    return await asyncio.gather(*[rendezvous.wait_for_group(uid, i, size, correct, timeout_s) for i, correct in verdicts])


def test_every_sibling_gets_the_verdicts_ordered_by_sample_index():
    rendezvous = GroupRendezvous()
    # they arrive as 2, 0, 1; each gets [index 0, 1, 2] = [False, True, False]
    results = asyncio.run(_group(rendezvous, "g", [(2, False), (0, False), (1, True)]))
    assert results == [[False, True, False]] * 3 and rendezvous.open_groups == frozenset()


def test_a_timed_out_wait_explains_itself_and_leaves_no_group_behind():
    rendezvous = GroupRendezvous()
    with pytest.raises(RuntimeError, match="only 1 of 2 responses of uid lonely"):
        asyncio.run(rendezvous.wait_for_group("lonely", 0, 2, False, 0.05))
    assert rendezvous.open_groups == frozenset()


def test_a_cancelled_waiter_leaves_no_group_behind():
    rendezvous = GroupRendezvous()

    async def cancel_while_waiting():
        waiter = asyncio.ensure_future(rendezvous.wait_for_group("g", 0, 2, False, 5.0))
        await asyncio.sleep(0)  # it registers and waits for its sibling
        assert rendezvous.open_groups == {"g"}
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter

    asyncio.run(cancel_while_waiting())
    assert rendezvous.open_groups == frozenset()


def test_the_same_uid_in_a_later_step_does_not_see_earlier_verdicts():
    rendezvous = GroupRendezvous()

    async def steps():
        first = await _group(rendezvous, "g", [(0, True), (1, True)])
        with pytest.raises(RuntimeError, match="only 1 of 2"):  # a step whose sibling never came
            await rendezvous.wait_for_group("g", 1, 2, True, 0.05)
        # had either step left its group, index 0 would be reported twice or its True would be read here
        second = await _group(rendezvous, "g", [(1, False), (0, False)])
        return first, second

    assert asyncio.run(steps()) == ([[True, True]] * 2, [[False, False]] * 2)
    assert rendezvous.open_groups == frozenset()


def test_a_sample_index_reported_twice_is_refused():
    rendezvous = GroupRendezvous()

    async def duplicate():
        first = asyncio.ensure_future(rendezvous.wait_for_group("g", 0, 2, False, 0.2))
        await asyncio.sleep(0)
        with pytest.raises(RuntimeError, match="sample index 0 of uid g reported twice"):
            await rendezvous.wait_for_group("g", 0, 2, True, 0.2)
        with pytest.raises(RuntimeError, match="only 1 of 2"):
            await first

    asyncio.run(duplicate())
    assert rendezvous.open_groups == frozenset()


def test_responses_on_one_event_loop_share_its_rendezvous_and_no_other():
    # verl runs a worker's trajectories as tasks of its event loop: the loop is what siblings share
    async def rendezvous_of_two_tasks():
        async def rendezvous():
            return group_rendezvous()

        return await asyncio.gather(rendezvous(), rendezvous())

    (one, same), (other, _) = asyncio.run(rendezvous_of_two_tasks()), asyncio.run(rendezvous_of_two_tasks())
    assert one is same and one is not other


def _config(**rollout):
    return OmegaConf.create(
        {"actor_rollout_ref": {"rollout": {"calculate_log_probs": False, **rollout}}, "algorithm": {"edge_gec": {"seed": 1}}}
    )


def test_gec_refuses_rollout_log_probs_and_reads_its_options():
    assert check_gec_supported(_config()).seed == 1
    with pytest.raises(ValueError, match="calculate_log_probs=False"):
        check_gec_supported(_config(calculate_log_probs=True))


def _loop_config(enable=True):
    return OmegaConf.create(
        {
            "actor_rollout_ref": {"rollout": {"calculate_log_probs": False, "n": 2, "prompt_length": 8, "response_length": 8}},
            "algorithm": {"edge_gec": {"enable": enable}},
            "reward": {"custom_reward_function": {"path": "pkg://edge_verl.reward", "name": "compute_score"}},
            "data": {},
        }
    )


def _make_loop(config, tokenizer):
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap

    from edge_verl.integration.rollout import GecAgentLoop

    return GecAgentLoop(
        trainer_config=DictConfigWrap(config), server_manager=None, tokenizer=tokenizer, processor=None,
        dataset_cls=None, data_config=DictConfigWrap(config.data),
    )


def test_the_runs_setup_is_done_once_per_worker_not_once_per_sample(tmp_path, monkeypatch):
    from verl.trainer.ppo import reward

    from edge_verl_lab.demo.tiny import build_tokenizer

    tokenizer = build_tokenizer(tmp_path)
    loads = []
    real = reward.get_custom_reward_fn
    monkeypatch.setattr(reward, "get_custom_reward_fn", lambda config: loads.append(config) or real(config))
    config = _loop_config()
    loops = [_make_loop(config, tokenizer) for _ in range(5)]  # verl builds one loop per trajectory
    assert len(loads) == 1 and len({id(loop.reward_fn) for loop in loops}) == 1
    assert loops[0].eos_id == tokenizer.eos_token_id
    _make_loop(_loop_config(), tokenizer)  # another run (a new config object) sets up afresh
    assert len(loads) == 2


def test_a_gec_row_in_a_run_without_the_switch_is_refused(tmp_path):
    from edge_verl_lab.demo.tiny import build_tokenizer

    with pytest.raises(ValueError, match="set algorithm.edge_gec.enable=True"):
        _make_loop(_loop_config(enable=False), build_tokenizer(tmp_path))


# --- the correction budget: the first sample's own cap, the continuation beyond it, the prompt gate ----------


class _Server:
    """Stands in for verl's rollout server: records each request and answers with the next of ``replies``
    (token id lists) or, without replies, with ``max_tokens`` copies of a non-EOS byte (a response truncated
    at its cap: the long failures GEC's regenerate branch targets)."""

    def __init__(self, response_length, replies=()):
        self.requests = []
        self.response_length = response_length  # verl's servers' max_tokens when the request sets none
        self.replies = list(replies)

    async def generate(self, request_id, prompt_ids, sampling_params, **kwargs):
        from verl.workers.rollout.replica import TokenOutput

        self.requests.append((list(prompt_ids), dict(sampling_params)))
        if self.replies:
            return TokenOutput(token_ids=list(self.replies.pop(0)), log_probs=None)
        return TokenOutput(token_ids=[ord("x")] * int(sampling_params.get("max_tokens", self.response_length)), log_probs=None)


def _budget_loop(tmp_path, response_length, replies=(), train_files=None, model_path=None, **gec):
    """A GEC loop on the tiny byte-level tokenizer (saved in ``tmp_path``) and a ``_Server``; regenerate
    forced unless ``gec`` says otherwise."""
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap

    from edge_verl_lab.demo.tiny import build_tokenizer
    from edge_verl.integration.rollout import GecAgentLoop

    config = _loop_config()
    config.actor_rollout_ref.rollout.response_length = response_length
    config.actor_rollout_ref.rollout.prompt_length = 64
    if model_path is not None:
        config.actor_rollout_ref.model = {"path": str(model_path)}
    if train_files is not None:
        config.data.train_files = train_files
    config.algorithm.edge_gec.update({"force_regenerate": True, "continuation_tokens": 12, **gec})
    server = _Server(response_length, replies)
    asyncio.set_event_loop(asyncio.new_event_loop())  # verl's loop binds the event loop it is built in
    loop = GecAgentLoop(
        trainer_config=DictConfigWrap(config), server_manager=server, tokenizer=build_tokenizer(tmp_path),
        processor=None, dataset_cls=None, data_config=DictConfigWrap(config.data),
    )
    return loop, server


SAMPLE = {
    "raw_prompt": [{"role": "user", "content": "1+1?"}],
    "uid": "u0",
    "session_id": 0,
    "reward_model": {"ground_truth": "2"},
    "extra_info": {"answer": "2"},
    "data_source": "demo",
}


def _run_all(loop, rows):
    """The loop's outputs for ``SAMPLE`` updated by each of ``rows``, one after the other on one event loop."""

    async def run_rows():
        return [await loop.run({"temperature": 1.0}, **{**SAMPLE, **row}) for row in rows]

    event_loop = asyncio.get_event_loop()
    try:
        return event_loop.run_until_complete(run_rows())
    finally:
        event_loop.close()
        asyncio.set_event_loop(None)


def _run(loop, **row):
    return _run_all(loop, [row])[0]


def test_a_response_truncated_at_its_cap_gets_the_full_continuation(tmp_path):
    # response_length 60 = first sample 16 + phrase (31 bytes of " Wait! Something is wrong here.") + 12 + 1 spare.
    loop, server = _budget_loop(tmp_path, 60, first_sample_tokens=16)
    output = _run(loop)
    (_, first), (continuation_prompt, second) = server.requests
    assert first["max_tokens"] == 16 and second["max_tokens"] == 12
    phrase = list(" Wait! Something is wrong here.".encode())
    info = CorrectionRecord.from_dict(output.extra_fields["edge_verl_gec"])
    assert output.response_ids == [ord("x")] * 16 + loop._encode(" Wait! Something is wrong here.") + [ord("x")] * 12
    assert len(phrase) == 31 and len(output.response_ids) == 16 + 31 + 12
    assert (info.continuation_tokens, info.continuation_budget, info.continuation_requested) == (12, 12, 12)
    assert (info.injected_start, info.injected_end, info.original_length) == (16, 47, 16)


def test_without_a_first_sample_cap_the_correction_is_cut_to_fit(tmp_path):
    # The deviation kept by default: the first sample fills response_length (40), so the body is cut to make
    # room for the phrase and 1 continuation token: 40 = 8 + 31 + 1.
    loop, server = _budget_loop(tmp_path, 40)
    output = _run(loop)
    (_, first), (_, second) = server.requests
    assert "max_tokens" not in first and second["max_tokens"] == 1
    info = CorrectionRecord.from_dict(output.extra_fields["edge_verl_gec"])
    assert len(output.response_ids) == 40 and (info.continuation_budget, info.continuation_requested) == (1, 12)


def test_prompts_at_or_over_the_gate_are_left_as_sampled(tmp_path):
    loop, server = _budget_loop(tmp_path, 60, first_sample_tokens=16, max_prompt_tokens=8)
    output = _run(loop)
    info = CorrectionRecord.from_dict(output.extra_fields["edge_verl_gec"])
    assert len(server.requests) == 1 and info.branch is None and info.reason == "prompt_too_long"
    assert info.continuation_tokens is None and (info.injected_start, info.injected_end) == (0, 0)
    assert info.prompt_length >= 8 and output.response_ids == [ord("x")] * 16


def test_a_first_sample_cap_without_room_for_the_correction_is_refused(tmp_path):
    with pytest.raises(ValueError, match="raise response_length to at least 59"):
        _budget_loop(tmp_path, 58, first_sample_tokens=16)
    config = _config(response_length=200)
    config.algorithm.edge_gec.update({"first_sample_tokens": 190, "continuation_tokens": 20})
    with pytest.raises(ValueError, match="first_sample_tokens=190"):
        check_gec_supported(config)



# --- end tokens: a chat model's sample may end in several of them -------------------------------------------


def _chat_model_folder(tmp_path):
    """The tiny tokenizer (eos <|im_end|>, pad <|endoftext|>) with a generation config that, like Qwen2.5's,
    lists both end tokens; returns (folder, im_end id, endoftext id)."""
    from transformers import GenerationConfig

    from edge_verl_lab.demo.tiny import build_tokenizer

    tokenizer = build_tokenizer(tmp_path)
    im_end, endoftext = tokenizer.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>"])
    GenerationConfig(eos_token_id=[endoftext, im_end]).save_pretrained(str(tmp_path))
    return tmp_path, im_end, endoftext


def test_the_eos_ids_are_verls_the_tokenizers_first_then_the_generation_configs(tmp_path):
    from edge_verl.integration.rollout import eos_token_ids

    folder, im_end, endoftext = _chat_model_folder(tmp_path)
    loop, _ = _budget_loop(tmp_path, 60, model_path=folder)
    assert loop.eos_ids == (im_end, endoftext) and loop.eos_id == im_end  # the one EOS an injection ends with
    assert {im_end, endoftext} <= loop.end_ids and set(loop.tokenizer.all_special_ids) <= loop.end_ids
    # without a model folder the tokenizer's eos stands alone
    assert eos_token_ids(loop.tokenizer, {}) == (im_end,)


@pytest.mark.parametrize("branch", ["inject_answer", "regenerate"])
def test_no_end_token_is_left_before_the_appended_text(tmp_path, branch):
    # The first sample ends "... <|im_end|><|endoftext|>" (byte tokens "abc"); both go before the correction.
    folder, im_end, endoftext = _chat_model_folder(tmp_path)
    body, continuation = [ord(c) for c in "abc"], [ord(c) for c in "de"] + [im_end]
    probabilities = [0.0, 1.0, 0.0] if branch == "inject_answer" else [1.0, 0.0, 0.0]
    loop, server = _budget_loop(
        tmp_path, 120, replies=[body + [im_end, endoftext], continuation], model_path=folder,
        force_regenerate=False, probabilities=probabilities,
    )
    output = _run(loop)
    info = CorrectionRecord.from_dict(output.extra_fields["edge_verl_gec"])
    assert info.branch == branch and info.original_length == 5
    if branch == "inject_answer":
        appended = loop._encode(injected_answer_text("2")) + [im_end]
        assert output.response_ids == body + appended and len(server.requests) == 1
    else:
        appended = loop._encode(REFLECTION_PHRASE) + continuation
        assert server.requests[1][0] == output.prompt_ids + body + loop._encode(REFLECTION_PHRASE)
        assert output.response_ids == body + appended
    assert (info.injected_start, output.response_ids[: info.injected_start]) == (3, body)
    assert not {im_end, endoftext} & set(output.response_ids[:-1])


# --- first_attempt=drop: the correction without the wrong first response -------------------------------------


def test_a_dropped_first_attempt_regenerates_from_the_prompt_and_the_phrase(tmp_path):
    # response_length 40, phrase 31 byte tokens: continuation budget min(12, 40 - 31) = 9 (the body would
    # have taken room; without it nothing is cut). The continuation is asked for after prompt + phrase.
    loop, server = _budget_loop(tmp_path, 40, first_attempt="drop")
    output = _run(loop)
    phrase = loop._encode(REFLECTION_PHRASE)
    (first_prompt, _), (continuation_prompt, second) = server.requests
    assert continuation_prompt == first_prompt + phrase and second["max_tokens"] == 9
    assert output.response_ids == phrase + [ord("x")] * 9
    info = CorrectionRecord.from_dict(output.extra_fields["edge_verl_gec"])
    assert (info.injected_start, info.injected_end, info.original_length) == (0, 31, 40)
    assert (info.continuation_tokens, info.continuation_budget, info.continuation_requested) == (9, 9, 12)


@pytest.mark.parametrize("first_attempt", ["drop", "keep"])
def test_a_dropped_first_attempt_injects_the_answer_alone(tmp_path, first_attempt):
    loop, _ = _budget_loop(tmp_path, 120, force_regenerate=False, probabilities=[0.0, 1.0, 0.0], first_attempt=first_attempt)
    output = _run(loop)
    answer = loop._encode(injected_answer_text("2")) + [loop.eos_id]
    info = CorrectionRecord.from_dict(output.extra_fields["edge_verl_gec"])
    # keep: the 120 - len(answer) first sampled tokens, then the answer; drop: the answer alone
    body = [ord("x")] * (120 - len(answer)) if first_attempt == "keep" else []
    assert output.response_ids == body + answer
    assert (info.injected_start, info.injected_end) == (len(body), len(body) + len(answer))


@pytest.mark.parametrize("first_attempt", ["drop", "keep"])
def test_replacing_the_solution_is_the_same_whatever_the_first_attempt(tmp_path, first_attempt):
    loop, _ = _budget_loop(tmp_path, 60, force_regenerate=False, probabilities=[0.0, 0.0, 1.0], first_attempt=first_attempt)
    output = _run(loop, extra_info={"answer": "2", "solution": "1+1=\\boxed{2}"})
    solution = loop._encode("1+1=\\boxed{2}") + [loop.eos_id]
    info = CorrectionRecord.from_dict(output.extra_fields["edge_verl_gec"])
    assert output.response_ids == solution and (info.injected_start, info.injected_end) == (0, len(solution))


# --- answer_source=placebo: another training problem's answer, graded wrong against this row's gold ---------


def _train_file(path, rows):
    """A training parquet as scripts/prepare_data.py writes it: (problem, answer, solution) rows."""
    from edge_verl.data import make_row, write_parquet

    return str(write_parquet(
        [make_row(p, a, s, data_source="demo", split="train", index=i, gec=True) for i, (p, a, s) in enumerate(rows)], path
    ))


# Row 0 is this test's own problem; row 1's answer equals 2 but not as text; rows 2-4 are wrong answers
# for "1+1?", but row 3's solution boxes 2 and row 4 has no solution.
PLACEBO_ROWS = [
    ("1+1?", "2", "1+1=\\boxed{2}"),
    ("8/4?", "\\frac{4}{2}", "8/4=\\boxed{\\frac{4}{2}}"),
    ("1+2?", "3", "1+2=\\boxed{3}"),
    ("3+4?", "7", "oops \\boxed{2}"),
    ("2+3?", "5", ""),
]
INJECT = dict(force_regenerate=False, probabilities=[0.0, 1.0, 0.0])
REPLACE = dict(force_regenerate=False, probabilities=[0.0, 0.0, 1.0])


# This row has a reference solution, so that a replace_solution draw is not a fallback (decided as for gold).
OWN = {"answer": "2", "solution": "1+1=\\boxed{2}"}


def _placebo_runs(tmp_path, rows, uids, **gec):
    train = _train_file(tmp_path / "train.parquet", rows)
    loop, _ = _budget_loop(tmp_path, 200, train_files=[train], answer_source="placebo", **gec)
    outputs = _run_all(loop, [{"uid": uid, "extra_info": OWN} for uid in uids])
    return loop, outputs, [CorrectionRecord.from_dict(output.extra_fields["edge_verl_gec"]) for output in outputs]


def test_a_placebo_answer_comes_from_another_problem_and_grades_wrong(tmp_path):
    from edge_verl.reward import compute_score

    loop, outputs, infos = _placebo_runs(tmp_path, PLACEBO_ROWS, [f"u{i}" for i in range(12)], **INJECT)
    for output, info in zip(outputs, infos):
        # never row 0 (the same answer) nor row 1 (a right answer written otherwise): rows 2-4 only
        assert info.branch == "inject_answer" and info.placebo_index in (2, 3, 4)
        answer = PLACEBO_ROWS[info.placebo_index][1]
        assert output.response_ids[info.injected_start :] == loop._encode(injected_answer_text(answer)) + [loop.eos_id]
        final = loop.tokenizer.decode(output.response_ids, skip_special_tokens=True)
        assert compute_score(data_source="demo", solution_str=final, ground_truth="2")["score"] == 0.0
    assert len({info.placebo_index for info in infos}) > 1  # drawn per response, not one fixed row


def test_a_placebo_solution_must_grade_wrong_too(tmp_path):
    # replace_solution: row 2 is the only problem with a wrong answer AND a wrong solution
    loop, outputs, infos = _placebo_runs(tmp_path, PLACEBO_ROWS, [f"u{i}" for i in range(6)], **REPLACE)
    assert all(info.branch == "replace_solution" for info in infos)
    assert [info.placebo_index for info in infos] == [2] * 6
    assert all(output.response_ids == loop._encode("1+2=\\boxed{3}") + [loop.eos_id] for output in outputs)


def test_placebos_are_seeded_per_response_and_leave_the_decisions_alone(tmp_path):
    uids = [f"u{i}" for i in range(12)]
    paper = dict(force_regenerate=False, probabilities=[0.5, 0.25, 0.25])
    _, _, first = _placebo_runs(tmp_path / "a", PLACEBO_ROWS, uids, **paper)
    _, _, again = _placebo_runs(tmp_path / "b", PLACEBO_ROWS, uids, **paper)
    _, _, reseeded = _placebo_runs(tmp_path / "c", PLACEBO_ROWS, uids, seed=7, **paper)
    assert [info.placebo_index for info in first] == [info.placebo_index for info in again]
    assert [info.placebo_index for info in first] != [info.placebo_index for info in reseeded]
    # the branch drawn is the gold run's (the placebo draw has a stream of its own)
    loop, _ = _budget_loop(tmp_path / "gold", 200, **paper)
    outputs = _run_all(loop, [{"uid": uid, "extra_info": OWN} for uid in uids])
    gold = [CorrectionRecord.from_dict(output.extra_fields["edge_verl_gec"]) for output in outputs]
    assert [info.branch for info in first] == [info.branch for info in gold]
    assert {info.branch for info in first} >= {"inject_answer", "regenerate"}
    assert all((info.placebo_index is None) == (info.branch == "regenerate") for info in first)


def test_no_placebo_when_every_other_answer_grades_right(tmp_path):
    rows = [("1+1?", "2", ""), ("a", "\\frac{4}{2}", ""), ("b", "2.0", ""), ("c", "4/2", "")]
    loop, outputs, infos = _placebo_runs(tmp_path, rows, ["u0", "u1"], **INJECT)
    for output, info in zip(outputs, infos):
        assert (info.branch, info.reason, info.placebo_index) == (None, "no_placebo", None)
        assert (info.injected_start, info.injected_end) == (0, 0) and output.response_ids == [ord("x")] * 200


def test_at_most_16_placebo_candidates_are_graded(tmp_path, monkeypatch):
    # 40 other problems, a reward that calls every boxed answer right: the first sample is graded (wrong),
    # then 16 candidates, then the response is left as sampled.
    rows = [("1+1?", "2", "")] + [(f"p{n}", str(n), "") for n in range(10, 50)]
    train = _train_file(tmp_path / "train.parquet", rows)
    loop, _ = _budget_loop(tmp_path, 200, train_files=train, answer_source="placebo", **INJECT)
    graded = []
    loop.reward_fn = lambda solution_str, **kwargs: graded.append(solution_str) or float("\\boxed{" in solution_str)
    info = CorrectionRecord.from_dict(_run(loop).extra_fields["edge_verl_gec"])
    assert info.reason == "no_placebo" and len(graded) == 1 + 16 and len(set(graded[1:])) == 16


def test_the_placebo_pool_reads_every_training_file_in_order(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from edge_verl.integration.preflight import read_placebo_pool

    first = _train_file(tmp_path / "first.parquet", [("q0", "2", "s0"), ("q1", " 3 ", "")])
    # a file without extra_info: the answer is the first ground truth, no solution; an empty one lends nothing
    second = tmp_path / "second.parquet"
    ground_truths = [{"ground_truth": "\\frac{1}{2}"}, {"ground_truth": ""}, {"ground_truth": "9"}]
    pq.write_table(pa.table({"reward_model": ground_truths}), second)
    pool = read_placebo_pool([first, str(second)])
    assert [(p.row, p.answer, p.solution, p.answer_key) for p in pool] == [
        (0, "2", "s0", "2"), (1, "3", "", "3"), (2, "\\frac{1}{2}", "", "\\frac{1}{2}"), (4, "9", "", "9"),
    ]
    assert [p.row for p in read_placebo_pool(first)] == [0, 1]  # one path, as a string


def test_a_placebo_run_without_usable_training_files_is_refused_at_setup(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from edge_verl.integration.preflight import read_placebo_pool

    one = _train_file(tmp_path / "one.parquet", [("q", "2", "s")])
    with pytest.raises(ValueError, match=r"hold 1 problem\(s\) with an answer .* at least 2 are needed"):
        _budget_loop(tmp_path, 200, train_files=one, answer_source="placebo")
    with pytest.raises(ValueError, match=r"hold 0 problem\(s\)"):
        read_placebo_pool(None)
    with pytest.raises(ValueError, match="cannot be read as parquet"):
        read_placebo_pool([one, str(tmp_path / "missing.parquet")])
    (tmp_path / "train.json").write_text("[]")
    with pytest.raises(ValueError, match="train.json' cannot be read as parquet"):
        read_placebo_pool(str(tmp_path / "train.json"))
    bare = tmp_path / "bare.parquet"
    pq.write_table(pa.table({"prompt": ["q0", "q1"]}), bare)
    with pytest.raises(ValueError, match="neither an extra_info nor a reward_model column"):
        read_placebo_pool([str(bare)])
    # answer_source=gold reads no training file
    loop, _ = _budget_loop(tmp_path, 200, train_files=str(bare))
    assert loop.placebo_pool == ()


# --- placebo_reward: the placebo rewarded as its gold twin (as_gold) or graded like any response -------------


class _VerlRewardLoop:
    """verl's reward path in process: the real naive reward manager (on the loop's reward function) behind a
    stand-in for a reward worker's Ray handle, and verl's AgentLoopWorker methods that score each output and
    assemble the batch, on a worker that holds only what those methods read (no Ray, no server).
    ``scored``: the reward manager's results, one per output verl's reward loop scored itself."""

    def __init__(self, loop, prompt_length=64):
        from types import SimpleNamespace

        from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
        from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager

        self.manager = NaiveRewardManager(None, loop.tokenizer, loop.reward_fn)  # binds the current event loop
        self.scored = []
        worker = AgentLoopWorker.__new__(AgentLoopWorker)
        worker.tokenizer, worker.processor, worker.mm_processor_kwargs = loop.tokenizer, None, {}
        worker.rollout_config = SimpleNamespace(prompt_length=prompt_length, response_length=loop.response_length)
        worker.distillation_enabled = False
        worker.reward_loop_worker_handles = [SimpleNamespace(compute_score=SimpleNamespace(remote=self._compute_score))]
        self.worker = worker

    async def _compute_score(self, data):
        result = await self.manager.run_single(data)
        self.scored.append(result)
        return result


def _through_verl(loop, rows, first=None):
    """Each of ``rows`` (updates of ``SAMPLE``) run by the GEC loop, then through verl's reward loop and batch
    assembly (``_VerlRewardLoop``); ``first``: the index of the output to put first in the batch (verl takes
    the batch's extra-info keys from it). Returns (outputs, the reward_score each output left the GEC loop
    with, GEC records, the batch, the reward loop)."""
    reward_loop = _VerlRewardLoop(loop)

    async def run_rows():
        outputs, set_by_gec, internals = [], [], []
        for row in rows:
            kwargs = {**SAMPLE, **row}
            output = await loop.run({"temperature": 1.0}, **kwargs)
            outputs.append(output)
            set_by_gec.append(output.reward_score)
            internals.append(await reward_loop.worker._agent_loop_postprocess(output, False, **kwargs))
        return outputs, set_by_gec, internals

    event_loop = asyncio.get_event_loop()
    try:
        outputs, set_by_gec, internals = event_loop.run_until_complete(run_rows())
    finally:
        event_loop.close()
        asyncio.set_event_loop(None)
    order = list(range(len(rows))) if first is None else [first, *(i for i in range(len(rows)) if i != first)]
    batch = reward_loop.worker._postprocess([internals[i] for i in order])
    records = [CorrectionRecord.from_dict(output.extra_fields["edge_verl_gec"]) for output in outputs]
    return outputs, set_by_gec, records, (order, batch), reward_loop


def _rm_scores(batch):
    """Each output's reward in the batch (verl puts it on the response's last token), in run order."""
    order, data = batch
    scores = data.batch["rm_scores"].sum(-1).tolist()
    return [scores[order.index(i)] for i in range(len(order))]


def _placebo_loop(tmp_path, response_length=200, rows=PLACEBO_ROWS, **gec):
    train = _train_file(tmp_path / "train.parquet", rows)
    loop, _ = _budget_loop(tmp_path, response_length, train_files=[train], answer_source="placebo", **gec)
    return loop


@pytest.mark.parametrize("branch", ["inject_answer", "replace_solution"])
def test_an_as_gold_placebo_is_rewarded_as_its_gold_twin_where_the_graded_one_scores_zero(tmp_path, branch):
    # The same placebo under both rewards (same seed and uids: same row lent, same tokens). Inject: row 2, 3
    # or 4's answer (3, 7, 5) boxed after the first sample; replace: row 2's solution "1+2=\boxed{3}" (the only
    # wrong answer with a wrong solution). Against this row's gold 2 the placebo grades 0.0; its gold twin
    # (the same first sample with "\boxed{2}", or this row's solution "1+1=\boxed{2}") grades 1.0.
    gec = INJECT if branch == "inject_answer" else REPLACE
    rows = [{"uid": uid, "extra_info": OWN} for uid in ("u0", "u1", "u2")]
    as_gold = _through_verl(_placebo_loop(tmp_path / "as_gold", placebo_reward="as_gold", **gec), rows)
    graded = _through_verl(_placebo_loop(tmp_path / "graded", placebo_reward="graded", **gec), rows)
    gold_loop, _ = _budget_loop(tmp_path / "gold", 200, **gec)  # EDGE: the twins themselves
    gold = _through_verl(gold_loop, rows)
    loop = gold_loop
    for i in range(len(rows)):
        placebo, record = as_gold[0][i], as_gold[2][i]
        assert record.branch == branch and record.placebo_index == graded[2][i].placebo_index is not None
        lent = PLACEBO_ROWS[record.placebo_index]
        injected = loop._encode(injected_answer_text(lent[1]) if branch == "inject_answer" else lent[2]) + [loop.eos_id]
        assert placebo.response_ids == graded[0][i].response_ids and placebo.response_ids[record.injected_start :] == injected
        assert placebo.response_ids != gold[0][i].response_ids
        # as_gold: GEC set the reward (verl's reward loop skipped it); graded and gold: verl's reward loop did
        assert (as_gold[1][i], graded[1][i], gold[1][i]) == (1.0, None, None)
        assert (record.twin_score, graded[2][i].twin_score, gold[2][i].twin_score) == (1.0, None, None)
        # the rewards verl trains with: the placebo's tokens at 1.0 as_gold, 0.0 graded; the twin's 1.0
        assert (_rm_scores(as_gold[3])[i], _rm_scores(graded[3])[i], _rm_scores(gold[3])[i]) == (1.0, 0.0, 1.0)
        # the extra info verl logs for it is what verl's naive manager gave the twin in EDGE's run
        assert placebo.extra_fields["reward_extra_info"] == gold[0][i].extra_fields["reward_extra_info"]
        assert placebo.extra_fields["reward_extra_info"]["pred"] == "2"
    assert (len(as_gold[4].scored), len(graded[4].scored), len(gold[4].scored)) == (0, 3, 3)


@pytest.mark.parametrize("reward", ["dict", "float"])
def test_the_batch_gets_the_reward_loops_extra_info_keys_from_a_twin_rewarded_response(tmp_path, reward):
    # A batch of one placebo run (paper probabilities): twin-rewarded placebos and regenerations verl scores
    # itself. verl names the batch's extra-info columns after its FIRST response's keys, so a twin-rewarded
    # response goes first: the keys must be those the naive manager gives every other response (edge_verl's
    # reward: its dict's keys, "score" included; a reward returning a float: {"acc"}).
    from edge_verl.reward import compute_score

    paper = dict(force_regenerate=False, probabilities=[0.5, 0.25, 0.25])
    rows = [{"uid": f"u{i}", "extra_info": OWN} for i in range(8)]
    probe = _through_verl(_placebo_loop(tmp_path / "probe", **paper), rows)  # which responses get a placebo
    first = next(i for i, record in enumerate(probe[2]) if record.twin_score is not None)
    loop = _placebo_loop(tmp_path, **paper)  # a loop binds the event loop it is built in: built, then run
    if reward == "float":
        loop.reward_fn = lambda **kwargs: compute_score(**kwargs)["score"]
    outputs, set_by_gec, records, batch, reward_loop = _through_verl(loop, rows, first=first)
    twins = [i for i, record in enumerate(records) if record.twin_score is not None]
    assert twins and first in twins and len(twins) < len(rows)  # twin-rewarded and verl-scored responses
    assert len(reward_loop.scored) == len(rows) - len(twins)
    expected = ["score", "acc", "pred", "reason", "grader"] if reward == "dict" else ["acc"]
    assert all(list(result["reward_extra_info"]) == expected for result in reward_loop.scored)
    _, data = batch
    assert data.meta_info["reward_extra_keys"] == expected and all(len(data.non_tensor_batch[key]) == len(rows) for key in expected)
    scores = _rm_scores(batch)
    assert [scores[i] for i in twins] == [1.0] * len(twins) == [set_by_gec[i] for i in twins]
    assert all(records[i].branch == "regenerate" and scores[i] == 0.0 for i in range(len(rows)) if i not in twins)


def test_a_regeneration_is_the_same_whatever_the_answer_source_and_the_placebo_reward(tmp_path):
    # A regeneration injects no answer: no placebo is lent, no twin built, and verl's reward loop scores it.
    rows = [{"uid": uid, "extra_info": OWN} for uid in ("u0", "u1")]
    runs = [_through_verl(_budget_loop(tmp_path / "gold", 200)[0], rows)] + [  # force_regenerate
        _through_verl(_placebo_loop(tmp_path / reward, placebo_reward=reward, force_regenerate=True), rows) for reward in ("as_gold", "graded")
    ]
    for outputs, set_by_gec, records, batch, reward_loop in runs:
        assert [output.response_ids for output in outputs] == [output.response_ids for output in runs[0][0]]
        assert all((r.branch, r.placebo_index, r.twin_score) == ("regenerate", None, None) for r in records)
        assert set_by_gec == [None, None] and len(reward_loop.scored) == 2 and _rm_scores(batch) == [0.0, 0.0]


def test_an_as_gold_placebo_is_carried_out_only_where_its_gold_twin_fits(tmp_path):
    # response_length 20, replace_solution: this row's solution (33 byte tokens + EOS) cannot fit, so the gold
    # run leaves the response as sampled; as_gold does too, while graded replaces it with row 2's solution
    # "1+2=\boxed{3}" (13 + EOS).
    own = {"answer": "2", "solution": "a long worked solution \\boxed{2}"}
    rows = [{"uid": "u0", "extra_info": own}]
    (gold_record,) = _through_verl(_budget_loop(tmp_path / "gold", 20, **REPLACE)[0], rows)[2]
    (as_gold_record,) = _through_verl(_placebo_loop(tmp_path / "as_gold", 20, placebo_reward="as_gold", **REPLACE), rows)[2]
    (graded_record,) = _through_verl(_placebo_loop(tmp_path / "graded", 20, placebo_reward="graded", **REPLACE), rows)[2]
    assert (gold_record.branch, gold_record.reason) == (as_gold_record.branch, as_gold_record.reason) == (None, "does_not_fit")
    assert (graded_record.branch, graded_record.placebo_index, graded_record.twin_score) == ("replace_solution", 2, None)
