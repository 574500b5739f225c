"""The plugin's two process-wide switches, read from the environment; imports nothing, so ``import verl`` with the
plugin turned off loads nothing else of it (:mod:`verl_offgrpo.plugin`)."""

from __future__ import annotations

import os

#: ``VERL_OFFGRPO_DISABLE=1``: the entry point registers nothing and patches nothing.
DISABLE_ENV = "VERL_OFFGRPO_DISABLE"
#: Set to "1" in every Ray process of a job whose config selects the plugin (the driver adds it to the
#: job's Ray runtime env, :mod:`verl_offgrpo.patches.job_env`); patches that must agree across processes read it.
JOB_ENV = "VERL_OFFGRPO_JOB"


def truthy(value: str | None) -> bool:
    """``1``, ``true``, ``yes`` or ``on`` (any case, spaces around ignored)."""
    return (value or "").strip().lower() in {"1", "true", "yes", "on"}


def disabled(environ=os.environ) -> bool:
    """Whether ``VERL_OFFGRPO_DISABLE`` turns the plugin off in this process."""
    return truthy(environ.get(DISABLE_ENV))


def job_selected(environ=os.environ) -> bool:
    """Whether this process belongs to a Ray job whose config selects the plugin (:data:`JOB_ENV`)."""
    return truthy(environ.get(JOB_ENV))
