"""The FSDP recipes themselves, unchanged, run one training step on CPU when their variables point at the
tiny model, the demo data and the plugin's CPU backend (the Megatron recipes: test_megatron_on_cpu.py; the
EDGE FSDP recipe's run, with every metric of its method: the EDGE row of tests/e2e/test_reproduce_on_cpu.py,
which runs it unchanged)."""

from tests.e2e.recipe_runs import run_recipe_on_cpu


def test_the_gepo_recipe_runs_a_step_on_cpu_as_its_dry_run_prints_it(tmp_path):
    # GEPO through the command its DRY_RUN=1 prints, pasted into a shell elsewhere (it runs as printed)
    run = run_recipe_on_cpu(tmp_path, "run_gepo_qwen7b.sh", "gepo", as_printed=True)
    assert any("edge_verl/gepo/h_low" in record["data"] for record in run["records"])
    # verl's FSDP engine trained (actor and reference share one), with megatron-core installed and untouched
    assert run["engines"] and all(engine.startswith("fsdp ") for engine in run["engines"]), run["engines"]
