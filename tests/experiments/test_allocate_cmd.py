"""``ugrpo allocate`` and the heterogeneity knobs of ``make-env`` (docs/math.md M32-M38)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ugrpo.envs.generate import random_env
from ugrpo.experiments.allocate import (
    AllocateConfig,
    _batch_errors,
    _sizes,
    bernoulli_stats,
    build_lab,
    predicted_stats,
)
from ugrpo.stats.allocation import best_uniform
from ugrpo.stats.predict import posterior_means
from ugrpo.stats.safe import choose_sizes

from .conftest import assert_png, results, run_cli


def _hetero(seed=3, **kw):
    return random_env("softmax_bandit", n_prompts=12, n_actions=4, logit_scale=1.5, extreme_fraction=0.7,
                      score_reward_corr=-0.8, seed=seed, **kw)


def _score_norms_by_reward(env):
    p, r = env.probs(), env.reward_mean
    w2 = (env.score_table(probs=p) ** 2).sum(-1)
    return (p * r * w2).sum(-1) / (p * r).sum(-1), (p * (1 - r) * w2).sum(-1) / (p * (1 - r)).sum(-1)


def test_bernoulli_stats_with_a_point_mass_are_the_exact_moments():
    env = _hetero()
    ex = env.exact()
    m1, m0 = (t.numpy() for t in _score_norms_by_reward(env))
    p = ex.V.numpy()
    g2 = np.array([m.g_norm2 for m in ex.prompt_moments])
    st = bernoulli_stats((p, p**2, p**3), m1, m0, g2)
    np.testing.assert_allclose(st.c2, [m.tr_sigma_oracle for m in ex.prompt_moments], rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(st.c3, [m.c3 for m in ex.prompt_moments], rtol=1e-10)


def test_predicted_stats_keep_unsolved_prompts_alive():
    env = _hetero()
    cfg = AllocateConfig(budget=48, history_steps=2)
    post, hist, _ = predicted_stats(env, cfg, torch.Generator().manual_seed(0))
    pred = posterior_means(post)
    assert hist["history_samples"] == 2 * 12 * 4
    assert (pred.value > 0).all() and (pred.value < 1).all() and (pred.c3 > 0).all()


def test_ustat_with_true_moments_never_loses_to_uniform_on_a_batch():
    """Per drawn batch, ustat minimises M33 exactly, and uniform G is one of its feasible allocations."""
    env = _hetero()
    lab = build_lab(env, 0)
    G_u, _ = best_uniform(lab.c1, lab.c2, lab.c3, 48)
    cfg = AllocateConfig(budget=48)
    batches = np.random.default_rng(0).integers(12, size=(50, 48 // G_u))
    us, _, moved = _batch_errors(lab, lab.true, "ustat", batches, cfg, "samples", G_u)
    un, _, _ = _batch_errors(lab, lab.true, "uniform", batches, cfg, "samples", G_u)
    assert (us <= un + 1e-15).all() and (us < un).any()
    assert moved == 0.0  # certain moments: the guard keeps the plug-in sizes


def test_the_lab_uses_the_safe_rule_with_predicted_moments():
    """With predicted moments the lab's ustat sizes are the trainer's choice (the predictor's posterior and the
    safe rule, M50) with the lab's seed for the guard's draws."""
    env = _hetero()
    cfg = AllocateConfig(budget=48, history_steps=2)
    post, _, _ = predicted_stats(env, cfg, torch.Generator().manual_seed(0))
    lab = build_lab(env, 0)
    G_u, _ = best_uniform(lab.c1, lab.c2, lab.c3, 48)
    idx = np.random.default_rng(1).integers(12, size=48 // G_u)
    sizes, _, _ = _sizes(post, "ustat", idx, cfg, "samples", G_u, 48 // G_u, lab, 0)
    want, _ = choose_sizes("ustat", post.take(idx), 48, G_u, g_min=cfg.g_min, g_max=cfg.g_max,
                           rng=np.random.default_rng([cfg.seed, 3, 0]))
    np.testing.assert_array_equal(sizes, want)


def test_make_env_knobs():
    env = random_env("softmax_bandit", n_prompts=40, n_actions=4, extreme_fraction=0.75, extreme_shift=8.0, seed=1)
    V = env.exact().V
    assert int(((V < 0.02) | (V > 0.98)).sum()) == 30
    lo = [float((a / b).median()) for a, b in [_score_norms_by_reward(
        random_env("softmax_bandit", n_prompts=30, n_actions=5, logit_scale=2.0, score_reward_corr=rho, seed=2))
        for rho in (-0.9, 0.9)]]
    assert lo[0] > 1.2 > 0.8 > lo[1]  # rewarded arms unlikely (rho < 0): larger score norms for right answers
    plain = random_env("linear_softmax", n_prompts=5, n_actions=3, dim=2, seed=4)
    same = random_env("linear_softmax", n_prompts=5, n_actions=3, dim=2, seed=4, extreme_fraction=0.0)
    assert torch.equal(plain.features, same.features) and torch.equal(plain.reward_mean, same.reward_mean)
    with pytest.raises(ValueError, match="score_reward_corr"):
        random_env("softmax_bandit", n_prompts=3, n_actions=2, score_reward_corr=1.5)


def test_make_env_score_norm_knobs():
    """score_scale_spread, hard_score_scale and the rare prompts change the scores by the stated factors and, for
    the bandit, leave the policy alone; the defaults leave the instance bit for bit unchanged."""
    base = random_env("softmax_bandit", n_prompts=40, n_actions=5, seed=3)
    spread = random_env("softmax_bandit", n_prompts=40, n_actions=5, seed=3, score_scale_spread=100.0)
    assert torch.allclose(spread.probs(), base.probs())
    ratio = spread.exact().e_w2 / base.exact().e_w2                       # s_x^2, s_x in [0.1, 10]
    assert 1e-2 <= float(ratio.min()) < 0.1 and 10 < float(ratio.max()) <= 1e2
    hard = random_env("softmax_bandit", n_prompts=40, n_actions=5, seed=3, hard_score_scale=6.0)
    mean_r = base.reward_mean.mean(1)
    r = hard.exact().e_w2 / base.exact().e_w2
    torch.testing.assert_close(r, torch.where(mean_r < mean_r.median(), 36.0, 1.0).to(r.dtype))
    rare = random_env("softmax_bandit", n_prompts=100, n_actions=5, seed=3, rare_fraction=0.05, rare_shift=5.0,
                      rare_score_scale=31.6)
    ex = rare.exact()
    big = ex.e_w2 > 100 * ex.e_w2.median()
    assert int(big.sum()) == 5 and float(ex.V[big].max()) < 0.05 and float(ex.V[~big].min()) > 0.05
    lin = random_env("linear_softmax", n_prompts=8, n_actions=4, dim=3, seed=5)
    lin_s = random_env("linear_softmax", n_prompts=8, n_actions=4, dim=3, seed=5, score_scale_spread=10.0)
    assert torch.allclose(lin_s.probs(), lin.probs())                     # features scaled orthogonally to theta0
    assert not torch.allclose(lin_s.exact().e_w2, lin.exact().e_w2)
    assert torch.equal(random_env("softmax_bandit", n_prompts=6, n_actions=3, seed=1, score_scale_spread=1.0,
                                  hard_score_scale=1.0, rare_fraction=0.0).features,
                       random_env("softmax_bandit", n_prompts=6, n_actions=3, seed=1).features)
    with pytest.raises(ValueError, match="score_scale_spread = 0.5 must be a finite number in \\[1.0"):
        random_env("softmax_bandit", n_prompts=3, n_actions=2, score_scale_spread=0.5)


def test_allocate_command_end_to_end(tmp_path, capsys):
    env_path = tmp_path / "env.json"
    rc, out, err = run_cli(["make-env", "--kind", "softmax_bandit", "--prompts", 12, "--actions", 4,
                            "--logit-scale", 1.5, "--extreme-fraction", 0.7, "--score-reward-corr", -0.8,
                            "--seed", 3, "--out", env_path], capsys)
    assert rc == 0, err
    run = tmp_path / "run"
    rc, out, err = run_cli(["allocate", "--env", env_path, "--budget", 48, "--batches", 60, "--token-batches", 5,
                            "--seed", 1, "--screen", "--out", run, "--no-progress"], capsys)
    assert rc == 0, err
    res = results(run)
    rows = res["rows"]
    assert {(r["rule"], r["moments"]) for r in rows} == {(a, m) for a in ("uniform", "vip", "knapsack", "ustat",
                                                                          "uniform-is", "ustat-is", "ustat+screen")
                                                         for m in ("true", "predicted")}
    for r in rows + res["token_rows"]:
        assert {"rule", "moments", "budget", "mse", "ci_low", "ci_high"} <= set(r)
        assert r["budget"] == 48 and 0 <= r["ci_low"] <= r["mse"] <= r["ci_high"]
    uni = next(r for r in rows if r["rule"] == "uniform")
    assert uni["G"] == res["instance"]["best_uniform_G"] and 48 % uni["G"] == 0
    assert min(c["mse"] for c in res["uniform_curve"]) == pytest.approx(uni["mse"])
    assert {r["unit"] for r in res["token_rows"]} == {"tokens"}
    assert_png(run / "allocation.png")
    assert "## Ratios" in (run / "report.md").read_text()
    # ustat / uniform at a sample budget divides by uniform's exact MSE: not a paired ratio, and named so (issue 22)
    for moments in ("true", "predicted"):
        ex = next(r for r in res["ratios"] if (r["unit"], r["moments"], r["numerator"], r["denominator"])
                  == ("samples", moments, "ustat", "uniform"))
        ustat = next(r for r in rows if (r["rule"], r["moments"]) == ("ustat", moments))
        assert ex["ratio"] == pytest.approx(ustat["mse"] / uni["mse"]) and "exact MSE" in ex["interval"]
        assert "paired" not in ex["interval"]
    paired = next(r for r in res["ratios"] if r["denominator"] == "vip" and r["unit"] == "samples")
    assert paired["interval"] == "95% delta method, ratio of paired means"
    # the prompt-IS rows (M52-M57): exact, at N samples in expectation, and their ratios
    for moments in ("true", "predicted"):
        row = next(r for r in rows if (r["rule"], r["moments"]) == ("ustat-is", moments))
        assert row["exact"] and row["ci_low"] == row["mse"] == row["ci_high"]
        assert row["mean_cost"] == pytest.approx(48, rel=1e-6) and row["weight_max"] <= 10 + 1e-9
        ex = next(r for r in res["ratios"] if (r["unit"], r["moments"], r["numerator"], r["denominator"])
                  == ("samples", moments, "ustat-is", "uniform"))
        assert ex["ratio"] == pytest.approx(row["mse"] / uni["mse"]) and ex["ci_low"] == ex["ci_high"] == ex["ratio"]
        vs = next(r for r in res["ratios"] if (r["unit"], r["moments"], r["numerator"], r["denominator"])
                  == ("samples", moments, "ustat-is", "ustat"))
        assert vs["ci_low"] <= vs["ratio"] <= vs["ci_high"] and "exact numerator" in vs["interval"]
    assert not any(r["rule"].endswith("-is") for r in res["token_rows"])
    assert ("`uniform-is` and `ustat-is` are not in this table: a prompt-IS law is chosen for a budget of samples"
            in (run / "report.md").read_text())  # said, not silently dropped
    for rule in ("uniform-is", "ustat-is"):  # predicted moments: the trainer's guarded law (M78)
        row = next(r for r in rows if (r["rule"], r["moments"]) == (rule, "predicted"))
        assert row["guard"] and row["guard_choice"] in (rule, "uniform-is", "own", "uniform") and row["guard_checks"]
        assert min(int(g) for g in row["sizes_hist"]) >= 3
    assert "held-out visits" in (run / "report.md").read_text()


def test_prompt_is_row_is_the_closed_form_at_the_law_of_the_true_moments():
    """The lab's ustat-is row with true moments: the law from the exact per-prompt moments and its M53 MSE, at the
    lab's B; uniform-is never above the best uniform G's MSE at that G."""
    from ugrpo.experiments.allocate import _is_row
    from ugrpo.stats.prompt_is import is_law, is_mse

    env = _hetero()
    lab = build_lab(env, 0)
    cfg = AllocateConfig(budget=48)
    G_u, mse_u = best_uniform(lab.c1, lab.c2, lab.c3, 48)
    B = 48 // G_u
    row = _is_row(lab, lab.true, "ustat-is", cfg, B)
    law = is_law("ustat-is", lab.true, B, 48, g_max=cfg.g_max)
    g2 = float((lab.g_x.mean(0) ** 2).sum())
    assert row["mse"] == pytest.approx(is_mse(law.q, law.sizes, B, lab.true, g2), rel=1e-9)
    one = _is_row(lab, lab.true, "uniform-is", cfg, B)
    assert one["mse"] <= mse_u * (1 + 1e-12) and row["mse"] <= one["mse"] * (1 + 1e-9)


@pytest.mark.parametrize("extra,msg", [
    (["--rules", "uniform,dapo"], "unknown rule"),
    (["--prompts", 30], "exceeds the budget"),
    (["--g-min", 5, "--g-max", 4], "g_min <= g_max"),
    (["--is-guard", "yes"], "--is-guard 'yes': give true or false"),
    (["--rules", "uniform,ustat-is", "--prompts", 24], "N / B = 48/24 < 3"),
])
def test_allocate_bad_input(tmp_path, capsys, extra, msg):
    rc, out, err = run_cli(["allocate", "--env", "builtin:demo", "--budget", 48, "--out", tmp_path / "r", *extra],
                           capsys)
    assert rc == 2 and msg in err
