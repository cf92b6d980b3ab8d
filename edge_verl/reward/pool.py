"""A pool of pre-warmed grading worker processes whose deadline is enforced from outside.

Why processes and not ``signal.alarm`` or threads: verl calls reward functions in executor threads of
async Ray actors, where alarms are unavailable (math-verify's own timeouts then raise or silently
disable), and a thread stuck in sympy cannot be stopped. Here the caller -- in any thread, event-loop
executor, Ray actor or task -- hands a request to an idle worker's pipe and waits with ``select``; a worker
that misses its deadline is killed and replaced. Workers are plain subprocesses (``python -m
edge_verl.reward.worker``, no fork of the caller) that import only math-verify and sympy (~60 MB each,
ready ~0.6 s after start on the 2-core CPU machine).

Two bounds, so that no answer pays for another (``grade``):
- ``timeout_s`` (default 5 s, ``EDGE_VERL_REWARD_TIMEOUT``) bounds the grader's work on THIS answer: it
  starts when a worker has the request. Past it the reason is ``deadline``.
- ``wait_s`` (default 120 s, ``EDGE_VERL_REWARD_WAIT``) bounds the wait for a worker: callers are served
  first come, first served (each waiting caller holds a ticket; a freed worker goes to the oldest ticket,
  newcomers cannot barge in). Past it the reason is ``waiting``.
A call therefore returns within ``wait_s + timeout_s`` plus pipe latency, whatever the other calls are.

The mechanism, elastic capacity with a cap: a worker still busy ``SLOW_AFTER_S`` (0.5 s; real answers
take ~1 ms median, ~13 ms p99) no longer counts as capacity: it drops to the lowest CPU priority (nice 19;
it keeps its deadline) and a spare worker is started in its place, up to ``max_size`` processes (default
8, ``EDGE_VERL_REWARD_MAX_WORKERS``). A worker that was slow retires when it finishes, spares beyond
``size`` retire when they fall idle. Hostile inputs (power towers, huge factorials) can then hold at most
``max_size`` workers, each for at most ``timeout_s``, without starving the cores or the queue.
The pool is written here, not taken from ``concurrent.futures`` or ``multiprocessing.Pool``, because neither
kills a worker past its deadline or stops counting a slow one as capacity, and those two are what the
measurements below turn on. Measured with ``scripts/bench_reward.py --load`` (8 hostile + 18 correct
symbolic answers submitted at once from 26 threads, hostile ones first in line; 2 workers, 5 s deadline;
2-core CPU):
  - a fixed-size pool with one deadline covering the wait as well: 18 of 18 correct answers lost;
  - a fair queue alone (``max_size=2``): 0 lost, but the correct answers returned after 22.9 s (they
    wait N/size deadlines behind the hostile ones);
  - this pool: 0 lost, every correct answer back within 6.1 s, hostile ones within 8.1 s (cut at 5.0 s
    of grading each); without the renice, 10.9 s and 11.8 s (8 sympy processes shared 2 cores).
There is no caller-side pre-screen of "inputs that cannot finish": it would be a guess about sympy's cost
that either misses hostile forms or refuses legitimate ones (``2^{2^{3}}``); the pool needs no guess.

Start-up: a worker that fails to start (no ``ready`` within ``STARTUP_TIMEOUT_S``, or it exits) is retried
``STARTUP_ATTEMPTS`` times in a row; then the pool is broken and every call that needs a worker raises
``GraderUnavailable`` with the last worker's stderr tail (a training run fails loudly rather than scoring
every symbolic answer 0).
"""

from __future__ import annotations

import atexit
import collections
import json
import logging
import os
import select
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Optional

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = float(os.environ.get("EDGE_VERL_REWARD_TIMEOUT", "5"))
DEFAULT_WAIT_S = float(os.environ.get("EDGE_VERL_REWARD_WAIT", "120"))
DEFAULT_WORKERS = int(os.environ.get("EDGE_VERL_REWARD_WORKERS", "2"))
DEFAULT_MAX_WORKERS = int(os.environ.get("EDGE_VERL_REWARD_MAX_WORKERS", "8"))
SLOW_AFTER_S = 0.5
STARTUP_TIMEOUT_S = 120.0
STARTUP_ATTEMPTS = 3
STDERR_TAIL_LINES = 40


class GraderUnavailable(RuntimeError):
    """No grading worker could be started; the message carries the cause (the worker's stderr tail)."""


