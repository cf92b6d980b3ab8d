"""The upstream patch series' second implementation of EDA and GEPO (``upstream/verl/patches/0002-*.patch``,
code added to verl's ``core_algos``) equals ``edge_verl.algorithms`` on random batches.

The patch is read at test time: the added lines of ``core_algos.py`` and ``config/algorithm.py`` are parsed,
their top-level functions and classes are executed against verl 0.9.1's ``as_torch_index`` /
``group_mean_std`` (which the patch imports from ``verl.utils``); the registry decorators are dropped, since
they would register into this process's verl. Inputs are finite (the patch does not zero non-finite
log-probs/entropies, the plugin does: a deliberate extra guard of the plugin)."""

import ast
import dataclasses
import typing
from pathlib import Path

import numpy as np
import pytest
import torch
from verl.base_config import BaseConfig
from verl.utils import as_torch_index, group_mean_std

from edge_verl.estimators.edge_eda import compute_eda_advantages
from edge_verl.estimators.gepo import GepoThresholds, compute_gepo_advantages
from edge_verl.estimators.groups import group_index_from_uids

PATCHES = Path(__file__).resolve().parents[2] / "upstream" / "verl" / "patches"


def added_blocks(patch_text: str, path: str) -> list[str]:
    """Runs of consecutive added lines ('+' without the '+') in the patch's diff of ``path``."""
    blocks, current, in_file = [], [], False
    for line in patch_text.splitlines():
        if line.startswith("diff --git "):
            in_file = line == f"diff --git a/{path} b/{path}"
        if in_file and line.startswith("+") and not line.startswith("+++"):
            current.append(line[1:])
            continue
        if current:
            blocks.append("\n".join(current))
            current = []
    if current:
        blocks.append("\n".join(current))
    return blocks


def added_definitions(patch_text: str, path: str) -> list[ast.stmt]:
    """Top-level functions and classes added to ``path`` (blocks that are not whole statements, such as new
    enum members, are skipped), with their decorators other than ``@dataclass`` removed."""
    definitions = []
    for block in added_blocks(patch_text, path):
        try:
            tree = ast.parse(block)
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                node.decorator_list = [d for d in node.decorator_list if ast.unparse(d) == "dataclass"]
                definitions.append(node)
    return definitions


@pytest.fixture(scope="module")
def patch_ns() -> dict:
    (patch,) = sorted(PATCHES.glob("0002-*.patch"))
    text = patch.read_text()
    namespace = {
        "torch": torch, "np": np, "Optional": typing.Optional, "Any": typing.Any, "Callable": typing.Callable,
        "dataclass": dataclasses.dataclass, "field": dataclasses.field, "BaseConfig": BaseConfig,
        "as_torch_index": as_torch_index, "group_mean_std": group_mean_std, "AlgoConfig": object,
    }
    for path in ("verl/trainer/config/algorithm.py", "verl/trainer/ppo/core_algos.py"):
        module = ast.Module(body=added_definitions(text, path), type_ignores=[])
        exec(compile(module, f"{patch.name}:{path}", "exec"), namespace)
    for name in ("EdgeEDAConfig", "GEPOConfig", "compute_edge_eda_outcome_advantage", "compute_gepo_outcome_advantage"):
        assert name in namespace, f"{patch.name} no longer adds {name}"
    return namespace


def _batch(rng: np.random.Generator, pad_rows: int = 0):
    """Groups of mixed sizes (singletons included) scattered through the batch, response lengths 0..T, binary
    or continuous scores, token entropies in (0, 3) with some all-zero groups, log-probs in (-inf, 0);
    ``pad_rows`` rows like verl's balancing (uid "pad", empty mask, zero reward) at the end."""
    width = int(rng.integers(1, 9))
    uids, scores, zero_entropy = [], [], []
    for group in range(int(rng.integers(1, 9))):
        size = int(rng.choice([1, 2, 3, 5, 8]))
        uids += [f"g{group}-{rng.integers(1 << 40):x}"] * size
        scores += (rng.integers(0, 2, size).astype(float) if rng.uniform() < 0.5 else rng.normal(0, 2, size)).tolist()
        zero_entropy += [rng.uniform() < 0.15] * size
    order = rng.permutation(len(uids))
    size = len(uids) + pad_rows
    uids = [uids[i] for i in order] + ["pad"] * pad_rows
    scores = np.array([scores[i] for i in order] + [0.0] * pad_rows)
    lengths = rng.integers(0, width + 1, size)
    lengths[len(order):] = 0
    mask = torch.tensor(np.arange(width)[None, :] < lengths[:, None], dtype=torch.float32)
    rewards = torch.zeros(size, width)
    rows = np.flatnonzero(lengths > 0)
    rewards[rows, lengths[rows] - 1] = torch.tensor(scores[rows], dtype=torch.float32)
    entropy = rng.uniform(0.0, 3.0, (size, width))
    entropy[[i for i, o in enumerate(order) if zero_entropy[o]]] = 0.0
    log_probs = -rng.exponential(1.0, (size, width))
    return dict(
        rewards=rewards, mask=mask, uids=np.array(uids, dtype=object),
        entropy=torch.tensor(entropy, dtype=torch.float32), old_log_probs=torch.tensor(log_probs, dtype=torch.float32),
    )


def _groups(uids):
    group_index, num_groups, is_pad = group_index_from_uids(uids)
    return dict(group_index=group_index, num_groups=num_groups, valid=~is_pad)


