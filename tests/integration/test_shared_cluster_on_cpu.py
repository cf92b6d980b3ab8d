"""Several verl runs on one Ray cluster (the study's ``--jobs``): TransferQueue's controller per Ray job.

The two runs at a time on one cluster, for real, are the smoke study's (tests/e2e/test_study_on_cpu.py); here
the rewrite itself, against verl 0.9.1's pinned TransferQueue, and that a CPU-backend process applies it."""

import inspect
import subprocess
import sys
from types import ModuleType, SimpleNamespace

from edge_verl.integration.cpu import shared_cluster
from edge_verl.integration.cpu.overrides import cpu_environment


def test_transfer_queue_names_its_controller_in_the_job_s_namespace(monkeypatch):
    calls = []

    class Controller:
        @staticmethod
        def options(**kwargs):
            calls.append(("options", kwargs))
            return "bound"

        remote = "the class's own attribute"

    interface = ModuleType("interface")
    interface.ray = SimpleNamespace(get_actor=lambda name, **kwargs: calls.append(("get_actor", name, kwargs)), put="ray.put")
    interface.TransferQueueController = Controller
    monkeypatch.setattr(shared_cluster, "job_namespace", lambda: "transfer_queue-02000000")
    shared_cluster.patch_transfer_queue(interface)
    shared_cluster.patch_transfer_queue(interface)  # a second call changes nothing

    assert interface.TransferQueueController.options(name="TransferQueueController", namespace="transfer_queue") == "bound"
    interface.ray.get_actor("TransferQueueController", namespace="transfer_queue")
    interface.ray.get_actor("SomeoneElses", namespace="theirs")  # other namespaces are left alone
    assert calls == [
        ("options", {"name": "TransferQueueController", "namespace": "transfer_queue-02000000"}),
        ("get_actor", "TransferQueueController", {"namespace": "transfer_queue-02000000"}),
        ("get_actor", "SomeoneElses", {"namespace": "theirs"}),
    ]
    # everything else is Ray's and the class's own
    assert interface.ray.put == "ray.put" and interface.TransferQueueController.remote == "the class's own attribute"


def test_the_pinned_transfer_queue_looks_its_controller_up_where_the_patch_rewrites():
    import transfer_queue.interface as interface

    source = inspect.getsource(interface)
    # the two places TransferQueue names its controller: created in init(), found in _init_from_existing()
    assert source.count('namespace="transfer_queue"') == 2
    assert 'ray.get_actor("TransferQueueController", namespace="transfer_queue")' in source
    assert "TransferQueueController.options(" in source
    assert shared_cluster.TQ_NAMESPACE == "transfer_queue"


def test_a_cpu_backend_process_gets_the_per_job_controller():
    code = ("import verl, transfer_queue.interface as i; from edge_verl.integration.cpu.shared_cluster import _ActorClassPerJob, _RayPerJob; "
            "print(isinstance(i.ray, _RayPerJob), isinstance(i.TransferQueueController, _ActorClassPerJob))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=cpu_environment(), timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-2:] == ["True", "True"]
