#!/usr/bin/env python3
"""AIME 2024 (I and II, 30 problems) -> test.parquet, an evaluation set for verl.

data_source "aime24", scored by verl_offgrpo.rewards.compute_score through math-verify (set
reward.custom_reward_function.path=pkg://verl_offgrpo.rewards). The prompt is the problem plus an
instruction to put the final answer in \\boxed{}; the ground truth is the integer answer (0-999)
without leading zeros ("025" -> "25"; math-verify also accepts \\boxed{025} for it).

Local file: <DIR>/test.jsonl with fields 'problem' (or 'question'), 'answer', and optionally 'id',
'url' (the layout of Qwen2.5-Math's evaluation/data/aime24/test.jsonl).

    python data_prep/aime24.py --output-dir ~/data/aime24                       # from the hub
    python data_prep/aime24.py --local-dir raw/aime24 --output-dir ~/data/aime24  # test.jsonl
"""

from __future__ import annotations

import os
import sys

if __package__:
    from . import _common as C
else:  # run as a script: python data_prep/aime24.py
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import _common as C

DATA_SOURCE = "aime24"
HUB_ID = "HuggingFaceH4/aime_2024"  # its only split is "train"; all 30 problems
SPLITS = (C.Split("test", "test.jsonl", "train"),)


def integer_answer(rec: C.Record) -> str:
    """The answer as a canonical integer string; AIME answers are integers 0-999."""
    raw = rec.field("answer", (str, int))
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise rec.fail(f"cannot parse the answer {raw!r}: AIME answers are integers 0-999") from None
    if not 0 <= value <= 999:
        raise rec.fail(f"answer {raw!r} is outside 0-999")
    return str(value)


def build_row(rec: C.Record, split: str, index: int) -> dict:
    problem = rec.field("problem" if "problem" in rec.data else "question")
    extra = {k: rec.data[k] for k in ("id", "url") if k in rec.data}
    return C.boxed_math_row(
        DATA_SOURCE, problem, integer_answer(rec), split, index, answer=str(rec.data["answer"]), **extra
    )


def main(argv=None) -> int:
    return C.run(
        argv,
        description=__doc__.split("\n")[0],
        hub_id=HUB_ID,
        hub_config=None,
        splits=SPLITS,
        default_out="~/data/aime24",
        build_row=build_row,
    )


if __name__ == "__main__":
    sys.exit(main())
