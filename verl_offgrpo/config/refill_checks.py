"""How verl's trainers hand out a step's prompts, checked before Ray: the V1 trainer fetches them in whole
``data.gen_batch_size`` chunks unless a refill option (:data:`REFILLS`) makes it fetch one at a time, and the
v0 trainer reads no refill option at all.

    chunks per step = data.train_batch_size / data.gen_batch_size     (V1, no refill: a whole number)
"""

from __future__ import annotations

from typing import Any

from verl_offgrpo import TRAINER_MODE

from .readers import flag_at, uses_v1, v1_mode
from .values import OffGRPOConfigError
from .values import config_value as _get
from .values import is_int as _is_int

#: verl's V1 options that refill a step's groups after its generation (then verl fetches prompts one at a time:
#: ``data.gen_batch_size`` becomes 1), as (flag, what it does)
REFILLS = (
    ("algorithm.filter_groups.enable", "refill filtered groups"),
    ("trainer.v1.sampler.sync_refill_failed_groups", "refill failed groups"),
)


def check_gen_batch_divides(config: Any) -> None:
    """verl's V1 sync trainer (the plugin's mode presents itself as it) fetches a step's prompts in whole
    ``data.gen_batch_size`` chunks, ``train_batch_size / gen_batch_size`` of them, and raises a ``ValueError``
    at the first step (after Ray, the model and vLLM have started) where that is not a whole number. Refuse it
    here; with a refill option (:data:`REFILLS`) verl sets gen_batch_size to 1 itself."""
    if not uses_v1(config) or v1_mode(config) != TRAINER_MODE or any(flag_at(config, f, False) for f, _ in REFILLS):
        return
    gen, train = _get(config, "data.gen_batch_size"), _get(config, "data.train_batch_size")
    if _is_int(gen) and _is_int(train) and (gen <= 0 or train % gen):
        raise OffGRPOConfigError(
            f"data.gen_batch_size={gen} must divide data.train_batch_size={train}: verl's V1 trainer fetches each "
            "step's prompts in whole gen_batch_size chunks and stops at the first step otherwise; set a divisor, or "
            "unset it (null)."
        )


def refuse_refill_on_v0(config: Any) -> None:
    """verl 0.9.1's v0 trainer (``trainer.use_v1=false``) reads none of :data:`REFILLS`: with one set, DAPO-style
    dynamic sampling would silently not happen and every group would train unfiltered. Refuse it."""
    if uses_v1(config):
        return
    for flag, what in REFILLS:
        if flag_at(config, flag, False):
            raise OffGRPOConfigError(
                f"{flag}=true ({what}) is read only by verl's V1 trainer; with trainer.use_v1=false verl 0.9.1 "
                f"ignores it and trains every group unfiltered: set trainer.use_v1=true, or {flag}=false."
            )
