"""A two-node Ray cluster on one machine, for the multi-node tests: each node in a network namespace of its own,
joined by a veth pair, one address each (``ADDRESSES``), ``ray start --head`` in the first and ``ray start
--address`` in the second. A process of a node runs inside its namespace (``Node.command``), so that the
node's Ray, its workers and a driver started there see only that node's address, as on two machines; the
filesystem is shared (a checkpoint folder is one path for both, as docs/multinode.md asks of a real cluster).

Needs root (``ip netns``); ``skip_reason`` says why it cannot run here. Each node's processes are exactly its
namespace's (``ip netns pids``): ``Node.kill`` is a lost machine, and nothing outside the cluster is touched.
The addresses are the cluster's own, on a link that exists only between the two namespaces.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

# The link between the two namespaces and each end's address: a private /30 that exists only on this link.
SUBNET_BITS = 30
ADDRESSES = ("10.251.7.1", "10.251.7.2")
# The same interface name in both namespaces: one GLOO_SOCKET_IFNAME for every node of the cluster.
INTERFACE = "edge0"
GCS_PORT = 6379
# Logical CPUs per node: TransferQueue takes 32 per run (integration/cpu/overrides.py), two runs may share a node.
CPUS_PER_NODE = 64


def skip_reason() -> str | None:
    """Why the two-node cluster cannot be built here, or None."""
    if sys.platform != "linux":
        return "network namespaces are Linux's"
    if os.geteuid() != 0:
        return "building network namespaces needs root (CI runs as root)"
    if shutil.which("ip") is None:
        return "no `ip` command (iproute2)"
    return None


def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, text=True)


@dataclass
class Node:
    """One node: its namespace, its address and how its Ray was started."""

    namespace: str
    address: str
    python: str
    environment: dict[str, str]
    temp_dir: str

    def command(self, argv: list[str]) -> list[str]:
        """``argv`` run inside this node's namespace."""
        return ["ip", "netns", "exec", self.namespace, *argv]

    def pids(self) -> list[int]:
        result = subprocess.run(["ip", "netns", "pids", self.namespace], capture_output=True, text=True)
        return [int(pid) for pid in result.stdout.split()]

    def start_ray(self, head_address: str | None, gpus: int = 1) -> None:
        """``ray start`` on this node: the head when ``head_address`` is None, else a node joining it."""
        # the head's Ray files (sessions, and the "current cluster" file that a plain ray.init() on this machine would
        # join) in a folder of the cluster's own, removed with it
        role = (["--head", f"--port={GCS_PORT}", "--include-dashboard=false", f"--temp-dir={self.temp_dir}"]
                if head_address is None else [f"--address={head_address}"])
        argv = [self.python, "-c", "from ray.scripts.scripts import main; main()", "start", *role, f"--node-ip-address={self.address}", f"--num-cpus={CPUS_PER_NODE}",
                f"--num-gpus={gpus}", "--disable-usage-stats"]
        result = subprocess.run(self.command(argv), env=self.environment, capture_output=True, text=True, timeout=180)
        if result.returncode != 0:
            raise RuntimeError(f"ray start on {self.namespace} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")

    def kill(self) -> None:
        """Every process of this node, at once (a machine lost): SIGKILL, no shutdown of any kind."""
        for _ in range(20):
            pids = [pid for pid in self.pids() if pid != os.getpid()]
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.5)
        raise RuntimeError(f"processes of {self.namespace} survived SIGKILL: {self.pids()}")


