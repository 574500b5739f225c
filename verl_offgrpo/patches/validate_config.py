"""``verl.utils.config.validate_config`` also runs the plugin's start-up checks, for a config that selects it.

``main_ppo``'s driver calls ``validate_config`` before it starts Ray. For a config that selects the
plugin (:func:`.selection.config_selects`):

0. every value must be readable: a ``${...}`` that does not resolve, or a section of verl's set to null, is
   :class:`~verl_offgrpo.config.readable.UnreadableConfigError`, one line (:mod:`verl_offgrpo.config.readable`);
1. the installed verl must be in :data:`VERL_VERSIONS` and every patch target and verl internal the job's
   trainer uses must exist (:func:`verl_offgrpo.patches.preflight`), else :class:`~verl_offgrpo.patches.PatchError`, one line;
2. the estimator and loss names and the V1 trainer mode against verl's registries
   (:mod:`verl_offgrpo.config.names`, :mod:`verl_offgrpo.config.trainer_modes`), then
   :func:`verl_offgrpo.config.validate_off_grpo_config` — before verl's own checks, so a failing
   config never prints verl's "All configuration checks passed successfully!"; for a config not
   composed from the plugin's yaml, the error may end by pointing at it (:mod:`verl_offgrpo.config.yaml_hint`);
3. verl's ``RolloutConfig`` built from the rollout section, which verl's workers build only after Ray started
   (:mod:`.rollout_config`: ``rollout.mode=sync``, one line), then verl's original ``validate_config``;
4. the job's Ray processes are marked as selecting the plugin, and as asking vLLM for final outputs
   only where ``final_outputs_only`` is on (:mod:`.job_env`). Every validation first removes the marks
   an earlier one in the same process left, so only a selecting config that passed is marked; where Ray
   already runs in this process with other marks (which ``main_ppo`` would reuse), or where the driver's own
   environment sets a mark the job must not have (which its Ray processes inherit), one line refuses the
   job, a plain one included (:func:`.job_env.running_ray_problem`, :func:`.job_env.driver_env_problem`).

Any other config (or one whose selection test cannot resolve a key it reads: :func:`selects`, one warning naming
the value) goes straight to verl's ``validate_config``, unless it names the plugin's estimator or loss in a way verl
cannot run (another package's, or a slip of case, ``-`` or ``_`` registered nowhere: one line,
:func:`_refuse_plugin_names_verl_would_not_run`); if it sets ``algorithm.off_grpo`` knobs
(composed from the plugin's yaml: away from their defaults), one warning says they have no effect
(:mod:`verl_offgrpo.config.unselected`).
``verl.utils.config`` is already imported by ``import verl`` (verl 0.9.1), so the wrap goes in at once; by then
``verl/utils/__init__.py`` (verl 0.9.1) has bound ``verl.utils.validate_config`` to verl's function too, so every
loaded ``verl.*`` module attribute that is verl's function is rebound to the wrap (``from verl.utils import
validate_config`` gets it as well).
"""

from __future__ import annotations

import functools
import logging
import sys

from verl_offgrpo.patches import VERL_VERSIONS, complain, job_selected, target_problem

TARGETS = ("verl.utils.config.validate_config", "verl.utils.validate_config")
WHEN = "driver (main_ppo): the plugin's checks, then verl's, for a config that selects it; verl's alone otherwise"
MODULE = "verl.utils.config"
_WRAPPED = "__off_grpo_wrapped__"

__all__ = ["TARGETS", "VERL_VERSIONS", "WHEN", "install", "live", "wrap"]


def wrap(original):
    """verl's ``validate_config`` followed, for a selecting config only, by the plugin's checks."""
    if getattr(original, _WRAPPED, False):
        return original

    @functools.wraps(original)
    def validate_config(config, *args, **kwargs):
        _unmark_quietly()  # an earlier selecting config's mark: only a passing selecting config re-marks
        if not selects(config):
            _refuse_plugin_names_verl_would_not_run(config)
            if not _warn_unknowable_selection(config):
                _warn_unselected_knobs(config)
            _refuse_a_marked_ray(config)
            return original(config, *args, **kwargs)
        from verl_offgrpo.patches import PatchError, preflight
        from verl_offgrpo.config.readable import check_readable
        from verl_offgrpo.patches.job_env import driver_env_problem, mark_job, running_ray_problem
        from verl_offgrpo.patches.rollout_config import RolloutConfigError, rollout_config_error

        check_readable(config)  # a ${...} that does not resolve, a section set to null: before anything reads them
        problems = preflight(config=config)
        if problems:
            raise PatchError(problems[0] + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""))
        from verl_offgrpo.config import OffGRPOConfigError, advice_after_the_checks, validate_off_grpo_config
        from verl_offgrpo.config.yaml_hint import shipped_yaml_hint

        from verl_offgrpo.config.missing_values import unset_line

        if unset := unset_line(config):  # a ??? or a null model path or data file: verl's checks pass them
            raise OffGRPOConfigError(unset)
        # before verl's checks, so a config the plugin rejects never prints verl's success banner; the plugin's
        # warnings only once verl's checks passed too, so a refused job gets its error line alone
        with advice_after_the_checks():
            _check_names(config)
            try:
                knobs = validate_off_grpo_config(config)
            except OffGRPOConfigError as err:
                hint = shipped_yaml_hint(config, str(err))
                if hint is not None:
                    err.args = (f"{err} {hint}",)
                raise
            if problem := driver_env_problem(True, knobs.final_outputs_only):
                raise PatchError(problem)
            if line := rollout_config_error(config):  # else the workers stop on it, after Ray and the model started
                raise RolloutConfigError(line)
            result = original(config, *args, **kwargs)
            if problem := running_ray_problem(True, knobs.final_outputs_only):
                raise PatchError(problem)
        mark_job(final_outputs_only=knobs.final_outputs_only)
        return result

    setattr(validate_config, _WRAPPED, True)
    return validate_config


