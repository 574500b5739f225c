"""``compute_score``: the per-sample reward verl calls, dispatched on ``data_source``."""

from __future__ import annotations

from typing import Any

from .last_integer import last_integer_score
from .math_verify_reward import DEFAULT_TIMEOUT_S, math_verify_score

#: Scored by verl's built-in strict GSM8K scorer (the final answer must follow ``#### ``).
GSM8K_SOURCES = frozenset({"openai/gsm8k", "gsm8k"})

#: Scored by math-verify (the final answer in ``\boxed{}``). The first three are the names written
#: by ``data_prep/``; the others are the hub ids, accepted for data prepared elsewhere.
MATH_VERIFY_SOURCES = frozenset(
    {
        "math500",
        "aime24",
        "deepscaler",
        "HuggingFaceH4/MATH-500",
        "HuggingFaceH4/aime_2024",
        "agentica-org/DeepScaleR-Preview-Dataset",
    }
)

#: Synthetic tasks of ``data_prep/arithmetic.py``: the last integer of the response is the answer.
ARITHMETIC_PREFIX = "arithmetic/"


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: str,
    extra_info: dict[str, Any] | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
    require_think_end: bool = False,
    **kwargs: Any,
) -> float:
    """Reward of one response: 1.0 if its final answer equals ``ground_truth``, else 0.0.

    Args:
        data_source: the row's ``data_source``; see :data:`GSM8K_SOURCES` and
            :data:`MATH_VERIFY_SOURCES`; ``arithmetic/<task>`` is scored by the last integer of
            the response (:mod:`.last_integer`). Any other source falls back to verl's
            ``default_compute_score`` (as if no custom reward function were configured).
        solution_str: the decoded response.
        ground_truth: ``reward_model.ground_truth`` of the row.
        extra_info: the row's ``extra_info``; for ``arithmetic/<task>`` its ``question`` (written by
            ``data_prep/arithmetic.py``) makes a response that only echoes the question's operands
            score 0.0. Other sources pass it on to verl's ``default_compute_score``.
        timeout: math-verify only: seconds after which the answer scores 0.0
            (set through ``+reward.custom_reward_function.reward_kwargs.timeout=...``).
        require_think_end: math-verify only: a response without ``</think>`` scores 0.0, unfinished reasoning (for a
            model whose chat template opens ``<think>`` in the prompt, e.g. DeepSeek-R1-Distill; the DeepScaleR
            recipes set it). Either way a ``<think>`` never closed, or a final ``\\boxed{`` never closed, scores 0.0.
        **kwargs: further arguments verl may pass (e.g. ``reward_router_address``); ignored.

    Raises:
        ValueError: ``data_source`` is not a non-empty string, ``solution_str`` is not a string, or
            ``ground_truth`` is None (a row or a caller that is broken, not a wrong answer).
    """
    if not isinstance(data_source, str) or not data_source:
        raise ValueError(
            f"compute_score: data_source must be a non-empty string (got {data_source!r}); it picks the scorer, "
            "and each row of the data_prep/ parquet files carries one."
        )
    if not isinstance(solution_str, str):
        raise ValueError(
            f"compute_score: solution_str must be the decoded response, a string (got {type(solution_str).__name__}) "
            f"for data_source {data_source!r}."
        )
    if ground_truth is None:
        raise ValueError(
            f"compute_score: ground_truth is None for data_source {data_source!r}; the row needs "
            "reward_model.ground_truth."
        )
    if data_source in GSM8K_SOURCES:
        from verl.utils.reward_score import gsm8k

        return float(gsm8k.compute_score(solution_str, str(ground_truth)))
    if data_source in MATH_VERIFY_SOURCES:
        return math_verify_score(solution_str, str(ground_truth), timeout=timeout, require_think_end=require_think_end)
    if str(data_source).startswith(ARITHMETIC_PREFIX):
        return last_integer_score(solution_str, str(ground_truth), question=(extra_info or {}).get("question"))

    from verl.utils.reward_score import default_compute_score

    return default_compute_score(data_source, solution_str, ground_truth, extra_info=extra_info)
