"""Which of Yao et al.'s options (arXiv 2509.24203) a ``rec`` config selects, said in one line at start-up,
and the ε settings that do nothing with it (warnings).

The names are the README's "Which loss when" table: REC-<clip mode>-<NoIS|IS>, "wider clip" for the paper's
ε = (0.6, 2.0), group-relative REINFORCE (no mask), RED-Weight (Ã = A·exp(A/τ)), RED-Drop (the estimator).
"""

from __future__ import annotations

import logging
from typing import Any, Optional

from verl_offgrpo import ESTIMATOR_NAMES, RED_DROP_ESTIMATOR_NAME
from verl_offgrpo.config.rec import RECConfig
from verl_offgrpo.config.readers import flag_at
from verl_offgrpo.config.values import config_value as _get

logger = logging.getLogger(__name__)

#: the paper's wider clip (ε_low, ε_high)
WIDER_CLIP = (0.6, 2.0)
_MODES = {"one-side": "OneSide", "two-side": "TwoSide", "ring": "Ring"}
_RHO = {"alpha": "ρ = π_θ/α", "pi_k": "ρ = π_θ/π_k", "rprime": "ρ = π_θ/α around r' = π_k/α"}
#: estimators that read ``algorithm.norm_adv_by_std_in_grpo`` (the plugin's and verl's GRPO)
_READS_NORM_FLAG = (*ESTIMATOR_NAMES, "grpo")


def option_name(rec: RECConfig, eps_low: float, eps_high: float, estimator: Any) -> str:
    """The README's name of what ``rec`` (with ε and the estimator) runs, e.g. ``REC-OneSide-NoIS, wider clip``."""
    if rec.clip_mode == "none":
        name = {"red_weight": "RED-Weight", "is": "group-relative REINFORCE, IS-weighted"}.get(
            rec.weight, "group-relative REINFORCE")
    else:
        weight = {"none": "NoIS", "is": "IS"}.get(rec.weight, "RED-Weight")
        name = f"REC-{_MODES[rec.clip_mode]}-{weight}"
        if (eps_low, eps_high) == WIDER_CLIP:
            name += ", wider clip"
    return f"RED-Drop + {name}" if estimator == RED_DROP_ESTIMATOR_NAME else name


def advantage_text(config: Any, estimator: Any) -> str:
    """A as the estimator computes it: r − mean (the paper's) or divided by the group's std."""
    if estimator not in _READS_NORM_FLAG:
        return f"A from algorithm.adv_estimator={estimator}"
    if flag_at(config, "algorithm.norm_adv_by_std_in_grpo", True):
        return "A = (r − mean)/std, not the paper's r − mean (algorithm.norm_adv_by_std_in_grpo=false)"
    return "A = r − mean"


def tell_rec_option(config: Any, rec: RECConfig, eps_low: float, eps_high: float) -> None:
    """One info line naming the option, its ε, ρ and A; a warning for ε that cannot act: any ε under
    ``clip_mode=none`` (no mask), ε_low ≥ 1 with a band around 1 (ρ < 1 − ε_low ≤ 0 never happens)."""
    estimator = _get(config, "algorithm.adv_estimator")
    eps = f"ε = {eps_low:g}/{eps_high:g}, " if rec.clip_mode != "none" else ""
    logger.info("off_grpo: the rec loss runs %s (%s%s, %s).", option_name(rec, eps_low, eps_high, estimator),
                eps, _RHO.get(rec.anchor, rec.anchor), advantage_text(config, estimator))
    idle = idle_eps(rec, eps_low, eps_high)
    if idle:
        logger.warning("off_grpo: %s", idle)


def idle_eps(rec: RECConfig, eps_low: float, eps_high: float) -> Optional[str]:
    """Why the ε settings cannot act with ``rec``, or None."""
    actor = "actor_rollout_ref.actor"
    if rec.clip_mode == "none" and (eps_low, eps_high) != (0.2, 0.2):
        return (f"{actor}.clip_ratio_low/high={eps_low:g}/{eps_high:g}: no effect with the rec loss's "
                "clip_mode=none (no mask).")
    if rec.clip_mode != "none" and rec.anchor != "rprime" and eps_low >= 1:  # rprime: the edge is r' − ε_low
        return (f"{actor}.clip_ratio_low={eps_low:g} ≥ 1: ρ < 1 − ε_low never happens, so the rec mask's lower "
                "side never binds (the paper's wider clip is 0.6).")
    return None

