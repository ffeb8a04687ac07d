"""``ugrpo plan``: env pilot, pilot files (scores / gram), exact block, bad inputs."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ugrpo.envs.io import load_env
from ugrpo.experiments.plan.pilot_io import Pilot, load_pilot, save_pilot
from ugrpo.stats.planner import bound

from .conftest import assert_png, results, run_cli

KEYS = {"c1", "c2", "c3", "g_star_continuous", "g_star_paper", "g_star", "g_star_ci", "candidates",
        "message", "budget", "pilot"}
PLAN = ["--pilot-batch", 40, "--pilot-group", 6, "--budget", 96, "--seed", 7, "--n-boot", 300]


def _plan_env(tmp_path, capsys, env_path, name="plan", extra=()):
    out = tmp_path / name
    rc, stdout, err = run_cli(["plan", "--env", env_path, *PLAN, "--out", out, *extra], capsys)
    assert rc == 0, err
    return out, stdout


def test_plan_env_contract_and_exact_block(tmp_path, capsys, linear_env_path):
    out, stdout = _plan_env(tmp_path, capsys, linear_env_path)
    for f in ("config.json", "metrics.jsonl", "results.json", "plan.png", "report.md"):
        assert (out / f).exists(), f
    assert_png(out / "plan.png")
    res = results(out)
    assert KEYS | {"exact"} <= set(res)
    for k in ("c1", "c2", "c3"):
        assert {"estimate", "ci_low", "ci_high"} <= set(res[k])
        assert res[k]["ci_low"] <= res[k]["estimate"] <= res[k]["ci_high"]
    assert res["pilot"] == {**res["pilot"], "B0": 40, "G0": 6, "samples": 240}
    assert res["budget"] == 96 and len(res["g_star_ci"]) == 2
    # candidates: every divisor G >= 2 of N, with the Thm 7 bound at the pilot's constants (clipped at 0)
    assert [c["G"] for c in res["candidates"]] == [g for g in range(2, 97) if 96 % g == 0]
    c1, c2, c3 = (max(res[k]["estimate"], 0.0) for k in ("c1", "c2", "c3"))
    for c in res["candidates"]:
        assert c["B"] * c["G"] == 96
        assert c["predicted_mse"] == pytest.approx(bound(c1, c2, c3, 96, c["G"]), rel=1e-12)
    # exact block = env.exact at theta0, and the exact G* is the brute-force argmin of the bound
    env = load_env(linear_env_path)
    ex = env.exact(env.theta0)
    pm = ex.policy_moments
    e = res["exact"]
    assert (e["c1"], e["c2"], e["c3"]) == (pm.c1, pm.c2, pm.c3)
    divisors = [g for g in range(2, 97) if 96 % g == 0]
    assert e["g_star"] == min(divisors, key=lambda g: bound(pm.c1, pm.c2, pm.c3, 96, g))
    assert e["g_star_continuous"] == pytest.approx(1 + (pm.c3 / pm.c1) ** 0.5)
    # the exact bound curve is GRPO's exact minibatch MSE with B = N / G (Prop. 3 = Thm 7 bound)
    for pt in e["curve"]:
        assert pt["mse"] == pytest.approx(bound(pm.c1, pm.c2, pm.c3, 96, pt["G"]), rel=1e-10)
    assert "G to use" in stdout and "exact" in stdout


def test_pilot_roundtrip_same_results(tmp_path, capsys, bandit_env_path):
    """env -> --save-pilot -> plan --pilot: identical estimates with the same seed; gram-only too."""
    pilot_path = tmp_path / "pilot.npz"
    out1, _ = _plan_env(tmp_path, capsys, bandit_env_path, "a", ["--save-pilot", pilot_path])
    rc, _, err = run_cli(["plan", "--pilot", pilot_path, "--budget", 96, "--seed", 7, "--n-boot", 300,
                          "--out", tmp_path / "b"], capsys)
    assert rc == 0, err
    r1, r2 = results(out1), results(tmp_path / "b")
    assert "exact" not in r2
    for k in KEYS - {"pilot"}:
        assert r1[k] == r2[k], k
    assert r1["pilot"]["meta"] == r2["pilot"]["meta"] and r2["pilot"]["meta"]["seed"] == 7

    p = load_pilot(pilot_path)
    assert p.scores is not None and p.B0 == 40 and p.G0 == 6
    gram_path = save_pilot(tmp_path / "gram.npz", Pilot(rewards=p.rewards, gram=p.gram_matrix(), meta=p.meta))
    with np.load(gram_path) as z:
        assert "scores" not in z.files and z["gram"].shape == (240, 240)
    rc, _, err = run_cli(["plan", "--pilot", gram_path, "--budget", 96, "--seed", 7, "--n-boot", 300,
                          "--out", tmp_path / "c"], capsys)
    assert rc == 0, err
    r3 = results(tmp_path / "c")
    for k in ("c1", "c2", "c3"):
        for f in ("estimate", "ci_low", "ci_high", "se"):
            assert r3[k][f] == pytest.approx(r2[k][f], rel=1e-9, abs=1e-12), (k, f)
    assert r3["g_star"] == r2["g_star"]
    for a, b in zip(r3["g_star_ci"], r2["g_star_ci"]):
        assert a == b or a == pytest.approx(b, rel=1e-9)


def _bad(tmp_path, capsys, pilot, *expect):
    rc, out, err = run_cli(["plan", "--pilot", pilot, "--budget", 64, "--out", tmp_path / "o"], capsys)
    assert rc == 2, (out, err)
    assert err.startswith("ugrpo plan: error:") and len(err.strip().splitlines()) == 1, err
    for e in expect:
        assert e in err, (e, err)


def test_plan_bad_pilots(tmp_path, capsys):
    rng = np.random.default_rng(0)
    _bad(tmp_path, capsys, tmp_path / "missing.npz", "missing.npz", "file not found")
    (tmp_path / "text.npz").write_text("not a zip")
    _bad(tmp_path, capsys, tmp_path / "text.npz", "text.npz", "not a readable .npz")
    np.savez(tmp_path / "norew.npz", scores=rng.normal(size=(8, 4, 3)))
    _bad(tmp_path, capsys, tmp_path / "norew.npz", "missing array 'rewards'")
    np.savez(tmp_path / "noscore.npz", rewards=rng.random((8, 4)))
    _bad(tmp_path, capsys, tmp_path / "noscore.npz", "'scores'", "'gram'", "neither")
    np.savez(tmp_path / "shape.npz", rewards=rng.random((8, 4)), scores=rng.normal(size=(8, 5, 3)))
    _bad(tmp_path, capsys, tmp_path / "shape.npz", "'scores' must have shape (B0, G0, D) = (8, 4, D)", "(8, 5, 3)")
    np.savez(tmp_path / "gram.npz", rewards=rng.random((8, 4)), gram=np.eye(30))
    _bad(tmp_path, capsys, tmp_path / "gram.npz", "'gram' must have shape", "(32, 32)", "(30, 30)")
    np.savez(tmp_path / "g0.npz", rewards=rng.random((8, 3)), scores=rng.normal(size=(8, 3, 2)))
    _bad(tmp_path, capsys, tmp_path / "g0.npz", "G0 = 3 < 4")
    np.savez(tmp_path / "meta.npz", rewards=rng.random((8, 4)), scores=rng.normal(size=(8, 4, 2)), meta=np.array("{x"))
    _bad(tmp_path, capsys, tmp_path / "meta.npz", "'meta' is not a JSON string")


def test_plan_bad_arguments(tmp_path, capsys, bandit_env_path):
    rc, _, err = run_cli(["plan", "--env", bandit_env_path, "--pilot-batch", 16, "--pilot-group", 3,
                          "--budget", 64, "--out", tmp_path / "o"], capsys)
    assert rc == 2 and "G0 = 3" in err and ">= 4" in err
    rc, _, err = run_cli(["plan", "--budget", 64, "--out", tmp_path / "o"], capsys)
    assert rc == 2 and "exactly one of --env" in err
    rc, _, err = run_cli(["plan", "--env", bandit_env_path, "--budget", 64, "--out", tmp_path / "o"], capsys)
    assert rc == 2 and "--pilot-batch" in err


def test_pilot_meta_and_dtype_roundtrip(tmp_path):
    rng = np.random.default_rng(1)
    import torch

    p = Pilot(rewards=torch.tensor(rng.random((3, 4))), scores=torch.tensor(rng.normal(size=(3, 4, 2))),
              meta={"model": "tiny", "step": 3})
    q = load_pilot(save_pilot(tmp_path / "p.npz", p, with_gram=True))
    assert q.meta == {"model": "tiny", "step": 3}
    assert torch.equal(q.rewards, p.rewards) and torch.equal(q.scores, p.scores)
    torch.testing.assert_close(q.gram, p.gram_matrix())
    with pytest.raises(ValueError, match="must end in .npz"):
        save_pilot(tmp_path / "p.bin", p)
    json.dumps(q.meta)


def test_plan_band_group_and_interval_method(tmp_path, capsys, linear_env_path):
    """results.json holds the band; --group answers on the console for an env; --ci-method percentile is kept."""
    out, stdout = _plan_env(tmp_path, capsys, linear_env_path, extra=["--group", 8])
    res = results(out)
    band = res["band"]
    assert {"tolerance", "G", "low", "high", "open_ended", "probability", "recommended", "decided", "cannot_tell",
            "g_range", "c1_range", "recommended_worst_ratio", "worst", "pilot_prompts_needed", "c1_status"} <= set(band)
    assert res["g_recommended"] == band["recommended"] and band["low"] <= band["recommended"] <= band["high"]
    assert res["interval_method"] == "studentized-log" and band["c1_status"] in ("positive", "interval_contains_zero",
                                                                              "negative")
    cands = res["candidates"]
    best = min(c["predicted_mse"] for c in cands)
    assert band["G"] == [c["G"] for c in cands if c["predicted_mse"] <= 1.05 * best]  # the point band
    assert [c["band_probability"] for c in cands] == [band["probability"][str(c["G"])] for c in cands]
    worst = max(cands, key=lambda c: c["worst_ratio"])  # the largest ratio over c1's interval (M41)
    assert band["worst"] == {"G": worst["G"], "ratio": pytest.approx(worst["worst_ratio"])}
    assert min(c["expected_ratio"] for c in cands) >= 1.0
    rec = next(c for c in cands if c["G"] == band["recommended"])
    assert band["decided"] == (rec["worst_ratio"] <= 1.05) and band["recommended_worst_ratio"] == rec["worst_ratio"]
    if not band["decided"]:  # no G is within 5% for every c1 in its interval: the smallest expected ratio
        assert rec["expected_ratio"] == min(c["expected_ratio"] for c in cands)
    g8 = next(c for c in cands if c["G"] == 8)
    cg = res["current_group"]
    assert cg["ratio_to_best"] == pytest.approx(g8["predicted_mse"] / best)
    assert cg["ratio_range"][0] <= cg["ratio_to_best"] <= cg["ratio_range"][1] == pytest.approx(g8["worst_ratio"])
    assert cg["message"].startswith("your G = 8 is ") and cg["message"] in stdout
    assert f"use G = {res['g_recommended']} " in stdout and "Planner: use G" in (out / "report.md").read_text()
    rc, _, err = run_cli(["plan", "--env", linear_env_path, *PLAN, "--out", tmp_path / "p", "--ci-method",
                          "percentile"], capsys)
    assert rc == 0, err
    pct = results(tmp_path / "p")
    assert pct["interval_method"] == "percentile" and pct["c1"]["estimate"] == res["c1"]["estimate"]
    rc, _, err = run_cli(["plan", "--env", linear_env_path, *PLAN, "--out", tmp_path / "q", "--group", 5], capsys)
    assert rc == 2 and "5" in err and "96" in err
