"""Prompt groups: the rows of a batch that share a ``uid`` (one prompt's ``rollout.n`` responses).

The group statistics the advantage, the zero-variance mask and the bound monitor share. Pure
functions over tensors; imports nothing of the plugin.
"""

from __future__ import annotations

import numpy as np
import torch


def group_ids(index: np.ndarray) -> tuple[np.ndarray, int]:
    """Dense group id per row (0..n_groups−1) and the number of groups."""
    _, inverse = np.unique(np.asarray(index, dtype=object).astype(str), return_inverse=True)
    inverse = inverse.reshape(-1)
    return inverse, int(inverse.max()) + 1 if inverse.size else 0


def zero_variance_rows(scores: torch.Tensor, index: np.ndarray) -> torch.Tensor:
    """Bool (bs,): rows of groups with N > 1 whose scores are all equal."""
    gid, n_groups = group_ids(index)
    gid_t = torch.as_tensor(gid, dtype=torch.long, device=scores.device)
    scores = scores.detach().to(torch.float64)
    g_max = torch.full((n_groups,), -torch.inf, dtype=scores.dtype, device=scores.device)
    g_min = torch.full((n_groups,), torch.inf, dtype=scores.dtype, device=scores.device)
    g_max = g_max.scatter_reduce(0, gid_t, scores, reduce="amax")
    g_min = g_min.scatter_reduce(0, gid_t, scores, reduce="amin")
    count = torch.bincount(gid_t, minlength=n_groups)
    zero_var_group = (g_max == g_min) & (count > 1)
    return zero_var_group[gid_t]
