"""verl's import-time noise this CLI drops (main_ppo's own output keeps it): the optional training engines
that are not installed, the note that a non-GAE estimator runs without a critic, and the platform lines of a
machine without an accelerator (a dry run is for one). Nothing else of verl's or the plugin's output is
hidden."""

from __future__ import annotations

#: verl's warnings that an optional training engine is not installed
QUIET_WARNINGS = (r"\w+ engine is not available: ", r"verl\.workers\.engine\Z")
#: verl's note that a non-GAE estimator runs without a critic: always true for the plugin's estimators
QUIET_CRITIC_NOTE = r"Disabled critic as algorithm\.adv_estimator != gae"
QUIET_PLATFORM = ("verl.plugin.platform.platform_manager",
                  ("No supported accelerator detected", "Platform '%s' (%s) is registered but not available"))


def quiet_verl_imports() -> None:
    """Filters for :data:`QUIET_WARNINGS`, :data:`QUIET_CRITIC_NOTE` and :data:`QUIET_PLATFORM`, set before
    verl is imported."""
    import logging
    import warnings

    message, module = QUIET_WARNINGS
    warnings.filterwarnings("ignore", message=message, category=UserWarning, module=module)
    warnings.filterwarnings("ignore", message=QUIET_CRITIC_NOTE, category=UserWarning)
    name, prefixes = QUIET_PLATFORM
    logging.getLogger(name).addFilter(lambda record: not str(record.msg).startswith(prefixes))
