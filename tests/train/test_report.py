"""report.md of a training run: accuracy bands inside [0, 1], and the model's load time apart from training."""

from __future__ import annotations

from ugrpo.report.train import _accuracy_series, write_report
from ugrpo.runs import RunDir
from ugrpo.stats.intervals import wilson_interval


def _rows() -> list[dict]:
    evals = [(0, 0.0, 0.0), (2, 0.5, 0.25), (4, 1.0, 1.0)]
    return [{"step": s, "reward_mean": 0.5, "eval_accuracy": a, "eval_pass1": p, "eval_n_problems": 8}
            for s, a, p in evals]


def test_eval_bands_are_wilson_intervals_inside_0_1():
    s = _accuracy_series(_rows(), "eval_accuracy", "greedy accuracy")
    assert list(s.x) == [0, 2, 4] and list(s.y) == [0.0, 0.5, 1.0]
    assert [(lo, hi) for lo, hi in zip(s.low, s.high)] == [(w.ci_low, w.ci_high) for w in (wilson_interval(y, 8)
                                                                                          for y in s.y)]
    assert all(0.0 <= lo <= y <= hi <= 1.0 for lo, y, hi in zip(s.low, s.y, s.high))
    assert s.low[0] == 0.0 and s.high[-1] == 1.0 and s.high[0] > 0.0  # 0 of 8 is not "certainly 0"
    old = [{"step": 0, "eval_accuracy": 0.5}, {"step": 2, "eval_accuracy": 3.0, "eval_n_problems": 8}]
    s = _accuracy_series(old, "eval_accuracy", "x")  # n not recorded / a custom reward above 1: no band
    assert list(s.low) == [None, None] and list(s.high) == [None, None]


def test_report_states_training_and_load_time_apart(tmp_path):
    run = RunDir(tmp_path)
    run.write_config({"model": {"name": "tiny:instruct"}, "task": {"name": "arithmetic"}, "budget": {}})
    for r in _rows():
        run.append_metrics(r)
    run.write_results({"steps": 4, "minutes": 0.4, "load_minutes": 4.5})
    text = write_report(run).read_text()
    assert "0.400 minutes of training (loading the model took 4.500 more minutes, including any first-use build" in text
    assert (tmp_path / "eval.png").is_file()


def test_before_after_and_eval_tables_carry_wilson_intervals(tmp_path):
    run = RunDir(tmp_path)
    run.write_config({"model": {"name": "m"}, "task": {"name": "t"}, "budget": {}})
    for r in _rows():
        run.append_metrics(r)
    run.write_results({"steps": 4, "minutes": 0.1})
    text = write_report(run).read_text()
    w = wilson_interval(0.5, 8)
    assert f"| 2 | 0.500 [{w.ci_low:.3f}, {w.ci_high:.3f}] |" in text  # the evaluation table
    before = f"0.000 [0.000, {wilson_interval(0.0, 8).ci_high:.3f}]"
    after = f"1.000 [{wilson_interval(1.0, 8).ci_low:.3f}, 1.000]"
    assert f"| before (step 0) | {before} | {before} |" in text and f"| after | {after} | {after} |" in text
