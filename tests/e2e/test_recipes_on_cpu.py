"""The FSDP recipes themselves, unchanged, run one training step on CPU when their variables point at the
tiny model, the demo data and the plugin's CPU backend (the Megatron recipes: test_megatron_on_cpu.py)."""

import pytest

from tests.e2e.recipe_runs import run_recipe_on_cpu


@pytest.mark.parametrize(
    "recipe, algorithm, metrics, as_printed",
    [
        # EDGE-GRPO with EDA's gradient form (the recipe's default) and GEC's budget: 16-token first samples
        # (the demo's), corrections up to 64 more tokens; response_length derived by the recipe (16 + 64 + 32).
        # Its metrics: GEC's, EDA's gradient share and quantiles, per-origin and as-sampled diagnostics.
        ("run_edge_qwen2.5-math-1.5b_fsdp.sh", "edge", (
            "edge_verl/gec/responses", "actor/edge_eda/entropy_grad_share", "edge_verl/edge_eda/abs_adv_p99",
            "actor/gec/sampled/token_share", "actor/gec/phrase/token_share", "edge_verl/gec/sampled/adv_var",
        ), False),
        # GEPO through the command its DRY_RUN=1 prints, pasted into a shell elsewhere (it runs as printed)
        ("run_gepo_qwen7b.sh", "gepo", ("edge_verl/gepo/h_low",), True),
    ],
    ids=["edge", "gepo_as_printed"],
)
def test_fsdp_recipe_runs_a_step_on_cpu(tmp_path, recipe, algorithm, metrics, as_printed):
    run = run_recipe_on_cpu(tmp_path, recipe, algorithm, as_printed=as_printed)
    for metric in metrics:
        assert any(metric in record["data"] for record in run["records"]), metric
    # verl's FSDP engine trained (actor and reference share one), with megatron-core installed and untouched
    assert run["engines"] and all(engine.startswith("fsdp ") for engine in run["engines"]), run["engines"]
