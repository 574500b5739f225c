#!/usr/bin/env python3
"""DeepScaleR-Preview (agentica-org/DeepScaleR-Preview-Dataset, ~40K problems) -> train.parquet.

data_source "deepscaler", scored by verl_offgrpo.rewards.compute_score through math-verify (set
reward.custom_reward_function.path=pkg://verl_offgrpo.rewards). The prompt is the problem plus an
instruction to put the final answer in \\boxed{}; the ground truth is the 'answer' field (a record with an
empty answer is skipped, and the skipped rows are counted on stderr).

Local file (offline use and tests): <DIR>/train.jsonl, one object per line with the hub's fields
'problem', 'answer', 'solution'.

    python data_prep/deepscaler.py --output-dir ~/data/deepscaler                          # from the hub
    python data_prep/deepscaler.py --local-dir raw/deepscaler --output-dir ~/data/deepscaler  # train.jsonl
"""

from __future__ import annotations

import os
import sys

if __package__:
    from . import _common as C
else:  # run as a script: python data_prep/deepscaler.py
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import _common as C

DATA_SOURCE = "deepscaler"
SPLITS = (C.Split("train", "train.jsonl", "train"),)


def build_row(rec: C.Record, split: str, index: int) -> dict | None:
    """The row of a record, or None (skipped, counted by ``C.run``) for one whose ``answer`` is empty or null: nothing
    to score against. ``solution`` is kept in ``extra_info`` where present (nothing scores it)."""
    answer = rec.data.get("answer")
    blank = answer is None or (isinstance(answer, str) and not answer.strip())
    if "answer" in rec.data and blank:  # an absent field is a wrong file: rec.field names it below
        return None
    solution = rec.data.get("solution")
    return C.boxed_math_row(
        DATA_SOURCE,
        rec.field("problem"),
        rec.field("answer").strip(),
        split,
        index,
        solution=solution if isinstance(solution, str) else "",
    )


def main(argv=None) -> int:
    return C.run(
        argv,
        description=__doc__.split("\n")[0],
        hub_id="agentica-org/DeepScaleR-Preview-Dataset",
        hub_config=None,
        splits=SPLITS,
        default_out="~/data/deepscaler",
        build_row=build_row,
    )


if __name__ == "__main__":
    sys.exit(main())
