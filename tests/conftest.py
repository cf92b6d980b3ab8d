"""Test tiers, by folder: pure (everything else: no verl import, seconds), ``verl`` (tests/integration/:
verl functions in-process, seconds), ``e2e`` (tests/e2e/: real ``main_ppo`` runs on CPU, ~1.5-2 min each).
The markers are applied here from the folder, so a test cannot sit in a folder and miss its tier.
``pytest -m "not e2e"`` skips the slow tier; ``-m e2e`` runs exactly tests/e2e/."""

from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"
TESTS = REPO_ROOT / "tests"
FOLDER_MARKERS = {TESTS / "e2e": "e2e", TESTS / "integration": "verl"}


def pytest_collection_modifyitems(items):
    for item in items:
        for folder, marker in FOLDER_MARKERS.items():
            if item.path.is_relative_to(folder):
                item.add_marker(marker)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data sets not found at {SHARED_DATA}")
    return SHARED_DATA
