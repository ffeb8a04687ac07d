"""``ugrpo sweep --allocation``: run folder on the demo and on a heterogeneous make-env instance, the metrics rows
equal direct runs, resume, interpolation of samples-to-reach, and bad inputs that fail before any work."""

from __future__ import annotations

import pytest

from ugrpo.envs.algorithm1 import run_algorithm1_alloc
from ugrpo.envs.io import builtin_env, load_env
from ugrpo.experiments.sweep.env import aggregate_alloc, compare_to_uniform, samples_to_reach

from .conftest import assert_png, metrics, results, run_cli

FAST = ["--steps", 6, "--lr", 2, "--seeds", 2, "--checkpoints", "0,3,6", "--no-progress"]


def test_demo_run_folder_and_rows(tmp_path, capsys):
    out = tmp_path / "alloc"
    rc, stdout, err = run_cli(["sweep", "--env", "builtin:demo", "--budget", 64, "--groups", 8,
                               "--allocation", "uniform,vip,knapsack,ustat", *FAST, "--out", out], capsys)
    assert rc == 0, err
    for f in ("config.json", "metrics.jsonl", "results.json", "allocation_sweep.png", "report.md"):
        assert (out / f).exists(), f
    assert_png(out / "allocation_sweep.png")
    res = results(out)
    assert res["G_uniform"] == 8 and res["B"] == 8
    assert len(res["rows"]) == 4 * 3 and len(metrics(out)) == 4 * 2
    assert {v["rule"] for v in res["versus_uniform"]} == {"vip", "knapsack", "ustat"}
    env = builtin_env("demo")
    for r in res["rows"]:
        assert r["samples"] == 64 * r["checkpoint"]
        if r["checkpoint"] == 0:
            assert r["gap_mean"] == pytest.approx(env.gap(), abs=1e-12)
        assert r["ci_low"] is None or 0.0 <= r["ci_low"] <= r["gap_mean"] <= r["ci_high"]
    m = next(r for r in metrics(out) if (r["rule"], r["seed"]) == ("ustat", 1))
    direct = run_algorithm1_alloc(env, rule="ustat", N=64, B=8, steps=6, lr=2.0, seeds=[1], checkpoints=[0, 3, 6])
    assert m["gaps"] == pytest.approx(direct.gaps[0].tolist(), abs=1e-12)
    assert "ustat" in stdout and "report.md" in stdout
    assert "too small to decide" in (out / "report.md").read_text() or "than uniform" in (out / "report.md").read_text()
    text = " ".join((out / "report.md").read_text().split())
    assert "Welch ;" not in text and text.count("the difference to uniform is per seed") == 1
    before = (out / "metrics.jsonl").read_text()
    rc, _, err = run_cli(["sweep", "--env", "builtin:demo", "--budget", 64, "--groups", 8,
                          "--allocation", "uniform,vip,knapsack,ustat", *FAST, "--out", out], capsys)
    assert rc == 0, err
    assert (out / "metrics.jsonl").read_text() == before  # resumed: nothing re-run


def test_heterogeneous_instance_with_exact_moments(tmp_path, capsys):
    env_path = tmp_path / "het.json"
    rc, _, err = run_cli(["make-env", "--kind", "softmax_bandit", "--prompts", 12, "--actions", 4,
                          "--extreme-fraction", 0.75, "--score-reward-corr", -0.8, "--seed", 7, "--out", env_path],
                         capsys)
    assert rc == 0, err
    out = tmp_path / "het"
    rc, _, err = run_cli(["sweep", "--env", env_path, "--budget", 48, "--allocation", "uniform,ustat",
                          "--allocation-moments", "true", *FAST, "--out", out], capsys)
    assert rc == 0, err
    res = results(out)
    env = load_env(env_path)
    pm = env.exact().policy_moments
    best = min([2, 4, 8, 16], key=lambda G: (pm.c1 + pm.c2 / G + pm.c3 / (G * (G - 1))) * G / 48)
    assert res["G_uniform"] == best and res["config"]["moments"] == "exact"
    assert all(r["frac_samples_zero_std"] >= 0 for r in res["rows"])


def test_samples_to_reach_and_verdicts():
    """The verdict against uniform is a paired test by seed: vip's gap is below uniform's on every seed by 0.05 while
    the seeds' spread (0.1-0.5) makes the two marginal intervals overlap; the previous non-overlap rule said "cannot
    tell" there (issue 22)."""
    assert samples_to_reach([(0, 1.0), (100, 0.5), (200, 0.2)], 0.35) == pytest.approx(150.0)
    assert samples_to_reach([(0, 1.0), (100, 0.5)], 0.1) is None
    u = [0.5, 0.3, 0.1, 0.4, 0.2]
    final = {"uniform": u, "ustat": [g * 0.6 for g in u], "vip": [g - 0.05 + 0.001 * k for k, g in enumerate(u)],
             "knapsack": [g + (0.02 if k % 2 else -0.02) for k, g in enumerate(u)], "copy": list(u)}
    runs = [{"rule": rule, "seed": k, "checkpoints": [0, 10], "gaps": [1.0, g], "frac_samples_zero_std": 0.0}
            for rule, gs in final.items() for k, g in enumerate(gs)]
    rows = aggregate_alloc(runs, 10)
    v = {r["rule"]: r for r in compare_to_uniform(rows, runs)}
    mean = {rule: sum(gs) / 5 for rule, gs in final.items()}
    assert v["ustat"]["verdict"].startswith("lower gap than uniform") and v["ustat"]["paired_seeds"] == 5
    assert v["ustat"]["samples_to_uniform_final"] == pytest.approx(100 * (1 - mean["uniform"]) / (1 - mean["ustat"]))
    r_vip, r_u = (next(r for r in rows if r["rule"] == k and r["checkpoint"] == 10) for k in ("vip", "uniform"))
    assert r_vip["ci_high"] > r_u["ci_low"]  # the marginal intervals overlap...
    assert v["vip"]["verdict"] == "lower gap than uniform (95% paired interval of the difference below 0)"
    assert v["vip"]["diff_ci_high"] < 0 and v["vip"]["diff"] == pytest.approx(mean["vip"] - mean["uniform"])
    assert v["knapsack"]["verdict"].startswith("too small to decide")  # +-0.02: the paired interval contains 0
    assert v["knapsack"]["diff_ci_low"] < 0 < v["knapsack"]["diff_ci_high"]
    # samples to reach uniform's final mean over uniform's own (not over all it spent): a rule that is uniform has
    # ratio 1 and says so (before: a saving credited to a copy of uniform wherever uniform's curve is not monotone)
    assert v["ustat"]["samples_ratio"] == pytest.approx(v["ustat"]["samples_to_uniform_final"] / 100)
    c = v["copy"]
    assert c["samples_ratio"] == 1 and c["samples_ratio_ci_low"] == 1 == c["samples_ratio_ci_high"]
    assert v["copy"]["verdict"].startswith("the same as uniform at every seed (every paired difference is 0")
    bumpy = [dict(r, gaps=[1.0, 0.2, 0.3], checkpoints=[0, 5, 10]) for r in runs if r["rule"] in ("uniform", "copy")]
    w = {r["rule"]: r for r in compare_to_uniform(aggregate_alloc(bumpy, 10), bumpy)}["copy"]
    assert w["samples_to_uniform_final"] < 100 and w["samples_ratio"] == 1  # uniform reached 0.3 before its end


