"""Test tiers, by folder: pure (everything else: no verl import, seconds), ``verl`` (tests/integration/:
verl functions in-process, seconds), ``e2e`` (tests/e2e/: real ``main_ppo`` runs on CPU, ~1.5-2 min each, and
OpenRLHF's ``train_ppo_ray`` in its own environment, ~1 min each).
The markers are applied here from the folder, so a test cannot sit in a folder and miss its tier.
``pytest -m "not e2e"`` skips the slow tier; ``-m e2e`` runs exactly tests/e2e/.

Two workers (pytest-xdist, ``-n 2`` in pyproject.toml's addopts, scheduler below). An e2e run is a chain of
single-process start-ups (driver, Ray, TaskRunner, workers, each importing verl for ~7-10 s): alone it keeps about
one of the two cores busy, so two runs at a time take ~1.3x as long each (two demo runs: 114 and 122 s against 91 s
alone), while three at a time filled the machine and took longer in all than one after another (CPU at 95-100 %,
each run 3x slower). So at most two heavy things run at once, and the two-node tests, which train two runs at a
time themselves, run beside light ones: the first worker takes the two-node tests first (``MULTINODE``: a cluster
of network namespaces of their own, which shares nothing with the local clusters but the CPU), while the other runs
the fast tiers at a lower priority (``BESIDE_NICENESS``); then both take the e2e files from one queue, one file at
a time, longest first (``E2E_SECONDS``). In CI run 10 the two-node tests came after the fast tiers, beside the
README demo's run: 815 s and 605 s, against 745 s and 503 s in run 9. The verl tier's files (``FILLER``) wait until
no e2e file is left to start, so that a worker whose e2e files are done has them to run beside the other's last.
The tests that grade against a deadline (``DEADLINE_UNITS``: the doctor's self-check, tests/reward/, OpenRLHF's
reward hook) run last, in two units side by side, once no e2e test runs beside them (``wait_for_e2e_beside``).
``-p no:xdist`` or ``-n 0`` runs everything in one process."""

import os
import time
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"
TESTS = REPO_ROOT / "tests"
FOLDER_MARKERS = {TESTS / "e2e": "e2e", TESTS / "integration": "verl"}


# Tests that grade against a deadline, in two work units of about two minutes each (one per worker, side by side:
# each keeps about one core busy), run when no e2e run is left beside them (see above). As one unit they ran on one
# worker for ~4 minutes at the end of a CI run while the other had nothing left to do.
DEADLINE_UNITS = (
    (TESTS / "reward", TESTS / "openrlhf"),  # the reward's deadlines, and OpenRLHF's reward hook
    (
        TESTS / "integration" / "test_doctor_on_cpu.py",
        TESTS / "integration" / "test_core_without_lab_on_cpu.py",  # the doctor's self-check, twice
        TESTS / "integration" / "test_reward_in_ray_on_cpu.py",
    ),
)
DEADLINE = tuple(path for unit in DEADLINE_UNITS for path in unit)
# The verl tier's other files (in-process verl, Ray clusters of a few actors; seconds to a minute each): the filler,
# one work unit per file, handed out once no e2e file is left to start, before the DEADLINE units. Taken with the
# fast tiers at the start, they left a worker waiting ~2 minutes at the end for the other's last e2e run (CI run 9).
FILLER = (TESTS / "integration",)
# The two-node tests (tests/e2e/two_nodes.py): one work unit, the first worker's first.
MULTINODE = (
    TESTS / "e2e" / "test_two_nodes_on_cpu.py",
    TESTS / "e2e" / "test_openrlhf_two_nodes_on_cpu.py",
)
# The e2e files' durations alone here (seconds, rounded; from CI runs, the OpenRLHF file's estimated after it lost
# three runs, the main_ppo and tiled files' after each lost one), the order the scheduler hands them out in: longest
# first, so that the two workers end together. A file missing here goes last; a wrong figure costs time, never a
# result.
E2E_SECONDS = {
    "test_openrlhf_train_ppo_ray_on_cpu.py": 400,
    "test_demo_command_on_cpu.py": 330,
    "test_vllm_rollout_on_cpu.py": 280,
    "test_study_on_cpu.py": 210,
    "test_main_ppo_on_cpu.py": 200,
    "test_megatron_on_cpu.py": 175,
    "test_openrlhf_docs_command_on_cpu.py": 170,
    "test_tiled_head_on_cpu.py": 120,
    "test_gec_controls_on_cpu.py": 105,
    "test_reproduce_on_cpu.py": 105,
    "test_openrlhf_upstream_series_on_cpu.py": 60,
    "test_evaluation_on_cpu.py": 30,
    "test_preflight_before_ray_on_cpu.py": 20,
}


# E2E files that do not start while the two-node tests run: the OpenRLHF file's own Ray head, with the dashboard
# `ray job submit` needs, did not come up in 2 x 300 s beside them (CI run 11), as beside a pair of runs before
# (tests/e2e/ray_head.py). Another file goes first; one of these still runs when nothing else is left.
NOT_BESIDE_MULTINODE = ("test_openrlhf_train_ppo_ray_on_cpu.py",)


# The niceness of a worker while it runs a fast-tier test (the processes a test starts inherit it): the e2e runs
# are the critical path, so the tests beside them take only the CPU time those leave. Measured in the first
# two-worker CI run: without it, the first two e2e runs took 4:47 and 3:24 beside the fast tiers (2:23 and 2:00
# alone).
BESIDE_NICENESS = 15


