"""``ugrpo sweep``: contract, exact gaps, resume after Ctrl-C, bad inputs."""

from __future__ import annotations

import pytest
import torch

from ugrpo.envs.algorithm1 import run_algorithm1
from ugrpo.envs.io import load_env
from ugrpo.stats.planner import bound

from .conftest import assert_png, metrics, results, run_cli

SWEEP = ["--budget", "8,16", "--groups", "2,4,8", "--steps", 12, "--lr", "0.5,1.5", "--seeds", 2,
         "--checkpoints", "0,6,12", "--no-progress"]


def test_sweep_contract_and_resume(tmp_path, capsys, bandit_env_path):
    out = tmp_path / "sweep"
    argv = ["sweep", "--env", bandit_env_path, *SWEEP, "--out", out]
    rc, stdout, err = run_cli(argv, capsys)
    assert rc == 0, err
    for f in ("config.json", "metrics.jsonl", "results.json", "sweep.png", "report.md"):
        assert (out / f).exists(), f
    assert_png(out / "sweep.png")
    res = results(out)
    assert {"rows", "best_G", "planner"} <= set(res)
    assert len(metrics(out)) == 2 * 3 * 2  # (N, G, seed)
    assert len(res["rows"]) == 2 * 3 * 3  # (N, G, checkpoint)
    env = load_env(bandit_env_path)
    gap0 = env.gap(env.theta0)
    for r in res["rows"]:
        assert {"budget", "G", "B", "checkpoint", "gap_mean", "ci_low", "ci_high", "seeds"} <= set(r)
        assert r["B"] * r["G"] == r["budget"] and r["seeds"] == 2
        if r["checkpoint"] == 0:  # every run starts at theta0: the exact gap, zero-width interval
            assert r["gap_mean"] == pytest.approx(gap0, abs=1e-12)
            assert r["ci_high"] - r["ci_low"] == pytest.approx(0.0, abs=1e-12)
    # a metrics row equals a direct run of Algorithm 1 with that seed
    m = next(r for r in metrics(out) if (r["budget"], r["G"], r["seed"]) == (16, 4, 1))
    direct = run_algorithm1(env, N=16, G=4, steps=12, lr=1.5, seed=1, checkpoints=[0, 6, 12])  # lr of N=16
    assert m["gaps"] == pytest.approx(list(direct.gaps), abs=1e-12)
    # best G per (budget, checkpoint) is the argmin of the mean gap
    for b in res["best_G"]:
        cell = [r for r in res["rows"] if r["budget"] == b["budget"] and r["checkpoint"] == b["checkpoint"]]
        assert b["G"] == min(cell, key=lambda r: r["gap_mean"])["G"]
    pm = env.exact(env.theta0).policy_moments
    assert res["planner"]["g_star"] == min([2, 4, 8], key=lambda g: bound(pm.c1, pm.c2, pm.c3, 8, g))
    assert "planner G*" in stdout

    before = (out / "metrics.jsonl").read_text()
    rc, stdout, _ = run_cli(argv, capsys)  # same command again: nothing to do
    assert rc == 0 and "resuming: 12 runs already" in stdout and "0 to go" in stdout
    assert (out / "metrics.jsonl").read_text() == before
    rc, _, _ = run_cli([*argv[:-2], "--seeds", 3, "--out", out], capsys)  # one more seed: 6 new runs
    assert rc == 0 and len(metrics(out)) == 18 and results(out)["rows"][0]["seeds"] == 3

    rc, _, err = run_cli(["sweep", "--env", bandit_env_path, *SWEEP[:-3], "--lr", 0.1, "--out", out], capsys)
    assert rc == 2 and "lr = 0.5 at budget N=8" in err and "new --out" in err


def test_sweep_ctrl_c_keeps_rows_and_resumes(tmp_path, capsys, bandit_env_path, monkeypatch):
    import ugrpo.envs.algorithm1 as sgd

    real, calls = sgd.run_algorithm1_batch, {"n": 0}

    def flaky(*a, **k):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(sgd, "run_algorithm1_batch", flaky)
    out = tmp_path / "s"
    argv = ["sweep", "--env", bandit_env_path, *SWEEP, "--out", out]
    rc, _, err = run_cli(argv, capsys)
    assert rc == 130 and str(out / "metrics.jsonl") in err
    assert len(metrics(out)) == 2 * 2  # two finished (N, G) cells x 2 seeds
    assert not (out / "results.json").exists()
    monkeypatch.setattr(sgd, "run_algorithm1_batch", real)
    rc, stdout, _ = run_cli(argv, capsys)
    assert rc == 0 and "resuming: 4 runs" in stdout and len(metrics(out)) == 12


@pytest.mark.parametrize(
    "extra, expect",
    [
        (["--budget", "12", "--groups", "8"], "G=8 does not divide the budget N=12"),
        (["--budget", "16", "--groups", "4", "--checkpoints", "5,30", "--steps", "10"], "0..steps=10"),
        (["--budget", "16", "--groups", "4", "--seeds", "0"], "--seeds must be >= 1"),
        (["--budget", "16", "--groups", "1"], "G >= 2"),
        (["--budget", "16,32", "--groups", "4", "--lr", "1,2,3"], "--lr has 3 values for 2 budgets"),
    ],
)
def test_sweep_bad_inputs(tmp_path, capsys, bandit_env_path, extra, expect):
    rc, _, err = run_cli(["sweep", "--env", bandit_env_path, *extra, "--out", tmp_path / "o"], capsys)
    assert rc == 2 and err.startswith("ugrpo sweep: error:") and expect in err, err
    assert len(err.strip().splitlines()) == 1


