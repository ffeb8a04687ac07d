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
    assert f"| before (step 0) | {before} | {before} |" in text and f"| after (step 4) | {after} | {after} |" in text
    assert "| change, paired over the problems | - | - |" in text  # no per-problem values recorded: no change


def test_the_paired_change_is_the_mean_per_problem_difference_with_its_interval(tmp_path):
    """Greedy: before [0,0,1,1,0], after [1,0,1,1,1] -> differences [1,0,0,0,1]: mean 0.4, SE = sd/sqrt(5) with
    sd = sqrt(0.3) (ddof 1), interval 0.4 -+ 1.96 SE; pass@1 the same way from the per-problem means."""
    import math

    run = RunDir(tmp_path)
    run.write_config({"model": {"name": "m"}, "task": {"name": "t"}, "budget": {}})
    before = {"greedy": [0.0, 0.0, 1.0, 1.0, 0.0], "pass1": [0.25, 0.0, 0.5, 1.0, 0.25]}
    after = {"greedy": [1.0, 0.0, 1.0, 1.0, 1.0], "pass1": [0.5, 0.25, 0.5, 1.0, 0.75]}
    for step, per in ((0, before), (4, after)):
        run.append_metrics({"step": step, "eval_accuracy": sum(per["greedy"]) / 5, "eval_pass1": sum(per["pass1"]) / 5,
                            "eval_n_problems": 5, "eval_per_problem": per})
    run.write_results({"steps": 4, "minutes": 0.1})
    text = write_report(run).read_text()
    se_g = math.sqrt(0.3 / 5)
    d_p = [0.25, 0.25, 0.0, 0.0, 0.5]
    m_p = sum(d_p) / 5
    se_p = math.sqrt(sum((d - m_p) ** 2 for d in d_p) / 4 / 5)
    greedy = f"+0.400 [{0.4 - 1.959964 * se_g:+.3f}, {0.4 + 1.959964 * se_g:+.3f}] (SE {se_g:.3f})"
    pass1 = f"{m_p:+.3f} [{m_p - 1.959964 * se_p:+.3f}, {m_p + 1.959964 * se_p:+.3f}] (SE {se_p:.3f})"
    assert f"| change, paired over the problems | {greedy} | {pass1} |" in text, text


def test_a_run_records_each_problems_rewards_behind_its_accuracies(tiny_model_dir, task_files, tmp_path):
    import pytest
    from train_helpers import small_config

    from ugrpo.train.config import config_from_dict
    from ugrpo.train.loop import train

    train(config_from_dict(small_config(tiny_model_dir, task_files, steps=2, checkpoint_every=0)), tmp_path / "r")
    evals = [r for r in RunDir(tmp_path / "r").metrics() if r.get("eval_accuracy") is not None]
    assert [r["step"] for r in evals] == [0, 2]
    for r in evals:
        per = r["eval_per_problem"]
        assert len(per["greedy"]) == len(per["pass1"]) == r["eval_n_problems"] == 4
        assert sum(per["greedy"]) / 4 == pytest.approx(r["eval_accuracy"])
        assert sum(per["pass1"]) / 4 == pytest.approx(r["eval_pass1"])
    assert "| change, paired over the problems | " in (tmp_path / "r" / "report.md").read_text()


def test_the_report_names_the_task_with_its_effective_options(tmp_path):
    """The header names the task as the sweep report does (``report.markdown.task_text``): with the options the run
    used (config.json's, every command-line override applied), so two variants of a task are told apart."""
    run = RunDir(tmp_path)
    run.write_config({"model": {"name": "m"}, "task": {"name": "arithmetic",
                                                      "options": {"n_train": 200, "difficulty": "medium"}},
                      "budget": {}})
    for r in _rows():
        run.append_metrics(r)
    run.write_results({"steps": 4, "minutes": 0.1})
    assert "Model `m`, task `arithmetic` (difficulty=medium, n_train=200), algorithm" in write_report(run).read_text()
