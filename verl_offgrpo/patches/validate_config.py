"""``verl.utils.config.validate_config`` also runs the plugin's start-up checks, for a config that selects it.

``main_ppo``'s driver calls ``validate_config`` before it starts Ray. The wrap calls verl's original
first, unchanged; then, only if the config selects the plugin (:func:`.selection.config_selects`):

1. the installed verl must be in :data:`VERL_VERSIONS` and every patch target must exist
   (:func:`verl_offgrpo.patches.preflight`), else :class:`~verl_offgrpo.patches.PatchError`, one line;
2. :func:`verl_offgrpo.validation.validate_off_grpo_config`;
3. the job's Ray processes are marked as selecting the plugin (:mod:`.job_env`).

For any other config the wrap returns what verl's ``validate_config`` returned and does nothing else.
``verl.utils.config`` is already imported by ``import verl`` (verl 0.9.1), so the wrap goes in at once.
"""

from __future__ import annotations

import functools
import sys

from verl_offgrpo.patches import VERL_VERSIONS, complain, job_selected, target_problem

TARGETS = ("verl.utils.config.validate_config",)
WHEN = "driver (main_ppo): verl's checks, then the plugin's only for a config that selects it"
MODULE = "verl.utils.config"
_WRAPPED = "__off_grpo_wrapped__"

__all__ = ["TARGETS", "VERL_VERSIONS", "WHEN", "install", "live", "wrap"]


def wrap(original):
    """verl's ``validate_config`` followed, for a selecting config only, by the plugin's checks."""
    if getattr(original, _WRAPPED, False):
        return original

    @functools.wraps(original)
    def validate_config(config, *args, **kwargs):
        result = original(config, *args, **kwargs)
        from verl_offgrpo.patches.selection import config_selects

        if config_selects(config):
            from verl_offgrpo.patches import PatchError, preflight

            problems = preflight()
            if problems:
                raise PatchError(problems[0] + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""))
            from verl_offgrpo.validation import validate_off_grpo_config

            validate_off_grpo_config(config)
            from verl_offgrpo.patches.job_env import mark_job

            mark_job()
        return result

    setattr(validate_config, _WRAPPED, True)
    return validate_config


def live() -> bool:
    module = sys.modules.get(MODULE)
    return module is not None and getattr(getattr(module, "validate_config", None), _WRAPPED, False)


def install() -> None:
    """Wrap ``validate_config`` now (its module is loaded by ``import verl``), or once it is imported."""
    from verl_offgrpo.patches.post_import import on_import

    on_import(MODULE, "validate_config", _apply)


def _apply(module) -> None:
    if not hasattr(module, "validate_config"):
        complain(target_problem(TARGETS[0]) or f"verl-offgrpo: {TARGETS[0]} is missing", job_selected())
        return
    module.validate_config = wrap(module.validate_config)
