"""A pool of pre-warmed grading worker processes whose deadline is enforced from outside.

Why processes and not ``signal.alarm`` or threads: verl calls reward functions in executor threads of
async Ray actors, where alarms are unavailable (math-verify's own timeouts then raise or silently
disable), and a thread stuck in sympy cannot be stopped. Here the caller -- in any thread, event-loop
executor, Ray actor or task -- writes a request to an idle worker's pipe and waits with ``select`` until
its deadline; a worker that misses it is killed and replaced by a fresh, pre-warmed one in the
background, so one hostile input never delays or poisons later calls. Workers are plain subprocesses
(``python -m edge_verl.reward.worker``, no fork of the caller) that import only math-verify and sympy.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import queue
import select
import subprocess
import sys
import threading
import time
from typing import Optional, Sequence

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = float(os.environ.get("EDGE_VERL_REWARD_TIMEOUT", "5"))
DEFAULT_WORKERS = int(os.environ.get("EDGE_VERL_REWARD_WORKERS", "2"))
STARTUP_TIMEOUT_S = 120.0


class _Worker:
    def __init__(self) -> None:
        env = dict(os.environ)
        env.setdefault("OMP_NUM_THREADS", "1")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "edge_verl.reward.worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            close_fds=True,
        )
        self._buffer = b""

    @property
    def pid(self) -> int:
        return self.process.pid

    def read_line(self, deadline: float) -> Optional[str]:
        """One line from the worker, or None if the deadline passes (or the worker died) first."""
        stdout = self.process.stdout
        assert stdout is not None
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            readable, _, _ = select.select([stdout], [], [], remaining)
            if not readable:
                return None
            chunk = os.read(stdout.fileno(), 65536)
            if not chunk:
                return None
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line.decode("utf-8", errors="replace")

    def send(self, payload: dict) -> bool:
        try:
            assert self.process.stdin is not None
            self.process.stdin.write((json.dumps(payload) + "\n").encode("utf-8"))
            self.process.stdin.flush()
            return True
        except (BrokenPipeError, OSError):
            return False

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()


class GradingPool:
    """``size`` warm workers; ``grade`` is safe to call from any number of threads."""

    def __init__(self, size: int = DEFAULT_WORKERS):
        if size < 1:
            raise ValueError(f"grading pool size={size!r} must be >= 1")
        self.size = size
        self._idle: "queue.Queue[_Worker]" = queue.Queue()
        self._request_id = 0
        self._lock = threading.Lock()
        self._closed = False
        self.killed = 0
        for _ in range(size):
            self._start_worker()

    def _start_worker(self) -> None:
        worker = _Worker()
        threading.Thread(target=self._warm, args=(worker,), daemon=True, name="edge-verl-grader-warm").start()

    def _warm(self, worker: _Worker) -> None:
        line = worker.read_line(time.monotonic() + STARTUP_TIMEOUT_S)
        if line == "ready" and not self._closed:
            self._idle.put(worker)
            return
        worker.kill()
        if not self._closed:
            logger.error("edge_verl grading worker failed to start (got %r); starting another", line)
            time.sleep(1.0)
            self._start_worker()

    def wait_ready(self, timeout_s: float = STARTUP_TIMEOUT_S) -> bool:
        """Block until every worker is warm (used to pre-warm before the first training step)."""
        deadline = time.monotonic() + timeout_s
        while self._idle.qsize() < self.size and time.monotonic() < deadline:
            time.sleep(0.01)
        return self._idle.qsize() >= self.size

    def grade(self, pred: str, golds: Sequence[str], timeout_s: float = DEFAULT_TIMEOUT_S) -> tuple[bool, str]:
        """(correct, reason); ``reason == "deadline"`` when no answer came within ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                worker = self._idle.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return False, "deadline"
            if worker.process.poll() is None:
                break
            # Died while idle (killed from outside, out of memory): replace it, take another.
            worker.kill()
            self._start_worker()
        with self._lock:
            self._request_id += 1
            request_id = self._request_id
        line = None
        if worker.send({"id": request_id, "pred": pred, "golds": list(golds)}):
            line = worker.read_line(deadline)
        reply = json.loads(line) if line else None
        if reply is None or reply.get("id") != request_id:
            worker.kill()
            self.killed += 1
            self._start_worker()
            return False, "deadline" if time.monotonic() >= deadline else "grader_crashed"
        self._idle.put(worker)
        return bool(reply["correct"]), str(reply["reason"])

    def worker_pids(self) -> list[int]:
        return [worker.pid for worker in list(self._idle.queue)]

    def close(self) -> None:
        self._closed = True
        while True:
            try:
                self._idle.get_nowait().kill()
            except queue.Empty:
                return


_POOL: Optional[GradingPool] = None
_POOL_LOCK = threading.Lock()


def get_pool() -> GradingPool:
    """The process-wide pool, started (and warming) on first use."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = GradingPool()
            atexit.register(_POOL.close)
        return _POOL


def _forget_pool_in_child() -> None:
    # A forked child must not share the parent's worker pipes; it starts its own pool when it grades.
    global _POOL
    _POOL = None


os.register_at_fork(after_in_child=_forget_pool_in_child)
