"""OpenRLHF 0.11.2's real code on this CPU, the way OpenRLHF's own tests run it.

scripts/setup.sh installs openrlhf==0.11.2 WITHOUT its dependencies into .venv/openrlhf-0.11.2 (its wheel
also ships a top-level ``tests`` package, so that folder is never put on sys.path). ``openrlhf_modules``
registers OpenRLHF's packages as bare package objects over that folder (their ``__init__`` files, which pull
in deepspeed / vLLM, are not run; the modules themselves are OpenRLHF's files, imported by name) and stubs
only what needs a GPU stack: ``ray`` (``get``/``put`` pass values through, ``remote`` leaves a class as is),
``vllm``, ``deepspeed``, and ``openrlhf.utils.deepspeed`` / ``openrlhf.datasets`` (imported by
ppo_trainer.py for names the tests do not call). Everything is removed from sys.modules afterwards.
A missing install is a failure, not a skip.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
import types
import uuid
from pathlib import Path
from types import SimpleNamespace
from unittest.mock import MagicMock

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
OPENRLHF_ROOT = REPO / ".venv" / "openrlhf-0.11.2"
OPENRLHF_DIR = OPENRLHF_ROOT / "openrlhf"
PACKAGES = (
    "openrlhf", "openrlhf.utils", "openrlhf.trainer", "openrlhf.trainer.ppo_utils", "openrlhf.trainer.ray",
    "openrlhf.models", "openrlhf.cli",
)


def _package(name: str, folder: Path) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__path__ = [str(folder)]
    module.__package__ = name
    return module


def _fake_ray() -> types.ModuleType:
    ray = types.ModuleType("ray")
    ray.get = lambda value, **_: value
    ray.put = lambda value, **_: value
    ray.remote = lambda *args, **kwargs: args[0] if args and isinstance(args[0], type) else (lambda cls: cls)
    ray.is_initialized = lambda: True
    ray.init = MagicMock()
    util = types.ModuleType("ray.util")
    util.placement_group = MagicMock()
    placement = types.ModuleType("ray.util.placement_group")
    placement.placement_group = MagicMock()
    placement.PlacementGroup = MagicMock
    strategies = types.ModuleType("ray.util.scheduling_strategies")
    strategies.PlacementGroupSchedulingStrategy = MagicMock()
    ray.util = util
    return {"ray": ray, "ray.util": util, "ray.util.placement_group": placement, "ray.util.scheduling_strategies": strategies}


def _fake_deepspeed() -> MagicMock:
    # A spec, so that transformers' find_spec("deepspeed") works (and then finds no installed distribution).
    deepspeed = MagicMock()
    deepspeed.__spec__ = importlib.machinery.ModuleSpec("deepspeed", None)
    return deepspeed


def _fake_vllm() -> dict:
    vllm = types.ModuleType("vllm")
    vllm.__version__ = "0.29.0"
    vllm.SamplingParams = SimpleNamespace
    inputs = types.ModuleType("vllm.inputs")
    inputs.TokensPrompt = dict
    utils = types.ModuleType("vllm.utils")
    utils.random_uuid = lambda: uuid.uuid4().hex
    return {"vllm": vllm, "vllm.inputs": inputs, "vllm.utils": utils}


def use_package_folder(monkeypatch, package_dir: Path) -> None:
    """Serve ``openrlhf.*`` from ``package_dir`` (a folder named openrlhf) from now on in this test."""
    for name in PACKAGES:
        monkeypatch.setitem(sys.modules, name, _package(name, package_dir.joinpath(*name.split(".")[1:])))


@pytest.fixture
def openrlhf_modules(monkeypatch):
    """``load(name)``: an OpenRLHF module imported from the pinned install, with GPU-only modules stubbed."""
    if not (OPENRLHF_DIR / "trainer" / "ppo_utils" / "experience_maker.py").is_file():
        pytest.fail(f"openrlhf 0.11.2 is not installed at {OPENRLHF_ROOT}: run `bash scripts/setup.sh`.")
    before = set(sys.modules)
    stubs = {**_fake_ray(), **_fake_vllm(), "deepspeed": _fake_deepspeed(), "openrlhf.utils.deepspeed": MagicMock(),
             "openrlhf.datasets": MagicMock(), "openrlhf.datasets.utils": MagicMock()}
    use_package_folder(monkeypatch, OPENRLHF_DIR)
    for name in ("flash_attn", "flash_attn.bert_padding", "flash_attn.utils", "flash_attn.utils.distributed"):
        stubs[name] = MagicMock(__spec__=importlib.machinery.ModuleSpec(name, None))
    for name, module in stubs.items():
        monkeypatch.setitem(sys.modules, name, module)
    # models/utils.py wraps compute_entropy in torch.compile at import; run it eagerly (as OpenRLHF's tests do).
    monkeypatch.setattr(torch, "compile", lambda fn=None, **_: fn if fn is not None else (lambda f: f))
    yield importlib.import_module
    for name in set(sys.modules) - before:  # OpenRLHF modules imported during the test, and ours bound to them
        if name.startswith(("openrlhf", "edge_verl.openrlhf.gec_executor")):
            del sys.modules[name]


def load_launcher(load):
    """OpenRLHF's trainer/ray/launcher.py; ``from openrlhf.models import Actor`` is served from models/actor.py
    (the models package's __init__ also builds reward models, which this CPU test does not need)."""
    models = sys.modules["openrlhf.models"]
    models.Actor = load("openrlhf.models.actor").Actor
    models.get_llm_for_sequence_regression = MagicMock()
    return load("openrlhf.trainer.ray.launcher")


class CharTokenizer:
    """A character tokenizer with Hugging Face's call shape (id = code point; 1 = EOS, shown as <|im_end|>)."""

    eos_token_id = 1
    all_special_ids = [1]
    EOS_TEXT = "<|im_end|>"

    def encode(self, text, add_special_tokens=False):
        return [ord(char) for char in text]

    def __call__(self, text, add_special_tokens=False, return_tensors=None):
        import torch

        return {"input_ids": torch.tensor([self.encode(text)])}

    def decode(self, ids, skip_special_tokens=False):
        return "".join(("" if skip_special_tokens else self.EOS_TEXT) if i == 1 else chr(i) for i in ids)


@pytest.fixture
def tokenizer():
    return CharTokenizer()
