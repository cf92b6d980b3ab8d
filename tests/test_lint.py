"""ruff, configured in pyproject.toml ([tool.ruff]: the rules and why), passes on the whole checkout: the README's
test command runs it, so CI does."""

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_passes_on_the_checkout():
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    assert ruff is not None, "ruff is a test dependency (pyproject.toml's test extra): pip install -e '.[test]'"
    done = subprocess.run([ruff, "check", "--no-cache", "--output-format", "concise", str(ROOT)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
