"""The lab's fault injection (benchmarks/diag/guard_faults.py) on CPU: each stale-sync fault leaves exactly the
weights it names on the old sync's values, on the ranks it names, through vLLM's ``Worker.wake_up`` patch and verl's
``update_weights_from_ipc`` wrapper (fakes of both)."""

import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

DIAG = Path(__file__).resolve().parents[1] / "diag" / "guard_faults.py"


def load(monkeypatch, fault):
    """The module as a job's process imports it with ``OFFGRPO_GUARD_FAULT=fault`` (its post-import hook not kept)."""
    import verl_offgrpo.patches.post_import as post_import

    monkeypatch.setenv("OFFGRPO_GUARD_FAULT", fault)
    monkeypatch.setattr(post_import, "on_import", lambda *args, **kwargs: None)
    spec = importlib.util.spec_from_file_location(f"guard_faults_{fault}", DIAG)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def workers(monkeypatch, diag, tp=2):
    class Extension:  # verl's vLLMColocateWorkerExtension: a sync loads π_version (every element = version)
        def update_weights_from_ipc(self, version):
            with torch.no_grad():
                for param in self.model_runner.model.parameters():
                    param.fill_(float(version))

    class Worker(Extension):  # vLLM's Worker, with the extension mixed in
        def __init__(self, rank):
            self.rank, self.parallel_config = rank, SimpleNamespace(tensor_parallel_size=tp)
            layers = torch.nn.ModuleList([torch.nn.ModuleDict({"mlp": torch.nn.Linear(2, 2),
                                                               "input_layernorm": torch.nn.LayerNorm(2)})
                                          for _ in range(5)])
            self.model_runner = SimpleNamespace(model=torch.nn.ModuleDict({"layers": layers}))

        def wake_up(self, tags=None):
            return None

    monkeypatch.setitem(sys.modules, diag.EXTENSION_MODULE, SimpleNamespace(vLLMColocateWorkerExtension=Extension))
    diag.patch_worker(SimpleNamespace(Worker=Worker))
    ranks = [Worker(rank) for rank in range(tp)]
    for version in (1, 2, 3):  # the 2nd sync (OFFGRPO_GUARD_FAULT_AFTER_SYNC's default) is the faulty one
        for worker in ranks:
            worker.wake_up(["weights"])
            worker.update_weights_from_ipc(version)
        if version == 2:
            served = [{name: float(p.flatten()[0]) for name, p in w.model_runner.model.named_parameters()}
                      for w in ranks]
    return served


@pytest.mark.parametrize("fault, stale", [
    ("stale_sync", lambda rank, name: True),  # every rank keeps π_1
    ("stale_sync_rank", lambda rank, name: rank == 1),  # the last TP rank only
    ("stale_sync_tensor", lambda rank, name: name == "layers.3.mlp.weight"),  # one tensor, every rank
    # one tensor every rank holds whole (a layer norm), on the last rank only
    ("stale_sync_rank_norm", lambda rank, name: rank == 1 and name == "layers.3.input_layernorm.weight"),
])
def test_each_stale_sync_fault_keeps_what_it_names(monkeypatch, capsys, fault, stale):
    served = workers(monkeypatch, load(monkeypatch, fault))
    said = capsys.readouterr().out
    assert "; moved " in said and "; moved 0" not in said  # the sync changed what the fault then put back
    for rank, tensors in enumerate(served):
        assert len(tensors) == 20
        for name, value in tensors.items():
            assert value == (1.0 if stale(rank, name) else 2.0), (rank, name)


def test_a_corrupt_sync_changes_one_element_of_one_tensor_right_after_the_sync(monkeypatch):
    """``corrupt_sync_tensor``: the 2nd sync arrives everywhere, then layers.3's first matrix gains one ulp in element
    0 on the last TP rank only: that tensor changed at the sync (so "changed" passes) yet is not the sent weights."""
    diag = load(monkeypatch, "corrupt_sync_tensor")
    served = workers(monkeypatch, diag)  # fp32 fakes: the ulp is a byte of element 0's mantissa
    for rank, tensors in enumerate(served):
        for name, value in tensors.items():
            if rank == 1 and name == "layers.3.mlp.weight":
                assert value != 2.0 and abs(value - 2.0) < 1e-5, value
            else:
                assert value == 2.0, (rank, name)
