"""Data that only the plugin's scorer can score must not meet verl's built-in one.

Without ``reward.custom_reward_function.path`` verl 0.9.1 scores every row with
``verl.utils.reward_score.default_compute_score``, which raises ``NotImplementedError`` for a ``data_source`` it has no
scorer for, at the first reward (the first validation, with ``val_before_train``), after Ray, the actor and vLLM have
started. ``data_prep/`` writes such names for MATH-500, DeepScaleR and the arithmetic tasks: the plugin's
``compute_score`` (:mod:`verl_offgrpo.rewards`) scores them. Here, in a selecting job's driver checks, the
``data_source`` column of each local parquet file of ``data.train_files`` / ``data.val_files`` is read (only that
column, until the first such name); a file that is not local, not there, or without the column is left to verl, as
are jobs whose rows may not reach verl's scorer: a reward model, a reward manager other than verl's built-in ones, a
dataset class of the user's own (``data.custom_cls.path``), validation files of a job that never validates.
"""

from __future__ import annotations

from typing import Any, Optional

from .readers import local_parquet_files, validates
from .values import OffGRPOConfigError
from .values import config_value as _get

#: the ``data_source`` names the plugin's scorer knows and verl 0.9.1's ``default_compute_score`` does not (besides
#: every ``arithmetic/<task>``); verl takes ``openai/gsm8k``, ``HuggingFaceH4/MATH-500`` and any ``aime*``
VERL_UNSCORED = frozenset(
    {"math500", "deepscaler", "gsm8k", "HuggingFaceH4/aime_2024", "agentica-org/DeepScaleR-Preview-Dataset"}
)
#: data_prep's arithmetic tasks (the rewards' ``score.ARITHMETIC_PREFIX``: config modules import nothing outside config)
ARITHMETIC_PREFIX = "arithmetic/"
REWARD_PATH = "reward.custom_reward_function.path"
#: verl 0.9.1's built-in reward managers (``reward.reward_manager.name``; verl's reward-loop registry), each scoring
#: with ``default_compute_score`` where no custom reward function is given
VERL_REWARD_MANAGERS = ("naive", "dapo", "gdpo", "rate_limited", "remote")


def verl_cannot_score(data_source: Any) -> bool:
    """Whether ``data_source`` is one of the plugin's names that verl's built-in scorer refuses."""
    return isinstance(data_source, str) and (data_source in VERL_UNSCORED or data_source.startswith(ARITHMETIC_PREFIX))


def check_data_sources_verl_can_score(config: Any) -> None:
    """Raise :class:`OffGRPOConfigError` where verl's built-in scorer would score a row it has no scorer for."""
    if _get(config, REWARD_PATH) or _get(config, "reward.reward_model.enable", False) or _get(config, "data.custom_cls.path"):
        return
    if _get(config, "reward.reward_manager.source", "register") != "register":
        return  # a reward manager of the user's own: it may not call verl's scorer
    if _get(config, "reward.reward_manager.name", "naive") not in VERL_REWARD_MANAGERS:
        return
    for key in ["data.train_files"] + (["data.val_files"] if validates(config) else []):
        for path in local_parquet_files(_get(config, key)):
            source = _first_unscored_source(path)
            if source is not None:
                raise OffGRPOConfigError(
                    f"{key}: {path} holds data_source {source!r}, which verl's built-in scorer does not know "
                    "(NotImplementedError at the first reward, after the workers started): set "
                    f"{REWARD_PATH}=pkg://verl_offgrpo.rewards reward.custom_reward_function.name=compute_score, the "
                    "plugin's scorer, for which data_prep/ writes it."
                )


def _first_unscored_source(path: str) -> Optional[str]:
    """The first value of ``path``'s ``data_source`` column that verl cannot score (:func:`verl_cannot_score`),
    read in batches; None where there is none, or the column cannot be read here."""
    try:
        import pyarrow.parquet as pq

        for batch in pq.ParquetFile(path).iter_batches(columns=["data_source"], batch_size=65536):
            found = next((s for s in set(batch.column(0).to_pylist()) if verl_cannot_score(s)), None)
            if found is not None:
                return found
    except Exception:  # noqa: BLE001 - no column, another format, no pyarrow: verl reads it and says so, or not
        return None
    return None


__all__ = ["VERL_UNSCORED", "check_data_sources_verl_can_score", "verl_cannot_score"]
