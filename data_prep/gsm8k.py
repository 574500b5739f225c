#!/usr/bin/env python3
"""GSM8K (openai/gsm8k, train 7473 / test 1319) -> train.parquet, test.parquet for verl.

data_source "openai/gsm8k", so verl's built-in strict scorer (verl.utils.reward_score.gsm8k) and
verl_offgrpo.rewards.compute_score both score it: the response must end its answer with "#### n".
The prompt is the question plus the instruction of verl's own GSM8K example; the ground truth is the
number on the solution's final "#### n" line, commas removed.

    python data_prep/gsm8k.py --output-dir ~/data/gsm8k                      # from the hub
    python data_prep/gsm8k.py --local-dir raw/gsm8k --output-dir ~/data/gsm8k  # train.jsonl, test.jsonl
"""

from __future__ import annotations

import os
import re
import sys

if __package__:
    from . import _common as C
else:  # run as a script: python data_prep/gsm8k.py
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import _common as C

DATA_SOURCE = "openai/gsm8k"
INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'
SPLITS = (C.Split("train", "train.jsonl", "train"), C.Split("test", "test.jsonl", "test"))
_FINAL_LINE = re.compile(r"####\s*(-?[0-9][0-9,]*(?:\.[0-9]+)?)")


def extract_answer(rec: C.Record, solution: str) -> str:
    """The number on the solution's last line, which must read ``#### <number>``; commas removed."""
    last = solution.strip().splitlines()[-1].strip()
    m = _FINAL_LINE.fullmatch(last)
    if m is None:
        raise rec.fail(f"cannot parse the final answer: the last line of 'answer' must be '#### <number>', got {last!r}")
    return m.group(1).replace(",", "")


def build_row(rec: C.Record, split: str, index: int) -> dict:
    question = rec.field("question")
    solution = rec.field("answer")
    return C.make_row(
        DATA_SOURCE,
        question + " " + INSTRUCTION,
        extract_answer(rec, solution),
        split,
        index,
        question=question,
        answer=solution,
    )


def main(argv=None) -> int:
    return C.run(
        argv,
        description=__doc__.split("\n")[0],
        hub_id="openai/gsm8k",
        hub_config="main",
        splits=SPLITS,
        default_out="~/data/gsm8k",
        build_row=build_row,
    )


if __name__ == "__main__":
    sys.exit(main())
