"""``ugrpo mse`` end to end: Monte Carlo against the exact MSE (paper Prop. 3, docs/math.md)."""

from __future__ import annotations

import pytest
import torch

from ugrpo.envs.io import load_env
from ugrpo.experiments.mse.env import ESTIMATORS, squared_errors

from .conftest import assert_png, metrics, results, run_cli

ROW_KEYS = {"estimator", "G", "B", "mse", "ci_low", "ci_high", "se", "exact", "reps"}


def test_mse_matches_exact_within_4_se(tmp_path, capsys, bandit_env_path):
    out = tmp_path / "mse"
    groups = [2, 4, 16]
    rc, stdout, _ = run_cli(["mse", "--env", bandit_env_path, "--groups", "2,4,16", "--batch", 3,
                             "--reps", 3000, "--seed", 1, "--out", out, "--no-progress"], capsys)
    assert rc == 0
    for f in ("config.json", "metrics.jsonl", "results.json", "mse.png", "report.md"):
        assert (out / f).exists(), f
    assert_png(out / "mse.png")
    res = results(out)
    assert {"rows", "env", "exact_components", "hoeffding_grpo"} <= set(res)
    assert len(res["rows"]) == len(groups) * len(ESTIMATORS) == len(metrics(out))
    env = load_env(bandit_env_path)
    ex = env.exact(env.theta0)
    for r in res["rows"]:
        assert ROW_KEYS <= set(r)
        assert r["reps"] == 3000 and r["B"] == 3
        assert r["exact"] == ex.mse(r["estimator"], 3, r["G"])
        assert abs(r["mse"] - r["exact"]) <= 4 * r["se"], r  # Monte Carlo tolerance: 4 SE
        assert r["ci_low"] < r["mse"] < r["ci_high"]
    pm = ex.policy_moments
    assert res["exact_components"]["c1"] == pm.c1 and res["exact_components"]["c3"] == pm.c3
    for s in res["hoeffding_grpo"]:
        G = s["G"]
        # the split is exact: oracle part + residual = GRPO's exact MSE, oracle part = oracle's MSE
        assert abs(s["oracle_part"] + s["residual"] - ex.mse("grpo", 3, G)) < 1e-12
        assert abs(s["oracle_part"] - ex.mse("oracle", 3, G)) < 1e-12
        lo, hi = s["residual_mc_ci"]
        se = (hi - lo) / (2 * 1.96)
        assert abs(s["residual_mc"] - s["residual"]) <= 4 * se, s
    assert "oracle" in stdout and "exact" in stdout
    report = (out / "report.md").read_text()
    assert "![MSE vs G](mse.png)" in report and "## Reading" in report
    command = next(line for line in report.splitlines() if line.startswith("ugrpo mse "))
    assert "--env" in command and not any(f in command for f in ("--ref-samples", "--sketch-dim", "--max-new-tokens",
                                                                 "--history-", "--sampling-backend"))  # model-only


def test_squared_errors_use_common_samples():
    """All four estimators see the same batch: grpo_mean's error vector is the (G-1)/G-scaled grpo one."""
    from ugrpo.envs.generate import random_env

    env = random_env("softmax_bandit", n_prompts=3, n_actions=3, seed=0)
    gen = torch.Generator().manual_seed(0)
    G, B, R = 4, 2, 5
    batch = env.sample(env.theta0, R * B, G, gen)
    g0 = torch.zeros(env.dim, dtype=torch.float64)  # error against 0 = squared norm of the estimate
    err = squared_errors(batch, g0, B)
    assert set(err) == {*ESTIMATORS, "residual"}
    # with g = 0 the squared error is ||ghat||^2, and ghat_mean = (G-1)/G ghat_grpo exactly (docs/paper.md sec. 3)
    torch.testing.assert_close(err["grpo_mean"], ((G - 1) / G) ** 2 * err["grpo"])


