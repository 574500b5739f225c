"""A mini-batch with no loss token takes no optimizer step (verl_offgrpo/empty_update.py).

Through verl's real ``BaseEngine.train_batch`` (the code every engine inherits) with a one-layer engine
on the CPU: AdamW after one real step, then a mini-batch whose ``loss_mask`` is all 0 (every group
masked as zero-variance). verl alone moves the parameters on that mini-batch although the gradient
is exactly 0 (Adam's momentum and weight decay); with the plugin's wrap they stay bit-identical.
"""

from __future__ import annotations

import inspect
import json
import subprocess
import sys

import pytest
import torch
from tensordict import TensorDict
from verl.utils import tensordict_utils as tu
from verl.workers.engine import base as engine_base

from verl_offgrpo import empty_update


class OneLayerEngine(engine_base.BaseEngine):
    """The parts of verl's FSDPEngine that ``train_batch`` calls, for one linear layer: the loss-token
    count stored in ``data`` as ``forward_backward_batch`` does, a token-mean loss, clipped AdamW."""

    def __init__(self):
        torch.manual_seed(0)
        self.module = torch.nn.Linear(3, 1)
        self.optimizer = torch.optim.AdamW(self.module.parameters(), lr=0.1, weight_decay=0.01)
        self.steps_taken = 0

    def optimizer_zero_grad(self):
        self.optimizer.zero_grad()

    def forward_backward_batch(self, data, loss_function, forward_only=False):
        num_tokens = data["loss_mask"].sum()
        if torch.distributed.is_initialized():  # over the data-parallel group, as verl's engines count
            torch.distributed.all_reduce(num_tokens)
        num_tokens = int(num_tokens)
        tu.assign_non_tensor(data, batch_num_tokens=num_tokens)
        per_token = self.module(data["x"]).squeeze(-1) * data["loss_mask"]
        (per_token.sum() / max(num_tokens, 1)).backward()
        return {"metrics": {}}

    def optimizer_step(self):
        grad_norm = torch.nn.utils.clip_grad_norm_(self.module.parameters(), max_norm=1.0)
        self.optimizer.step()
        self.steps_taken += 1
        return grad_norm.item()

    def is_mp_src_rank_with_outputs(self):
        return True


def mini_batch(loss_mask: list[float]) -> TensorDict:
    x = torch.arange(len(loss_mask) * 3, dtype=torch.float32).reshape(len(loss_mask), 3) / 10
    return TensorDict({"x": x, "loss_mask": torch.tensor(loss_mask)}, batch_size=[len(loss_mask)])


def params_of(engine) -> list[torch.Tensor]:
    return [p.detach().clone() for p in engine.module.parameters()]


def run(train_batch, masks):
    """The engine after ``train_batch`` on each loss mask in turn, and the outputs' grad norms."""
    engine = OneLayerEngine()
    norms = [train_batch(engine, mini_batch(mask), loss_function=None)["metrics"]["grad_norm"] for mask in masks]
    return engine, norms


def test_the_plugin_wraps_verls_base_engine_in_every_process_that_imports_it():
    assert empty_update.is_wrapped(engine_base.BaseEngine)
    assert engine_base.BaseEngine.train_batch.__wrapped__.__module__ == empty_update.BASE_ENGINE_MODULE
    # a fresh process: the wrap comes with `import verl` (the entry point), before the module is imported
    code = ("import sys, verl; assert 'verl.workers.engine.base' not in sys.modules;"
            "from verl.workers.engine.base import BaseEngine;"
            "assert BaseEngine.train_batch.__off_grpo_wrapped__; print('wrapped')")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "wrapped", done.stderr[-2000:]
    # wrapping twice keeps one wrap
    wrapped = engine_base.BaseEngine.train_batch
    empty_update.skip_empty_updates(engine_base)
    assert engine_base.BaseEngine.train_batch is wrapped


def test_verl_alone_moves_the_parameters_on_a_mini_batch_without_loss_tokens():
    """The defect the wrap removes, through verl's own train_batch: zero gradient, parameters moved."""
    verl_train_batch = engine_base.BaseEngine.train_batch.__wrapped__
    engine, _ = run(verl_train_batch, [[1.0, 1.0, 0.0, 1.0]])
    before = params_of(engine)
    assert verl_train_batch(engine, mini_batch([0.0, 0.0, 0.0, 0.0]), loss_function=None)["metrics"]["grad_norm"] == 0.0
    assert all(p.grad is not None and torch.count_nonzero(p.grad) == 0 for p in engine.module.parameters())
    moved = [float((a - b).abs().max()) for a, b in zip(params_of(engine), before)]
    assert min(moved) > 0.05 and engine.steps_taken == 2  # Adam's momentum: about lr = 0.1 per parameter