def test_patch_defaults_are_the_plugins(patch_ns):
    eda, gepo = patch_ns["EdgeEDAConfig"](), patch_ns["GEPOConfig"]()
    eda_defaults = {k: p.default for k, p in _kwonly(compute_eda_advantages).items()}
    gepo_defaults = {k: p.default for k, p in _kwonly(compute_gepo_advantages).items()}
    assert (eda.std_epsilon, eda.entropy_epsilon) == (eda_defaults["std_epsilon"], eda_defaults["entropy_epsilon"])
    for name in ("alpha_low", "alpha_high", "beta_low", "beta_high", "std_epsilon"):
        assert getattr(gepo, name) == gepo_defaults[name], name
    assert gepo.group_entropy == gepo_defaults["estimator"] and gepo.gamma == GepoThresholds().gamma


def _kwonly(fn):
    import inspect

    return {k: p for k, p in inspect.signature(fn).parameters.items() if p.kind is p.KEYWORD_ONLY}


@pytest.mark.parametrize("norm_by_std", [True, False])
@pytest.mark.parametrize("seed", range(10))
def test_patch_eda_equals_plugin_eda(patch_ns, seed, norm_by_std):
    rng = np.random.default_rng(seed)
    b = _batch(rng, pad_rows=2 if seed % 3 == 0 else 0)
    std_epsilon, entropy_epsilon = (1e-4, 1e-6) if seed % 2 == 0 else (1e-3, 1e-2)
    config = {"edge_eda": patch_ns["EdgeEDAConfig"](std_epsilon=std_epsilon, entropy_epsilon=entropy_epsilon), "norm_adv_by_std_in_grpo": norm_by_std}
    expected, _ = patch_ns["compute_edge_eda_outcome_advantage"](
        b["rewards"].clone(), b["mask"], b["uids"], entropy=b["entropy"], config=config
    )
    ours = compute_eda_advantages(
        b["rewards"].sum(-1), b["entropy"], b["mask"], **_groups(b["uids"]), norm_by_std=norm_by_std,
        std_epsilon=std_epsilon, entropy_epsilon=entropy_epsilon,
    )
    torch.testing.assert_close(ours.advantages, expected)


def test_patch_eda_without_config_equals_plugin_defaults(patch_ns):
    b = _batch(np.random.default_rng(99))
    expected, _ = patch_ns["compute_edge_eda_outcome_advantage"](b["rewards"].clone(), b["mask"], b["uids"], entropy=b["entropy"])
    ours = compute_eda_advantages(b["rewards"].sum(-1), b["entropy"], b["mask"], **_groups(b["uids"]))
    torch.testing.assert_close(ours.advantages, expected)


@pytest.mark.parametrize("group_entropy", ["token_pooled", "response_mean"])
@pytest.mark.parametrize("seed", range(6))
def test_patch_gepo_equals_plugin_gepo_over_steps(patch_ns, seed, group_entropy):
    # one run of 6 steps: the patch's estimator_state dict and the plugin's GepoThresholds evolve side by side
    rng = np.random.default_rng(100 + seed)
    options = dict(alpha_low=0.5, alpha_high=0.2, beta_low=0.2, beta_high=0.3, gamma=0.01)
    if seed % 2:
        options = dict(alpha_low=0.3, alpha_high=0.7, beta_low=0.5, beta_high=0.1, gamma=0.4)
    norm_by_std = seed % 3 != 2
    config = {
        "gepo": patch_ns["GEPOConfig"](**options, std_epsilon=1e-6, group_entropy=group_entropy),
        "norm_adv_by_std_in_grpo": norm_by_std,
    }
    state, thresholds, updates = {}, GepoThresholds(gamma=options.pop("gamma")), 0
    for step in range(6):
        b = _batch(rng, pad_rows=1 if step % 2 else 0)
        expected, _ = patch_ns["compute_gepo_outcome_advantage"](
            b["rewards"].clone(), b["mask"], b["uids"], old_log_probs=b["old_log_probs"], estimator_state=state,
            config=config,
        )
        ours = compute_gepo_advantages(
            b["rewards"].sum(-1), b["old_log_probs"], b["mask"], **_groups(b["uids"]), thresholds=thresholds,
            norm_by_std=norm_by_std, std_epsilon=1e-6, estimator=group_entropy, **options,
        )
        torch.testing.assert_close(ours.advantages, expected, msg=lambda m, step=step: f"step {step}: {m}")
        updates += bool(b["mask"].sum() > 0)  # a step without any response token leaves the thresholds alone
        assert state["gepo"]["num_updates"] == thresholds.num_updates == updates
        # the patch forms the candidates in float32, the plugin in float64: equal to float32 precision
        assert (thresholds.h_low, thresholds.h_high) == pytest.approx(
            (state["gepo"]["h_low"], state["gepo"]["h_high"]), rel=1e-6, abs=1e-6
        )


def test_patch_gepo_without_config_equals_plugin_defaults(patch_ns):
    rng = np.random.default_rng(7)
    state, thresholds = {}, GepoThresholds()
    for _ in range(3):
        b = _batch(rng)
        expected, _ = patch_ns["compute_gepo_outcome_advantage"](
            b["rewards"].clone(), b["mask"], b["uids"], old_log_probs=b["old_log_probs"], estimator_state=state
        )
        ours = compute_gepo_advantages(b["rewards"].sum(-1), b["old_log_probs"], b["mask"], **_groups(b["uids"]), thresholds=thresholds)
        torch.testing.assert_close(ours.advantages, expected)
    assert (thresholds.h_low, thresholds.h_high) == pytest.approx((state["gepo"]["h_low"], state["gepo"]["h_high"]), rel=1e-6)