class _Worker:
    def __init__(self, env: Optional[dict] = None) -> None:
        environment = dict(os.environ)
        environment.update(env or {})
        environment.setdefault("OMP_NUM_THREADS", "1")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "edge_verl.reward.worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=environment,
            close_fds=True,
        )
        self._buffer = b""
        self._stderr: collections.deque = collections.deque(maxlen=STDERR_TAIL_LINES)
        self._stderr_reader = threading.Thread(target=self._drain_stderr, daemon=True, name="edge-verl-grader-stderr")
        self._stderr_reader.start()

    def _drain_stderr(self) -> None:
        # Reading continuously keeps a chatty library from filling the pipe and blocking the worker.
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self._stderr.append(line.decode("utf-8", errors="replace").rstrip())

    def stderr_tail(self) -> str:
        self._stderr_reader.join(timeout=2.0)
        return "\n".join(self._stderr)

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

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

    def deprioritise(self) -> None:
        """Lowest CPU priority (nice 19): a slow answer keeps its deadline but yields the cores to the rest."""
        try:
            os.setpriority(os.PRIO_PROCESS, self.process.pid, 19)
        except (OSError, AttributeError):  # not permitted, already gone, or no setpriority on this platform
            pass

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()


@dataclass(eq=False)  # identity: leaving the line removes this ticket, not an equal-looking one
class _Ticket:
    """A waiting caller's place in line; the pool hands it a worker."""

    worker: Optional[_Worker] = None


@dataclass
class PoolCounters:
    """What the pool did since it started (for benchmarks and tests)."""

    started: int = 0
    spares: int = 0
    retired: int = 0
    killed: int = 0
    start_failures: int = 0
    peak_processes: int = 0


