"""A run's Ray nodes, from its driver: every node runs the driver's plugin with the job's settings, a lost node ends
the run with a message, and the run records where its actors ran. Ray only: verl's coupling is
``integration/cluster.py``, OpenRLHF's the launcher's (``openrlhf/train_ppo_ray.py``); docs/multinode.md is the
user's page.

verl loads ``verl.plugins`` entry points only where the package is installed, and Ray unpickles OpenRLHF's actor
classes of edge_verl only where it can import them: a node without edge_verl runs the framework's own code (verl:
no per-response seed, no EDA loss term, no GEC) or fails deep in a worker, and a node with another version runs
another method under the same name. A process reads the plugin's settings (``EDGE_VERL_*``) from its own
environment, which on another node is that node's raylet's, not the driver's: the couplings put the driver's in
the job's runtime env (``travelling_settings``).

- **The plugin on every node** (``check_nodes``): a probe task on each alive node, scheduled there and nowhere
  else, imports the framework's side of the plugin as a worker does and reports what it has (``installation.py``):
  no plugin, another version or code, other estimators or hooks, or plugin settings other than the job's (a
  variable set on that node's raylet but not on the driver) refuse the run before its first actor, naming the node
  and the fix (``ClusterCheckFailed``, exit code 2).
- **A lost node** (``NodeWatch``): while the run trains, the driver watches the nodes that were alive at its start;
  one that Ray reports dead ends the run within ``NODE_LOSS_GRACE_S`` with a message naming it and how to resume,
  whatever the framework was waiting on (the driver exits, and Ray ends the job's actors with it, so no collective
  waits out its timeout).
- **Where the actors ran** (``placement``): when the driver exits, one line ``edge-verl placement: {...}`` lists
  every actor of the job by class with the node it ran on.
"""

from __future__ import annotations

import atexit
import json
import os
import socket
import sys
import threading
from typing import Any, Callable, Mapping, Optional

from edge_verl.installation import FRAMEWORKS, installation_report

SETTINGS_PREFIX = "EDGE_VERL_"
PREFIX = "edge-verl cluster"
EXIT_CODE = 2
# How long a node's probe may take: a fresh worker process importing torch and the framework (~10-40 s on a busy node).
PROBE_TIMEOUT_S = 300.0
# How often the driver looks at the nodes while the run trains, and how long after a lost node it waits for the
# framework's own error before it ends the driver itself.
NODE_POLL_S = 2.0
NODE_LOSS_GRACE_S = 30.0
# How long the driver's last look at exit waits for a watched node's raylet to take a connection.
RAYLET_CONNECT_S = 3.0
INSTALL_HINT = "install the driver's edge-verl on every node (pip install --no-deps edge-verl=={version}; docs/multinode.md)"


class ClusterCheckFailed(SystemExit):
    """The cluster cannot run this run. A ``SystemExit`` (code ``EXIT_CODE``): the message is printed last."""

    def __init__(self, message: str):
        super().__init__(EXIT_CODE)
        self.message = message

    def __str__(self) -> str:
        return self.message


def travelling_settings(environ: Optional[Mapping[str, str]] = None) -> dict[str, str]:
    """The plugin's settings in ``environ`` (default: this process's environment): every ``EDGE_VERL_*`` variable."""
    environ = os.environ if environ is None else environ
    return {name: value for name, value in sorted(environ.items()) if name.startswith(SETTINGS_PREFIX)}


# Ray's variable holding a submitted job's config in its driver (``ray job submit``), runtime env included.
JOB_CONFIG_VARIABLE = "RAY_JOB_CONFIG_JSON_ENV_VAR"


def submitted_env_vars(environ: Optional[Mapping[str, str]] = None) -> dict[str, str]:
    """The env_vars of a submitted job's runtime env (``ray job submit``; none in a driver started by hand)."""
    environ = os.environ if environ is None else environ
    job = json.loads(environ.get(JOB_CONFIG_VARIABLE) or "{}")
    return dict((job.get("runtime_env") or {}).get("env_vars") or {})