def test_make_env(tmp_path, capsys):
    out = tmp_path / "e.json"
    rc, stdout, err = run_cli(["make-env", "--kind", "linear_softmax", "--prompts", 4, "--actions", 3, "--dim", 2,
                               "--seed", 9, "--out", out], capsys)
    assert rc == 0, err
    env = load_env(out)
    assert (env.kind, env.n_prompts, env.dim) == ("linear_softmax", 4, 2)
    assert "--dim 2" in env.description  # the stored command rebuilds the policy (it left --dim out)
    assert "c1" in stdout and str(out) in stdout
    rc2, _, _ = run_cli(["make-env", "--kind", "linear_softmax", "--prompts", 4, "--actions", 3, "--dim", 2,
                         "--seed", 9, "--out", tmp_path / "f.json"], capsys)
    assert rc2 == 0 and (tmp_path / "f.json").read_text() == out.read_text()  # seeded: same file
    rc, _, err = run_cli(["make-env", "--kind", "softmax_bandit", "--prompts", 4, "--actions", 1,
                          "--out", tmp_path / "g.json"], capsys)
    assert rc == 2 and "--actions 1 must be an integer >= 2" in err, err  # the flag, not random_env's n_actions
    for flags, said in ((["--prompts", 0, "--actions", 3], "--prompts 0 must be an integer >= 1"),
                        (["--prompts", 4, "--actions", 3, "--extreme-fraction", 1.5],
                         "--extreme-fraction 1.5 must be a finite number in [0.0, 1.0]"),
                        (["--prompts", 4, "--actions", 3, "--heterogeneity", 2], "--heterogeneity 2"),
                        (["--kind", "linear_softmax", "--prompts", 4, "--actions", 3],
                         "--kind linear_softmax needs --dim (an integer >= 1)")):
        kind = [] if "--kind" in flags else ["--kind", "softmax_bandit"]
        rc, _, err = run_cli(["make-env", *kind, *flags, "--out", tmp_path / "g.json"], capsys)
        assert rc == 2 and said in err, err
    rc, _, err = run_cli(["make-env", "--kind", "softmax_bandit", "--prompts", 4, "--actions", 3,
                          "--out", tmp_path / "g.txt"], capsys)
    assert rc == 2 and "must end in .json" in err
    assert torch.isfinite(env.theta0).all()


def test_demo_quick(tmp_path, capsys, bandit_env_path):
    out = tmp_path / "demo"
    rc, stdout, err = run_cli(["demo", "--out", out, "--env", bandit_env_path, "--quick", "--no-progress"], capsys)
    assert rc == 0, err
    for sub in ("mse", "plan", "sweep"):
        assert (out / sub / "results.json").exists() and (out / sub / "report.md").exists()
    report = (out / "report.md").read_text()
    for link in ("mse/report.md", "plan/report.md", "sweep/report.md", "mse/mse.png"):
        assert link in report
    for s in ("Gradient MSE", "G*", "best G"):
        assert s in stdout


def test_sweep_gap_interval_is_student_t_and_never_below_zero():
    """Few seeds: the interval uses t_{0.975, n-1} (not 1.96), and a gap's interval is cut at 0."""
    from scipy.stats import t as student_t

    from ugrpo.experiments.sweep.env import aggregate

    gaps = [0.0, 0.0, 0.3]
    row = aggregate([{"budget": 8, "G": 4, "gaps": [g]} for g in gaps], [10])[0]
    m, se = 0.1, (sum((g - 0.1) ** 2 for g in gaps) / 2) ** 0.5 / 3**0.5
    assert row["gap_mean"] == pytest.approx(m) and row["se"] == pytest.approx(se)
    assert row["ci_low"] == 0.0  # m - t se < 0, cut
    assert row["ci_high"] == pytest.approx(m + float(student_t.ppf(0.975, 2)) * se)


def test_best_g_is_compared_with_the_other_g_by_seed():
    """Every G's run of seed s starts from seed s: the best G is compared with each other G by a paired t interval
    over seeds (before: overlap of the marginal intervals, about a 0.5% level test). Here G = 4's gap is above G = 2's
    at every seed by 0.01-0.02 while the seeds spread over 0.1-0.5, so the marginal intervals overlap and the paired
    interval does not contain 0; G = 8's differences change sign."""
    from ugrpo.experiments.sweep.env import aggregate, best_groups

    base = [0.1, 0.3, 0.5, 0.2, 0.4]
    gaps = {2: base, 4: [g + 0.01 + 0.002 * k for k, g in enumerate(base)],
            8: [g + (-0.02 if k % 2 else 0.02) for k, g in enumerate(base)]}
    runs = [{"budget": 16, "G": G, "B": 16 // G, "seed": k, "checkpoints": [0, 10], "gaps": [1.0, g]}
            for G, gs in gaps.items() for k, g in enumerate(gs)]
    rows = aggregate(runs, [0, 10])
    (last,) = [b for b in best_groups(rows, runs) if b["checkpoint"] == 10]
    r2, r4 = (next(r for r in rows if r["G"] == G and r["checkpoint"] == 10) for G in (2, 4))
    assert last["G"] == 2 and r4["ci_low"] <= r2["ci_high"]  # the marginal intervals overlap...
    assert last["not_distinguishable"] == [8]  # ...but seed by seed G = 4 is worse; G = 8 is not told apart

