"""Tell every Ray process of a selecting job that it is one: ``VERL_OFFGRPO_JOB=1`` in the job's runtime env.

A worker cannot see the whole config: the actor's engine sees only its actor config, vLLM's worker
processes see nothing of it. The patches that must agree across processes (:mod:`.ipc_socket`:
sender and receiver must name the same socket) or that depend on the estimator (:mod:`.empty_update`)
read :data:`~verl_offgrpo.patches.JOB_ENV` instead.

``main_ppo``'s driver builds the Ray runtime env from ``verl.trainer.constants_ppo.PPO_RAY_RUNTIME_ENV``
(``get_ppo_ray_runtime_env``, after ``validate_config``, before ``ray.init``) and Ray hands its
``env_vars`` to every actor of the job (TaskRunner, actor workers, vLLM server actors; vLLM's worker
processes inherit them from the server actor). :func:`mark_job` adds :data:`JOB_ENV` there; the
``validate_config`` wrap (:mod:`.validate_config`) calls it for a config that selects the plugin, and
only then; it first removes the marks an earlier validation in the same process left (:func:`unmark_job`). A driver that does not go through ``validate_config`` before ``ray.init`` (a custom script,
or a Ray cluster started beforehand, for which ``main_ppo`` builds no runtime env) can set
``VERL_OFFGRPO_JOB=1`` (and ``VERL_OFFGRPO_FINAL_OUTPUTS=1``) in its Ray runtime env itself.
"""

from __future__ import annotations

import sys

from verl_offgrpo.patches import FINAL_OUTPUTS_ENV, JOB_ENV, VERL_VERSIONS

TARGETS = ("verl.trainer.constants_ppo.PPO_RAY_RUNTIME_ENV",)
WHEN = ("driver: adds VERL_OFFGRPO_JOB=1 (and VERL_OFFGRPO_FINAL_OUTPUTS=1 with final_outputs_only) to the Ray "
        "job's env_vars, only once a selecting config is validated")
MODULE = "verl.trainer.constants_ppo"

__all__ = ["TARGETS", "VERL_VERSIONS", "WHEN", "install", "live", "mark_job", "unmark_job"]


def mark_job(final_outputs_only: bool = False) -> None:
    """Add ``VERL_OFFGRPO_JOB=1`` to the env_vars of verl's PPO Ray runtime env (this process), and
    :data:`FINAL_OUTPUTS_ENV` ``=1`` when the job asks vLLM for final outputs only (else remove it)."""
    from verl.trainer import constants_ppo

    env_vars = constants_ppo.PPO_RAY_RUNTIME_ENV.setdefault("env_vars", {})
    env_vars[JOB_ENV] = "1"
    if final_outputs_only:
        env_vars[FINAL_OUTPUTS_ENV] = "1"
    else:
        env_vars.pop(FINAL_OUTPUTS_ENV, None)


def unmark_job() -> None:
    """Remove :data:`JOB_ENV` and :data:`FINAL_OUTPUTS_ENV` from verl's PPO Ray runtime env: the
    ``validate_config`` wrap calls it first, so a plain job (or a rejected one) validated in the same
    driver process after a selecting one is not marked as the plugin's."""
    from verl.trainer import constants_ppo

    env_vars = constants_ppo.PPO_RAY_RUNTIME_ENV.get("env_vars") or {}
    for name in (JOB_ENV, FINAL_OUTPUTS_ENV):
        env_vars.pop(name, None)


def live() -> bool:
    module = sys.modules.get(MODULE)
    env = getattr(module, "PPO_RAY_RUNTIME_ENV", None) or {}
    return env.get("env_vars", {}).get(JOB_ENV) == "1"


def install() -> None:
    """Nothing at ``import verl``: :func:`mark_job` runs from the ``validate_config`` wrap when selected."""
