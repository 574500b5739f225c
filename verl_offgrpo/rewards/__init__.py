"""Rule-based rewards for the paper's datasets, in verl's custom-reward-function format.

Use with verl::

    reward.custom_reward_function.path=pkg://verl_offgrpo.rewards
    reward.custom_reward_function.name=compute_score

:func:`compute_score` sends GSM8K (``data_source="openai/gsm8k"``) to verl's own strict ``#### n``
scorer (a plain number right after ``#### `` in the last 300 characters: ``#### 18.00``, ``#### $18`` and
``#### 18.`` score 0, as in verl), the synthetic ``arithmetic/<task>`` rows of ``data_prep/arithmetic.py`` to the last integer
of the response (:mod:`.last_integer`), and MATH-500 / AIME24 / DeepScaleR to math-verify
(:mod:`.math_verify_reward`), with a
timeout that also holds in verl's reward threads (:mod:`._worker`). Importing this package is
cheap: math-verify and verl's scorers are imported on first use.
"""

from .score import ARITHMETIC_PREFIX, GSM8K_SOURCES, MATH_VERIFY_SOURCES, compute_score

__all__ = ["compute_score", "ARITHMETIC_PREFIX", "GSM8K_SOURCES", "MATH_VERIFY_SOURCES"]
