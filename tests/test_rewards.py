"""verl_offgrpo.rewards: GSM8K via verl's scorer, math sets via math-verify, timeouts, verl loading.

Real answers come from the shared data (<repo>/../shared/data, or $VERL_OFFGRPO_TEST_DATA: the ``shared_data``
fixture of conftest.py), run through data_prep first so the ground truths are exactly what training sees; the
tests that read it skip, saying why, without it.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from verl_offgrpo.rewards import compute_score
from verl_offgrpo.rewards import _worker
from verl_offgrpo.rewards.math_verify_reward import answer_region, verify_with_alarm

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures"
PATHOLOGICAL = "\\boxed{9^{9^{9^{9}}}}"  # sympy tries to evaluate the tower: never finishes


def prepared(tmp_path_factory, name: str, local_dir: Path, split: str = "test") -> list[dict]:
    out = tmp_path_factory.mktemp(name)
    res = subprocess.run(
        [sys.executable, str(REPO / "data_prep" / f"{name}.py"), "--local-dir", str(local_dir), "--output-dir", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    return pq.read_table(out / f"{split}.parquet").to_pylist()


@pytest.fixture(scope="module")
def gsm8k_test(tmp_path_factory, shared_data):
    return prepared(tmp_path_factory, "gsm8k", shared_data / "gsm8k")


@pytest.fixture(scope="module")
def math500(tmp_path_factory, shared_data):
    return {r["extra_info"]["unique_id"]: r for r in prepared(tmp_path_factory, "math500", shared_data / "math500")}


@pytest.fixture(scope="module")
def aime24(tmp_path_factory, shared_data):
    return {r["extra_info"]["id"]: r for r in prepared(tmp_path_factory, "aime24", shared_data / "aime24")}


def score(row: dict, response: str, **kw) -> float:
    return compute_score(row["data_source"], response, row["reward_model"]["ground_truth"], row["extra_info"], **kw)


# ---------------------------------------------------------------- GSM8K (verl's strict scorer)


def test_gsm8k_every_reference_solution_scores_one(gsm8k_test):
    """The gold worked solution (ending in '#### n') is a perfect response for all 1319 items."""
    assert len(gsm8k_test) == 1319
    scores = [score(r, r["extra_info"]["answer"]) for r in gsm8k_test]
    assert scores == [1.0] * 1319


def test_gsm8k_correct_wrong_and_format(gsm8k_test):
    janet = gsm8k_test[0]  # ground truth 18
    assert score(janet, "16 - 3 - 4 = 9 eggs, 9 * 2 = 18.\n#### 18") == 1.0
    assert score(janet, "#### 17") == 0.0
    assert score(janet, "The answer is 18.") == 0.0  # strict: the '#### ' marker is required
    assert score(janet, "#### $18") == 0.0  # verl's strict regex wants the number right after '#### '
    assert score(janet, "#### 9\nwait, no.\n#### 18") == 1.0  # the last marker counts
    big = next(r for r in gsm8k_test if r["extra_info"]["answer"].endswith("#### 114,200"))
    assert big["reward_model"]["ground_truth"] == "114200"
    assert score(big, "#### 114,200") == 1.0
    assert score(big, "#### 114200") == 1.0
    assert score(big, "#### 114,000") == 0.0
    assert isinstance(score(big, "#### 114200"), float)


# ---------------------------------------------------------------- MATH-500 / AIME24 / DeepScaleR (math-verify)


def test_math500_every_reference_solution_scores_one(math500):
    """Each of the 500 reference solutions (LaTeX, \\boxed{answer} inside) scores 1.0."""
    assert len(math500) == 500
    assert [score(r, r["extra_info"]["solution"]) for r in math500.values()] == [1.0] * 500


def test_math500_equal_values_written_differently(math500):
    half = math500["test/counting_and_probability/282.json"]
    assert half["reward_model"]["ground_truth"] == "\\frac{1}{2}"
    for response in ("$\\boxed{\\frac{1}{2}}$", "\\boxed{0.5}", "\\boxed{\\dfrac12}", "\\boxed{1/2}", "so $\\boxed{.5}$"):
        assert score(half, response) == 1.0, response
    assert score(half, "\\boxed{\\frac{1}{3}}") == 0.0
    assert score(half, "\\boxed{0.51}") == 0.0
    fourteen_thirds = next(r for r in math500.values() if r["reward_model"]["ground_truth"] == "\\frac{14}{3}")
    assert score(fourteen_thirds, "\\boxed{4\\frac{2}{3}}") == 1.0
    assert score(fourteen_thirds, "\\boxed{4.6667}") == 0.0  # rounded decimals are not equal
    polar = math500["test/precalculus/807.json"]  # (3, pi/2)
    assert score(polar, "$\\boxed{(3, \\frac{\\pi}{2})}$") == 1.0
    assert score(polar, "$\\boxed{(3, \\pi)}$") == 0.0
    root = next(r for r in math500.values() if r["reward_model"]["ground_truth"] == "3\\sqrt{13}")
    assert score(root, "\\boxed{\\sqrt{117}}") == 1.0
    assert score(root, "\\boxed{2\\sqrt{13}}") == 0.0


def test_aime24_every_reference_answer_and_leading_zeros(aime24, shared_data):
    """All 30 answers as written in the file (three digits, '025') score 1.0 against ints."""
    raw = [json.loads(line) for line in (shared_data / "aime24" / "test.jsonl").read_text().splitlines()]
    assert [score(aime24[r["id"]], f"The answer is $\\boxed{{{r['answer']}}}$.") for r in raw] == [1.0] * 30
    row = aime24[67]  # answer "025"
    assert score(row, "\\boxed{025}") == 1.0
    assert score(row, "\\boxed{25}") == 1.0
    assert score(row, "\\boxed{26}") == 0.0
    assert score(row, "no boxed answer and no number") == 0.0


def test_aime24_every_reference_solution_scores_one_and_numbers_in_text_commands(aime24, shared_data):
    """All 30 worked solutions of the file score 1.0 (id 75 ends in \\boxed{\\textbf{(073)}}, which math-verify alone
    reads as a symbol named 073); a number in \\text{} or \\mathrm{} is unwrapped, other text is not."""
    raw = [json.loads(line) for line in (shared_data / "aime24" / "test.jsonl").read_text().splitlines()]
    assert [score(aime24[r["id"]], r["solution"]) for r in raw] == [1.0] * 30
    row = aime24[67]  # answer "025"
    assert score(row, "\\boxed{\\text{025}}") == score(row, "\\boxed{\\mathrm{ 25 }}") == 1.0
    assert score(row, "\\boxed{\\textbf{26}}") == 0.0
    from verl_offgrpo.rewards.math_verify_reward import unwrap_text_numbers

    assert (unwrap_text_numbers("\\boxed{\\textbf{(073)}}; \\mathrm{2.5}; \\text{(A)}; \\text{ cm}; \\text{(1}")
            == "\\boxed{073}; 2.5; \\text{(A)}; \\text{ cm}; \\text{(1}")
    # next to a digit it stays: unwrapped, 10\\text{ (1)} would read as 101 and 1\\text{2} as 12
    assert unwrap_text_numbers("\\boxed{10\\text{ (1)}} \\boxed{1\\text{2}} \\boxed{\\text{3} 4}") == (
        "\\boxed{10\\text{ (1)}} \\boxed{1\\text{2}} \\boxed{\\text{3} 4}")
    assert score(aime24[67], "\\boxed{02\\text{5}}") == 0.0


def test_r1_style_response_scores_the_text_after_think(aime24):
    row = aime24[67]
    assert score(row, "<think>maybe \\boxed{24}? no.</think>\nThe answer is $\\boxed{25}$.") == 1.0
    assert score(row, "<think>it is \\boxed{25}</think>\nThe answer is $\\boxed{24}$.") == 0.0
    assert answer_region("a</think>b</think>c") == "c"
    assert answer_region("no think tags") == "no think tags"


@pytest.mark.parametrize("response", [
    "<think>\nSo the final answer is 204. Hmm, let me double-check with s = 3: then t = 36",  # cut in its reasoning
    "<think>\nMaybe \\boxed{204}? Wait, let me recheck: s = 3, t = 36",
    "<think>a</think>\\boxed{7}<think>\nso the final answer is 204",  # a second block, never closed
    "</think>\\boxed{204",  # the final box cut before its brace closes
    "</think>The answer is \\boxed{\\frac{204}{1}",
])
def test_an_answer_cut_off_by_the_length_cap_scores_zero(response):
    """A response that hit the length cap inside its reasoning or inside its final box holds no answer, though an
    answer appears in it (DeepScaleR's reward gives such a response 0 too): 0.0, from any thread."""
    assert compute_score("aime24", response, "204") == 0.0
    with ThreadPoolExecutor(1) as ex:
        assert ex.submit(compute_score, "aime24", response, "204").result() == 0.0


@pytest.mark.parametrize("answer, truth, score", [
    ("\\boxed{10\\,080}", "10,\\!080", 1.0),  # MATH-500's own spelling of the truth; a thin space in the answer
    ("\\boxed{\\$32\\,348}", "32,\\!348", 1.0),
    ("\\boxed{11\\,111\\,111\\,100}", "11,\\!111,\\!111,\\!100", 1.0),
    ("\\boxed{10\\,08}", "10,\\!080", 0.0),  # no group of three: not one number
    ("\\boxed{3\\,x}", "3x", 1.0),  # a thin space that is no digit group is left as it is
])
def test_thin_spaces_between_digit_groups_join_one_number(answer, truth, score):
    """``10\\,080`` (LaTeX's thin-space thousands separator) was read as 10 and 080: scored 0 against 10,080."""
    assert compute_score("math500", answer, truth) == score


def test_require_think_end_for_templates_that_open_think_in_the_prompt():
    """DeepSeek-R1-Distill's chat template opens ``<think>`` in the prompt: its response has ``</think>`` only, and
    one cut off has neither. With ``require_think_end`` (the DeepScaleR recipes, through verl's reward_kwargs) that
    scores 0.0; without it the whole text is the answer region (models that do not think); a finished answer and a
    closed box nested in braces score 1.0 either way."""
    from omegaconf import OmegaConf
    from verl.trainer.ppo.reward import get_custom_reward_fn

    cut = "So the final answer is \\boxed{204}. Wait, s = 3"
    done = "s = 3 works.</think>The answer is \\boxed{\\frac{408}{2}}."
    assert compute_score("aime24", cut, "204") == 1.0
    assert compute_score("aime24", cut, "204", require_think_end=True) == 0.0
    assert compute_score("aime24", done, "204", require_think_end=True) == 1.0
    cfg = OmegaConf.create({"reward": {"custom_reward_function": {
        "path": "pkg://verl_offgrpo.rewards", "name": "compute_score", "reward_kwargs": {"require_think_end": True}}}})
    fn = get_custom_reward_fn(cfg)
    assert fn(data_source="aime24", solution_str=cut, ground_truth="204", extra_info={}) == 0.0
    assert fn(data_source="aime24", solution_str=done, ground_truth="204", extra_info={}) == 1.0


def test_the_deepscaler_recipes_require_think_end():
    text = (Path(__file__).resolve().parents[1] / "recipes" / "_common.sh").read_text()
    task = text[text.index("deepscaler_task()"):]
    assert "+reward.custom_reward_function.reward_kwargs.require_think_end=true" in task[:task.index("\n}")]


def test_deepscaler_fixture_answers(tmp_path_factory):
    rows = prepared(tmp_path_factory, "deepscaler", FIXTURES / "deepscaler", split="train")
    assert [score(r, r["extra_info"]["solution"]) for r in rows] == [1.0] * 5
    assert score(rows[0], "\\boxed{0.5}") == 1.0
    assert score(rows[2], "\\boxed{\\sqrt{50}}") == 1.0
    assert score(rows[4], "\\boxed{-1.5}") == 1.0
    assert score(rows[4], "\\boxed{1.5}") == 0.0


def test_hub_ids_route_to_math_verify_and_others_to_verl():
    assert compute_score("HuggingFaceH4/MATH-500", "\\boxed{0.5}", "\\frac{1}{2}") == 1.0
    assert compute_score("agentica-org/DeepScaleR-Preview-Dataset", "\\boxed{0.5}", "\\frac{1}{2}") == 1.0
    # not ours: verl's default_compute_score (lighteval/MATH -> verl's math_reward)
    assert compute_score("lighteval/MATH", "so \\boxed{2}", "2") == 1.0
    with pytest.raises(NotImplementedError):
        compute_score("no_such_dataset", "x", "y")


@pytest.mark.parametrize(
    "args, message",
    [
        ((None, "#### 72", "72"), r"data_source must be a non-empty string \(got None\)"),
        (("", "#### 72", "72"), r"data_source must be a non-empty string \(got ''\)"),
        (("openai/gsm8k", None, "72"), r"solution_str must be the decoded response, a string \(got NoneType\)"),
        (("math500", None, "5"), "solution_str must be"),
        (("arithmetic/add1", b"12", "12"), r"a string \(got bytes\)"),
        (("aime24", "\\boxed{25}", None), "ground_truth is None for data_source 'aime24'"),
    ],
)
def test_bad_input_is_one_clear_line(args, message):
    """A broken row or caller: a one-line ValueError naming the argument (was: a TypeError deep in a
    scorer, or verl's "not implemented" for data_source None, or "None" compared as an answer)."""
    with pytest.raises(ValueError, match=message) as err:
        compute_score(*args)
    assert "\n" not in str(err.value)


# ---------------------------------------------------------------- threads and timeouts


def test_reward_threads_give_the_same_scores():
    """verl calls the reward from executor threads: those go through the helper processes."""
    cases = [("math500", "\\boxed{0.5}", "\\frac{1}{2}", 1.0), ("aime24", "\\boxed{025}", "25", 1.0),
             ("aime24", "\\boxed{24}", "25", 0.0), ("openai/gsm8k", "#### 72", "72", 1.0),
             ("deepscaler", "<think>x</think> \\boxed{5\\sqrt{2}}", "\\sqrt{50}", 1.0)] * 3
    with ThreadPoolExecutor(4) as ex:
        got = list(ex.map(lambda c: compute_score(c[0], c[1], c[2]), cases))
    assert got == [c[3] for c in cases]


def test_timeout_in_main_thread():
    start = time.monotonic()
    assert compute_score("math500", PATHOLOGICAL, "5", timeout=1.0) == 0.0
    assert time.monotonic() - start < 3.0
    assert compute_score("math500", "\\boxed{5}", "5") == 1.0  # and the next check works


def test_timeout_in_worker_thread():
    start = time.monotonic()
    with ThreadPoolExecutor(1) as ex:
        got = ex.submit(compute_score, "math500", PATHOLOGICAL, "5", None, 1.0).result()
    assert got == 0.0
    assert time.monotonic() - start < 1.0 + _worker.TIMEOUT_GRACE_S + 30  # + helper start-up
    with ThreadPoolExecutor(1) as ex:
        assert ex.submit(compute_score, "math500", "\\boxed{5}", "5").result() == 1.0


def test_helper_that_does_not_answer_is_killed():
    pool = _worker.WorkerPool(1)
    try:
        assert pool.call({"op": "sleep", "seconds": 0}, timeout=60) == {"slept": 0}
        helper = pool._idle.queue[0]
        start = time.monotonic()
        with pytest.raises(TimeoutError):
            pool.call({"op": "sleep", "seconds": 60}, timeout=0.5)
        assert time.monotonic() - start < 5.0
        assert helper.proc.poll() is not None  # killed
        assert pool.call({"op": "sleep", "seconds": 0}, timeout=60) == {"slept": 0}  # a fresh helper
        assert pool.call({"op": "nope"}, timeout=60) == {"error": "unknown op 'nope'"}
    finally:
        pool.close()


def test_helper_that_died_while_idle_is_replaced():
    """A helper killed between requests (e.g. by the OOM killer) is dropped, not written to (BrokenPipeError)."""
    pool = _worker.WorkerPool(1)
    try:
        assert pool.call({"op": "sleep", "seconds": 0}, timeout=60) == {"slept": 0}
        dead = pool._idle.queue[0]
        dead.proc.kill()
        dead.proc.wait()
        assert pool.call({"op": "sleep", "seconds": 0}, timeout=60) == {"slept": 0}
        assert pool._idle.queue[0] is not dead
    finally:
        pool.close()


def test_helper_that_dies_mid_check_scores_zero(monkeypatch):
    """A helper that dies during a check: that response scores 0.0 at once (it raised out of the reward
    thread before), and the next check gets a fresh helper."""
    pool = _worker.WorkerPool(1)
    monkeypatch.setattr(_worker, "_pool", pool)
    try:
        assert pool.call({"op": "sleep", "seconds": 0}, timeout=60) == {"slept": 0}
        helper = pool._idle.queue[0]
        with ThreadPoolExecutor(1) as ex:
            pending = ex.submit(compute_score, "math500", PATHOLOGICAL, "5", None, 60.0)
            while pool._idle.qsize():  # the thread took the helper
                time.sleep(0.01)
            time.sleep(0.5)
            start = time.monotonic()
            helper.proc.kill()
            assert pending.result(timeout=30) == 0.0
            assert time.monotonic() - start < 10
            assert ex.submit(compute_score, "math500", "\\boxed{5}", "5").result() == 1.0
    finally:
        pool.close()


def test_helper_that_cannot_start_fails_loudly(monkeypatch):
    """No helper can start (here: a python that exits at once): the reward raises instead of scoring
    every response 0, which would train on a constant reward without a word."""
    monkeypatch.setattr(_worker.sys, "executable", "/bin/false")
    pool = _worker.WorkerPool(1)
    monkeypatch.setattr(_worker, "_pool", pool)
    with ThreadPoolExecutor(1) as ex, pytest.raises(_worker.HelperStartError, match="failed to start"):
        ex.submit(compute_score, "math500", "\\boxed{5}", "5").result()


@pytest.mark.parametrize("written", ["abc", "2.5", "0", "-1", ""])
def test_a_bad_pool_size_is_loud_not_a_zero_reward_or_a_hang(monkeypatch, written):
    """``VERL_OFFGRPO_REWARD_WORKERS`` not an integer >= 1: every check raises HelperStartError naming it (it scored
    every response 0.0, or with 0 waited for a helper slot forever)."""
    monkeypatch.setenv(_worker.POOL_SIZE_ENV, written)
    monkeypatch.setattr(_worker, "_pool", None)
    with ThreadPoolExecutor(1) as ex, pytest.raises(_worker.HelperStartError, match=f"^{_worker.POOL_SIZE_ENV}="):
        ex.submit(compute_score, "math500", "\\boxed{5}", "5").result(timeout=30)
    monkeypatch.setenv(_worker.POOL_SIZE_ENV, " 2 ")
    assert _worker.pool_size() == 2


def test_alarm_restores_a_running_timer():
    signal.setitimer(signal.ITIMER_REAL, 100.0)
    try:
        assert verify_with_alarm("\\boxed{5}", "5", 2.0) == 1.0
        left, _ = signal.getitimer(signal.ITIMER_REAL)
        assert 90.0 < left <= 100.0
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


# ---------------------------------------------------------------- loading through verl's config


def test_loads_through_verl_custom_reward_function():
    from omegaconf import OmegaConf
    from verl.trainer.ppo.reward import get_custom_reward_fn

    cfg = OmegaConf.create(
        {"reward": {"custom_reward_function": {"path": "pkg://verl_offgrpo.rewards", "name": "compute_score",
                                               "reward_kwargs": {"timeout": 5.0}}}}
    )
    fn = get_custom_reward_fn(cfg)
    assert fn(data_source="aime24", solution_str="\\boxed{025}", ground_truth="25", extra_info={"num_turns": None}) == 1.0
    assert fn(data_source="openai/gsm8k", solution_str="#### 7", ground_truth="8", extra_info={}) == 0.0


@pytest.mark.parametrize(
    "response, truth, score",
    [
        ("12", "12", 1.0),
        ("7 + 5 equals 12.", "12", 1.0),  # the last integer is the answer
        ("The answer is 12, not 13", "12", 0.0),
        ("I think 13. Actually 12", "12", 1.0),
        ("The larger number is 63.", "63", 1.0),
        ("-4", "-4", 1.0),
        ("1,234 apples", "1234", 1.0),
        ("12.5", "12", 0.0),  # the last number is not whole
        ("7 + 5 = 12.0", "12", 1.0),  # a whole decimal is that integer (it was read as 12 and 0)
        ("The answer is 12.00.", "12", 1.0),
        ("The answer is \u22123.", "-3", 1.0),  # the Unicode minus (its sign was dropped: 3)
        ("1.2.3", "3", 1.0),  # no number has two decimal points: 1.2, then 3
        ("twelve", "12", 0.0),
        ("", "12", 0.0),
        ("12", "abc", 0.0),  # a ground truth that is no integer scores nothing
    ],
)
def test_arithmetic_last_integer_reward(response, truth, score):
    assert compute_score("arithmetic/add1", response, truth) == score


@pytest.mark.parametrize(
    "question, response, truth, score",
    [
        ("What is 0 + 8? Answer with just the number.", "What is 0 + 8?", "8", 0.0),  # an echo ends in the answer
        ("What is 0 + 8? Answer with just the number.", "0 +\n 8", "8", 0.0),  # whitespace runs read as one space
        ("What is 0 + 8? Answer with just the number.", "0 + 8 = 8", "8", 1.0),  # restated, then answered
        ("What is 0 + 8? Answer with just the number.", "8 + 0 = 8", "8", 1.0),
        ("What is 0 + 8? Answer with just the number.", "What is 0 + 8? 8", "8", 1.0),
        ("What is 1 + 8? Answer with just the number.", "11 + 8", "19", 0.0),  # wrong, and no copy of "1 + 8"
        ("What is 1 + 8? Answer with just the number.", "It is 11 + 8", "8", 1.0),  # "1 + 8" inside "11 + 8": no echo
        ("Which number is larger, 59 or 63? Answer with just the number.", "59 or 63", "63", 0.0),
        ("Which number is larger, 59 or 63? Answer with just the number.", "Of 59 or 63, 63.", "63", 1.0),
        ("Which number is larger, 59 or 63? Answer with just the number.", "The larger of 59 and 63", "63", 1.0),  # paraphrase: not caught
        ("Which number is the largest: 12, 87, 45, 60? Answer with just the number.", "12, 87, 45, 60", "60", 0.0),
        ("Which number is the largest: 12, 87, 45, 60? Answer with just the number.", "45, 60", "60", 1.0),  # a part is no echo
        # an echo cut by the length cap, wherever the cut lands (also on the largest)
        ("Which number is the largest: 12, 87, 45, 60? Answer with just the number.",
         "Which number is the largest: 12, 87", "87", 0.0),
        ("Which number is the largest: 12, 87, 45, 60? Answer with just the number.", "x\n12,  87, 45,", "45", 0.0),
        ("Which number is the largest: 87, 12, 45, 60? Answer with just the number.", "The largest is 87.", "87", 1.0),
        ("Which number is the largest: 12, 87, 45, 60? Answer with just the number.", "Of 12, 87, 45, 60: 87", "87", 1.0),
        ("What is 7? Answer with just the number.", "7", "7", 1.0),  # one number: nothing to echo
    ],
)
def test_arithmetic_reward_scores_an_echo_of_the_question_zero(question, response, truth, score):
    """The row's ``extra_info["question"]`` (written by data_prep/arithmetic.py) is what verl passes."""
    assert compute_score("arithmetic/larger2", response, truth, {"question": question}) == score
    # without the question (data prepared elsewhere) the last integer alone decides
    from verl_offgrpo.rewards.last_integer import last_integer

    assert compute_score("arithmetic/larger2", response, truth) == float(last_integer(response) == int(truth))


def test_echo_check_goes_through_verls_custom_reward_function():
    from omegaconf import OmegaConf
    from verl.trainer.ppo.reward import get_custom_reward_fn

    cfg = OmegaConf.create({"reward": {"custom_reward_function": {"path": "pkg://verl_offgrpo.rewards", "name": "compute_score"}}})
    fn = get_custom_reward_fn(cfg)
    question = "Which number is larger, 59 or 63? Answer with just the number."
    kwargs = {"data_source": "arithmetic/larger2", "ground_truth": "63", "extra_info": {"question": question, "num_turns": None}}
    assert fn(solution_str="59 or 63", **kwargs) == 0.0
    assert fn(solution_str="63", **kwargs) == 1.0


def test_pool_and_checker_do_not_import_each_other():
    """math_verify_reward uses the helper pool; the helper's main module, not the pool, imports the checker."""
    root = Path(__file__).resolve().parents[1] / "verl_offgrpo" / "rewards"
    assert "math_verify_reward" not in (root / "_worker.py").read_text()
    with ThreadPoolExecutor(1) as ex:  # a helper started from the new main module still scores
        assert ex.submit(compute_score, "math500", "\\boxed{0.5}", "\\frac{1}{2}").result() == 1.0
