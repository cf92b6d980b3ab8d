"""The README is for the GPU verl user (issue 46): at most ~200 lines; its first screen holds the two CPU commands
(the test command exactly as CI runs it), the install into an existing verl that moves none of its packages, with
the one requirement verl does not bring at pyproject's pin, and a GEPO command; every docs/ page is linked."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
FIRST_SCREEN = "\n".join(README.splitlines()[:60])


def test_the_readme_is_short_and_its_first_screen_holds_the_commands():
    assert len(README.splitlines()) <= 200
    ci_command = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert ci_command == "bash scripts/setup.sh && .venv/bin/python -m pytest" and ci_command in FIRST_SCREEN
    assert "bash scripts/setup.sh && .venv/bin/edge-verl demo" in FIRST_SCREEN
    assert "pip install --no-deps edge-verl" in FIRST_SCREEN and "edge-verl doctor" in FIRST_SCREEN
    assert re.search(r"python -m verl\.trainer\.main_ppo algorithm\.adv_estimator=gepo", FIRST_SCREEN)


def test_the_no_deps_install_adds_math_verify_at_the_pyproject_pin():
    # pyproject's requirements beyond verl and what verl brings (its torch; wrapt, through ray[default]'s
    # smart_open): math-verify alone, at the version the README installs
    dependencies = re.search(r"^dependencies = \[(.*?)^\]", (ROOT / "pyproject.toml").read_text(), re.M | re.S).group(1)
    pins = re.findall(r'^\s*"([^"]+)"', dependencies, re.M)
    others = [pin for pin in pins if not pin.startswith(("torch", "verl[", "wrapt"))]
    assert others == ["math-verify==0.9.0"]
    assert f"pip install {others[0]}" in FIRST_SCREEN


def test_every_docs_page_is_linked_from_the_readme():
    pages = sorted(path.name for path in (ROOT / "docs").glob("*.md"))
    assert {"options.md", "metrics.md", "gec.md", "eda.md", "reward.md", "cpu.md", "study.md", "reproduce.md",
            "performance.md", "openrlhf.md", "verl-versions.md", "INSTALL_GPU.md"} <= set(pages)
    assert [page for page in pages if f"](docs/{page}" not in README] == []


def test_every_plugin_setting_is_on_the_multinode_page():
    # a setting travels to every node with the job (integration/cluster.py): the page says what each one does
    names = {name for path in (ROOT / "edge_verl").rglob("*.py") for name in re.findall(r"EDGE_VERL_[A-Z_]*[A-Z]", path.read_text())}
    page = (ROOT / "docs" / "multinode.md").read_text()
    table = "\n".join(line for line in page.splitlines() if line.startswith("| `EDGE_VERL_"))
    assert len(names) >= 15
    assert sorted(name for name in names if f"`{name}`" not in table) == []