class TwoNodeCluster:
    """Namespaces ``<prefix>a`` and ``<prefix>b``: ``head`` and ``worker``, Ray started on both (``nodes=1``: on the
    head alone, a one-node cluster of the same network), ``gpus_per_node`` fake GPUs each; the head's Ray runs
    from ``python``, the worker's from ``worker_python``."""

    def __init__(self, prefix: str, head_env: dict[str, str], worker_env: dict[str, str],
                 worker_python: str = sys.executable, gpus_per_node: int = 1, nodes: int = 2, python: str = sys.executable):
        self.prefix = prefix
        self.gpus_per_node = gpus_per_node
        self.nodes = nodes
        self.temp_dir = f"/tmp/{prefix}_ray"  # short: Ray's socket paths live under it
        self.head = Node(f"{prefix}a", ADDRESSES[0], python, {**head_env, "RAY_AUTH_MODE": "disabled"}, self.temp_dir)
        self.worker = Node(f"{prefix}b", ADDRESSES[1], worker_python, {**worker_env, "RAY_AUTH_MODE": "disabled"}, self.temp_dir)

    @property
    def address(self) -> str:
        return f"{self.head.address}:{GCS_PORT}"

    def build_network(self) -> None:
        self.remove_network()
        host_a, host_b = f"{self.prefix}ha", f"{self.prefix}hb"
        for node in (self.head, self.worker):
            _run("ip", "netns", "add", node.namespace)
        _run("ip", "link", "add", host_a, "type", "veth", "peer", "name", host_b)
        for node, link in ((self.head, host_a), (self.worker, host_b)):
            _run("ip", "link", "set", link, "netns", node.namespace)
            _run("ip", "-n", node.namespace, "link", "set", link, "name", INTERFACE)
            _run("ip", "-n", node.namespace, "addr", "add", f"{node.address}/{SUBNET_BITS}", "dev", INTERFACE)
            _run("ip", "-n", node.namespace, "link", "set", INTERFACE, "up")
            _run("ip", "-n", node.namespace, "link", "set", "lo", "up")

    def start(self) -> "TwoNodeCluster":
        self.build_network()
        self.head.start_ray(None, self.gpus_per_node)
        if self.nodes == 2:
            self.worker.start_ray(self.address, self.gpus_per_node)
        return self

    def remove_network(self) -> None:
        for node in (self.worker, self.head):
            if node.namespace in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split():
                node.kill()
                subprocess.run(["ip", "netns", "delete", node.namespace], capture_output=True)
        shutil.rmtree(self.temp_dir, ignore_errors=True)
        # SIGKILL skips `ray stop`'s clean-up: the default folder's "current cluster" file, if it names this cluster
        current = Path("/tmp/ray/ray_current_cluster")
        if current.exists() and current.read_text().strip() == self.address:
            current.unlink()

    def __enter__(self) -> "TwoNodeCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.remove_network()


def python_without_plugin(root: Path, python: str = sys.executable) -> str:
    """A Python environment with every package of ``python``'s but edge-verl and its lab (a venv whose site-packages
    links each entry of the other's but theirs): what a node on which the plugin was never installed has. Its python."""
    query = "import sys, sysconfig; print(sys.prefix); print(sysconfig.get_paths()['purelib']); print(sys.base_prefix)"
    prefix, purelib, base = subprocess.run([python, "-c", query], capture_output=True, text=True, check=True).stdout.split()
    subprocess.run([str(Path(base) / "bin" / "python3"), "-m", "venv", "--without-pip", "--clear", str(root)], check=True)
    ours = Path(purelib)
    theirs = root / ours.relative_to(prefix)
    for entry in ours.iterdir():
        if "edge_verl" not in entry.name.lower().replace("-", "_"):  # the packages, their records, editable finders
            (theirs / entry.name).symlink_to(entry)
    return str(root / "bin" / "python")


def main(argv: list[str] | None = None) -> int:
    """``python -m tests.e2e.two_nodes start|stop``: the tests' cluster by hand (docs/multinode.md), in namespaces
    ``edgevna`` / ``edgevnb``, each node with the CPU backend's environment (the demo's)."""
    import argparse

    from edge_verl_lab.demo.run import run_environment

    parser = argparse.ArgumentParser(prog="python -m tests.e2e.two_nodes", description=main.__doc__.splitlines()[0])
    parser.add_argument("action", choices=("start", "stop"))
    args = parser.parse_args(argv)
    if skip_reason() is not None:
        print(f"two_nodes: {skip_reason()}", file=sys.stderr)
        return 2
    environment = {**run_environment("hf"), "GLOO_SOCKET_IFNAME": INTERFACE}
    cluster = TwoNodeCluster("edgevn", environment, environment)
    if args.action == "stop":
        cluster.remove_network()
        return 0
    cluster.start()
    print(f"Ray nodes {cluster.head.address} (head, namespace {cluster.head.namespace}) and {cluster.worker.address} "
          f"(namespace {cluster.worker.namespace}); join with --ray-address {cluster.address}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