def test_mse_bad_inputs_exit_2(tmp_path, capsys, bandit_env_path):
    rc, _, err = run_cli(["mse", "--env", tmp_path / "nope.json", "--out", tmp_path / "o"], capsys)
    assert rc == 2 and err.startswith("ugrpo mse: error:") and "nope.json" in err and len(err.strip().splitlines()) == 1
    rc, _, err = run_cli(["mse", "--env", bandit_env_path, "--groups", "1,4", "--out", tmp_path / "o"], capsys)
    assert rc == 2 and "--groups: 1 is below the minimum 2" in err
    rc, _, err = run_cli(["mse", "--env", bandit_env_path, "--groups", "2,x", "--out", tmp_path / "o"], capsys)
    assert rc == 2 and "'x' is not an integer" in err
    rc, _, err = run_cli(["mse", "--env", bandit_env_path, "--groups", "4,8,,16", "--out", tmp_path / "o"], capsys)
    assert rc == 2 and "--groups: '4,8,,16' has an empty item" in err, err  # a value left out is not dropped
    assert not (tmp_path / "o").exists()
    rc, _, err = run_cli(["mse", "--env", bandit_env_path, "--theta", "1,2", "--out", tmp_path / "o"], capsys)
    assert rc == 2 and "--theta has 2 values" in err and "D = 15" in err


def test_squared_errors_match_prompt_gradients():
    """The batched computation equals ugrpo.stats.estimator.prompt_gradients per estimator."""
    from ugrpo.envs.generate import random_env
    from ugrpo.stats.advantages import compute_advantages
    from ugrpo.stats.estimator import prompt_gradients

    env = random_env("softmax_bandit", n_prompts=4, n_actions=3, seed=2)
    batch = env.sample(env.theta0, 3 * 5, 4, torch.Generator().manual_seed(1))
    g = env.exact(env.theta0).g
    err = squared_errors(batch, g, 5)
    for est in ESTIMATORS:
        adv = compute_advantages(batch.rewards, baseline=est, values=batch.values).advantages
        ghat = prompt_gradients(batch.scores, adv).view(3, 5, -1).mean(1)
        torch.testing.assert_close(err[est], ((ghat - g) ** 2).sum(1))


def test_mse_ctrl_c_keeps_finished_rows(tmp_path, capsys, bandit_env_path, monkeypatch):
    import ugrpo.experiments.mse.env as mse

    real, calls = mse.squared_errors, {"n": 0}

    def flaky(*a, **k):
        calls["n"] += 1
        if calls["n"] == 2:  # one chunk per G here: G=2 finishes, G=4 is interrupted
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(mse, "squared_errors", flaky)
    out = tmp_path / "m"
    rc, _, err = run_cli(["mse", "--env", bandit_env_path, "--groups", "2,4", "--batch", 2, "--reps", 50,
                          "--out", out, "--no-progress"], capsys)
    assert rc == 130 and str(out / "metrics.jsonl") in err
    rows = metrics(out)
    assert [r["G"] for r in rows] == [2] * 4 and not (out / "results.json").exists()


def test_mse_interval_never_goes_below_zero():
    """Squared errors are >= 0: a skewed sample whose t interval would dip below 0 is cut at 0, nothing else."""
    import pytest
    import torch
    from scipy.stats import t

    from ugrpo.experiments.mse.env import _stats

    q = t.ppf(0.975, 3)  # 4 repetitions
    r = _stats(torch.tensor([0.0, 0.0, 0.0, 100.0]))  # mean 25, se 25: 25 - 3.18 * 25 < 0
    assert r["ci_low"] == 0.0 and r["ci_high"] == pytest.approx(25 + q * 25, rel=1e-6)
    r = _stats(torch.tensor([1.0, 1.1, 0.9, 1.0]))  # far from 0: unchanged
    assert r["ci_low"] == pytest.approx(1.0 - q * float(torch.tensor([1.0, 1.1, 0.9, 1.0]).std()) / 2)


def test_few_repetitions_get_student_t_intervals(tmp_path, capsys, bandit_env_path):
    """At --reps 3 the interval is mean +- t_{0.975, 2} SE = 4.30 SE, not 1.96 SE (issue 22: at 3 reps all four
    printed normal intervals missed the exact value)."""
    from scipy.stats import t

    out = tmp_path / "mse3"
    rc, _, err = run_cli(["mse", "--env", bandit_env_path, "--groups", "4", "--batch", 3, "--reps", 3, "--seed", 1,
                          "--out", out, "--no-progress"], capsys)
    assert rc == 0, err
    for r in results(out)["rows"]:
        assert r["ci_high"] - r["mse"] == pytest.approx(t.ppf(0.975, 2) * r["se"], rel=1e-9)
        assert r["ci_low"] == pytest.approx(max(r["mse"] - t.ppf(0.975, 2) * r["se"], 0.0), rel=1e-9, abs=1e-15)
