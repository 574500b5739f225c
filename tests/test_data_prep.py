"""data_prep/*.py: offline runs on the shared data, schema, and bad-input errors.

Shared data: <repo>/../shared/data (see its README.md for the fields), or $VERL_OFFGRPO_TEST_DATA: the
``shared_data`` fixture (conftest.py); the tests that read it skip, saying why, without it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import types
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures"
GSM8K_INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'
BOXED_INSTRUCTION = "Let's think step by step and output the final answer within \\boxed{}."

ROW_SCHEMA_FIELDS = {
    "data_source": pa.string(),
    "prompt": pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())])),
    "ability": pa.string(),
    "reward_model": pa.struct([("style", pa.string()), ("ground_truth", pa.string())]),
}


def run_script(name: str, *args: str) -> subprocess.CompletedProcess:
    """``python data_prep/<name>.py args`` in a fresh interpreter (``--help``, the bad inputs, whose stderr must
    be the script's line alone, and one arithmetic run as a script)."""
    return subprocess.run(
        [sys.executable, str(REPO / "data_prep" / f"{name}.py"), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def run_script_here(name: str, *args: str) -> subprocess.CompletedProcess:
    """:func:`run_script` in this process (``_in_process``: ``runpy`` as ``__main__``, the same argv, stdout,
    stderr and exit code), for the runs that write data: a fresh interpreter spent ~0.8 s of each on
    importing pyarrow and pandas."""
    from _in_process import run_main

    return run_main([str(REPO / "data_prep" / f"{name}.py"), *args])


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def load_rows(path: Path) -> tuple[pa.Schema, list[dict]]:
    table = pq.read_table(path)
    return table.schema, table.to_pylist()


def check_schema(schema: pa.Schema, extra_fields: set[str]) -> None:
    assert schema.names == ["data_source", "prompt", "ability", "reward_model", "extra_info"]
    for name, typ in ROW_SCHEMA_FIELDS.items():
        assert schema.field(name).type == typ, name
    extra = schema.field("extra_info").type
    assert {extra.field(i).name for i in range(extra.num_fields)} == {"split", "index"} | extra_fields
    assert extra.field("index").type == pa.int64()


def check_common(rows: list[dict], data_source: str, split: str, instruction: str) -> None:
    assert [r["extra_info"]["index"] for r in rows] == list(range(len(rows)))
    assert {r["extra_info"]["split"] for r in rows} == {split}
    assert {r["data_source"] for r in rows} == {data_source}
    assert {r["ability"] for r in rows} == {"math"}
    assert {r["reward_model"]["style"] for r in rows} == {"rule"}
    for r in rows:
        assert len(r["prompt"]) == 1 and r["prompt"][0]["role"] == "user"
        assert r["prompt"][0]["content"] == r["extra_info"]["question"] + " " + instruction


def test_gsm8k_offline(tmp_path, shared_data):
    res = run_script_here("gsm8k", "--local-dir", str(shared_data / "gsm8k"), "--output-dir", str(tmp_path))
    assert res.returncode == 0, res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["test.parquet", "train.parquet"]
    for split, count in (("train", 7473), ("test", 1319)):
        schema, rows = load_rows(tmp_path / f"{split}.parquet")
        assert len(rows) == count
        check_schema(schema, {"question", "answer"})
        check_common(rows, "openai/gsm8k", split, GSM8K_INSTRUCTION)
        raw = read_jsonl(shared_data / "gsm8k" / f"{split}.jsonl")
        for r, src in zip(rows, raw):
            assert r["extra_info"]["question"] == src["question"]
            assert r["extra_info"]["answer"] == src["answer"]
            last = src["answer"].splitlines()[-1]
            assert r["reward_model"]["ground_truth"] == last.removeprefix("#### ").replace(",", "")
            assert re.fullmatch(r"-?\d+(\.\d+)?", r["reward_model"]["ground_truth"])
    _, test_rows = load_rows(tmp_path / "test.parquet")
    assert test_rows[0]["reward_model"]["ground_truth"] == "18"
    assert test_rows[0]["prompt"][0]["content"].startswith("Janet’s ducks lay 16 eggs per day.")
    with_comma = [r for r in test_rows if "," in r["extra_info"]["answer"].splitlines()[-1]]
    assert len(with_comma) == 14  # e.g. "#### 1,000" -> "1000"
    assert all("," not in r["reward_model"]["ground_truth"] for r in with_comma)
    assert "wrote 7473 rows" in res.stdout and "wrote 1319 rows" in res.stdout


def test_math500_offline(tmp_path, shared_data):
    res = run_script_here("math500", "--local-dir", str(shared_data / "math500"), "--output-dir", str(tmp_path))
    assert res.returncode == 0, res.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["test.parquet"]
    schema, rows = load_rows(tmp_path / "test.parquet")
    assert len(rows) == 500
    check_schema(schema, {"question", "solution", "subject", "level", "unique_id"})
    check_common(rows, "math500", "test", BOXED_INSTRUCTION)
    raw = read_jsonl(shared_data / "math500" / "test.jsonl")
    assert [r["reward_model"]["ground_truth"] for r in rows] == [s["answer"] for s in raw]
    assert rows[0]["reward_model"]["ground_truth"] == "\\left( 3, \\frac{\\pi}{2} \\right)"
    assert rows[0]["extra_info"]["subject"] == "Precalculus" and rows[0]["extra_info"]["level"] == 2
    assert sum(r["extra_info"]["subject"] == "Algebra" for r in rows) == 124


def test_aime24_offline(tmp_path, shared_data):
    res = run_script_here("aime24", "--local-dir", str(shared_data / "aime24"), "--output-dir", str(tmp_path))
    assert res.returncode == 0, res.stderr
    schema, rows = load_rows(tmp_path / "test.parquet")
    assert len(rows) == 30
    check_schema(schema, {"question", "answer", "id", "url"})
    check_common(rows, "aime24", "test", BOXED_INSTRUCTION)
    raw = read_jsonl(shared_data / "aime24" / "test.jsonl")
    assert [r["reward_model"]["ground_truth"] for r in rows] == [str(int(s["answer"])) for s in raw]
    by_id = {r["extra_info"]["id"]: r for r in rows}
    assert by_id[67]["reward_model"]["ground_truth"] == "25"  # "025" in the file
    assert by_id[67]["extra_info"]["answer"] == "025"
    assert by_id[60]["reward_model"]["ground_truth"] == "204"


def test_deepscaler_fixture(tmp_path):
    res = run_script_here("deepscaler", "--local-dir", str(FIXTURES / "deepscaler"), "--output-dir", str(tmp_path))
    assert res.returncode == 0, res.stderr
    schema, rows = load_rows(tmp_path / "train.parquet")
    check_schema(schema, {"question", "solution"})
    check_common(rows, "deepscaler", "train", BOXED_INSTRUCTION)
    assert [r["reward_model"]["ground_truth"] for r in rows] == ["\\frac{1}{2}", "12", "5\\sqrt{2}", "8", "-\\frac{3}{2}"]
    assert rows[1] == {
        "data_source": "deepscaler",
        "prompt": [{"role": "user", "content": "Find the positive integer $n$ with $n^2 = 144$. " + BOXED_INSTRUCTION}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": "12"},
        "extra_info": {
            "split": "train",
            "index": 1,
            "question": "Find the positive integer $n$ with $n^2 = 144$.",
            "solution": "Since $12^2=144$, $n=\\boxed{12}$.",
        },
    }


@pytest.mark.parametrize(
    "name, files",
    [
        ("gsm8k", ["train.jsonl", "test.jsonl"]),
        ("math500", ["test.jsonl"]),
        ("aime24", ["test.jsonl"]),
        ("deepscaler", ["train.jsonl"]),
    ],
)
def test_help_documents_cli(name, files):
    res = run_script(name, "--help")
    assert res.returncode == 0
    out = " ".join(res.stdout.split())
    assert "--local-dir DIR" in out and "--output-dir DIR" in out
    for f in files:
        assert f"<DIR>/{f}" in out


GOOD_GSM8K = {"question": "What is 2+2?", "answer": "2+2=<<2+2=4>>4\n#### 4"}
GOOD_MATH = {"problem": "p", "answer": "1", "solution": "s", "subject": "Algebra", "level": 1, "unique_id": "u"}


def _lines(*objs) -> str:
    return "".join((o if isinstance(o, str) else json.dumps(o)) + "\n" for o in objs)


BAD_INPUTS = [
    # (script, file, content, line, message)
    ("gsm8k", "train.jsonl", _lines(GOOD_GSM8K, {"question": "q"}), 2, "missing field 'answer'"),
    ("gsm8k", "train.jsonl", _lines(GOOD_GSM8K, GOOD_GSM8K, '{"question": "q", "answer": '), 3, "invalid JSON"),
    ("gsm8k", "train.jsonl", _lines(GOOD_GSM8K, {"question": "q", "answer": "so the answer is 4"}), 2, "cannot parse the final answer"),
    ("gsm8k", "train.jsonl", _lines(GOOD_GSM8K, {"question": "q", "answer": "x\n#### four"}), 2, "cannot parse the final answer"),
    ("gsm8k", "train.jsonl", _lines(GOOD_GSM8K, "", "[1, 2]"), 3, "expected a JSON object"),
    ("gsm8k", "test.jsonl", _lines({"question": "", "answer": "#### 1"}), 1, "field 'question' is empty"),
    ("math500", "test.jsonl", _lines(GOOD_MATH, dict(GOOD_MATH, level="1")), 2, "field 'level' has type str"),
    ("aime24", "test.jsonl", _lines({"problem": "p", "answer": "12a"}), 1, "cannot parse the answer '12a'"),
    ("aime24", "test.jsonl", _lines({"problem": "p", "answer": "1000"}), 1, "outside 0-999"),
    ("deepscaler", "train.jsonl", _lines({"problem": "p", "solution": "s"}), 1, "missing field 'answer'"),
]


@pytest.mark.parametrize("name, bad_file, content, line, message", BAD_INPUTS)
def test_bad_input_names_file_and_line(tmp_path, name, bad_file, content, line, message):
    src, out = tmp_path / "src", tmp_path / "out"
    src.mkdir()
    if name == "gsm8k":  # the other split is valid: nothing at all may be written
        for f in ("train.jsonl", "test.jsonl"):
            (src / f).write_text(_lines(GOOD_GSM8K))
    (src / bad_file).write_text(content)
    res = run_script(name, "--local-dir", str(src), "--output-dir", str(out))
    assert res.returncode == 1
    assert f"error: {src / bad_file}:{line}: " in res.stderr
    assert message in res.stderr
    assert "Traceback" not in res.stderr
    assert not out.exists() or list(out.iterdir()) == []


@pytest.mark.parametrize("content", ["", "\n\n  \n"])
def test_empty_file(tmp_path, content):
    (tmp_path / "test.jsonl").write_text(content)
    out = tmp_path / "out"
    res = run_script("math500", "--local-dir", str(tmp_path), "--output-dir", str(out))
    assert res.returncode == 1
    assert f"error: {tmp_path / 'test.jsonl'}: empty file (no records)" in res.stderr
    assert not out.exists()


def test_missing_file_and_existing_output_untouched(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "train.parquet").write_text("old")
    (tmp_path / "train.jsonl").write_text(_lines(GOOD_GSM8K))  # test.jsonl is missing
    res = run_script("gsm8k", "--local-dir", str(tmp_path), "--output-dir", str(out))
    assert res.returncode == 1
    assert f"error: {tmp_path / 'test.jsonl'}: no such file" in res.stderr
    assert sorted(p.name for p in out.iterdir()) == ["train.parquet"]
    assert (out / "train.parquet").read_text() == "old"


def _load_script(name: str):
    spec = importlib.util.spec_from_file_location(f"_data_prep_{name}", REPO / "data_prep" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def test_write_failure_leaves_no_file(tmp_path, monkeypatch):
    common = _load_script("_common")
    import pyarrow.parquet as pq_mod

    calls = []

    def failing_write(table, where, *a, **k):
        calls.append(where)
        if len(calls) == 2:
            raise OSError("disk full")
        return real_write(table, where, *a, **k)

    real_write = pq_mod.write_table
    monkeypatch.setattr(pq_mod, "write_table", failing_write)
    row = common.make_row("s", "c", "1", "train", 0)
    with pytest.raises(OSError, match="disk full"):
        common.write_parquet_atomic({str(tmp_path / "train.parquet"): [row], str(tmp_path / "test.parquet"): [row]})
    assert len(calls) == 2
    assert list(tmp_path.iterdir()) == []


def test_hub_path_with_fake_datasets(tmp_path, monkeypatch):
    """Without --local-dir the script reads datasets.load_dataset(<hub id>, <config>, split=...)."""
    calls = []

    def load_dataset(path, name=None, split=None):
        calls.append((path, name, split))
        return [{"question": f"{split} q{i}", "answer": f"work\n#### {i},000"} for i in range(3)]

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    assert _load_script("gsm8k").main(["--output-dir", str(tmp_path)]) == 0
    assert calls == [("openai/gsm8k", "main", "train"), ("openai/gsm8k", "main", "test")]
    _, rows = load_rows(tmp_path / "test.parquet")
    assert [r["reward_model"]["ground_truth"] for r in rows] == ["0000", "1000", "2000"]
    assert rows[2]["extra_info"]["question"] == "test q2"


def test_an_unreachable_hub_is_one_line_that_points_to_local_dir(tmp_path, monkeypatch, capsys):
    def load_dataset(path, name=None, split=None):
        raise ConnectionError("Couldn't reach 'openai/gsm8k' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    assert _load_script("gsm8k").main(["--output-dir", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert err == ("error: openai/gsm8k [train]: cannot be read from the hub (ConnectionError: Couldn't reach "
                   "'openai/gsm8k' on the Hub (LocalEntryNotFoundError)); without a network pass the raw files with "
                   "--local-dir\n")
    assert not (tmp_path / "out").exists()


def test_hub_record_errors_name_split_and_row(tmp_path, monkeypatch, capsys):
    def load_dataset(path, name=None, split=None):
        return [{"problem": "p", "answer": "1", "solution": "s"}, {"problem": " ", "answer": "2", "solution": "s"}]

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    assert _load_script("deepscaler").main(["--output-dir", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert "error: agentica-org/DeepScaleR-Preview-Dataset [train] row 1: field 'problem' is empty" in err
    assert not (tmp_path / "out").exists()


def test_deepscaler_skips_records_without_an_answer_and_says_so(tmp_path, monkeypatch, capsys):
    """A hub row with an empty answer has nothing to score against: skipped and counted in one line, the rest written
    (one bad row of 40 000 no longer stops the whole preparation); a missing solution is kept as empty."""
    import pandas as pd

    def load_dataset(path, name=None, split=None):
        return [{"problem": "p0", "answer": "1", "solution": "s"}, {"problem": "p1", "answer": " ", "solution": "s"},
                {"problem": "p2", "answer": "3", "solution": None}, {"problem": "p3", "answer": None}][:rows]

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    rows = 4
    assert _load_script("deepscaler").main(["--output-dir", str(tmp_path / "out")]) == 0
    assert "note: [train]: skipped 2 of 4 records without an answer (rows 1, 3)" in capsys.readouterr().err
    rows = pd.read_parquet(tmp_path / "out" / "train.parquet")
    assert [r["ground_truth"] for r in rows["reward_model"]] == ["1", "3"]
    assert [e["solution"] for e in rows["extra_info"]] == ["s", ""]
    # a split all of whose records are skipped writes nothing and fails
    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(
        load_dataset=lambda path, name=None, split=None: [{"problem": "p", "answer": ""}]))
    assert _load_script("deepscaler").main(["--output-dir", str(tmp_path / "none")]) == 1
    assert "[train]: every one of its 1 records was skipped (no answer)" in capsys.readouterr().err
    assert not (tmp_path / "none").exists()


def test_offline_path_does_not_import_datasets(tmp_path):
    code = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('m', {str(REPO / 'data_prep' / 'deepscaler.py')!r})\n"
        "m = importlib.util.module_from_spec(spec); sys.modules['m'] = m; spec.loader.exec_module(m)\n"
        f"rc = m.main(['--local-dir', {str(FIXTURES / 'deepscaler')!r}, '--output-dir', {str(tmp_path)!r}])\n"
        "print(rc, 'datasets' in sys.modules)\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.stdout.splitlines()[-1] == "0 False", res.stderr


def test_runnable_as_module(tmp_path):
    res = subprocess.run(
        [sys.executable, "-m", "data_prep.deepscaler", "--local-dir", str(FIXTURES / "deepscaler"), "--output-dir", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    assert pq.read_table(tmp_path / "train.parquet").num_rows == 5


# ----------------------------------------------------------------------------- arithmetic (synthetic)
@pytest.mark.parametrize("task", ["add1", "add2", "larger2", "largest4"])
def test_arithmetic_rows_answers_and_disjoint_splits(tmp_path, task):
    res = run_script_here("arithmetic", "--task", task, "--n-train", "300", "--n-test", "40",
                          "--output-dir", str(tmp_path))
    assert res.returncode == 0, res.stderr
    train = pq.read_table(tmp_path / "train.parquet").to_pylist()
    test = pq.read_table(tmp_path / "test.parquet").to_pylist()
    assert len(train) == 300 and len(test) == 40
    test_questions = {r["prompt"][0]["content"] for r in test}
    assert len(test_questions) == 40
    assert not test_questions & {r["prompt"][0]["content"] for r in train}
    for row in train + test:
        question = row["prompt"][0]["content"]
        numbers = [int(x) for x in re.findall(r"\d+", question)]
        expected = sum(numbers) if task.startswith("add") else max(numbers)
        assert row["reward_model"]["ground_truth"] == str(expected), question
        assert row["data_source"] == f"arithmetic/{task}" and question.endswith("Answer with just the number.")


def test_arithmetic_is_reproducible_and_refuses_impossible_test_sizes(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for out in (a, b):
        assert run_script("arithmetic", "--task", "add1", "--n-train", "50", "--n-test", "20", "--output-dir", str(out)).returncode == 0
    assert pq.read_table(a / "test.parquet").to_pylist() == pq.read_table(b / "test.parquet").to_pylist()
    # single-digit addition has only 100 distinct questions
    res = run_script("arithmetic", "--task", "add1", "--n-test", "150", "--output-dir", str(tmp_path / "c"))
    assert res.returncode == 1 and "only 100 distinct questions" in res.stderr
    assert not (tmp_path / "c" / "test.parquet").exists()


def operands(row):
    """A row's question's numbers, sorted: the same for "7 + 5" and its twin "5 + 7"."""
    return tuple(sorted(int(x) for x in re.findall(r"\d+", row["prompt"][0]["content"])))


@pytest.mark.parametrize("task", ["add1", "add2", "larger2", "largest4"])
def test_arithmetic_no_twins_in_train_keeps_reordered_test_questions_out(tmp_path, task):
    """``--no-twins-in-train``: no train question has a test question's numbers in another order
    ("5 + 7" for "7 + 5"); without it add1 has such twins (the lab's count for its learning runs' data is in
    benchmarks/tests/test_learning_data.py)."""
    args = ("--task", task, "--n-train", "2000", "--n-test", "50", "--seed", "0", "--output-dir", str(tmp_path))
    assert run_script_here("arithmetic", *args, "--no-twins-in-train").returncode == 0
    train, test = (pq.read_table(tmp_path / f"{split}.parquet").to_pylist() for split in ("train", "test"))

    assert len(train) == 2000 and len({r["prompt"][0]["content"] for r in test}) == 50
    assert not {operands(r) for r in test} & {operands(r) for r in train}
    if task == "add1":  # 100 questions, 55 sets of operands: the test uses 39, train keeps 16 (27 questions)
        assert len({operands(r) for r in test}) == 39 and len({operands(r) for r in train}) == 16
        assert len({r["prompt"][0]["content"] for r in train}) == 27


@pytest.mark.parametrize("task", ["add1", "add2", "larger2", "largest4"])
def test_arithmetic_rows_carry_the_question_the_reward_reads_to_refuse_echoes(tmp_path, task):
    """A response that only repeats a row's question earned the last-integer reward wherever the
    question's last number is its answer (0 + b; larger2's second number being the larger); with the row's
    ``extra_info`` (what verl passes) it earns nothing, and the question followed by the answer earns 1."""
    from verl_offgrpo.rewards import compute_score

    res = run_script_here("arithmetic", "--task", task, "--n-train", "200", "--output-dir", str(tmp_path))
    assert res.returncode == 0
    rows = pq.read_table(tmp_path / "train.parquet").to_pylist()

    def scores(response_of, extra_info_of):
        return [compute_score(r["data_source"], response_of(r), r["reward_model"]["ground_truth"], extra_info_of(r))
                for r in rows]  # fmt: skip

    def question(row):
        return row["prompt"][0]["content"]

    def last_number_is_the_answer(row):  # 0 + b, or the last of the numbers is the largest
        numbers = [int(x) for x in re.findall(r"\d+", question(row))]
        return numbers[-1] == (sum(numbers) if task.startswith("add") else max(numbers))

    assert all(r["extra_info"]["question"] == question(r) for r in rows)
    echoes_paid_before = sum(map(last_number_is_the_answer, rows))
    assert echoes_paid_before > 0 or task == "add2"  # add2's operands are 10..99: never 0 + b
    assert sum(scores(question, lambda r: None)) == echoes_paid_before
    assert sum(scores(question, lambda r: r["extra_info"])) == 0
    answered = scores(lambda r: question(r) + " " + r["reward_model"]["ground_truth"], lambda r: r["extra_info"])
    assert answered == [1.0] * len(rows)


# ---------------------------------------------------------------- bad input: one line, nothing written


@pytest.mark.parametrize(
    "content, message",
    [
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe", "not UTF-8 text (a binary file?); expected JSON Lines"),
        (b"\x00\x00\x00\x00", "NUL byte (a binary file?); expected JSON Lines text"),
    ],
)
def test_binary_input_file(tmp_path, content, message):
    src, out = tmp_path / "src", tmp_path / "out"
    src.mkdir()
    (src / "train.jsonl").write_text(_lines(GOOD_GSM8K))
    (src / "test.jsonl").write_bytes(content)
    res = run_script("gsm8k", "--local-dir", str(src), "--output-dir", str(out))
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert res.stderr.strip() == f"error: {src / 'test.jsonl'}:1: {message}"
    assert not out.exists()


def _output_is_a_file(tmp_path):
    out = tmp_path / "out"
    out.write_text("mine")
    return out, out, "is a file, not a directory"


def _output_inside_a_file(tmp_path):
    parent = tmp_path / "f"
    parent.write_text("mine")
    return parent / "out", parent, f"is inside {parent}, which is a file"


def _output_file_is_a_directory(tmp_path):
    out = tmp_path / "out"
    (out / "test.parquet").mkdir(parents=True)
    return out, out / "test.parquet", "test.parquet is a directory"


@pytest.mark.parametrize("setup", [_output_is_a_file, _output_inside_a_file, _output_file_is_a_directory])
@pytest.mark.parametrize("script", ["gsm8k", "arithmetic"])
def test_output_path_that_cannot_hold_the_files(tmp_path, setup, script):
    out, kept, message = setup(tmp_path)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    if script == "gsm8k":
        src = tmp_path / "src"
        src.mkdir()
        for f in ("train.jsonl", "test.jsonl"):
            (src / f).write_text(_lines(GOOD_GSM8K))
        before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
        res = run_script("gsm8k", "--local-dir", str(src), "--output-dir", str(out))
    else:
        res = run_script("arithmetic", "--n-train", "8", "--n-test", "4", "--output-dir", str(out))
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and message in res.stderr, res.stderr
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before  # nothing written
    assert kept.exists()


@pytest.mark.parametrize("args, message", [(["--n-train", "0"], "--n-train must be an integer >= 1 (got 0)"),
                                           (["--n-test", "0"], "--n-test must be an integer >= 1 (got 0)"),
                                           (["--n-train", "-5"], "--n-train must be an integer >= 1 (got -5)")])
def test_arithmetic_needs_rows(tmp_path, args, message):
    out = tmp_path / "out"
    res = run_script("arithmetic", *args, "--output-dir", str(out))
    assert res.returncode == 1 and res.stderr.strip() == f"error: {message}"
    assert not out.exists()


def test_arithmetic_check_disjoint_refuses_repeats_shared_questions_and_twins():
    arithmetic = _load_script("arithmetic")

    def rows(*questions):
        return [{"prompt": [{"role": "user", "content": q}]} for q in questions]

    a, b, a_twin = "What is 1 + 2?", "What is 3 + 4?", "What is 2 + 1?"
    arithmetic.check_disjoint({"train": rows(b, b), "test": rows(a)})  # train rows may repeat
    arithmetic.check_disjoint({"train": rows(a_twin), "test": rows(a)}, twins_in_train=True)
    for splits, twins_in_train, message in [
        ({"train": rows(b), "test": rows(a, a)}, True, "1 questions repeated"),
        ({"train": rows(b, a), "test": rows(a, b)}, True, "2 test questions are also train questions"),
        ({"train": rows(a_twin), "test": rows(a)}, False, "1 test questions have a twin in train"),
    ]:
        with pytest.raises(arithmetic.C.DataPrepError, match=message):
            arithmetic.check_disjoint(splits, twins_in_train=twins_in_train)



def test_without_the_shared_data_its_tests_skip_saying_which_path_is_missing(tmp_path):
    """A checkout without ``../shared/data`` stays green: the tests that read it (here one of this module's and
    one of test_rewards.py's module fixtures) skip, and the default run's summary (``-rs`` in pyproject's
    addopts) names the missing path and the variable that points elsewhere; a folder that lacks some of the
    files names them."""
    from _shared_data import missing

    tests = {"tests/test_data_prep.py": "test_aime24_offline",
             "tests/test_rewards.py": "test_r1_style_response_scores_the_text_after_think"}
    absent = tmp_path / "absent"
    env = {**os.environ, "VERL_OFFGRPO_TEST_DATA": str(absent),
           "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}  # the tests use no third-party plugin; ~2 s less
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", *(f"{f}::{t}" for f, t in tests.items())],
                          capture_output=True, text=True, timeout=120, cwd=REPO, env=env)
    assert done.returncode == 0 and "2 skipped" in done.stdout, done.stdout + done.stderr
    how = ("the data folder beside the repository, which CI has; or set VERL_OFFGRPO_TEST_DATA to a folder that "
           "holds it")
    why = f"shared data not found: {absent} does not exist ({how})"
    skipped = [line for line in done.stdout.splitlines() if line.startswith("SKIPPED")]
    assert [re.sub(r":\d+: ", ": ", line, count=1) for line in skipped] == [f"SKIPPED [1] {f}: {why}" for f in tests]
    assert missing(absent) == why
    (tmp_path / "partial" / "aime24").mkdir(parents=True)
    (tmp_path / "partial" / "aime24" / "test.jsonl").write_text("")
    assert missing(tmp_path / "partial") == (f"shared data incomplete: {tmp_path / 'partial'} lacks gsm8k/train.jsonl, "
                                             f"gsm8k/test.jsonl, math500/test.jsonl ({how})")