def settings_to_pass(environ: Optional[Mapping[str, str]] = None) -> dict[str, str]:
    """The driver's settings (``travelling_settings``) that its ``ray.init`` must add to the job's runtime env: all but
    those a submitted job's runtime env already sets, which reach every worker of the job through Ray (and which Ray
    refuses to see set twice: "Failed to merge the Job's runtime env")."""
    submitted = submitted_env_vars(environ)
    return {name: value for name, value in travelling_settings(environ).items() if name not in submitted}


# --- the plugin on every node -----------------------------------------------------------------------------------


def node_probe(framework: str) -> Callable[[], dict]:
    """The probe each node runs for a run of ``framework`` ("verl" or "openrlhf"): a closure, so that Ray ships it by
    value and it runs on a node whose Python has no edge_verl (a function of this module would fail to unpickle
    there, saying nothing of why)."""
    if framework not in FRAMEWORKS:
        raise ValueError(f"framework={framework!r}; allowed: {', '.join(FRAMEWORKS)}")

    def probe() -> dict:
        import importlib
        import os
        import socket
        import sys

        report = {
            "hostname": socket.gethostname(), "python": sys.executable,
            "settings": {name: value for name, value in sorted(os.environ.items()) if name.startswith("EDGE_VERL_")},
        }
        if framework == "openrlhf":  # the launcher's actor classes are edge_verl's: importable, and installed
            try:
                importlib.import_module("edge_verl.openrlhf.actors")
            except Exception as error:
                report["problem"] = f"OpenRLHF's workers cannot import edge_verl there ({type(error).__name__}: {error})"
                return report
        else:
            try:
                import verl  # noqa: F401  (loads every verl.plugins entry point, as in any verl process)
            except Exception as error:  # a node without verl cannot run the run either
                report["problem"] = f"cannot import verl ({type(error).__name__}: {error})"
                return report
        if framework == "verl" and "edge_verl.integration.plugin" not in sys.modules:
            from importlib import metadata, util

            try:
                installed = bool(metadata.version("edge-verl"))
            except metadata.PackageNotFoundError:
                installed = False
            if not installed and util.find_spec("edge_verl") is None:
                why = "edge_verl is not installed"
            elif not installed:
                why = "edge_verl is only on sys.path there, not installed: verl finds no verl.plugins entry point"
            else:
                why = ("edge-verl is installed but verl did not load it (VERL_USE_EXTERNAL_PLUGINS="
                       f"{os.environ.get('VERL_USE_EXTERNAL_PLUGINS', 'auto')!r}, or its import failed: run `edge-verl doctor` there)")
            report["problem"] = f"verl runs there without the plugin: {why}"
            return report
        from edge_verl.installation import installation_report

        report.update(installation_report(framework))
        return report

    return probe


def alive_nodes(ray_module: Any) -> list[dict]:
    """Ray's alive nodes that run tasks (CPU resources), as verl's agent and reward loops pick them."""
    return [node for node in ray_module.nodes() if node["Alive"] and node["Resources"].get("CPU", 0) > 0]


