"""Prompt groups: the rows of a batch that share a ``uid`` (one prompt's ``rollout.n`` responses).

The group statistics the advantages, the rows that leave the loss (zero-variance groups, RED-Drop)
and the bound monitor share. Pure functions over tensors; imports nothing of the plugin.
"""

from __future__ import annotations

import hashlib

import numpy as np
import torch


def group_ids(index: np.ndarray) -> tuple[np.ndarray, int]:
    """Dense group id per row (0..n_groups−1) and the number of groups."""
    _, inverse = np.unique(np.asarray(index, dtype=object).astype(str), return_inverse=True)
    inverse = inverse.reshape(-1)
    return inverse, int(inverse.max()) + 1 if inverse.size else 0


def group_moments(scores: torch.Tensor, index: np.ndarray, *, unbiased: bool = True):
    """Per row its dense group id g (long, (bs,)); per group N_g, mean_g = Σ r / N_g and
    var_g = Σ (r − mean_g)² / (N_g − 1) (``unbiased``; else / N_g; a singleton's divisor is 1), in ``scores``' dtype."""
    gid, n_groups = group_ids(index)
    gid_t = torch.as_tensor(gid, dtype=torch.long, device=scores.device)
    count = torch.zeros(n_groups, dtype=scores.dtype, device=scores.device).index_add_(0, gid_t, torch.ones_like(scores))
    mean = torch.zeros_like(count).index_add_(0, gid_t, scores) / count
    dof = count - 1 if unbiased else count
    var = torch.zeros_like(count).index_add_(0, gid_t, (scores - mean[gid_t]) ** 2) / dof.clamp(min=1)
    return gid_t, count, mean, var


def zero_variance_groups(scores: torch.Tensor, gid_t: torch.Tensor, n_groups: int) -> torch.Tensor:
    """Bool (n_groups,): groups with N > 1 whose scores are all equal (max = min: exact, unlike a variance)."""
    scores = scores.detach().to(torch.float64)
    g_max = torch.full((n_groups,), -torch.inf, dtype=scores.dtype, device=scores.device)
    g_min = torch.full((n_groups,), torch.inf, dtype=scores.dtype, device=scores.device)
    g_max = g_max.scatter_reduce(0, gid_t, scores, reduce="amax")
    g_min = g_min.scatter_reduce(0, gid_t, scores, reduce="amin")
    return (g_max == g_min) & (torch.bincount(gid_t, minlength=n_groups) > 1)


def zero_variance_rows(scores: torch.Tensor, index: np.ndarray) -> torch.Tensor:
    """Bool (bs,): rows of groups with N > 1 whose scores are all equal."""
    gid, n_groups = group_ids(index)
    gid_t = torch.as_tensor(gid, dtype=torch.long, device=scores.device)
    return zero_variance_groups(scores, gid_t, n_groups)[gid_t]


def group_seed(seed: int, uid: str) -> int:
    """A 64-bit seed from (seed, uid) that every process computes alike (BLAKE2b, not Python's salted hash)."""
    digest = hashlib.blake2b(f"{int(seed)}\x00{uid}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def red_drop_rows(scores: torch.Tensor, index: np.ndarray, seed: int) -> torch.Tensor:
    """Bool (bs,): the rows RED-Drop drops (Yao et al., arXiv 2509.24203).

    In each group with N > 1, negatives are the rows with r < mean_G(r) − (ε + N·ε₆₄)·max|r| (ε the machine epsilon
    of the rewards' dtype, ε₆₄ float64's, in which the mean is taken: a reward equal to the mean up to the rounding
    of the stored rewards and of their sum counts as positive, so 0.2 among {0.1, 0.2, 0.3, 0.0, 0.4} does; a group
    without variance has none); where they outnumber the positives, |neg| − |pos|
    of them are dropped, chosen by a permutation of the group's negatives (in batch order) from numpy's
    default generator seeded with :func:`group_seed` (``seed``, the group's uid). Same seed, uids, rewards and row order: same rows.
    """
    gid, n_groups = group_ids(index)
    uids = np.asarray(index, dtype=object).astype(str)
    values = scores.detach().to(torch.float64).cpu().numpy()
    stored = torch.finfo(scores.dtype).eps if scores.is_floating_point() else 0.0
    summed = torch.finfo(torch.float64).eps
    dropped = np.zeros(values.shape[0], dtype=bool)
    for g in range(n_groups):
        rows = np.flatnonzero(gid == g)
        group = values[rows]
        if rows.size < 2 or group.min() == group.max():  # no negatives (a rounded mean could make them all so)
            continue
        negatives = rows[group < group.mean() - (stored + rows.size * summed) * np.abs(group).max()]
        surplus = 2 * negatives.size - rows.size  # |neg| − |pos|
        if surplus > 0:
            rng = np.random.default_rng(group_seed(seed, uids[rows[0]]))
            dropped[rng.permutation(negatives)[:surplus]] = True
    return torch.as_tensor(dropped, device=scores.device)
