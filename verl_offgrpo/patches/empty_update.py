"""No optimizer step for a mini-batch that has no loss token.

Under the zero-variance mask (:mod:`verl_offgrpo.zero_var_mask`) a mini-batch whose groups all have
equal rewards keeps no token in ``loss_mask`` (as does one whose rows RED-Drop all dropped). verl's
engine counts them over the data-parallel group in ``forward_backward_batch`` (``batch_num_tokens``,
all-reduced), finds 0, and the plugin's losses and every gradient are exactly 0 (:mod:`verl_offgrpo.policy_loss`). verl 0.9.1's
``BaseEngine.train_batch`` still calls ``optimizer_step()``, and AdamW moves every parameter anyway:

    m ← β₁·m,   v ← β₂·v                      (the gradient is 0)
    θ ← θ − lr·( m̂ / (√v̂ + ε) + λ·θ )

by its momentum from earlier mini-batches, in parameter space about the previous step's size, plus
weight decay: an update that no sample of this mini-batch asked for. The paper's mask takes such groups
out of the objective, and an objective with no terms gives no update. :func:`skip_empty_updates` wraps
``BaseEngine.train_batch`` so that, when the count the engine has just all-reduced is 0, the gradients
are zeroed and ``optimizer_step`` is not called. ``grad_norm`` is reported as 0.0, which verl alone also
logs for a zero gradient, so rank 0 prints :data:`SKIP_MESSAGE` to the console on each skip: the line
tells a skip apart in a run's saved log. The plugin's losses also log it to verl's metrics,
``actor/off_grpo/skipped_optimizer_step_frac`` (the fraction of the step's optimizer steps skipped;
:func:`skips_empty_updates` keeps it at 0 where the wrap is not installed). Every data-parallel rank
sees the same all-reduced count, so all ranks skip together and none is left in a collective of the step
(gradient clipping's all-reduce). Adam's step count stays where it was; the learning-rate schedule is
untouched (verl steps it per batch, outside ``train_batch``).

Scope: the wrap goes in when a process imports :data:`BASE_ENGINE_MODULE` (a post-import hook of
the entry point), but it acts only for a job that selects the plugin: the engine's loss function is
verl's ``ppo_loss`` bound to an actor config with one of the plugin's losses (``policy_loss.loss_mode``
``off_grpo`` or ``rec``; :func:`verl_offgrpo.patches.selection.loss_function_selects`), or the process carries
``VERL_OFFGRPO_JOB=1`` (:mod:`verl_offgrpo.patches.job_env`: the driver validated a config that selects
the plugin, e.g. the ``off_grpo`` estimator with another loss). Any other call goes straight to verl's
``train_batch``, unchanged. Within a selecting job only a mini-batch without a single loss token is
affected: besides the mask, verl builds one when its rollout correction rejects every sequence of a
mini-batch. In each the loss has no term, so no step is what the objective asks for. One exception:
an MoE model whose router adds an auxiliary load-balancing loss (Megatron) has a non-zero gradient
from it even then, and loses that mini-batch's router update (and automodel's gate-bias update, which
runs inside its ``optimizer_step``).
"""

from __future__ import annotations

import functools
import sys
from typing import Any

from verl_offgrpo.patches import VERL_VERSIONS, complain, first_rank, job_selected, target_problem, version_problem
from verl_offgrpo.patches.selection import loss_function_selects

#: verl's module whose ``BaseEngine.train_batch`` is wrapped (all engines inherit it: FSDP, Megatron, …).
BASE_ENGINE_MODULE = "verl.workers.engine.base"
TARGETS = (f"{BASE_ENGINE_MODULE}.BaseEngine.train_batch",)
#: verl 0.9.1's ``train_batch`` steps through ``self.optimizer_step``, which the wrap replaces for one call
#: (:func:`verl_offgrpo.patches.uses_problems`)
VERL_USES = ((TARGETS[0], ("optimizer_step",)),)
WHEN = ("actor workers: skips the optimizer step of a mini-batch without loss tokens when the engine's "
        "loss is off_grpo or rec, or the job selects the plugin (VERL_OFFGRPO_JOB=1); "
        "else verl's train_batch as is")


