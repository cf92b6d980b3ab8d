"""The README's first command, ``edge-verl demo`` with its defaults (GEPO, 30 steps, seed 0), learns, and gives the
numbers docs/cpu.md quotes, to the digit: a run is a function of its command, so the page can quote one run."""

import json
import re
import statistics
import subprocess
import sys
from pathlib import Path

from edge_verl_lab.same_run import read_rows

ROOT = Path(__file__).resolve().parents[2]


def test_the_readme_demo_learns_and_gives_the_figures_docs_cpu_md_quotes(tmp_path):
    out = tmp_path / "demo"
    # the README's command (`.venv/bin/edge-verl demo`), into a folder of the test's own
    done = subprocess.run([sys.executable, "-m", "edge_verl.cli", "demo", "--out", str(out)], capture_output=True, text=True)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    rewards = [row["critic/score/mean"] for row in read_rows(out / "metrics.jsonl")]
    assert len(rewards) == 30
    first, last = statistics.mean(rewards[:5]), statistics.mean(rewards[-5:])
    assert last - first >= 0.08
    quoted = re.search(r"\*\*(\d\.\d{4}) -> (\d\.\d{4})\*\* \(\+(\d\.\d{3})\)", (ROOT / "docs" / "cpu.md").read_text())
    assert quoted is not None, "docs/cpu.md quotes the demo's first-5 -> last-5 reward"
    assert quoted.groups() == (f"{first:.4f}", f"{last:.4f}", f"{last - first:.3f}")
    environment = json.loads((out / "environment.json").read_text())
    assert environment["threads"] == 1 and environment["packages"]["verl"] == "0.9.1"
