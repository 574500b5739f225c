"""A mini-batch with no loss token takes no optimizer step (verl_offgrpo/patches/empty_update.py).

Through verl's real ``BaseEngine.train_batch`` (the code every engine inherits) with a one-layer engine
on the CPU: AdamW after one real step, then a mini-batch whose ``loss_mask`` is all 0 (every group
masked as zero-variance). verl alone moves the parameters on that mini-batch although the gradient
is exactly 0 (Adam's momentum and weight decay); with the plugin's wrap and the ``off_grpo`` loss
they stay bit-identical. With any other loss (a job that does not select the plugin) the wrap passes
the call to verl's ``train_batch`` and the engine steps exactly as verl alone does.
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import subprocess
import sys

import pytest
import torch
from tensordict import TensorDict
from verl.utils import tensordict_utils as tu
from verl.workers.config import ActorConfig, PolicyLossConfig
from verl.workers.engine import base as engine_base
from verl.workers.utils.losses import ppo_loss

from verl_offgrpo.patches import JOB_ENV
from verl_offgrpo.patches import empty_update


def engine_loss(loss_mode: str):
    """The loss function verl's actor worker hands its engine: ``partial(ppo_loss, config=ActorConfig)``
    (engine_workers.py); the stub engine below never calls it, the wrap only reads its config."""
    config = ActorConfig(strategy="fsdp", rollout_n=1, ppo_mini_batch_size=4, ppo_micro_batch_size_per_gpu=4,
                         policy_loss=PolicyLossConfig(loss_mode=loss_mode))
    return functools.partial(ppo_loss, config=config)


#: the engine's loss in a job that uses the plugin's loss, and in a plain verl job
OFF_GRPO_LOSS = engine_loss("off_grpo")
VANILLA_LOSS = engine_loss("vanilla")


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


def run(train_batch, masks, loss_function=OFF_GRPO_LOSS):
    """The engine after ``train_batch`` on each loss mask in turn, and the outputs' grad norms."""
    engine = OneLayerEngine()
    norms = [train_batch(engine, mini_batch(mask), loss_function=loss_function)["metrics"]["grad_norm"]
             for mask in masks]
    return engine, norms


@pytest.fixture(autouse=True)
def _no_job_marker(monkeypatch):
    monkeypatch.delenv(JOB_ENV, raising=False)


def no_job_env(**env) -> dict:
    """The environment of a process that is no selecting job's (what ``_no_job_marker`` leaves), plus ``env``."""
    return {**{k: v for k, v in os.environ.items() if k != JOB_ENV}, **env}


# a fresh process: the wrap comes with `import verl` (the entry point), before the module is imported
FRESH_PROCESS_WRAP = ("import sys, verl; assert 'verl.workers.engine.base' not in sys.modules;"
                      "from verl.workers.engine.base import BaseEngine;"
                      "assert BaseEngine.train_batch.__off_grpo_wrapped__; print('wrapped')")  # fmt: skip


def test_the_plugin_wraps_verls_base_engine_in_every_process_that_imports_it(procs):
    assert empty_update.is_wrapped(engine_base.BaseEngine)
    assert engine_base.BaseEngine.train_batch.__wrapped__.__module__ == empty_update.BASE_ENGINE_MODULE
    done = procs["fresh_process_wrap"]  # FRESH_PROCESS_WRAP
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
    assert verl_train_batch(engine, mini_batch([0.0, 0.0, 0.0, 0.0]), loss_function=OFF_GRPO_LOSS)["metrics"]["grad_norm"] == 0.0
    assert all(p.grad is not None and torch.count_nonzero(p.grad) == 0 for p in engine.module.parameters())
    moved = [float((a - b).abs().max()) for a, b in zip(params_of(engine), before)]
    assert min(moved) > 0.05 and engine.steps_taken == 2  # Adam's momentum: about lr = 0.1 per parameter


def test_a_mini_batch_without_loss_tokens_leaves_the_parameters_and_adam_untouched(capsys):
    engine, norms = run(engine_base.BaseEngine.train_batch, [[1.0, 1.0, 0.0, 1.0]])
    assert empty_update.SKIP_MESSAGE not in capsys.readouterr().out  # a real step says nothing
    before, state_before = params_of(engine), [dict(s) for s in engine.optimizer.state.values()]
    out = engine_base.BaseEngine.train_batch(engine, mini_batch([0.0, 0.0, 0.0, 0.0]), loss_function=OFF_GRPO_LOSS)
    assert capsys.readouterr().out.count(empty_update.SKIP_MESSAGE) == 1  # the console line a run's log keeps
    assert out["metrics"]["grad_norm"] == 0.0 and norms[0] > 0
    assert all(torch.equal(a, b) for a, b in zip(params_of(engine), before))
    assert engine.steps_taken == 1
    for was, now in zip(state_before, engine.optimizer.state.values()):
        assert torch.equal(was["step"], now["step"]) and torch.equal(was["exp_avg"], now["exp_avg"])
    assert all(p.grad is None for p in engine.module.parameters())  # zero_grad ran (set_to_none)
    assert "optimizer_step" not in engine.__dict__  # the engine's own step is back