def selects(config) -> bool:
    """:func:`.selection.config_selects`, False where reading the config raises (an interpolation that does not
    resolve in the driver, e.g. ``${oc.env:UNSET}`` in a key the test reads): verl's own ``validate_config`` does not
    resolve every key, so such a config is left to it, as plain verl would."""
    from omegaconf.errors import OmegaConfBaseException

    from verl_offgrpo.patches.selection import config_selects

    try:
        return config_selects(config)
    except OmegaConfBaseException:
        return False


def _refuse_plugin_names_verl_would_not_run(config) -> None:
    """A config that does not select the plugin but names its estimator or loss in a way verl cannot run, against
    verl's registries in this driver, one line each (:mod:`verl_offgrpo.config.names`):

    * one of the plugin's (reserved) names that another package holds in verl's registry
      (:func:`~verl_offgrpo.config.names.check_names_are_the_plugins`): two packages claim the name, and verl runs
      whichever registered last in each process;
    * one of the plugin's names with another case, ``-`` or ``_`` (``adv_estimator=offgrpo``), registered nowhere
      (:func:`~verl_offgrpo.config.names.plugin_name_slip`, which leaves to verl whatever may still be registered
      later): it selects nothing, and verl would fail at its lookup after Ray, the model load and the first rollout.

    Reads ``core_algos`` only where it is already imported (the plugin's entry point imports it, and it is the only
    way another package can have registered there). A name that does not resolve here is left to verl's checks."""
    core_algos = sys.modules.get("verl.trainer.ppo.core_algos")
    if core_algos is None:
        return
    from omegaconf.errors import OmegaConfBaseException

    from verl_offgrpo.config import OffGRPOConfigError
    from verl_offgrpo.config.names import check_names_are_the_plugins, plugin_name_slip

    registries = (core_algos.ADV_ESTIMATOR_REGISTRY, core_algos.POLICY_LOSS_REGISTRY)
    try:
        check_names_are_the_plugins(config, *registries)
        line = plugin_name_slip(config, *registries)
    except OmegaConfBaseException:  # a name that does not resolve here: verl's own checks say so, or not
        return
    if line is not None:
        raise OffGRPOConfigError(line)


def _unmark_quietly() -> None:
    """:func:`.job_env.unmark_job` before every validation: a mark left by an earlier selecting config of this
    process must not reach a plain or rejected job, and nothing the plugin does may fail a plain job."""
    try:
        from verl_offgrpo.patches.job_env import unmark_job

        unmark_job()
    except Exception:  # noqa: BLE001 - a plain verl job must not fail on the plugin's account
        pass


def _refuse_a_marked_ray(config) -> None:
    """A plain job whose Ray processes would carry the plugin's marks: exported in the driver's environment, or in
    the runtime env of a Ray an earlier selecting job started in this process (which main_ppo would reuse). One
    line, before verl's checks. Nothing else of the plugin's may fail a plain job."""
    from verl_offgrpo.patches import PatchError

    try:
        from verl_offgrpo.patches.job_env import driver_env_problem, inert_driver_mark, running_ray_problem

        problem = driver_env_problem(False) or running_ray_problem(False)
        inert = inert_driver_mark(False)
    except Exception:  # noqa: BLE001 - a plain verl job must not fail on the plugin's account
        return
    if problem is not None:
        raise PatchError(problem)
    if inert is not None:
        logging.getLogger(__name__).warning(inert)


def _warn_unknowable_selection(config) -> bool:
    """One warning, and True, where a config that carries something of the plugin's (:func:`_carries_the_plugin`)
    has a key the selection test reads (:func:`.selection.config_selects`) that does not resolve in this driver: the
    job is left to verl as plain verl would run it (verl's TaskRunner resolves the whole config and stops there on it,
    or trains plain verl where the value resolves only in the job's Ray processes), but not in silence. A config with
    nothing of the plugin's is verl's alone, silence included. Never an error: this is a plain verl job's path."""
    try:
        from omegaconf.errors import OmegaConfBaseException

        from verl_offgrpo.config.readable import unresolved_interpolation
        from verl_offgrpo.patches.selection import config_selects

        try:
            config_selects(config)
            return False
        except OmegaConfBaseException as err:
            if not _carries_the_plugin(config):
                return False
            line = unresolved_interpolation(config) or " ".join(str(err).split())
    except Exception:  # noqa: BLE001 - a plain verl job must not fail on the plugin's account
        return False
    logging.getLogger(__name__).warning(
        "verl-offgrpo: %s The plugin cannot tell whether this job selects it, so it leaves the job to verl without "
        "its checks and patches (verl resolves the config again in its TaskRunner, after Ray started).",
        line if line.endswith(".") else line + ".",
    )
    return True


