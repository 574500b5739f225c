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


def test_the_committed_add1_runs_data_has_the_limits_the_notebook_states():
    """Moved from tests/test_data_prep.py (a lab fact, not a product property): the small-scale learning runs' data
    (add1, 8192 train, 50 test, seed 0, twins kept), whose limits the results notebook states: 23 test questions have
    their commuted twin in train, train holds the other 50 questions, and a response that only repeats the question
    earned the committed runs' last-integer reward (no ``extra_info``) on 1159 train rows and 3 test questions."""
    from verl_offgrpo.rewards import compute_score

    splits = _arithmetic().make_splits(task="add1", n_train=8192, n_test=50, seed=0, twins_in_train=True)
    train, test = splits["train"], splits["test"]

    def echo_scores(row):
        return compute_score(row["data_source"], _question(row), row["reward_model"]["ground_truth"])

    assert len({_question(r) for r in train}) == 50
    assert sum(_operands(r) in {_operands(t) for t in train} for r in test) == 23
    assert (sum(map(echo_scores, train)), sum(map(echo_scores, test))) == (1159, 3)
