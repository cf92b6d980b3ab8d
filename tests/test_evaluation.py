import pytest

from edge_verl_lab.evaluation import ProblemResult, markdown_table, pass_at_k, summarize


def test_pass_at_k_hand_computed():
    # n = 4 samples, c = 1 correct: pass@1 = 1/4; pass@2 = 1 - C(3,2)/C(4,2) = 1 - 3/6 = 0.5
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)
    assert pass_at_k(4, 0, 4) == 0.0 and pass_at_k(4, 3, 2) == 1.0
    with pytest.raises(ValueError):
        pass_at_k(2, 1, 3)


def test_average_weights_every_problem_equally():
    # aime24: 1 of 2 correct (50%), math500: 3 of 3 correct (100%), aime25 not averaged.
    # Avg = 4 / 5 = 80% (the mean of benchmark means would be 75%).
    results = [ProblemResult("aime24", 0, (1.0,)), ProblemResult("aime24", 1, (0.0,))]
    results += [ProblemResult("math500", i, (1.0,)) for i in range(3)] + [ProblemResult("aime25", 0, (1.0,))]
    table = summarize(results)
    assert table["aime24"]["pass@1"] == 0.5 and table["math500"]["pass@1"] == 1.0
    assert table["Avg"] == {"problems": 5, "pass@1": pytest.approx(0.8)}
    assert "| Avg | 5 | 80.00 |" in markdown_table(table)


def test_vllm_generates_only_on_a_gpu(monkeypatch):
    import importlib.util

    import torch

    from edge_verl_lab.evaluation import uses_vllm

    installed = importlib.util.find_spec("vllm") is not None
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert not uses_vllm()  # vLLM's CPU build (scripts/setup.sh) is for the rollout, not the evaluation
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert uses_vllm() == installed


def _hf_folder(folder, weights=True):
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    if weights:
        (folder / "model.safetensors").write_bytes(b"x")
    return folder


def test_resolve_model_dir_from_run_checkpoint_and_hf_folders(tmp_path):
    from edge_verl_lab.evaluation import resolve_model_dir

    run = tmp_path / "run"
    hf2 = _hf_folder(run / "global_step_2" / "actor" / "huggingface")
    _hf_folder(run / "global_step_1" / "actor" / "huggingface")
    (run / "latest_checkpointed_iteration.txt").write_text("2")
    assert resolve_model_dir(run) == str(hf2)  # the run folder: its latest checkpoint
    assert resolve_model_dir(run / "global_step_2") == str(hf2)
    assert resolve_model_dir(run / "global_step_2" / "actor") == str(hf2)
    assert resolve_model_dir(hf2) == str(hf2)
    assert resolve_model_dir("Qwen/Qwen2.5-Math-7B") == "Qwen/Qwen2.5-Math-7B"  # not a folder: a hub name


def test_checkpoint_without_hf_weights_says_how_to_get_them(tmp_path):
    from edge_verl_lab.evaluation import resolve_model_dir

    step = tmp_path / "global_step_5"
    _hf_folder(step / "actor" / "huggingface", weights=False)
    with pytest.raises(FileNotFoundError, match="hf_model.*verl.model_merger"):
        resolve_model_dir(step)
    with pytest.raises(FileNotFoundError, match="not an HF model folder"):
        resolve_model_dir(tmp_path)
