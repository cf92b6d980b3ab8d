"""Test tiers, by folder: pure (everything else: no verl import, seconds), ``verl`` (tests/integration/:
verl functions in-process, seconds), ``e2e`` (tests/e2e/: real ``main_ppo`` runs on CPU, ~1.5-2 min each, and
OpenRLHF's ``train_ppo_ray`` in its own environment, ~1 min each).
The markers are applied here from the folder, so a test cannot sit in a folder and miss its tier.
``pytest -m "not e2e"`` skips the slow tier; ``-m e2e`` runs exactly tests/e2e/.

Two workers (pytest-xdist, ``-n 2`` in pyproject.toml's addopts): an e2e run is a chain of
single-process start-ups (driver, Ray, TaskRunner, workers), so the fast tiers run beside it on the other
core, at a lower priority (``BESIDE_NICENESS``). What must not share the machine with anything else of the
suite runs in ONE worker, in collection order (``SERIAL`` below): every Ray session (two on one machine fail
at start-up) and the tests that grade against a deadline (the doctor's self-check, tests/reward/, OpenRLHF's
reward hook), which come after the e2e runs, by when the other worker is done. ``-p no:xdist`` or ``-n 0``
runs everything in one process."""

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"
TESTS = REPO_ROOT / "tests"
FOLDER_MARKERS = {TESTS / "e2e": "e2e", TESTS / "integration": "verl"}


# Tests that run one after another in one worker (see above): folders, and single files of other folders.
SERIAL = (
    TESTS / "e2e",
    TESTS / "integration" / "test_doctor_on_cpu.py",
    TESTS / "integration" / "test_core_without_lab_on_cpu.py",  # the doctor's self-check, twice
    TESTS / "integration" / "test_reward_in_ray_on_cpu.py",
    TESTS / "openrlhf",
    TESTS / "reward",
)


# The niceness of a worker while it runs a test outside SERIAL (the processes a test starts inherit it): the
# e2e runs are the critical path, so the tests beside them take only the CPU time those leave. Measured in
# the first two-worker CI run: without it, the first two e2e runs took 4:47 and 3:24 beside the fast tiers
# (2:23 and 2:00 alone).
BESIDE_NICENESS = 15


def serial_prefixes(rootpath: Path) -> tuple[str, ...]:
    """SERIAL as the node-id prefixes of its tests (a folder ends in "/"), what both the scheduler and the
    niceness below test against."""
    return tuple(path.relative_to(rootpath).as_posix() + ("/" if path.is_dir() else "") for path in SERIAL)


def pytest_configure(config):
    # Every process a test starts (Ray's workers, main_ppo, vLLM) keeps its compiled modules, as a study run does
    # (edge_verl/integration/cpu/overrides.py, keep_bytecode): ~25 s less start-up per verl run where the
    # machine sets PYTHONDONTWRITEBYTECODE.
    from edge_verl.integration.cpu.overrides import keep_bytecode, pin_numeric_path

    pin_numeric_path()  # before any test computes: models built in-process take the runs' numeric path

    kept = keep_bytecode(dict(os.environ))
    for name in set(os.environ) - set(kept):
        del os.environ[name]
    os.environ.update(kept)


def pytest_runtest_setup(item):
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    wanted = 0 if item.nodeid.startswith(serial_prefixes(item.config.rootpath)) else BESIDE_NICENESS
    try:
        os.setpriority(os.PRIO_PROCESS, 0, wanted)
    except PermissionError:  # back to 0 needs CAP_SYS_NICE; a serial test then runs niced, never wrong
        pass


def pytest_collection_modifyitems(items):
    for item in items:
        for folder, marker in FOLDER_MARKERS.items():
            if item.path.is_relative_to(folder):
                item.add_marker(marker)


# The serial tests are one work unit, handed whole to one worker, every other test a unit of its own. With
# e2e runs in it, the unit goes first (the e2e runs are the critical path, and its deadline tests, last in
# it, then run when the other worker has long finished); without, it goes last, so that its deadline tests
# do not run beside the fast tiers either. xdist's own grouping (``--dist loadgroup``) renames node ids,
# which pytest 9.2 no longer lets a plugin do, so the grouping is this scheduler's. tryfirst: xdist's session
# answers this hook too, and the first answer is the one used.
@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    serial = serial_prefixes(config.rootpath)
    e2e = (TESTS / "e2e").relative_to(config.rootpath).as_posix() + "/"

    class SerialAndLoad(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return "serial" if nodeid.startswith(serial) else nodeid

        def _assign_work_unit(self, node) -> None:
            unit = self.workqueue.get("serial")
            if unit is not None and len(self.workqueue) > 1 and not any(nodeid.startswith(e2e) for nodeid in unit):
                self.workqueue.move_to_end("serial")
            super()._assign_work_unit(node)

    return SerialAndLoad(config, log)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data sets not found at {SHARED_DATA}")
    return SHARED_DATA
