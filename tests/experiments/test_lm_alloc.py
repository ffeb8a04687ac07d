"""``ugrpo mse --model ... --allocation``: per-prompt group sizes at equal samples on a randomly initialised tiny
model (no downloads): the table, the uniform rule against the grpo estimator, brute-force ragged errors from the
stored pool, and every bad input rejected before sampling."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ugrpo.stats.allocation import BATCH_RULES, IS_RULES

from .conftest import assert_png, results, run_cli


def _args(model, task_args, out, *extra):
    return ["mse", "--model", model, *task_args, "--groups", "3,8", "--batch", 3, "--reps", 4, "--ref-samples", 8,
            "--prompts", 4, "--sketch-dim", 16, "--max-new-tokens", 4, "--seed", 2, "--out", out, "--no-progress",
            "--allocation", "uniform,vip,knapsack,ustat,uniform-is,ustat-is", "--history-visits", 2,
            "--history-group", 3, *extra]


def test_allocation_end_to_end(tmp_path, capsys, tiny_model_dir, task_args):
    out = tmp_path / "a"
    rc, stdout, err = run_cli(_args(tiny_model_dir, task_args, out), capsys)
    assert rc == 0, err
    res = results(out)
    al = res["allocation"]
    assert al["g_min"] == 2 and al["g_max"] == 8 and al["block"] == 8
    rows = al["rows"]
    assert [(r["G"], r["moments"], r["rule"]) for r in rows] == [(3, m, r) for m in ("true", "predicted")
                                                                for r in BATCH_RULES]
    # the prompt-IS rows (R11): their own list, at N = B G in expectation, a paired ratio to uniform's single draws
    assert [(r["G"], r["moments"], r["rule"]) for r in al["is_rows"]] == [(3, m, r) for m in ("true", "predicted")
                                                                         for r in IS_RULES]
    for r in al["is_rows"]:  # predicted moments: the trainer's guarded law (M78); true moments: unguarded
        assert (r.get("guard_choice") is None) == (r["moments"] == "true")
        if r["moments"] == "predicted":
            assert r["guard_choice"] in ("uniform-is", "ustat-is", "own", "uniform") and r["guard_checks"]
            assert r["sizes"]["min"] >= 3
            lo, hi = r["certificate"]  # the trainer's certificate of the law (M89), against the realised ratio
            assert 0 < lo <= r["certificate_median"] <= hi and r["certificate_covers"] == (lo <= r["ratio"] <= hi)
        else:
            assert "certificate" not in r and "certificate_covers" not in r
        assert r["expected_samples"] == pytest.approx(9, rel=1e-6) and 1 <= r["weight_max"] <= 10 + 1e-9
        assert 0 <= r["ci_low"] <= r["mse"] <= r["ci_high"] or r["mse"] < 0 <= r["ci_high"]
        assert r["ratio_ci"][0] <= r["ratio"] <= r["ratio_ci"][1] and math.isfinite(r["predicted_ratio"])
    assert "Prompt importance sampling" in (out / "report.md").read_text()
    assert "prompt importance sampling" in stdout and "holds ratio" in stdout
    for r in rows:
        assert {"rule", "moments", "budget", "G", "mse", "ci_low", "ci_high", "ratio", "ratio_ci", "predicted",
                "predicted_ratio"} <= set(r)
        assert r["budget"] == 9 and r["B"] == 3 and r["reps"] == 4
        assert 0 <= r["ci_low"] <= r["mse"] <= r["ci_high"] or r["mse"] < 0 <= r["ci_high"]
        assert r["ratio_ci"][0] <= r["ratio"] <= r["ratio_ci"][1] and r["ratio_ci"][0] >= 0
        assert r["predicted"] > 0 and math.isfinite(r["predicted_ratio"])
        assert 2 <= r["sizes"]["min"] and r["sizes"]["max"] <= 8 and r["sizes"]["mean"] == pytest.approx(3)
        assert (r["predicted_inside"] is None) == r["same_as_uniform"]
        w = r["within_prompts"]
        assert w["ratio_ci"][0] <= w["ratio"] <= w["ratio_ci"][1] and 0 < w["predicted"] < r["predicted"]
        assert (w["predicted_inside"] is None) == r["same_as_uniform"]
        assert r["same_as_uniform"] == (r["sizes"]["max"] == 3)
    uni = [r for r in rows if r["rule"] == "uniform"]
    assert uni[0]["mse"] == uni[1]["mse"] and uni[0]["ratio"] == 1.0 and uni[0]["predicted_ratio"] == 1.0
    # the uniform rule is the grpo estimator on the first G samples of each block (same samples, same correction)
    assert al["uniform_checks"] == [{"G": 3, "grpo_first_group_mse": pytest.approx(uni[0]["mse"], rel=1e-12),
                                     "grpo_row_groups_per_block": 2}]
    grpo = next(r for r in res["rows"] if r["estimator"] == "grpo" and r["G"] == 3)
    assert grpo["correction"] == uni[0]["correction"]
    assert len(al["verdicts"]) == sum(not r["same_as_uniform"] for r in rows)
    assert al["history"]["samples"] == 4 * 2 * 3
    assert res["cost"]["samples_history"] == 24 and res["cost"]["samples"] == 4 * 8 + 4 * 3 * 8 + 24
    assert_png(out / "allocation.png")
    report = (out / "report.md").read_text()
    verdict = ("predicted ratio inside the realised ratio's 95% interval" if al["verdicts"] else
               "no rule differed from uniform G")
    assert verdict in report and "allocation.png" in report and "Within the drawn prompts" in report
    assert "predicted ratio" in stdout and "ustat" in stdout
    # G = 8 = g_max leaves no room for a rule: skipped, and said (results, console, report)
    assert al["skipped_groups"] == [8]
    said = "Skipped G = 8 of --groups: at G >= g_max = 8"
    assert said in stdout and said in " ".join(report.split())


def test_uniform_rule_equals_grpo_row_when_one_group_per_block(tmp_path, capsys, tiny_model_dir, task_args):
    """--groups 4,7: the grpo row at G = 4 reads one group of the 7-sample block (floor(7/4) = 1), the same
    samples as the uniform rule: equal MSE and interval."""
    out = tmp_path / "u"
    argv = _args(tiny_model_dir, task_args, out)
    argv[argv.index("3,8")] = "4,7"
    rc, _, err = run_cli(argv, capsys)
    assert rc == 0, err
    res = results(out)
    grpo = next(r for r in res["rows"] if r["estimator"] == "grpo" and r["G"] == 4)
    uni = next(r for r in res["allocation"]["rows"] if r["rule"] == "uniform" and r["G"] == 4)
    for key in ("mse", "se", "raw_mse", "correction", "ci_high"):
        assert uni[key] == pytest.approx(grpo[key], rel=1e-12), key
    for key in ("mse", "se", "ci_high"):  # within the drawn prompts too (R7)
        assert uni["within_prompts"][key] == pytest.approx(grpo["within_prompts"][key], rel=1e-12), key


@pytest.mark.parametrize(("extra", "msg"), [
    (["--allocation", "uniform,greedy"], "unknown rule(s) ['greedy']"),
    (["--allocation", ""], "comma-separated rule names"),
    (["--g-max", 16], "--g-max = 16 exceeds the block size max(--groups) = 8"),
    (["--g-min", 4], "budget N = B x G = 3 x 3 = 9 is below B x g_min = 12"),
    (["--g-max", 3], "--allocation needs a uniform G in --groups below g_max = 3"),
    (["--g-min", 5, "--g-max", 4], "--g-max = 4 is below --g-min = 5"),
    (["--history-group", 2], "--history-group = 2 must be an integer >= 3"),
    (["--is-lambda", 0], "--is-lambda=0.0 must be a number in (0, 1]"),
    (["--is-guard", "maybe"], "--is-guard 'maybe': give true or false"),
    (["--groups", "2,8"], "with --is-guard true needs G >= 3"),
])
def test_allocation_bad_inputs_before_sampling(tmp_path, capsys, tiny_model_dir, task_args, extra, msg):
    argv = _args(tiny_model_dir, task_args, tmp_path / "o")
    i = argv.index("--allocation")
    if "--allocation" in extra:
        del argv[i:i + 2]
    rc, _, err = run_cli([*argv, *extra], capsys)
    assert rc == 2 and msg in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "o" / "results.json").exists()


def test_allocation_needs_model(tmp_path, capsys):
    rc, _, err = run_cli(["mse", "--env", "builtin:demo", "--allocation", "ustat", "--out", tmp_path / "o"], capsys)
    assert rc == 2 and "--allocation needs --model" in err


def test_rule_sizes_spend_the_budget():
    """Every rule's (R, B) sizes sum to N = B G per repetition and stay in [g_min, g_max]."""
    import torch

    from ugrpo.experiments.mse.lm_alloc import rule_sizes
    from ugrpo.stats.allocation import PromptStats

    st = PromptStats(value=np.array([0.0, 0.1, 0.5, 0.9, 1.0]), c2=np.array([0.0, 1.0, 4.0, 1.0, 0.0]),
                     c3=np.array([0.0, 2.0, 3.0, 0.5, 0.0]))
    idx = torch.tensor([[0, 1, 2], [2, 3, 4], [0, 0, 4]])
    for rule in BATCH_RULES:
        s = rule_sizes(rule, st, idx, 4, 2, 8)
        assert s.shape == (3, 3) and (s.sum(1) == 12).all() and s.min() >= 2 and s.max() <= 8, rule
        assert (rule == "uniform") == (s == 4).all(), rule  # heterogeneous prompts: every other rule moves samples
