"""The plugin's group-relative advantage estimators: ``off_grpo`` (paper eq. (1), with the zero-variance
mask of §4) and ``red_drop`` (RED-Drop, Yao et al., arXiv 2509.24203).

``off_grpo``: for a prompt group G (verl's ``uid``) with sequence rewards r_j = Σ_t token_level_rewards[j, t]::

    A_j = (r_j − mean_G(r)) / sqrt(std_G(r)² + ε)        (algorithm.norm_adv_by_std_in_grpo = true)
    A_j =  r_j − mean_G(r)                              (false: Dr.GRPO, no std normalisation)

std_G is the unbiased (N−1) sample std unless ``algorithm.off_grpo.std_unbiased=false`` (population,
N); ε = ``algorithm.off_grpo.std_eps``. A singleton group takes mean 0 and std 1, as verl's ``grpo``.

``red_drop``: in each group, the rows with r_j < mean_G(r) are negatives, the others positives; where
negatives outnumber positives, the surplus negatives are dropped at random (:func:`verl_offgrpo.groups.
red_drop_rows`: seeded by ``algorithm.off_grpo.red_drop_seed`` and the group's uid), and the formula
above runs over the kept rows K only (mean_K, std_K). With ``norm_adv_by_std_in_grpo=false`` this is the
paper's A_j = r_j − mean_K(r); with it true, std_K follows ``std_unbiased`` (N−1 by default, where the
reference implementation, Trinity-RFT's ``rec_advantage.py``, takes the population std and divides by std + ε, not
sqrt(std² + ε): ``std_unbiased=false`` matches it where std ≫ √ε). Dropped rows have A = 0 and leave the loss like masked groups.

Rows that leave the loss: a zero-variance group (N > 1, all rewards equal: A = 0) with the mask on
(``algorithm.off_grpo.zero_var_mask``), and RED-Drop's dropped rows. verl's ``compute_advantage`` hands
the estimator ``data.batch["response_mask"]`` itself; the estimator zeroes those rows of it in place
(:func:`leave_loss`), so the tokens leave the token-mean denominator, the entropy and the KL term of the
actor update (v0 trainer, and the padded batch of the V1 trainer, whose trainer mode writes the same
rows back to the TransferQueue's ``response_mask`` and ``loss_mask``: :mod:`verl_offgrpo.zero_var_mask`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from verl_offgrpo.config import OffGRPOConfig
from verl_offgrpo.groups import group_moments, red_drop_rows, zero_variance_rows


def group_normalized_advantage(
    scores: torch.Tensor,
    index: np.ndarray,
    *,
    std_eps: float,
    std_unbiased: bool = True,
    norm_by_std: bool = True,
) -> torch.Tensor:
    """Per-sequence A_j = (r_j − mean_G) / sqrt(std_G² + ε) (or r_j − mean_G); shape (bs,).

    ``scores`` (bs,) are the sequence rewards, ``index`` (bs,) the group of each row.
    """
    scores = scores.to(torch.float32)
    gid_t, count, mean, var = group_moments(scores, index, unbiased=std_unbiased)
    singleton = count == 1
    mean = torch.where(singleton, torch.zeros_like(mean), mean)
    var = torch.where(singleton, torch.ones_like(var), var)
    centred = scores - mean[gid_t]
    if not norm_by_std:
        return centred
    return centred / torch.sqrt(var[gid_t] + std_eps)


def leave_loss(response_mask: torch.Tensor, rows: torch.Tensor) -> None:
    """Rows ``rows`` (bool (bs,)) leave the loss: their ``response_mask`` is zeroed in place."""
    response_mask[rows.to(response_mask.device)] = 0


def _group_advantages(token_level_rewards, response_mask, index, config, *, red_drop: bool, name: str):
    """Both estimators: (advantages, returns), (bs, L), broadcast over the response; edits ``response_mask``."""
    if index is None:
        raise ValueError(f"{name} needs the prompt-group index (uid) in the batch; verl adds it for GRPO-style runs.")
    knobs = OffGRPOConfig.from_algorithm(config)
    norm_by_std = bool(config.get("norm_adv_by_std_in_grpo", True)) if config is not None else True
    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1)
        index = np.asarray(index, dtype=object)
        leaving = torch.zeros(scores.shape[0], dtype=torch.bool, device=scores.device)
        if red_drop:
            leaving = red_drop_rows(scores, index, knobs.red_drop_seed)
        kept = torch.nonzero(~leaving).squeeze(-1)
        adv = torch.zeros(scores.shape[0], dtype=torch.float32, device=scores.device)
        adv[kept] = group_normalized_advantage(
            scores[kept], index[kept.cpu().numpy()], std_eps=knobs.std_eps, std_unbiased=knobs.std_unbiased,
            norm_by_std=norm_by_std,
        )
        if knobs.zero_var_mask:
            leaving = leaving | zero_variance_rows(scores, index)
        leave_loss(response_mask, leaving)
        advantages = adv.to(token_level_rewards.dtype).unsqueeze(-1) * response_mask
    return advantages, advantages


def compute_off_grpo_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    config: Any = None,
    **unused: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl estimator contract: returns (advantages, returns), both (bs, L), broadcast over the response.

    Per prompt group G (``index``), with r_j = Σ_t token_level_rewards[j, t]::

        A_j = (r_j − mean_G(r)) / sqrt(std_G(r)² + ε)     (A_j = r_j − mean_G(r) if norm_adv_by_std_in_grpo=false)

    Reads ``norm_adv_by_std_in_grpo`` and ``off_grpo.*`` from ``config`` (verl's ``algorithm``).
    With ``zero_var_mask`` on, zeroes the rows of ``response_mask`` of zero-variance groups in place.
    """
    return _group_advantages(token_level_rewards, response_mask, index, config, red_drop=False, name="off_grpo")


def compute_red_drop_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    config: Any = None,
    **unused: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl estimator contract, RED-Drop: as :func:`compute_off_grpo_advantage` over each group's kept rows;
    also zeroes the rows of ``response_mask`` of the dropped rows in place.

    Per group G with kept rows K (G less a seeded random surplus of its negatives, r_j < mean_G(r)):
    A_j = (r_j − mean_K(r)) / sqrt(std_K(r)² + ε) (or r_j − mean_K(r)) on K; A_j = 0 on the dropped rows.
    """
    return _group_advantages(token_level_rewards, response_mask, index, config, red_drop=True, name="red_drop")