def prefixes(rootpath: Path, paths) -> tuple[str, ...]:
    """``paths`` as the node-id prefixes of their tests (a folder ends in "/")."""
    return tuple(path.relative_to(rootpath).as_posix() + ("/" if path.is_dir() else "") for path in paths)


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
    wanted = 0 if item.nodeid.startswith(prefixes(item.config.rootpath, (TESTS / "e2e", *DEADLINE))) else BESIDE_NICENESS
    try:
        os.setpriority(os.PRIO_PROCESS, 0, wanted)
    except PermissionError:  # back to 0 needs CAP_SYS_NICE; a serial test then runs niced, never wrong
        pass


def pytest_collection_modifyitems(items):
    for item in items:
        for folder, marker in FOLDER_MARKERS.items():
            if item.path.is_relative_to(folder):
                item.add_marker(marker)


# The scheduler (see the module's docstring). Work units: each e2e file but the two-node ones ("e2e:<file>"), the
# two-node files ("multinode"), each FILLER file ("filler:<file>"), each of DEADLINE_UNITS ("deadline:<index>"),
# every other test alone. A worker asks for its next unit while its last two tests are still queued (xdist runs a
# worker's last test only once it knows the next one or is told to stop), and the unit it gets is chosen for it: the
# first worker takes the two-node tests first, then e2e files; the last (the fast tiers' home) fast tests first, then
# e2e files; then both the FILLER files, beside the last e2e runs; the DEADLINE units come last, and their tests wait
# for the e2e tests still running elsewhere. xdist's own grouping (``--dist loadgroup``)
# renames node ids, which pytest 9.2 no longer lets a plugin do, so the grouping is this scheduler's. tryfirst:
# xdist's session answers this hook too, and the first answer is the one used.
@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    deadline_units = [prefixes(config.rootpath, unit) for unit in DEADLINE_UNITS]
    multinode = prefixes(config.rootpath, MULTINODE)
    e2e = prefixes(config.rootpath, (TESTS / "e2e",))
    filler = prefixes(config.rootpath, FILLER)

    class TwoHeavyAtMost(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            unit = next((index for index, paths in enumerate(deadline_units) if nodeid.startswith(paths)), None)
            if unit is not None:
                return f"deadline:{unit}"
            if nodeid.startswith(multinode):
                return "multinode"
            if nodeid.startswith(e2e):
                return "e2e:" + nodeid.split("::")[0]
            if nodeid.startswith(filler):
                return "filler:" + nodeid.split("::")[0]
            return nodeid

        def _multinode_running(self) -> bool:
            return any(not all(unit.values()) for units in self.assigned_work.values() for scope, unit in units.items()
                       if scope == "multinode")

        def _next_scope(self, node) -> str:
            files = [scope for scope in self.workqueue if scope.startswith("e2e:")]
            allowed = [scope for scope in files if Path(scope).name not in NOT_BESIDE_MULTINODE or not self._multinode_running()]
            longest = max(allowed or files, key=lambda scope: E2E_SECONDS.get(Path(scope).name, 0), default=None)
            fast = next((scope for scope in self.workqueue
                         if scope != "multinode" and not scope.startswith(("e2e:", "deadline:", "filler:"))), None)
            fast_tiers_home = len(self.nodes) > 1 and node is max(self.nodes, key=lambda other: other.gateway.id)
            preferred = (fast, longest, "multinode") if fast_tiers_home else ("multinode", longest, fast)
            later = [next((scope for scope in self.workqueue if scope.startswith(kind)), None) for kind in ("filler:", "deadline:")]
            return next(scope for scope in (*preferred, *later) if scope in self.workqueue)

        def _assign_work_unit(self, node) -> None:
            scope = self._next_scope(node)
            work_unit = self.workqueue.pop(scope)
            self.assigned_work.setdefault(node, {})[scope] = work_unit
            collection = self.registered_collections[node]
            node.send_runtest_some([collection.index(nodeid) for nodeid, done in work_unit.items() if not done])

    return TwoHeavyAtMost(config, log)


def e2e_running_folder(config) -> Path:
    """Where each xdist worker marks the e2e test it runs: a folder of this session's, shared by its workers."""
    return config._tmp_path_factory.getbasetemp().parent / "e2e_running"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None or not item.nodeid.startswith(prefixes(item.config.rootpath, (TESTS / "e2e",))):
        return (yield)
    marker = e2e_running_folder(item.config) / worker
    marker.parent.mkdir(exist_ok=True)
    marker.write_text(item.nodeid)
    try:
        return (yield)
    finally:
        marker.unlink(missing_ok=True)


# How long a DEADLINE test waits for the e2e tests beside it to end (then it runs anyway).
E2E_WAIT_S = 3600


@pytest.fixture(scope="session")
def e2e_ended_beside():
    """Whether this worker saw no e2e test running on another (set by the first DEADLINE test that waits)."""
    return []


@pytest.fixture(autouse=True)
def wait_for_e2e_beside(request, e2e_ended_beside):
    """The first DEADLINE test of a worker starts once no other worker runs an e2e test (seen so twice, 2 s apart):
    the DEADLINE units are the scheduler's last, so no e2e file starts after them."""
    if e2e_ended_beside or os.environ.get("PYTEST_XDIST_WORKER") is None or not request.node.nodeid.startswith(
            prefixes(request.config.rootpath, DEADLINE)):
        return
    folder, give_up, quiet = e2e_running_folder(request.config), time.monotonic() + E2E_WAIT_S, 0
    while quiet < 2 and time.monotonic() < give_up:
        quiet = quiet + 1 if not (folder.is_dir() and any(folder.iterdir())) else 0
        time.sleep(2)
    e2e_ended_beside.append(True)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data sets not found at {SHARED_DATA}")
    return SHARED_DATA
