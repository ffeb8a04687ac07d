"""``ugrpo gap``: the singular-Hessian policy, the exact predictions it feeds Theorem 8, the command end to end."""

from __future__ import annotations

import math

import pytest
import torch

from ugrpo.experiments.gap import find_optimum, predict, singular_env
from ugrpo.stats.asymptotics import estimator_covariance, prompt_covariances

from .conftest import assert_png, metrics, results, run_cli


@pytest.fixture(scope="module")
def optimum():
    env = singular_env(3.0)
    return env, find_optimum(env)


def test_policy_has_rank2_hessian_with_known_null_space(optimum):
    env, opt = optimum
    assert opt.grad_norm < 1e-12 and opt.sub.rank == 2
    # J is flat exactly along e3 (action-constant feature) and e1 - e4 (duplicated feature)
    null = torch.tensor([[0.0, 0, 1, 0], [1 / math.sqrt(2), 0, 0, -1 / math.sqrt(2)]], dtype=torch.float64).T
    torch.testing.assert_close(opt.null_basis @ opt.null_basis.T, null @ null.T, rtol=0, atol=1e-10)
    assert (torch.linalg.eigvalsh(opt.sub.H_star) < -0.3).all()
    for t in (0.7, -1.3):  # moving along the null space changes neither J nor the gradient
        shifted = opt.theta_star + t * null.sum(1)
        assert env.J(shifted) == pytest.approx(opt.J_star, abs=1e-14)
        assert float(env.grad_J(shifted).norm()) < 1e-12
    assert opt.J_star == pytest.approx(env.J_star(), abs=1e-9)  # Newton refines the env's own L-BFGS optimum


def test_predictions_use_the_exact_projected_covariance(optimum):
    env, opt = optimum
    pc = prompt_covariances(env.probs(opt.theta_star), env.score_table(opt.theta_star), env.reward_mean)
    mse = env.exact(opt.theta_star).mse("grpo", 8, 4)  # at theta*, g = 0 and Gamma's trace is the MSE
    assert float(torch.trace(estimator_covariance(pc, "grpo", 8, 4))) == pytest.approx(mse, rel=1e-10)
    lim = predict(env, opt, "grpo", 8, 4, 3.0)
    torch.testing.assert_close(lim["printed"].weights * 9.0, lim["corrected"].weights, rtol=1e-12, atol=0)
    w = {e: predict(env, opt, e, 8, 4, 3.0)["corrected"].mean for e in ("vanilla", "grpo", "oracle")}
    assert w["vanilla"] > w["grpo"] > w["oracle"] > 0


def test_gap_command_end_to_end(tmp_path, capsys):
    out = tmp_path / "gap"
    rc, stdout, err = run_cli(["gap", "--groups", "2,4", "--estimators", "grpo,oracle", "--runs", 16, "--steps", 40,
                               "--batch", 4, "--seed", 1, "--out", out, "--no-progress"], capsys)
    assert rc == 0, err
    for f in ("config.json", "metrics.jsonl", "results.json", "report.md"):
        assert (out / f).exists(), f
    for f in ("qq.png", "n_dependence.png", "corollary9.png"):
        assert_png(out / f)
    res = results(out)
    assert {"policy", "cells", "corollary9", "seconds"} <= set(res)
    assert res["policy"]["rank"] == 2 and res["policy"]["dim"] == 4
    assert [(c["estimator"], c["G"]) for c in res["cells"]] == [("grpo", 2), ("grpo", 4), ("oracle", 2), ("oracle", 4)]
    for c in res["cells"]:
        assert set(c["fit"]) == {"corrected", "printed"}
        for fit in c["fit"].values():
            assert {"mean", "se", "predicted_mean", "z", "ks_stat", "ks_p", "cvm_p"} <= set(fit)
            assert 0 <= fit["ks_p"] <= 1
        assert c["fit"]["corrected"]["predicted_mean"] == pytest.approx(9 * c["fit"]["printed"]["predicted_mean"])
        assert c["null_drift"] < 1e-10  # the iterates never move along the flat directions
        assert len(c["qq"]["empirical"]) == len(c["qq"]["predicted"]) == 50
        assert [r["step"] for r in c["by_n"]] == [2, 5, 10, 20, 40]
    rows = metrics(out)
    assert len(rows) == 4 and all(len(r["samples"]) == 16 for r in rows)
    assert rows[0]["fit"]["corrected"]["mean"] == pytest.approx(sum(rows[0]["samples"]) / 16)
    cor = {r["G"]: r for r in res["corollary9"]}
    assert cor[128]["ratio_to_2G"][0] == pytest.approx(4, abs=0.1)
    report = (out / "report.md").read_text()
    assert "Verdict" in report and "Corollary 9" in report and "KS p" in stdout
    # the settings in one line of words (the whole config is in config.json), not a Python dict
    assert f"config: G = 2, 4; grpo, oracle; 16 runs x 40 steps per cell, B = 4, eta_i = 3/(i + 20), seed 1; " \
           f"full config: {out}/config.json" in stdout and "{" not in stdout
    # another config into the same folder: refused, and no config line for a run that does not start
    rc, stdout, err = run_cli(["gap", "--groups", "2,4", "--estimators", "grpo", "--runs", 8, "--steps", 10,
                               "--out", out, "--no-progress"], capsys)
    assert rc == 2 and "already holds a run with another config" in err, err
    assert "config:" not in stdout, stdout