def _carries_the_plugin(config) -> bool:
    """Whether ``config`` writes one of the plugin's sections (``algorithm.off_grpo``, ``policy_loss.rec``) or the
    ``+rollout.checkpoint_manager_class`` key, which verl's yaml lacks (resolved or not)."""
    from verl_offgrpo.config.readable import PLUGIN_SECTIONS
    from verl_offgrpo.config.values import ABSENT, written_value

    for key in (*PLUGIN_SECTIONS, "actor_rollout_ref.rollout.checkpoint_manager_class"):
        try:
            if written_value(config, key, ABSENT) is not ABSENT:
                return True
        except Exception:  # noqa: BLE001 - there, but its ${...} does not resolve
            return True
    return False


def _warn_unselected_knobs(config) -> None:
    """One warning for plugin knobs in a config that does not select the plugin (they do nothing there), and one
    for the plugin's yaml's untruncated rollout IS weights under verl's own loss
    (:func:`~verl_offgrpo.config.loss_estimator_checks.untruncated_is_under_verls_loss`); never an error: this is a
    plain verl job's path."""
    try:
        from verl_offgrpo.config.unselected import unselected_knobs_message

        message = unselected_knobs_message(config)
    except Exception:  # noqa: BLE001 - a plain verl job must not fail on the plugin's account
        return
    if message is not None:
        logging.getLogger(__name__).warning(message)
    try:  # the plugin's yaml's untruncated rollout IS under verl's own loss: verl's GRPO it is not
        from verl_offgrpo.config.loss_estimator_checks import untruncated_is_under_verls_loss
        from verl_offgrpo.config.yaml_hint import composed_from_plugin_yaml

        untruncated = untruncated_is_under_verls_loss(config) if composed_from_plugin_yaml(config) else None
    except Exception:  # noqa: BLE001 - a plain verl job must not fail on the plugin's account
        return
    if untruncated is not None:
        logging.getLogger(__name__).warning(untruncated)


def _check_names(config) -> None:
    """The config's estimator and loss against verl 0.9.1's ``core_algos.ADV_ESTIMATOR_REGISTRY`` and
    ``POLICY_LOSS_REGISTRY`` (read, not replaced; importing ``core_algos`` also registers the plugin's names),
    and its V1 trainer mode against verl's ``TRAINER_REGISTRY`` (:mod:`verl_offgrpo.config.trainer_modes`)."""
    from verl.trainer.ppo import core_algos

    from verl_offgrpo.config.names import check_names_are_the_plugins, check_registered_names
    from verl_offgrpo.config.trainer_modes import check_trainer_mode
    from verl_offgrpo.sync import registered_v1_modes

    check_registered_names(config, core_algos.ADV_ESTIMATOR_REGISTRY, core_algos.POLICY_LOSS_REGISTRY)
    check_names_are_the_plugins(config, core_algos.ADV_ESTIMATOR_REGISTRY, core_algos.POLICY_LOSS_REGISTRY)
    check_trainer_mode(config, registered_v1_modes)


def live() -> bool:
    modules = [sys.modules.get(target.rpartition(".")[0]) for target in TARGETS]
    return all(module is not None and getattr(getattr(module, "validate_config", None), _WRAPPED, False)
               for module in modules)


def install() -> None:
    """Wrap ``validate_config`` now (its module is loaded by ``import verl``), or once it is imported."""
    from verl_offgrpo.patches.post_import import on_import

    on_import(MODULE, "validate_config", _apply)


def _apply(module) -> None:
    if not hasattr(module, "validate_config"):
        complain(target_problem(TARGETS[0]) or f"verl-offgrpo: {TARGETS[0]} is missing", job_selected())
        return
    original = module.validate_config
    wrapped = wrap(original)
    module.validate_config = wrapped
    _rebind_loaded_references(original, wrapped)


def _rebind_loaded_references(original, wrapped) -> None:
    """Every attribute of a loaded ``verl.*`` module that is verl's ``validate_config`` itself becomes the wrap:
    ``verl.utils.validate_config`` (``from .config import validate_config`` in verl 0.9.1's ``verl/utils/__init__.py``,
    run before the plugin loads) and any module that imported it by name before the wrap went in."""
    if wrapped is original:
        return
    for name, loaded in list(sys.modules.items()):
        if loaded is None or not (name == "verl" or name.startswith("verl.")):
            continue
        for attr, value in list(getattr(loaded, "__dict__", {}).items()):
            if value is original:
                setattr(loaded, attr, wrapped)
