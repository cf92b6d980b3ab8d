"""A Ray head a test starts with ``ray start`` and stops again without touching anything else on the machine.

``ray start --head`` as a user types it takes the machine's default Ray folder and GCS port and writes the "current
cluster" file that every later plain ``ray.init()`` on the machine joins; ``ray stop --force`` then kills every Ray
process of the machine. Beside other tests (pytest-xdist runs the two-node tests and the fast tiers beside the e2e
chain, tests/conftest.py) both break them: a local run joins the test's cluster, or its raylet is killed mid-run. This head has a folder of its own (the
"current cluster" file lands there), free ports, and is stopped by ending exactly its own processes.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def processes_naming(text: str) -> list[int]:
    """The pids whose command line contains ``text`` (this process excepted)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if text.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:  # gone meanwhile, or not ours to read
            pass
    return found


@contextmanager
def own_ray_head(ray: str, env: dict[str, str], *options: str, timeout_s: float = 300) -> Iterator[dict[str, str]]:
    """``ray start --head --block`` (``ray``: the ``ray`` command of the environment to use) with ``options``, in a
    Ray folder of its own (a second try in a fresh one if the first does not come up); yields ``{"address": GCS
    host:port, "dashboard": http URL}``. On exit: ``_stop``."""
    # Ray gives its dashboard 60 s to come up, which a loaded 2-core machine can exceed (seen once in CI); beside a pair
    # of runs 180 s were not enough either (twice in CI; the OpenRLHF file runs first, beside the niced fast tiers)
    env = {"RAY_DASHBOARD_STARTUP_TIMEOUT_S": str(int(timeout_s)), **env}
    for attempt in (1, 2):
        folder = tempfile.mkdtemp(prefix="rayhead_", dir="/tmp")  # short: Ray's socket paths live under it
        port, dashboard_port = free_port(), free_port()
        argv = [ray, "start", "--head", "--block", f"--temp-dir={folder}", f"--port={port}", f"--dashboard-port={dashboard_port}",
                "--dashboard-host=127.0.0.1", "--disable-usage-stats", *options]
        log = open(Path(folder).with_suffix(".log"), "w+")
        process = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        up = _wait_until_up(process, Path(folder), timeout_s)
        if up:
            break
        log.seek(0)
        failure = f"ray start --head did not come up (rc {process.poll()}):\n{log.read()[-4000:]}"
        _stop(process, folder, log)
        if attempt == 2:
            raise RuntimeError(failure)
    try:
        yield {"address": f"127.0.0.1:{port}", "dashboard": f"http://127.0.0.1:{dashboard_port}"}
    finally:
        _stop(process, folder, log)


def _wait_until_up(process: subprocess.Popen, folder: Path, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not (folder / "ray_current_cluster").exists():  # written once the head is up
        if process.poll() is not None or time.monotonic() > deadline:
            return False
        time.sleep(0.5)
    return True


def _stop(process: subprocess.Popen, folder: str, log) -> None:
    """SIGTERM to the blocking ``ray start`` (it ends its processes), then SIGKILL to any still naming ``folder``."""
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
    for pid in processes_naming(folder):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    log.close()
    shutil.rmtree(folder, ignore_errors=True)
    Path(folder).with_suffix(".log").unlink(missing_ok=True)