@pytest.mark.parametrize("args,needle", [
    (["--beta", "1.0"], "beta > 1/(2 lambda_min(-H*)) = 1.457"),
    (["--groups", "1,4"], "--groups: 1 is below the minimum 2"),
    (["--estimators", "grpo,std"], "--estimators: unknown std; choose from vanilla, grpo, oracle"),
    (["--runs", "3"], "--runs = 3 is too small"),
])
def test_gap_bad_inputs(tmp_path, capsys, args, needle):
    rc, _, err = run_cli(["gap", "--runs", 8, "--steps", 2, *args, "--out", tmp_path / "bad", "--no-progress"], capsys)
    assert rc == 2 and needle in err, err


def test_simulate_is_algorithm1(optimum):
    """One run with offset 0 is exactly ``run_algorithm1`` (eta_i = beta / i) with the same seed."""
    from ugrpo.envs.algorithm1 import run_algorithm1
    from ugrpo.experiments.gap import simulate

    env, opt = optimum
    theta0 = opt.theta_star + 0.3
    for est in ("vanilla", "grpo", "oracle"):
        J, theta = simulate(env, theta0, est, B=3, G=4, beta=3.0, steps=25, runs=1, offset=0, checkpoints=(10, 25),
                            generator=torch.Generator().manual_seed(11))
        ref = run_algorithm1(env, N=12, G=4, steps=25, lr=3.0, baseline=est, lr_schedule="inverse", seed=11,
                             checkpoints=[10, 25], theta0=theta0)
        torch.testing.assert_close(theta[0], ref.theta, rtol=0, atol=1e-12)
        torch.testing.assert_close(J[0], torch.tensor(ref.J, dtype=torch.float64), rtol=0, atol=1e-12)


def _fit(mean, se, E, p=0.5):
    return {"mean": mean, "se": se, "predicted_mean": E, "z": (mean - E) / se, "ks_p": p, "cvm_p": p}


@pytest.mark.parametrize("corrected,printed,want", [
    (_fit(9.1, 0.3, 9.0), _fit(9.1, 0.3, 1.0, p=1e-9), ("consistent", "rejected")),      # precise, discriminates
    (_fit(9.1, 3.0, 9.0), _fit(9.1, 3.0, 1.0, p=1e-9), ("too small to decide", "rejected")),  # 1.96 SE > 25% of E
    (_fit(1.2, 0.3, 1.1), _fit(1.2, 0.3, 1.0), ("too small to decide", "too small to decide")),  # both fit
    (_fit(5.0, 0.3, 9.0), _fit(5.0, 0.3, 1.0), ("rejected", "rejected")),                 # a rejection needs no gate
])
def test_gap_cell_verdict_has_a_power_gate(corrected, printed, want):
    from ugrpo.report.gap import _verdicts

    assert tuple(_verdicts({"fit": {"corrected": corrected, "printed": printed}}).values()) == want