class GradingPool:
    """``size`` warm workers, elastic up to ``max_size``; ``grade`` is safe from any number of threads."""

    def __init__(
        self,
        size: int = DEFAULT_WORKERS,
        max_size: Optional[int] = None,
        slow_after_s: float = SLOW_AFTER_S,
        startup_attempts: int = STARTUP_ATTEMPTS,
        startup_timeout_s: float = STARTUP_TIMEOUT_S,
        env: Optional[dict] = None,
    ):
        max_size = max(size, DEFAULT_MAX_WORKERS) if max_size is None else max_size
        if size < 1 or max_size < size:
            raise ValueError(f"grading pool size={size!r}, max_size={max_size!r}: need 1 <= size <= max_size")
        if startup_attempts < 1:
            raise ValueError(f"startup_attempts={startup_attempts!r} must be >= 1")
        self.size, self.max_size, self.slow_after_s = size, max_size, slow_after_s
        self._startup_attempts, self._startup_timeout_s, self._env = startup_attempts, startup_timeout_s, env
        self._cond = threading.Condition()
        self._idle: collections.deque = collections.deque()
        self._waiters: collections.deque = collections.deque()
        self._processes = 0  # starting + idle + busy
        self._slow = 0  # busy for longer than slow_after_s
        self._failures = 0  # consecutive start failures
        self._broken: Optional[str] = None
        self._closed = False
        self._request_id = 0
        self.counters = PoolCounters()
        with self._cond:
            for _ in range(size):
                self._spawn_locked()

    # --- capacity (all under self._cond) -------------------------------------------------------------

    def _spawn_locked(self) -> None:
        self._processes += 1
        self.counters.started += 1
        self.counters.peak_processes = max(self.counters.peak_processes, self._processes)
        threading.Thread(target=self._warm, daemon=True, name="edge-verl-grader-warm").start()

    def _top_up_locked(self) -> None:
        """Start workers until ``size`` of them are responsive (not stuck on a slow answer), within the cap."""
        while not self._closed and self._broken is None and self._processes - self._slow < self.size and self._processes < self.max_size:
            if self._processes >= self.size:
                self.counters.spares += 1
            self._spawn_locked()

    def _hand_over_locked(self, worker: _Worker) -> None:
        """A ready worker goes to the oldest waiting caller, else to the idle set (or retires if spare)."""
        if self._waiters:
            self._waiters.popleft().worker = worker
            self._cond.notify_all()
            return
        if self._closed or self._processes > self.size:
            self._processes -= 1
            self.counters.retired += 1
            worker.kill()
            return
        self._idle.append(worker)

    def _gone_locked(self, worker: _Worker, was_slow: bool) -> None:
        worker.kill()
        self._processes -= 1
        if was_slow:
            self._slow -= 1
        self._top_up_locked()

    def _warm(self) -> None:
        worker, line = None, None
        try:
            worker = _Worker(self._env)
            line = worker.read_line(time.monotonic() + self._startup_timeout_s)
        except OSError as error:
            line = f"could not start: {error}"
        with self._cond:
            if line == "ready" and worker is not None:
                self._failures = 0
                self._hand_over_locked(worker)
                return
            self._processes -= 1
            self._failures += 1
            self.counters.start_failures += 1
        tail = ""
        if worker is not None:
            worker.kill()
            tail = worker.stderr_tail()
        cause = f"the worker said {line!r}" if line else "the worker exited or printed nothing"
        logger.error("edge_verl grading worker failed to start (%s); stderr:\n%s", cause, tail)
        with self._cond:
            if self._failures >= self._startup_attempts:
                self._broken = (
                    f"edge_verl's grading workers failed to start {self._failures} times in a row ({cause}). "
                    f"Last worker's stderr:\n{tail or '(empty)'}\nCheck that math-verify and sympy import in this "
                    f"environment: {sys.executable} -m edge_verl.reward.worker"
                )
                self._cond.notify_all()
                return
        time.sleep(0.5 * self._failures)
        with self._cond:
            self._top_up_locked()

    # --- calls ----------------------------------------------------------------------------------------

    def _acquire(self, wait_deadline: float) -> Optional[_Worker]:
        with self._cond:
            self._raise_if_broken_locked()
            if self._idle and not self._waiters:
                return self._idle.popleft()
            ticket = _Ticket()
            self._waiters.append(ticket)
            while ticket.worker is None:
                remaining = wait_deadline - time.monotonic()
                if self._broken is not None or remaining <= 0:
                    self._waiters.remove(ticket)  # leave the line: a freed worker must not wait for us
                    self._raise_if_broken_locked()
                    return None
                self._cond.wait(remaining)
            return ticket.worker

    def _raise_if_broken_locked(self) -> None:
        if self._broken is not None:
            raise GraderUnavailable(self._broken)

    def grade(
        self, request: dict, timeout_s: float = DEFAULT_TIMEOUT_S, wait_s: float = DEFAULT_WAIT_S
    ) -> tuple[dict, str]:
        """(the worker's reply, outcome): outcome is ``worker``, or ``deadline`` / ``waiting`` / ``crashed``
        with an empty reply. ``request`` is a worker request without its ``id`` (see the worker module).
        Raises ``GraderUnavailable`` when no worker can be started."""
        waited_from = time.monotonic()
        while True:
            worker = self._acquire(waited_from + wait_s)
            if worker is None:
                return {}, "waiting"
            if worker.alive():
                break
            with self._cond:  # died while idle (killed from outside, out of memory): replace it
                self._gone_locked(worker, was_slow=False)
        with self._cond:
            self._request_id += 1
            request_id = self._request_id
        deadline = time.monotonic() + timeout_s
        line, slow = None, False
        if worker.send({**request, "id": request_id}):
            line = worker.read_line(min(deadline, time.monotonic() + self.slow_after_s))
            if line is None and worker.alive() and time.monotonic() < deadline:
                slow = True
                worker.deprioritise()
                with self._cond:
                    self._slow += 1
                    self._top_up_locked()
                line = worker.read_line(deadline)
        reply = json.loads(line) if line else None
        if reply is None or reply.get("id") != request_id:
            timed_out = time.monotonic() >= deadline
            with self._cond:
                self.counters.killed += 1
                self._gone_locked(worker, was_slow=slow)
            return {}, "deadline" if timed_out else "crashed"
        with self._cond:
            if slow:  # deprioritised for good: retire it, a fresh worker takes its place if needed
                self._gone_locked(worker, was_slow=True)
            else:
                self._hand_over_locked(worker)
        return reply, "worker"

    def wait_ready(self, timeout_s: float = STARTUP_TIMEOUT_S) -> bool:
        """Block until ``size`` workers are idle (used to pre-warm); raises ``GraderUnavailable``."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while len(self._idle) < self.size:
                self._raise_if_broken_locked()
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(min(remaining, 0.05))
            return True

    def worker_pids(self) -> list[int]:
        with self._cond:
            return [worker.pid for worker in self._idle]

    def close(self) -> None:
        with self._cond:
            self._closed = True
            idle, self._idle = list(self._idle), collections.deque()
        for worker in idle:
            worker.kill()


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
