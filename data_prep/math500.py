#!/usr/bin/env python3
"""MATH-500 (HuggingFaceH4/MATH-500, 500 problems) -> test.parquet, an evaluation set for verl.

data_source "math500", scored by verl_offgrpo.rewards.compute_score through math-verify (set
reward.custom_reward_function.path=pkg://verl_offgrpo.rewards). The prompt is the problem plus an
instruction to put the final answer in \\boxed{}; the ground truth is the 'answer' field (LaTeX).

    python data_prep/math500.py --output-dir ~/data/math500                        # from the hub
    python data_prep/math500.py --local-dir raw/math500 --output-dir ~/data/math500  # test.jsonl
"""

from __future__ import annotations

import os
import sys

if __package__:
    from . import _common as C
else:  # run as a script: python data_prep/math500.py
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import _common as C

DATA_SOURCE = "math500"
SPLITS = (C.Split("test", "test.jsonl", "test"),)


def build_row(rec: C.Record, split: str, index: int) -> dict:
    return C.boxed_math_row(
        DATA_SOURCE,
        rec.field("problem"),
        rec.field("answer").strip(),
        split,
        index,
        solution=rec.field("solution"),
        subject=rec.field("subject"),
        level=rec.field("level", int),
        unique_id=rec.field("unique_id"),
    )


def main(argv=None) -> int:
    return C.run(
        argv,
        description=__doc__.split("\n")[0],
        hub_id="HuggingFaceH4/MATH-500",
        hub_config=None,
        splits=SPLITS,
        default_out="~/data/math500",
        build_row=build_row,
    )


if __name__ == "__main__":
    sys.exit(main())
