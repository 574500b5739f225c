"""The learning runs' data (``benchmarks/learning.py``'s task): held-out set disjoint from train and
pinned, so a change of ``data_prep/arithmetic.py`` or of Python's ``random`` that would change the runs'
questions shows here."""

from __future__ import annotations

import hashlib
import importlib.util
import re
import sys
from pathlib import Path

import learning

REPO = Path(__file__).resolve().parents[2]
LEARNING_DATA = dict(task=learning.DEFAULT_TASK, n_train=learning.TASK_N_TRAIN, n_test=learning.TASK_N_TEST,
                     seed=learning.TASK_SEED, twins_in_train=False)  # fmt: skip
PINNED_FIRST_TEST_QUESTION = "Which number is the largest: 59, 63, 15, 43? Answer with just the number."
PINNED_TEST_DIGEST = "fa1d844597b7817f"  # sha256 of the 500 test questions, one a line


def _arithmetic():
    spec = importlib.util.spec_from_file_location("_lab_data_prep_arithmetic", REPO / "data_prep" / "arithmetic.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def _question(row):
    return row["prompt"][0]["content"]


def _operands(row):
    return tuple(sorted(int(x) for x in re.findall(r"\d+", _question(row))))


def test_learning_data_is_disjoint_and_deterministic():
    """500 distinct held-out questions, none of them (nor a reordering of its numbers) a train question,
    checked here independently of ``check_disjoint``; the same arguments give the same rows (pinned),
    another seed other rows."""
    arithmetic = _arithmetic()
    splits = arithmetic.make_splits(**LEARNING_DATA)
    train, test = splits["train"], splits["test"]
    assert len(train) == 8192 and len({_question(r) for r in test}) == len(test) == 500
    assert not {_question(r) for r in test} & {_question(r) for r in train}
    assert not {_operands(r) for r in test} & {_operands(r) for r in train}
    assert arithmetic.make_splits(**LEARNING_DATA) == splits
    digest = hashlib.sha256("\n".join(map(_question, test)).encode()).hexdigest()[:16]
    assert (_question(test[0]), digest) == (PINNED_FIRST_TEST_QUESTION, PINNED_TEST_DIGEST)
    other = arithmetic.make_splits(**{**LEARNING_DATA, "seed": 1, "n_train": 10})["test"]
    assert [_question(r) for r in other] != [_question(r) for r in test]
