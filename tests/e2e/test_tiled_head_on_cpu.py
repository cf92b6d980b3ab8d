"""The plugin's tiled head in verl's real main_ppo (FSDP engine, v1 trainer, CPU): EDA's gradient form, one step,
trained with verl's eager head and with ``use_fused_kernels=True, fused_kernel_options.impl_backend=edge_tiled``,
two at a time on one Ray cluster, in float32 (FSDP's parameters and compute) so that the two heads can be held
to float32's tolerance. The same seed samples the same responses (the rollout does not use the head), so the
old log-probs, the entropy, the loss, its entropy-gradient share, the gradient norm and every parameter's gradient
of the two runs are the same computation by two heads.

That the samples are equal because the seed is, not because the rollout ignores it: the rollout decodes each request
from its own seed, and another run seed samples other responses (tests/integration/test_seeding_on_cpu.py, on the
same HF rollout server; a third run here, the eager head with another rollout seed, showed it too at the cost of a
round of runs)."""

from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from edge_verl.algorithms.tiled_head import TILED_HEAD_BACKEND
from edge_verl_lab.demo.run import DemoConfig, build_warm_model, model_recipe
from edge_verl_lab.same_run import read_rows, sampled_groups
from edge_verl_lab.study.cluster import study_cluster
from tests.e2e.conftest import train_demo

FLOAT32 = ["+actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=fp32"]
TILED = ["actor_rollout_ref.model.use_fused_kernels=True",
         f"actor_rollout_ref.model.fused_kernel_options.impl_backend={TILED_HEAD_BACKEND}"]
# the first update's figures, relative; measured between the two heads: <= 2e-6 (float32's summation order)
UPDATE_METRICS = ("actor/pg_loss", "actor/grad_norm", "actor/entropy", "actor/edge_eda/entropy_grad_share",
                  "actor/edge_eda/loss_scale_mean", "training/rollout_probs_diff_mean")
RELATIVE = 1e-4


def _config(root, name, extra, address):
    out = root / name
    return DemoConfig(algorithm="edge_eda", eda_form="gradient", steps=1, seed=0, out=out, model_dir=root / "model",
                      save_final_weights=True, ray_address=address,
                      extra_overrides=[f"trainer.rollout_data_dir={out / 'rollouts'}", *FLOAT32, *extra])


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiled_head")
    build_warm_model(model_recipe(_config(root, "unused", [], None)), root / "model")
    with study_cluster(2) as address, ThreadPoolExecutor(max_workers=2) as pool:
        runs = {"eager": [], "tiled": TILED}
        configs = [_config(root, name, extra, address) for name, extra in runs.items()]
        return dict(zip(runs, pool.map(train_demo, configs)))


def test_the_tiled_run_computed_its_head_with_the_plugins_function(runs):
    assert "the tiled head computes log-probs and entropy" in (runs["tiled"] / "verl.log").read_text()
    assert "the tiled head" not in (runs["eager"] / "verl.log").read_text()


def test_the_first_update_equals_the_eager_heads(runs):
    assert sampled_groups(runs["eager"] / "rollouts", 1) == sampled_groups(runs["tiled"] / "rollouts", 1)
    eager, tiled = (read_rows(runs[name] / "metrics.jsonl")[0] for name in ("eager", "tiled"))
    assert eager["actor/edge_eda/entropy_grad_share"] > 0  # the entropy's gradient reached the loss
    for key in UPDATE_METRICS:
        assert tiled[key] == pytest.approx(eager[key], rel=RELATIVE), key


def _adam_moments(run):
    """Adam's first moments after the step's mini-batches (the gradients, averaged), flattened in one vector."""
    state = torch.load(run / "checkpoints" / "global_step_1" / "actor" / "optim_world_size_1_rank_0.pt", weights_only=False)["state"]
    moments = [state[index]["exp_avg"] for index in sorted(state)]
    return torch.cat([(m.full_tensor() if hasattr(m, "full_tensor") else m).double().flatten() for m in moments])


def test_the_gradients_of_the_update_equal_the_eager_heads(runs):
    # every parameter's gradient, through Adam's first moment (two mini-batches: 0.1 g1 x 0.9 + 0.1 g2);
    # measured between the two heads: relative norm of the difference ~1e-6
    eager, tiled = _adam_moments(runs["eager"]), _adam_moments(runs["tiled"])
    assert eager.norm() > 0
    assert (tiled - eager).norm() / eager.norm() < RELATIVE
