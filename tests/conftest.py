"""Test tiers: pure (no verl import, seconds), ``verl`` (verl functions in-process), ``e2e`` (real
``main_ppo`` runs on CPU, ~1.5-2 min each). ``pytest -m "not e2e"`` skips the slow tier."""

from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data sets not found at {SHARED_DATA}")
    return SHARED_DATA
