"""GSM8K and MATH loaders on tiny local files (JSONL, Parquet, saved datasets) incl. bad rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ugrpo.tasks import GSM8KTask, MathTask, RowError, get_task
from ugrpo.tasks.gsm8k import gsm8k_gold
from ugrpo.tasks.qa import DEFAULT_TEMPLATE

GSM_ROWS = [
    {"question": "Tom has 3 apples and buys 4. How many?", "answer": "3 + 4 = <<3+4=7>>7\n#### 7"},
    {"question": "How many cents in $12.34?", "answer": "12.34 * 100 = 1234\n#### 1,234"},
    {"question": "Temperature drops by 5 from 2?", "answer": "2 - 5 = -3\n#### -3"},
]
MATH_ROWS = [
    {"problem": "What is $1/2$?", "solution": "It is $\\boxed{\\frac{1}{2}}$.", "level": "Level 1", "type": "Algebra"},
    {"problem": "Two boxes?", "solution": "First \\boxed{3}, finally "
     "\\boxed{\\sqrt{\\frac{8}{2}}}", "level": "Level 5"},
    {"problem": "Given answer field", "solution": "no box here", "answer": "42"},
]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def write_parquet(path: Path, rows: list[dict]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    keys = list(dict.fromkeys(k for r in rows for k in r))  # from_pylist would take the first row's keys only
    pq.write_table(pa.Table.from_pylist([{k: r.get(k) for k in keys} for r in rows]), path)
    return path


def test_gsm8k_gold_extraction() -> None:
    assert gsm8k_gold("a\n#### 7") == "7"
    assert gsm8k_gold("#### 1,234") == "1234"
    assert gsm8k_gold("#### 1 #### 2") == "2"  # the last marker
    assert gsm8k_gold("18") == "18"  # a bare number is accepted
    assert gsm8k_gold("the answer is 18") is None
    assert gsm8k_gold("####  ") is None


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_gsm8k_loads_official_fields(tmp_path: Path, fmt: str) -> None:
    write = write_jsonl if fmt == "jsonl" else write_parquet
    train = write(tmp_path / f"train.{fmt}", GSM_ROWS)
    test = write(tmp_path / f"test.{fmt}", GSM_ROWS[:2])
    task = get_task("gsm8k", train_path=str(train), eval_path=str(test))
    assert isinstance(task, GSM8KTask)
    tr, ev = task.train_problems(), task.eval_problems()
    assert [p.answer for p in tr] == ["7", "1234", "-3"]
    assert [p.id for p in ev] == ["gsm8k-test-0", "gsm8k-test-1"]
    assert tr[0].prompt == DEFAULT_TEMPLATE.replace("{question}", GSM_ROWS[0]["question"])
    assert tr[0].meta["solution"] == GSM_ROWS[0]["answer"]


def test_gsm8k_from_saved_datasets_folder(tmp_path: Path) -> None:
    import datasets

    dd = datasets.DatasetDict(
        {"train": datasets.Dataset.from_list(GSM_ROWS), "test": datasets.Dataset.from_list(GSM_ROWS[2:])}
    )
    dd.save_to_disk(str(tmp_path / "gsm8k"))
    folder = str(tmp_path / "gsm8k")
    task = get_task("gsm8k", train_path=folder, eval_path=folder)
    assert [p.answer for p in task.train_problems()] == ["7", "1234", "-3"]
    assert [p.answer for p in task.eval_problems()] == ["-3"]


def test_gsm8k_bad_row_names_file_line_and_field(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "bad.jsonl", [GSM_ROWS[0], {"question": "no answer here"}, GSM_ROWS[1]])
    with pytest.raises(RowError, match=r"bad\.jsonl:line 2: field 'answer' is missing.*on_bad_row='skip'"):
        get_task("gsm8k", train_path=str(path)).train_problems()
    task = get_task("gsm8k", train_path=str(path), on_bad_row="skip")
    assert [p.id for p in task.train_problems()] == ["gsm8k-train-0", "gsm8k-train-2"]  # ids keep row numbers
    (bad,) = task.bad_rows("train")
    assert bad.where.endswith("bad.jsonl:line 2") and "'answer'" in bad.problem


@pytest.mark.parametrize(
    "row,match",
    [
        ({"question": "q", "answer": "no final marker"}, r"line 1: field 'answer' has no final answer after '####'"),
        ({"question": "", "answer": "#### 3"}, r"line 1: field 'question' is empty"),
        ({"question": ["a list"], "answer": "#### 3"}, r"line 1: field 'question' must be text"),
        ({"answer": "#### 3"}, r"line 1: field 'question' is missing \(fields present: answer\)"),
    ],
)
def test_gsm8k_bad_rows(tmp_path: Path, row: dict, match: str) -> None:
    path = write_jsonl(tmp_path / "b.jsonl", [row])
    with pytest.raises(RowError, match=match):
        get_task("gsm8k", train_path=str(path)).train_problems()


def test_invalid_json_line_is_located(tmp_path: Path) -> None:
    path = tmp_path / "broken.jsonl"
    path.write_text(json.dumps(GSM_ROWS[0]) + "\n\n{not json\n")
    with pytest.raises(RowError, match=r"broken\.jsonl:line 3: not valid JSON"):
        get_task("gsm8k", train_path=str(path)).train_problems()


def test_parquet_bad_row_is_located(tmp_path: Path) -> None:
    path = write_parquet(tmp_path / "b.parquet", [GSM_ROWS[0], {"question": None, "answer": "#### 1"}])
    with pytest.raises(RowError, match=r"b\.parquet:row 1: field 'question' is missing"):
        get_task("gsm8k", train_path=str(path)).train_problems()


def test_limit_template_and_missing_paths(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "t.jsonl", GSM_ROWS)
    task = get_task("gsm8k", train_path=str(path), limit=2, prompt_template="Q: {question}\nA: \\boxed{}")
    tr = task.train_problems()
    assert len(tr) == 2 and tr[0].prompt == f"Q: {GSM_ROWS[0]['question']}\nA: \\boxed{{}}"
    with pytest.raises(ValueError, match="eval_path is not set"):
        task.eval_problems()
    with pytest.raises(FileNotFoundError, match="does not exist") as err:
        get_task("gsm8k", train_path=str(tmp_path / "nope.jsonl")).train_problems()
    assert "current directory" not in str(err.value)  # an absolute path needs no hint
    with pytest.raises(FileNotFoundError, match="a relative path is read from the current directory"):
        get_task("gsm8k", train_path="no/such/file.jsonl").train_problems()
    with pytest.raises(ValueError, match=r"unknown type '\.csv'"):
        (tmp_path / "x.csv").write_text("a,b\n")
        get_task("gsm8k", train_path=str(tmp_path / "x.csv")).train_problems()
    with pytest.raises(ValueError, match=r"placeholder \{question\}"):
        get_task("gsm8k", train_path=str(path), prompt_template="no placeholder")
    with pytest.raises(ValueError, match="on_bad_row must be"):
        get_task("gsm8k", train_path=str(path), on_bad_row="ignore")
    with pytest.raises(ValueError, match="limit must be a positive int"):
        get_task("gsm8k", train_path=str(path), limit=0)
    with pytest.raises(TypeError, match="unknown option.*split.*valid options are"):
        get_task("gsm8k", train_path=str(path), split="train")


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_math_loads_boxed_gold_nested_braces_and_answer_field(tmp_path: Path, fmt: str) -> None:
    write = write_jsonl if fmt == "jsonl" else write_parquet
    path = write(tmp_path / f"math.{fmt}", MATH_ROWS)
    task = get_task("math", train_path=str(path))
    assert isinstance(task, MathTask)
    p = task.train_problems()
    assert [x.answer for x in p] == ["\\frac{1}{2}", "\\sqrt{\\frac{8}{2}}", "42"]
    assert p[0].meta["level"] == "Level 1" and p[0].meta["type"] == "Algebra"
    assert p[1].meta["level"] == "Level 5" and "type" not in p[1].meta
    assert p[0].id == "math-train-0" and "What is $1/2$?" in p[0].prompt


@pytest.mark.parametrize(
    "row,match",
    [
        ({"problem": "p", "solution": "no box"}, r"line 1: field 'solution' has no \\boxed"),
        ({"problem": "p", "solution": "\\boxed{1"}, r"line 1: field 'solution' has no \\boxed"),
        ({"problem": "p"}, r"line 1: field 'solution' is missing"),
        ({"solution": "\\boxed{1}"}, r"line 1: field 'problem' is missing"),
    ],
)
def test_math_bad_rows(tmp_path: Path, row: dict, match: str) -> None:
    path = write_jsonl(tmp_path / "m.jsonl", [row])
    with pytest.raises(RowError, match=match):
        get_task("math", train_path=str(path)).train_problems()
    skipping = get_task("math", train_path=str(path), on_bad_row="skip")
    assert skipping.train_problems() == [] and len(skipping.bad_rows("train")) == 1


def test_gsm8k_from_folder_of_data_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")  # keep ~/.cache clean
    folder = tmp_path / "gsm8k"
    folder.mkdir()
    write_jsonl(folder / "train.jsonl", GSM_ROWS)
    write_jsonl(folder / "test.jsonl", GSM_ROWS[:1])
    task = get_task("gsm8k", train_path=str(folder), eval_path=str(folder))
    assert [p.answer for p in task.train_problems()] == ["7", "1234", "-3"]
    (p,) = task.eval_problems()
    assert p.meta["source"].endswith("gsm8k[test]:row 0")


def test_a_number_too_long_to_convert_is_a_wrong_answer_not_a_failed_batch(tmp_path: Path) -> None:
    """A degenerate sample's 5,000-digit number raised ValueError (Python's int() digit limit) outside the verifier's
    guard, so the whole batch scored 0, its correct completions included. It is now a number no gold equals."""
    from ugrpo.tasks.arith_verify import extract_number
    from ugrpo.tasks.base import score

    task = get_task("gsm8k", train_path=str(write_jsonl(tmp_path / "t.jsonl", GSM_ROWS)))
    p = task.train_problems()[0]  # gold 7
    huge = "9" * 5000
    res = score(task, [f"The answer is {huge}", f"\\boxed{{{huge}}}", "#### 7", f"-{huge} ... so 7"], [p] * 4)
    assert list(res.rewards) == [0.0, 0.0, 1.0, 1.0]
    assert extract_number(f"7 then {huge}") > 10 ** 4990  # the arithmetic task's extraction too


def test_an_echoed_empty_box_does_not_hide_the_answer(tmp_path: Path) -> None:
    """The default prompt ends "put your final answer within \\boxed{}"; a sample that echoes it after its answer had
    its answer hidden by the empty last box (unscorable), in the fast path and in math-verify alike."""
    gsm = get_task("gsm8k", train_path=str(write_jsonl(tmp_path / "g.jsonl", GSM_ROWS)))
    math_task = get_task("math", train_path=str(write_jsonl(tmp_path / "m.jsonl", MATH_ROWS)))
    seven, half = gsm.train_problems()[0], math_task.train_problems()[0]  # golds 7 and \frac{1}{2}
    echo = " Please put your final answer within \\boxed{}."
    assert gsm.verify([f"So \\boxed{{7}}.{echo}", f"So \\boxed{{8}}.{echo}", f"No answer.{echo}"],
                      [seven] * 3) == [1.0, 0.0, None]
    assert math_task.verify([f"It is \\boxed{{\\frac{{1}}{{2}}}}.{echo}"], [half]) == [1.0]
    minus3 = gsm.train_problems()[2]  # gold -3; a Unicode minus sign counted only inside a box before
    assert gsm.verify(["The temperature is \u22123.", "It is \\boxed{\u22123}."], [minus3] * 2) == [1.0, 1.0]


def test_a_bom_file_loads_and_errors_name_the_command_line_forms(tmp_path: Path) -> None:
    """A JSONL file saved with a byte-order mark loads (its first line was 'not valid JSON'); a bad row's error names
    the command-line way to skip rows; a template the command line read as YAML (a mapping) says to quote it."""
    bom = tmp_path / "bom.jsonl"
    bom.write_bytes(b"\xef\xbb\xbf" + "".join(json.dumps(r) + "\n" for r in GSM_ROWS).encode())
    assert [p.answer for p in get_task("gsm8k", train_path=str(bom)).train_problems()] == ["7", "1234", "-3"]
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"question": "q"}])
    with pytest.raises(RowError, match="on the command line --task.options.on_bad_row skip"):
        get_task("gsm8k", train_path=str(bad)).train_problems()
    with pytest.raises(ValueError, match=r"read as YAML: quote it .*prompt_template '\"Q: \{question\}\"'"):
        get_task("gsm8k", train_path=str(bom), prompt_template={"Q": {"question": None}})
