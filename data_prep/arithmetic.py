#!/usr/bin/env python3
"""Synthetic verifiable arithmetic tasks (no download) -> train.parquet, test.parquet for verl.

Small instruction models get GRPO signal on these without a warm start (SmolLM2-135M-Instruct
answers in sentences; the reward reads the last integer of the response), unlike GSM8K's strict
``#### n`` format. Scored by ``verl_offgrpo.rewards.compute_score``: data_source ``arithmetic/<task>``
-> 1.0 if the last integer in the response equals the answer (``verl_offgrpo/rewards/last_integer.py``).

Tasks (--task):

    add1      "What is 7 + 5? Answer with just the number."                  a, b in 0..9 (100 questions)
    add2      "What is 37 + 45? Answer with just the number."                a, b in 10..99
    larger2   "Which number is larger, 59 or 63? Answer with just the number."  distinct 10..99
    largest4  "Which number is the largest: 12, 87, 45, 60? Answer with just the number."  distinct 10..99

Train and test come from one generator seeded with --seed: the same arguments write the same rows.
Test questions are distinct, and no test question is a train question as written; every written
split is checked for that before anything is saved (check_disjoint). A test question's twins (the
same numbers in another order: "5 + 7" for "7 + 5", the same answer) may still be in train;
--no-twins-in-train keeps them out too, and the check then covers them. When the task has too
few distinct questions for the request, the script says so and stops (add1 has 100).

Each row's extra_info["question"] lets the reward refuse a response that only repeats the
question's operands ("What is 0 + 8?", "59 or 63"), whose last number is often the answer.

A small task for quick learning checks: largest4 with 500 held-out questions and no twins in train
(SmolLM2-135M-Instruct answers about a third of them greedily before training):

    python data_prep/arithmetic.py --task largest4 --n-train 8192 --n-test 500 --seed 0 --no-twins-in-train --output-dir ~/data/arith_largest4
"""

from __future__ import annotations

import argparse
import os
import random
import re
import sys

if __package__:
    from . import _common as C
else:  # run as a script: python data_prep/arithmetic.py
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import _common as C

SUFFIX = "Answer with just the number."


def add1(rng: random.Random) -> tuple[str, int]:
    a, b = rng.randrange(10), rng.randrange(10)
    return f"What is {a} + {b}? {SUFFIX}", a + b


def add2(rng: random.Random) -> tuple[str, int]:
    a, b = rng.randrange(10, 100), rng.randrange(10, 100)
    return f"What is {a} + {b}? {SUFFIX}", a + b


def larger2(rng: random.Random) -> tuple[str, int]:
    a, b = rng.sample(range(10, 100), 2)
    return f"Which number is larger, {a} or {b}? {SUFFIX}", max(a, b)


def largest4(rng: random.Random) -> tuple[str, int]:
    xs = rng.sample(range(10, 100), 4)
    return f"Which number is the largest: {', '.join(map(str, xs))}? {SUFFIX}", max(xs)


TASKS = {"add1": add1, "add2": add2, "larger2": larger2, "largest4": largest4}


def operands(question: str) -> tuple[int, ...]:
    """The question's numbers, sorted: one key for a question and its twins ("7 + 5", "5 + 7")."""
    return tuple(sorted(int(x) for x in re.findall(r"\d+", question)))


def make_splits(task: str, n_train: int, n_test: int, seed: int, twins_in_train: bool = True) -> dict[str, list[dict]]:
    """Rows of both splits; test questions are distinct and disjoint from train questions, and with
    ``twins_in_train=False`` so are their twins (the same numbers in another order)."""
    for flag, n in (("--n-train", n_train), ("--n-test", n_test)):
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise C.DataPrepError(f"{flag} must be an integer >= 1 (got {n!r})")
    rng = random.Random(seed)
    gen = TASKS[task]
    test: dict[str, int] = {}
    for _ in range(100 * n_test):
        if len(test) == n_test:
            break
        q, a = gen(rng)
        test.setdefault(q, a)
    if len(test) < n_test:
        raise C.DataPrepError(f"task {task}: only {len(test)} distinct questions, {n_test} requested for test")
    held_out_twins = set() if twins_in_train else {operands(q) for q in test}
    train = []
    for _ in range(100 * n_train):
        if len(train) == n_train:
            break
        q, a = gen(rng)
        if q not in test and operands(q) not in held_out_twins:
            train.append((q, a))
    if len(train) < n_train:
        raise C.DataPrepError(f"task {task}: could not draw {n_train} train questions outside the test set")
    source = f"arithmetic/{task}"

    def rows(pairs, split):
        return [
            {**C.make_row(source, q, str(a), split, i, question=q), "ability": "arithmetic"}
            for i, (q, a) in enumerate(pairs)
        ]

    splits = {"train": rows(train, "train"), "test": rows(list(test.items()), "test")}
    check_disjoint(splits, twins_in_train=twins_in_train)
    return splits


def check_disjoint(splits: dict[str, list[dict]], twins_in_train: bool = True) -> None:
    """Raise :class:`DataPrepError` unless the test questions (the rows' prompt text) are distinct and
    none is a train question; with ``twins_in_train=False`` also unless none has the numbers of a train
    question in another order (:func:`operands`)."""
    test = [r["prompt"][0]["content"] for r in splits["test"]]
    train = {r["prompt"][0]["content"] for r in splits["train"]}
    if len(set(test)) < len(test):
        raise C.DataPrepError(f"test: {len(test) - len(set(test))} questions repeated")
    if shared := sorted(set(test) & train):
        raise C.DataPrepError(f"{len(shared)} test questions are also train questions, e.g. {shared[0]!r}")
    if not twins_in_train:
        train_operands = {operands(q) for q in train}
        if twins := [q for q in test if operands(q) in train_operands]:
            raise C.DataPrepError(f"{len(twins)} test questions have a twin in train, e.g. {twins[0]!r}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", choices=sorted(TASKS), default="add1")
    p.add_argument("--n-train", type=int, default=4096, help="train rows (questions may repeat)")
    p.add_argument("--n-test", type=int, default=50, help="distinct held-out questions")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--no-twins-in-train",
        dest="twins_in_train",
        action="store_false",
        help="keep the test questions' twins (the same numbers in another order) out of train too: a stricter "
        "held-out set, fewer distinct train questions (add1 with 50 test questions keeps 27 of its 100)",
    )
    p.add_argument("--output-dir", default=None, help="default ~/data/arith_<task>")
    args = p.parse_args(argv)
    out_dir = os.path.expanduser(args.output_dir or f"~/data/arith_{args.task}")
    try:
        C.check_output_dir(out_dir, ["train", "test"])
        splits = make_splits(args.task, args.n_train, args.n_test, args.seed, twins_in_train=args.twins_in_train)
    except C.DataPrepError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return C.write_tables(out_dir, splits)


if __name__ == "__main__":
    sys.exit(main())