@pytest.mark.parametrize("extra,match", [
    (["--allocation", "uniform,dynamic"], r"unknown rule\(s\) \['dynamic'\]; choose among \['uniform', 'vip'"),
    (["--allocation", "ustat", "--groups", 2, "--g-min", 3], r"budget N = 64 is below B \* g_min = 32 \* 3"),
    (["--allocation", "ustat", "--g-min", 4, "--g-max", 3], r"need 2 <= g_min <= g_max"),
    (["--allocation", "ustat", "--groups", 64, "--g-max", 32], r"exceeds B \* g_max = 1 \* 32"),
    (["--allocation", "ustat", "--baseline", "vanilla"], "uses the LOO baseline"),
    (["--allocation", "ustat", "--allocation-moments", "maybe"], "give true"),
    (["--g-min", 3], r"--g-min only apply with --allocation"),
    (["--allocation", "ustat", "--lr", "1,2"], "give one --lr"),
])
def test_bad_input_fails_before_any_work(tmp_path, capsys, extra, match):
    import re

    out = tmp_path / "bad"
    fast = [a for i, a in enumerate(FAST) if "--lr" not in (FAST[i], FAST[i - 1])] if "--lr" in extra else FAST
    rc, _, err = run_cli(["sweep", "--env", "builtin:demo", "--budget", 64, *fast, *extra, "--out", out], capsys)
    assert rc == 2
    assert re.search(match, err), err
    assert not (out / "metrics.jsonl").exists()


def test_prompt_is_rules_in_the_env_sweep(tmp_path, capsys):
    """uniform-is spends N every step; ustat-is N in expectation, and its rows sit at the seeds' mean samples spent;
    a run row equals the direct run; --is-lambda reaches the law (docs/math.md M52-M57)."""
    out = tmp_path / "is"
    rc, stdout, err = run_cli(["sweep", "--env", "builtin:demo", "--budget", 64, "--groups", 8, "--allocation",
                               "uniform,uniform-is,ustat-is", "--is-lambda", 0.2, *FAST, "--out", out], capsys)
    assert rc == 0, err
    res = results(out)
    assert res["config"]["is_lambda"] == 0.2
    assert {v["rule"] for v in res["versus_uniform"]} == {"uniform-is", "ustat-is"}
    rows = {(r["rule"], r["checkpoint"]): r for r in res["rows"]}
    assert rows[("uniform-is", 6)]["samples"] == 6 * 64
    runs = {(r["rule"], r["seed"]): r for r in metrics(out)}
    spent = [runs[("ustat-is", s)]["samples"][-1] for s in (0, 1)]
    assert rows[("ustat-is", 6)]["samples"] == pytest.approx(sum(spent) / 2)
    direct = run_algorithm1_alloc(builtin_env("demo"), rule="ustat-is", N=64, B=8, steps=6, lr=2.0, seeds=[1],
                                  checkpoints=[0, 3, 6], is_lambda=0.2)
    assert runs[("ustat-is", 1)]["gaps"] == pytest.approx(direct.gaps[0].tolist(), abs=1e-12)
    assert runs[("ustat-is", 1)]["samples"] == direct.samples[0].tolist()
    rc, _, err = run_cli(["sweep", "--env", "builtin:demo", "--budget", 64, "--allocation", "ustat-is",
                          "--is-lambda", 0, *FAST, "--out", tmp_path / "bad"], capsys)
    assert rc == 2 and "--is-lambda=0.0 must be a number in (0, 1]" in err
    rc, _, err = run_cli(["sweep", "--env", "builtin:demo", "--budget", 64, "--allocation", "ustat-is",
                          "--is-guard", "maybe", *FAST, "--out", tmp_path / "bad2"], capsys)
    assert rc == 2 and "--is-guard 'maybe': give true or false" in err
    rc, _, err = run_cli(["sweep", "--env", "builtin:demo", "--budget", 64, "--groups", 8, "--allocation",
                          "uniform-is", "--is-guard", "false", *FAST, "--out", tmp_path / "off"], capsys)
    assert rc == 0 and results(tmp_path / "off")["config"]["is_guard"] is False