def node_reports(framework: str, timeout_s: float = PROBE_TIMEOUT_S) -> dict[str, dict]:
    """{node address: probe report} of every alive node, each probed in a task scheduled on it alone."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    probe = ray.remote(num_cpus=0, max_retries=0)(node_probe(framework))
    pending = {}
    for node in alive_nodes(ray):
        strategy = NodeAffinitySchedulingStrategy(node_id=node["NodeID"], soft=False)
        pending[probe.options(scheduling_strategy=strategy).remote()] = node["NodeManagerAddress"]
    reports = {address: {"problem": f"did not answer the plugin check within {timeout_s:.0f} s"} for address in pending.values()}
    ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=timeout_s)
    for ref in ready:
        try:
            reports[pending[ref]] = ray.get(ref)
        except Exception as error:  # the probe's worker could not start or died
            reports[pending[ref]] = {"problem": f"the plugin check failed there ({type(error).__name__}: {error})"}
    return reports


COMPARED = ("version", "digest", "estimators", "hooks")


def node_problems(reference: Mapping[str, Any], settings: Mapping[str, str], reports: Mapping[str, Mapping]) -> list[str]:
    """One line per node that cannot run this run: its probe's problem, a plugin that differs from ``reference``
    (the driver's ``installation_report``) or plugin settings other than the job's ``settings``."""
    hint = INSTALL_HINT.format(version=reference.get("version"))
    problems = []
    for address, report in sorted(reports.items()):
        where = f"node {address}" + (f" ({report['hostname']}, {report['python']})" if "python" in report else "")
        if "problem" in report:
            problems.append(f"{where}: {report['problem']}; {hint}")
            continue
        differs = [f"{key} {report.get(key)!r} (driver: {reference.get(key)!r})" for key in COMPARED if report.get(key) != reference.get(key)]
        if differs:
            problems.append(f"{where}: another edge_verl than the driver's: {'; '.join(differs)}; {hint}")
        seen = dict(report.get("settings", {}))
        if seen != dict(settings):
            names = sorted(name for name in set(seen) | set(settings) if seen.get(name) != settings.get(name))
            values = ", ".join(f"{name}={seen.get(name)!r} (the job's: {settings.get(name)!r})" for name in names)
            problems.append(f"{where}: plugin settings other than the job's: {values}; set them on the driver, whose "
                            "EDGE_VERL_* variables travel with the job, and unset them on the node")
    return problems


def job_settings(ray_module: Any) -> dict[str, str]:
    """The plugin settings every worker of this job should see: those of the job's runtime env, which the couplings
    fill with the driver's (``travelling_settings``)."""
    runtime_env = ray_module.get_runtime_context().runtime_env or {}
    return travelling_settings(runtime_env.get("env_vars") or {})


def check_nodes(framework: str) -> dict[str, dict]:
    """Probe every node (``node_reports``) and fail the run unless each runs the driver's plugin with the job's
    settings; prints one line ``edge-verl nodes: {...}`` with the reports and returns them."""
    import ray

    alive = alive_nodes(ray)
    if len(alive) == 1 and alive[0]["NodeID"] == ray.get_runtime_context().get_node_id():
        # one node, the driver's: its workers run this machine's Python, as the driver does (a probe would cost every
        # single-machine run a process importing torch and verl)
        print("edge-verl nodes: one node, the driver's own: not probed", flush=True)
        return {}
    reports = node_reports(framework)
    print(f"edge-verl nodes: {json.dumps(reports, sort_keys=True)}", flush=True)
    problems = node_problems(installation_report(framework), job_settings(ray), reports)
    if problems:
        message = f"{PREFIX}: {len(problems)} of {len(reports)} node(s) cannot run this run:\n" + "\n".join(f"  {line}" for line in problems)
        print(message, file=sys.stderr, flush=True)
        raise ClusterCheckFailed(message)
    return reports


# --- a lost node, and where the workers ran ---------------------------------------------------------------------


class NodeWatch:
    """Watches the nodes alive at the run's start while it trains (a thread of the driver). A node Ray reports dead
    is lost: the watch says which and how to resume, gives verl ``grace_s`` to fail on its own, then ends the
    driver (``EXIT_CODE``), whatever verl was blocked on: Ray then ends the job's actors with it, so that no
    collective waits out its timeout."""

    def __init__(self, ray_module: Any, poll_s: float = NODE_POLL_S, grace_s: float = NODE_LOSS_GRACE_S,
                 end: Callable[[int], None] = os._exit):
        self._ray = ray_module
        # each watched node's raylet: (address, port)
        self._raylets = {node["NodeID"]: (node["NodeManagerAddress"], node.get("NodeManagerPort"))
                         for node in alive_nodes(ray_module)}
        self._poll_s, self._grace_s, self._end = poll_s, grace_s, end
        self._stop = threading.Event()
        self.lost: Optional[str] = None
        self._thread = threading.Thread(target=self._watch, name="edge-verl-node-watch", daemon=True)
        self._thread.start()

    def _dead(self) -> list[str]:
        alive = {node["NodeID"] for node in self._ray.nodes() if node["Alive"]}
        return sorted(address for node_id, (address, _) in self._raylets.items() if node_id not in alive)

    def _watch(self) -> None:
        while not self._stop.wait(self._poll_s):
            try:
                dead = self._dead()
            except Exception:  # the cluster's GCS itself is gone: verl's own wait fails too
                return
            if dead:
                self.lost = self._message(dead)
                print(self.lost, file=sys.stderr, flush=True)
                if not self._stop.wait(self._grace_s):
                    print_placement(self._ray)
                    print(self.lost, file=sys.stderr, flush=True)
                    self._end(EXIT_CODE)
                return

    def _silent(self) -> list[str]:
        """The watched nodes whose raylet does not take a connection now (a node killed moments ago, before Ray's
        health checks report it dead: ~15-30 s)."""
        silent = []
        for address, port in self._raylets.values():
            if not port:
                continue
            try:
                socket.create_connection((address, int(port)), timeout=RAYLET_CONNECT_S).close()
            except OSError:
                silent.append(address)
        return sorted(silent)

    @staticmethod
    def _message(dead: list[str]) -> str:
        return (f"{PREFIX}: node {', '.join(dead)} was lost during the run (Ray reports it dead, or its raylet does not "
                "answer); the run stops. "
                "Bring the node back (or replace it) and run the same command with trainer.resume_mode=auto: "
                "it resumes from the last checkpoint in trainer.default_local_dir, which every node must see")

    def check_now(self) -> Optional[str]:
        """One look at the watched nodes now (the driver's last, at its exit: verl fails within seconds of a lost
        node that held its TaskRunner, before Ray reports the node dead), dead by Ray's account or with a raylet that
        takes no connection; the message when one is lost, else None."""
        if self.lost is None:
            try:
                dead = sorted(set(self._dead()) | set(self._silent()))
            except Exception:  # the cluster itself is gone
                return None
            self.lost = self._message(dead) if dead else None
        return self.lost

    def stop(self) -> None:
        self._stop.set()


def placement(ray_module: Any) -> dict[str, list[str]]:
    """{actor class: the node address of each of this job's actors of that class}, alive or dead."""
    from ray._private import state  # GCS's actor table: needs no dashboard (the CPU backend runs without one)

    job_id = ray_module.get_runtime_context().get_job_id()
    found: dict[str, list[str]] = {}
    for actor in state.actors().values():
        if actor.get("JobID") == job_id:
            found.setdefault(actor.get("ActorClassName") or "?", []).append(actor.get("Address", {}).get("IPAddress", "?"))
    return {name: sorted(addresses) for name, addresses in sorted(found.items())}


def print_placement(ray_module: Any) -> None:
    """``edge-verl placement: {...}`` (``placement``): a record of the run, never a reason to fail it."""
    try:
        print(f"edge-verl placement: {json.dumps(placement(ray_module), sort_keys=True)}", flush=True)
    except Exception as error:
        print(f"edge-verl placement: unavailable ({type(error).__name__}: {error})", flush=True)


def guard_run(framework: str) -> NodeWatch:
    """In the driver, right after ``ray.init``: ``check_nodes``, then a ``NodeWatch``, and the placement printed when
    the driver exits (before Ray's own exit handler disconnects it). Returns the watch."""
    import ray

    check_nodes(framework)
    watch = NodeWatch(ray)

    def at_exit() -> None:
        watch.stop()
        if ray.is_initialized():
            watch.check_now()
            print_placement(ray)
        if watch.lost:
            print(watch.lost, file=sys.stderr, flush=True)

    atexit.register(at_exit)
    return watch