PLAIN_VERL_SCRIPT = """
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("under_test", sys.argv[1])
module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)
assert "verl_offgrpo.plugin" not in sys.modules  # verl without the plugin
from verl.workers.engine.base import BaseEngine
assert not hasattr(BaseEngine.train_batch, "__wrapped__")
engine, norms = module.run(BaseEngine.train_batch, json.loads(sys.argv[2]), module.VANILLA_LOSS)
print(json.dumps({"steps_taken": engine.steps_taken, "norms": norms,
                  "params": [p.flatten().tolist() for p in module.params_of(engine)]}))
"""


#: a real step, then a mini-batch without loss tokens
PLAIN_VERL_MASKS = [[1.0, 1.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0]]

#: the subprocesses of the default run's tests, run in the background from the session's start (``_background``)
BACKGROUND_JOBS = {
    "fresh_process_wrap": ("test_the_plugin_wraps_verls_base_engine_in_every_process_that_imports_it",
                           lambda _: dict(args=[sys.executable, "-c", FRESH_PROCESS_WRAP], env=no_job_env(), timeout=300)),
    "plain_verl": ("test_a_job_without_the_plugins_loss_steps_on_an_empty_mini_batch_exactly_as_plain_verl",
                   lambda _: dict(args=[sys.executable, "-c", PLAIN_VERL_SCRIPT, __file__, json.dumps(PLAIN_VERL_MASKS)],
                                  env=no_job_env(VERL_USE_EXTERNAL_PLUGINS="none"), timeout=300)),
}


@pytest.fixture(scope="module")
def procs(request):
    from _background import module_jobs  # here: the subprocesses import this file without tests/ on sys.path

    return module_jobs(request)


def test_a_job_without_the_plugins_loss_steps_on_an_empty_mini_batch_exactly_as_plain_verl(capsys, procs):
    """A plain verl job (``vanilla`` loss, no ``VERL_OFFGRPO_JOB``) with the package installed: a
    mini-batch with 0 loss tokens takes its optimizer step, bit for bit as verl without the package
    (a fresh process with ``VERL_USE_EXTERNAL_PLUGINS=none``) and as verl's unwrapped train_batch."""
    masks = PLAIN_VERL_MASKS
    assert empty_update.is_wrapped(engine_base.BaseEngine)  # installed, and passing straight through
    ours, our_norms = run(engine_base.BaseEngine.train_batch, masks, VANILLA_LOSS)
    assert empty_update.SKIP_MESSAGE not in capsys.readouterr().out
    assert ours.steps_taken == 2 and our_norms[1] == 0.0
    done = procs["plain_verl"]
    assert done.returncode == 0, done.stderr[-3000:]
    plain = json.loads(done.stdout.strip().splitlines()[-1])
    assert plain["steps_taken"] == 2 and plain["norms"] == our_norms
    assert plain["params"] == [p.flatten().tolist() for p in params_of(ours)]
    verls, _ = run(engine_base.BaseEngine.train_batch.__wrapped__, masks, VANILLA_LOSS)
    assert all(torch.equal(a, b) for a, b in zip(params_of(ours), params_of(verls)))


@pytest.mark.parametrize("loss_function", [VANILLA_LOSS, None])
def test_a_job_that_selects_the_plugin_skips_with_any_loss(monkeypatch, loss_function):
    """``VERL_OFFGRPO_JOB=1`` (the driver validated a selecting config, e.g. the ``off_grpo`` estimator
    with verl's loss): the empty mini-batch is skipped whatever the engine's loss."""
    monkeypatch.setenv(JOB_ENV, "1")
    engine, norms = run(engine_base.BaseEngine.train_batch, [[1.0, 1.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0]], loss_function)
    assert engine.steps_taken == 1 and norms[1] == 0.0
    monkeypatch.setenv(JOB_ENV, "0")
    engine, _ = run(engine_base.BaseEngine.train_batch, [[1.0, 1.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0]], loss_function)
    assert engine.steps_taken == 2


def test_which_engine_losses_select_the_plugin():
    from verl_offgrpo.patches.selection import loss_function_selects

    assert loss_function_selects(OFF_GRPO_LOSS) and not loss_function_selects(VANILLA_LOSS)
    assert not loss_function_selects(None) and not loss_function_selects(ppo_loss)
    assert not empty_update.acts_for(VANILLA_LOSS) and empty_update.acts_for(OFF_GRPO_LOSS)


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
    engine_base.BaseEngine.train_batch(engine, mini_batch([0.0, 0.0]), loss_function=OFF_GRPO_LOSS)
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
    norms = [BaseEngine.train_batch(engine, module.mini_batch(mask), loss_function=module.OFF_GRPO_LOSS)["metrics"]["grad_norm"]
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
        pytest.param([[[1.0, 1.0], [0.0, 0.0]], [[0.0, 1.0], [0.0, 0.0]]], [1, 1], marks=pytest.mark.slow),
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