def test_a_mini_batch_without_loss_tokens_leaves_the_parameters_and_adam_untouched(capsys):
    engine, norms = run(engine_base.BaseEngine.train_batch, [[1.0, 1.0, 0.0, 1.0]])
    assert empty_update.SKIP_MESSAGE not in capsys.readouterr().out  # a real step says nothing
    before, state_before = params_of(engine), [dict(s) for s in engine.optimizer.state.values()]
    out = engine_base.BaseEngine.train_batch(engine, mini_batch([0.0, 0.0, 0.0, 0.0]), loss_function=None)
    assert capsys.readouterr().out.count(empty_update.SKIP_MESSAGE) == 1  # the console line a run's log keeps
    assert out["metrics"]["grad_norm"] == 0.0 and norms[0] > 0
    assert all(torch.equal(a, b) for a, b in zip(params_of(engine), before))
    assert engine.steps_taken == 1
    for was, now in zip(state_before, engine.optimizer.state.values()):
        assert torch.equal(was["step"], now["step"]) and torch.equal(was["exp_avg"], now["exp_avg"])
    assert all(p.grad is None for p in engine.module.parameters())  # zero_grad ran (set_to_none)
    assert "optimizer_step" not in engine.__dict__  # the engine's own step is back


@pytest.mark.parametrize("masks", [[[1.0, 1.0, 0.0, 1.0], [0.0, 1.0, 0.0, 0.0]], [[1.0, 0.0, 0.0, 1.0]] * 3])
def test_mini_batches_with_loss_tokens_step_exactly_as_verl_does(masks):
    ours, our_norms = run(engine_base.BaseEngine.train_batch, masks)
    verls, verl_norms = run(engine_base.BaseEngine.train_batch.__wrapped__, masks)
    assert our_norms == verl_norms and ours.steps_taken == verls.steps_taken == len(masks)
    assert all(torch.equal(a, b) for a, b in zip(params_of(ours), params_of(verls)))


def test_an_engine_without_a_token_count_still_steps():
    """An engine that does not store ``batch_num_tokens`` is never skipped (the count is unknown)."""

    class Uncounted(OneLayerEngine):
        def forward_backward_batch(self, data, loss_function, forward_only=False):
            self.module(data["x"]).sum().backward()
            return {"metrics": {}}

    engine = Uncounted()
    engine_base.BaseEngine.train_batch(engine, mini_batch([0.0, 0.0]), loss_function=None)
    assert empty_update.loss_tokens_of(mini_batch([0.0])) is None and engine.steps_taken == 1


def test_verls_engines_store_the_all_reduced_loss_token_count_the_wrap_reads():
    """The wrap reads ``batch_num_tokens`` from the mini-batch; verl's FSDP engine (the one the recipes
    use) stores it there, all-reduced over the data-parallel group, in ``forward_backward_batch``. If a
    verl release renamed it, the wrap would silently never skip: this fails instead."""
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngine

    source = inspect.getsource(FSDPEngine.forward_backward_batch)
    assert "all_reduce(" in source and "batch_num_tokens" in source
    assert "tu.assign_non_tensor(data, batch_num_tokens=" in source.replace("\n", " ")


RANK_SCRIPT = """
import importlib.util, json, sys, torch
rank, world, store_file, masks, out = int(sys.argv[1]), 2, sys.argv[2], json.loads(sys.argv[3]), sys.argv[4]
torch.distributed.init_process_group("gloo", init_method="file://" + store_file, rank=rank, world_size=world)
spec = importlib.util.spec_from_file_location("under_test", sys.argv[5])
module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)
from verl.workers.engine.base import BaseEngine
engine = module.OneLayerEngine()
import contextlib, io
printed = io.StringIO()
with contextlib.redirect_stdout(printed):
    norms = [BaseEngine.train_batch(engine, module.mini_batch(mask), loss_function=None)["metrics"]["grad_norm"]
             for mask in masks[rank]]
skips_printed = printed.getvalue().count(module.empty_update.SKIP_MESSAGE)
with open(out, "w") as f:
    json.dump({"steps_taken": engine.steps_taken, "norms": norms, "skips_printed": skips_printed}, f)
# exit without C++ teardown once both ranks are done: gloo's threads can abort it (pytorch/pytorch#179291)
torch.distributed.barrier()
import os; os._exit(0)
"""


@pytest.mark.parametrize(
    ("masks", "steps_taken"),
    [
        # rank 0's own rows are all masked, rank 1's are not: the group has tokens, so both ranks step
        ([[[0.0, 0.0]], [[1.0, 0.0]]], [1, 1]),
        # no rank has a token: both skip, so none is left waiting in a collective of the step
        ([[[1.0, 1.0], [0.0, 0.0]], [[0.0, 1.0], [0.0, 0.0]]], [1, 1]),
    ],
)
def test_data_parallel_ranks_skip_together_on_the_groups_count(tmp_path, masks, steps_taken):
    """Two gloo ranks through verl's train_batch: the skip follows the count over the group, not a
    rank's own rows (a rank-local decision would leave one rank in the step's all-reduce)."""
    outs = [tmp_path / f"rank{rank}.json" for rank in (0, 1)]
    procs = [subprocess.Popen([sys.executable, "-c", RANK_SCRIPT, str(rank), str(tmp_path / "store"), json.dumps(masks),
                               str(outs[rank]), __file__], stderr=subprocess.PIPE, text=True) for rank in (0, 1)]  # fmt: skip
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]
    done = [json.loads(out.read_text()) for out in outs]
    assert [d["steps_taken"] for d in done] == steps_taken
    if len(masks[0]) == 2:
        assert all(d["norms"][1] == 0.0 and d["norms"][0] > 0 for d in done)
        assert [d["skips_printed"] for d in done] == [1, 0]  # rank 0 alone says so
    else:
        assert [d["skips_printed"] for d in done] == [0, 0]
