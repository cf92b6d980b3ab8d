import pytest

from edge_verl_lab.demo.run import DemoConfig, run_demo


def train_demo(config: DemoConfig):
    """Run one demo config (verl's real main_ppo on CPU) and return its folder; fail with verl's log tail."""
    result = run_demo(config)
    assert result["returncode"] == 0, (config.out / "verl.log").read_text()[-6000:]
    return config.out


@pytest.fixture(scope="session")
def run_cpu_demo(tmp_path_factory):
    """Run the demo (verl's real main_ppo on CPU) into a fresh folder; fail with verl's log tail."""

    def run(name: str, overrides=lambda out: [], **options):
        out = tmp_path_factory.mktemp(name)
        result = run_demo(DemoConfig(out=out, extra_overrides=list(overrides(out)), **options))
        assert result["returncode"] == 0, (out / "verl.log").read_text()[-6000:]
        return out, result["rows"]

    return run
