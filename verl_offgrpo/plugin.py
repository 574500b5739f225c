"""Entry point of the ``verl.plugins`` group: verl imports this in every process at ``import verl``.

It stays light: it imports none of verl's modules beyond what ``import verl`` already loaded, so
``import verl`` costs about what it costs without the plugin. It

* registers the advantage estimators ``off_grpo`` and ``red_drop`` and the policy losses ``off_grpo``
  and ``rec`` with verl's registries as soon as ``verl.trainer.ppo.core_algos`` is imported, and the
  V1 trainer mode ``off_grpo_sync`` as soon as ``verl.trainer.ppo.v1`` is (post-import hooks, :mod:`verl_offgrpo.patches.post_import`); these only
  add names (a reload of this package first pops its own earlier entry from verl 0.9.1's registry dicts
  ``core_algos.ADV_ESTIMATOR_REGISTRY`` / ``POLICY_LOSS_REGISTRY``, as ``register_adv_est`` refuses a second function);
* installs the patches of :mod:`verl_offgrpo.patches`, each scoped to jobs that select the plugin.

``VERL_OFFGRPO_DISABLE=1`` turns all of it off. verl logs a plugin that fails to import at DEBUG only,
so an error here is printed to stderr as a warning before verl swallows it; in a process of a job
that selects the plugin (``VERL_OFFGRPO_JOB=1``) a patch error is raised instead.
"""

from __future__ import annotations

import sys
import traceback

from verl_offgrpo.switch import disabled, job_selected

CORE_ALGOS = "verl.trainer.ppo.core_algos"
#: set once this module has run its registrations in this process (``python -m verl_offgrpo check``)
ACTIVE = False


def register_algorithms(core_algos=None) -> None:
    """Register the estimators and the policy losses in ``core_algos`` (idempotent)."""
    if core_algos is None:
        from verl.trainer.ppo import core_algos

    from verl_offgrpo import ESTIMATOR_NAME, LOSS_NAME, RED_DROP_ESTIMATOR_NAME, REC_LOSS_NAME
    from verl_offgrpo.advantage import compute_off_grpo_advantage, compute_red_drop_advantage
    from verl_offgrpo.config.names import is_plugins, qualified_name
    from verl_offgrpo.policy_loss import compute_policy_loss_off_grpo
    from verl_offgrpo.rec_loss import compute_policy_loss_rec

    estimators = ((ESTIMATOR_NAME, compute_off_grpo_advantage), (RED_DROP_ESTIMATOR_NAME, compute_red_drop_advantage))
    losses = ((LOSS_NAME, compute_policy_loss_off_grpo), (REC_LOSS_NAME, compute_policy_loss_rec))
    for registry, register, pairs in ((core_algos.ADV_ESTIMATOR_REGISTRY, core_algos.register_adv_est, estimators),
                                      (core_algos.POLICY_LOSS_REGISTRY, core_algos.register_policy_loss, losses)):
        for name, fn in pairs:
            held = registry.get(name)
            if held is None or (held is not fn and is_plugins(held)):  # absent, or this package reloaded
                registry.pop(name, None)
                register(name)(fn)
            elif held is not fn:  # another package's: verl would overwrite a loss silently; keep theirs
                _warn_loudly(f"{name!r} is already registered by {qualified_name(held)}, so the plugin's {name} is not "
                             "(a job naming it runs that one, and the plugin's startup check refuses it)")


def _register_algorithms_on_import(core_algos) -> None:
    try:
        register_algorithms(core_algos)
    except Exception as err:  # noqa: BLE001 - a plain verl job must not fail on the plugin's account
        if job_selected():
            raise
        _warn_loudly(f"could not register the plugin's estimators/losses ({type(err).__name__}: {err})")


def _warn_loudly(message: str) -> None:
    print(f"WARNING verl-offgrpo: {message}; `python -m verl_offgrpo check` shows the details.", file=sys.stderr,
          flush=True)


def _load() -> None:
    global ACTIVE
    if disabled():
        return
    from verl_offgrpo.patches import install_all
    from verl_offgrpo.patches.post_import import on_import
    from verl_offgrpo.sync import register_sync_hooks

    on_import(CORE_ALGOS, "register_policy_loss", _register_algorithms_on_import)
    register_sync_hooks()  # the V1 trainer mode, once verl.trainer.ppo.v1 is imported (needs TransferQueue)
    install_all()
    ACTIVE = True


try:
    _load()
except Exception as _err:  # verl would log it at DEBUG only: say it on stderr, then let verl have it
    # by name: the patches package, which defines PatchError, may be what failed to import
    _detail = "" if type(_err).__name__ == "PatchError" else "\n" + traceback.format_exc()
    _warn_loudly(f"the plugin failed to load ({type(_err).__name__}: {_err}){_detail}")
    raise