#: the console line of a skipped step (rank 0 only), e.g. to count skips in a run's saved log
SKIP_MESSAGE = "[verl-offgrpo] no optimizer step: this mini-batch has no loss token (every group masked)"


def loss_tokens_of(data: Any) -> int | None:
    """The mini-batch's loss-token count over the data-parallel group, as the engine stored it in
    ``data`` (``batch_num_tokens``); None before ``forward_backward_batch`` or for an engine that
    does not count."""
    from verl.utils import tensordict_utils as tu

    return tu.get_non_tensor_data(data=data, key="batch_num_tokens", default=None)


def is_wrapped(engine_cls: type) -> bool:
    return getattr(engine_cls.train_batch, "__off_grpo_wrapped__", False)


def applied(module: Any) -> bool:
    """Whether :func:`skip_empty_updates` has wrapped ``module`` (:data:`BASE_ENGINE_MODULE`)."""
    return is_wrapped(module.BaseEngine)


def skips_empty_updates() -> bool:
    """Whether this process's verl engines skip the step of a mini-batch without a loss token: verl's
    :data:`BASE_ENGINE_MODULE` is imported here and its ``train_batch`` wrapped. The plugin's losses
    read it for ``actor/off_grpo/skipped_optimizer_step_frac``, so that the metric never reports a skip
    that did not happen (an engine outside ``BaseEngine``, or a wrap that failed to install)."""
    module = sys.modules.get(BASE_ENGINE_MODULE)
    return module is not None and applied(module)


def acts_for(loss_function: Any) -> bool:
    """Whether the wrap acts on a ``train_batch`` call with this ``loss_function`` in this process."""
    return loss_function_selects(loss_function) or job_selected()


def skip_empty_updates(module: Any) -> None:
    """Wrap ``module.BaseEngine.train_batch`` (once): for a call the plugin selects (:func:`acts_for`),
    ``self.optimizer_step`` inside it is the engine's own step unless the mini-batch has no loss token,
    in which case it zeroes the gradients and returns 0.0; any other call is verl's ``train_batch``."""
    engine_cls = module.BaseEngine
    if is_wrapped(engine_cls):
        return
    train_batch = engine_cls.train_batch

    @functools.wraps(train_batch)
    def train_batch_without_empty_steps(self, data, loss_function):
        if not acts_for(loss_function):
            return train_batch(self, data, loss_function)
        engine_step = self.optimizer_step

        def optimizer_step():
            if loss_tokens_of(data) == 0:
                self.optimizer_zero_grad()
                if first_rank():
                    print(SKIP_MESSAGE, flush=True)
                return 0.0
            return engine_step()

        own = self.__dict__.get("optimizer_step", None)  # an instance attribute of the engine's, if any
        self.optimizer_step = optimizer_step
        try:
            return train_batch(self, data, loss_function)
        finally:
            if own is None:
                del self.optimizer_step
            else:
                self.optimizer_step = own

    train_batch_without_empty_steps.__off_grpo_wrapped__ = True
    engine_cls.train_batch = train_batch_without_empty_steps


def live() -> bool:
    """Whether verl's ``BaseEngine.train_batch`` carries the wrap in this process (read off the class)."""
    return skips_empty_updates()


def install() -> None:
    """A post-import hook on :data:`BASE_ENGINE_MODULE` (or the wrap now, if it is imported already)."""
    from verl_offgrpo.patches.post_import import on_import

    on_import(BASE_ENGINE_MODULE, "BaseEngine", _apply)


def _apply(module: Any) -> None:
    problem = version_problem(VERL_VERSIONS)
    if problem is None and not callable(getattr(getattr(module, "BaseEngine", None), "train_batch", None)):
        problem = target_problem(TARGETS[0]) or f"verl-offgrpo: {TARGETS[0]} is missing"
    if problem is not None:
        complain(problem, job_selected())  # not installed: verl's train_batch as is
        return
    skip_empty_updates(module)
