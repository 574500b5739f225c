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

``main_ppo`` builds that env only when it starts Ray (``run_ppo``: ``if not ray.is_initialized()``), and
never stops it: a second job in the same process (a hydra ``-m`` sweep, an interactive session) runs on the first
job's env. :func:`running_ray_problem` says when that env would mark the job wrongly (a plain job's
workers running the plugin's patches, or a selecting job's without them); the ``validate_config`` wrap
raises it as one line.

The driver's own environment reaches the job's Ray processes too (a Ray started here inherits it), and verl
0.9.1's ``get_ppo_ray_runtime_env`` drops from the runtime env every variable the driver's environment already
sets, so a mark exported in the shell wins over the job's: :func:`driver_env_problem` says when it disagrees
with what the job needs (``VERL_OFFGRPO_JOB=1`` left in the shell of a plain job, ``=0`` in a selecting
one's); the ``validate_config`` wrap raises it as one line, for plain and selecting jobs alike. A plain job's
``VERL_OFFGRPO_FINAL_OUTPUTS=1`` alone is read by no process of it: one warning (:func:`inert_driver_mark`).
"""

from __future__ import annotations

import os
import sys

from verl_offgrpo.patches import FINAL_OUTPUTS_ENV, JOB_ENV, VERL_VERSIONS, _truthy

TARGETS = ("verl.trainer.constants_ppo.PPO_RAY_RUNTIME_ENV",)
WHEN = ("driver: adds VERL_OFFGRPO_JOB=1 (and VERL_OFFGRPO_FINAL_OUTPUTS=1 with final_outputs_only) to the Ray "
        "job's env_vars, only once a selecting config is validated")
MODULE = "verl.trainer.constants_ppo"

__all__ = ["TARGETS", "VERL_VERSIONS", "WHEN", "driver_env_problem", "expected_marks", "inert_driver_mark", "install", "live",
           "mark_job", "running_ray_marks",
           "running_ray_problem", "unmark_job"]


def mark_job(final_outputs_only: bool = False) -> None:
    """Add ``VERL_OFFGRPO_JOB=1`` to the env_vars of verl's PPO Ray runtime env (this process), and
    :data:`FINAL_OUTPUTS_ENV` ``=1`` when the job asks vLLM for final outputs only (else remove it)."""
    from verl.trainer import constants_ppo

    env_vars = constants_ppo.PPO_RAY_RUNTIME_ENV.setdefault("env_vars", {})
    env_vars.pop(FINAL_OUTPUTS_ENV, None)
    env_vars.update(expected_marks(True, final_outputs_only))


def unmark_job() -> None:
    """Remove :data:`JOB_ENV` and :data:`FINAL_OUTPUTS_ENV` from verl's PPO Ray runtime env: the
    ``validate_config`` wrap calls it first, so a plain job (or a rejected one) validated in the same
    driver process after a selecting one is not marked as the plugin's."""
    from verl.trainer import constants_ppo

    env_vars = constants_ppo.PPO_RAY_RUNTIME_ENV.get("env_vars") or {}
    for name in (JOB_ENV, FINAL_OUTPUTS_ENV):
        env_vars.pop(name, None)


def expected_marks(selecting: bool, final_outputs_only: bool = False) -> dict[str, str]:
    """The plugin's env vars a job's Ray processes must carry: none for a plain job."""
    if not selecting:
        return {}
    return {JOB_ENV: "1", **({FINAL_OUTPUTS_ENV: "1"} if final_outputs_only else {})}


def driver_env_problem(selecting: bool, final_outputs_only: bool = False, environ=os.environ) -> str | None:
    """Why a mark set in this driver's environment would give this job's workers the wrong one, or None. Compared
    as the workers read a mark (``1``, ``true``, ``yes``, ``on`` set it; any other value, or none, does not)."""
    want = expected_marks(selecting, final_outputs_only)
    for name in (JOB_ENV, FINAL_OUTPUTS_ENV):
        value = environ.get(name)
        if value is None or _truthy(value) == (name in want):
            continue
        if name == FINAL_OUTPUTS_ENV and not selecting:
            continue  # read only beside VERL_OFFGRPO_JOB=1 (final_outputs.install): inert here, see inert_driver_mark
        if name == FINAL_OUTPUTS_ENV:
            effect = (f"vLLM would {'' if _truthy(value) else 'not '}be asked for final outputs only where this job's "
                      f"final_outputs_only resolves to {str(final_outputs_only).lower()}")
        elif selecting:
            effect = "this job's workers would run without the plugin's patches"
        else:
            effect = "this plain verl job's workers would run the plugin's patches"
        return (f"verl-offgrpo: {name}={value} is set in this driver's environment, which the job's Ray processes "
                f"inherit (verl's get_ppo_ray_runtime_env keeps a driver's own value over the job's), so {effect}: "
                f"unset {name} (the plugin sets it for the jobs that need it).")
    return None


def inert_driver_mark(selecting: bool, environ=os.environ) -> str | None:
    """One warning line where this driver's environment sets :data:`FINAL_OUTPUTS_ENV` for a plain job: its Ray
    processes inherit it, but the vLLM servers read it only beside ``VERL_OFFGRPO_JOB=1`` (:mod:`.final_outputs`),
    so it does nothing there. None otherwise (a selecting job's disagreeing mark is :func:`driver_env_problem`)."""
    value = environ.get(FINAL_OUTPUTS_ENV)
    if selecting or not _truthy(value) or _truthy(environ.get(JOB_ENV)):
        return None
    return (f"verl-offgrpo: {FINAL_OUTPUTS_ENV}={value} is set in this driver's environment but has no effect: this "
            f"job does not select the plugin, and vLLM reads it only in a job that does ({JOB_ENV}=1). Unset it.")


def running_ray_marks() -> dict[str, str] | None:
    """The plugin's env vars in the runtime env of the Ray job this process already runs (verl's
    ``main_ppo`` will reuse it), or None where no Ray runs here (``ray`` not even imported: not started)."""
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return None
    env_vars = (ray.get_runtime_context().runtime_env or {}).get("env_vars") or {}
    return {name: env_vars[name] for name in (JOB_ENV, FINAL_OUTPUTS_ENV) if name in env_vars}


def running_ray_problem(selecting: bool, final_outputs_only: bool = False) -> str | None:
    """Why the Ray already running in this process would give this job's workers the wrong marks, or None."""
    have = running_ray_marks()
    want = expected_marks(selecting, final_outputs_only)
    if have is None or have == want:
        return None
    if not selecting:
        effect = "this plain verl job's workers would run the plugin's patches"
    elif JOB_ENV not in have:
        effect = "this job's workers would run without the plugin's patches"
    else:
        effect = (f"vLLM would get {FINAL_OUTPUTS_ENV}={have.get(FINAL_OUTPUTS_ENV, 'unset')} where this job's "
                  f"final_outputs_only resolves to {str(final_outputs_only).lower()}")
    return (f"verl-offgrpo: Ray is already running in this process with the plugin's env vars {have or '{}'} "
            f"where this job needs {want or '{}'}, and main_ppo passes a job's runtime env only when it "
            f"starts Ray, so {effect}: run each job in its own process (not a hydra -m sweep), or call "
            f"ray.shutdown() between jobs, or start Ray with runtime_env={{'env_vars': {want}}}.")


def live() -> bool:
    module = sys.modules.get(MODULE)
    env = getattr(module, "PPO_RAY_RUNTIME_ENV", None) or {}
    return env.get("env_vars", {}).get(JOB_ENV) == "1"


def install() -> None:
    """Nothing at ``import verl``: :func:`mark_job` runs from the ``validate_config`` wrap when selected."""
