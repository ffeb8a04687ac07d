"""``ugrpo plan``'s answer says one thing (issue 22): the G to use, how sure, and the band, with no line that
contradicts another; estimates below 0 shown clipped and said; an open band said as "at least"; pilots that cannot
tell anything say so and why. Each test is a message case the previous planner got wrong."""

from __future__ import annotations

import re

import pytest
import torch

from ugrpo.envs.generate import random_env
from ugrpo.envs.io import save_env
from ugrpo.experiments.plan.pilot_io import Pilot, save_pilot

from .conftest import results, run_cli

# a softmax bandit whose c1 is small (exact 5% band at N = 1024: 16-128); a 64 x 8 pilot with --seed 0 estimates
# c1 = -0.006, below 0, its 95% interval cut to [0, 0.006]
SMALL_C1 = dict(kind="softmax_bandit", n_prompts=64, n_actions=4, reward_spread=0.1, seed=31)
ARGS = ["--pilot-batch", 64, "--pilot-group", 8, "--budget", 1024, "--seed", 0, "--n-boot", 300]


@pytest.fixture(scope="module")
def small_c1_plan(tmp_path_factory):
    """(results, stdout, report.md) of the small-c1 pilot, with --group 8."""
    root = tmp_path_factory.mktemp("small_c1")
    save_env(random_env(**SMALL_C1), root / "env.json")
    import contextlib
    import io

    from ugrpo.cli import main as cli_main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = cli_main([str(a) for a in ["plan", "--env", root / "env.json", *ARGS, "--group", 8, "--out", root / "p"]])
    assert rc == 0
    return results(root / "p"), buf.getvalue(), (root / "p" / "report.md").read_text()


def test_negative_c1_is_shown_at_zero_beside_its_clipped_interval_and_said(small_c1_plan):
    res, stdout, report = small_c1_plan
    c1 = res["c1"]
    assert c1["estimate"] < 0 and c1["ci_low"] == 0.0  # the case: a negative point, its interval cut at 0
    row = next(line.split() for line in stdout.splitlines() if line.split()[:1] == ["c1"])
    assert row[1] == "0"  # the point is shown clipped, as its interval
    assert f"c1's unbiased estimate is {c1['estimate']:.4g}, below 0: shown at 0" in stdout
    assert "below 0 (the true c1 is >= 0; taken as 0 in the plan)" in res["message"]
    assert "c1: the unbiased estimate is below 0" in report


def test_one_answer_no_bootstrap_shares_beside_the_recommendation(small_c1_plan):
    """The previous planner printed "use G = 8: 13% of the bootstrap replicates put it within 5% of the best"
    while G = 32..1024 had 83-85%: the message now gives the G to use, its worst cost over c1's interval, and says
    that the pilot cannot tell."""
    res, stdout, _ = small_c1_plan
    band, msg = res["band"], res["message"]
    assert "of the bootstrap replicates" not in stdout and msg.count("use G =") == 1
    assert not band["decided"] and "the pilot cannot tell which G is best" in msg
    g, w = res["g_recommended"], band["recommended_worst_ratio"]
    assert f"use G = {g} (B = {1024 // g})" in msg and f"G = {g} costs at most {100 * (w - 1):.0f}% more" in msg
    a, b = band["g_range"]
    assert f"the best G is {a} at one end" in msg and f"and {b} at the other" in msg
    assert band["low"] <= g <= band["high"] and band["low"] <= a <= b <= band["high"]
    need = band["pilot_prompts_needed"]
    assert (f"a pilot of about {need} prompts (this one: 64) would probably decide, wherever c1 lies in that range"
            if need else
            "if c1 is near the bottom of that range even a pilot of 4096 prompts (64x this one) would not decide"
            ) in msg
    assert "if c1 is as its estimate says" not in msg  # the projection from the estimate alone decided in ~10%


def test_an_open_band_is_said_as_at_least_and_no_worst_candidate_inside_it(small_c1_plan):
    """Before: "95% confidence band of near-optimal G: [8, 1024]; the worst candidate G = 1024 gives 12.68x the
    best"."""
    res, stdout, _ = small_c1_plan
    band = res["band"]
    assert band["high"] == 1024 and band["open_ended"]
    assert f"G of at least {band['low']}" in res["message"] and f"[{band['low']}, 1024]" not in stdout
    assert not re.search(r"gives [0-9.]+x the best", stdout)


def test_the_console_has_one_G_row_not_G_star_beside_a_band(small_c1_plan):
    """Before: a "G*" row with the bootstrap interval of the argmins beside a different band."""
    res, stdout, _ = small_c1_plan
    lines = stdout.splitlines()
    assert not any(line.split()[:1] == ["G*"] for line in lines)
    row = next(line for line in lines if line.strip().startswith("G to use"))
    assert str(res["g_recommended"]) in row and f"G of at least {res['band']['low']}" in row


def test_the_group_in_use_is_worded_as_the_band_is(small_c1_plan):
    """Before: "your num_generations 8 is inside the band" beside "costs 19% more": now G's ratio is given at the
    estimates and over c1's interval, with whether it is within 5% for every, some or no c1 there."""
    res, stdout, _ = small_c1_plan
    cg = res["current_group"]
    lo, hi = cg["ratio_range"]
    assert lo <= cg["ratio_to_best"] <= hi and "ratio_ci" not in cg
    assert lo <= 1.05 < hi  # G = 8: near-optimal for some c1 in the interval, not all
    assert cg["message"].startswith("your G = 8 is within 5% of the best G for some c1 in its interval but not all: ")
    assert f"up to {100 * (hi - 1):.0f}% more over c1's interval" in cg["message"] and cg["message"] in stdout


def _pilot_cli(tmp_path, capsys, rewards, name):
    gen = torch.Generator().manual_seed(1)
    B, G = rewards.shape
    path = tmp_path / f"{name}.npz"
    save_pilot(path, Pilot(rewards=rewards, scores=torch.randn(B, G, 5, generator=gen, dtype=torch.float64)))
    rc, stdout, err = run_cli(["plan", "--pilot", path, "--budget", 64, "--n-boot", 200, "--group", 8, "--out",
                               tmp_path / name], capsys)
    assert rc == 0, err
    return results(tmp_path / name), stdout


@pytest.mark.parametrize("case", ["all rewards equal", "two prompts", "one prompt varies"])
def test_degenerate_pilots_cannot_tell_and_say_why(tmp_path, capsys, case):
    """Before: "100% of the bootstrap replicates..." (all rewards equal) or "G = 64 gives 20.46x" (2 prompts); one
    prompt whose rewards vary gave a confident G."""
    if case == "all rewards equal":
        rewards, why = torch.ones(16, 8, dtype=torch.float64), "has all-equal rewards"
    elif case == "one prompt varies":  # c1 compares prompts: one whose rewards vary tells nothing about it
        rewards, why = torch.zeros(8, 4, dtype=torch.float64), "only 1 of the B0 = 8 pilot prompts has rewards"
        rewards[0] = torch.tensor([1.0, 0.0, 0.0, 0.0])
    else:
        rewards = (torch.rand(2, 8, generator=torch.Generator().manual_seed(2)) < 0.5).double()
        why = "hold a single distinct prompt"
    res, stdout = _pilot_cli(tmp_path, capsys, rewards, case.replace(" ", "_"))
    assert res["g_recommended"] is None and res["band"]["cannot_tell"] and why in res["band"]["cannot_tell"]
    assert res["message"].startswith("the pilot cannot tell which G to use: ") and why in stdout
    assert "within 5%" not in res["message"] and not re.search(r"[0-9.]+x the best", stdout)
    assert res["current_group"]["message"].startswith("the pilot cannot tell how G = 8 compares")
    assert res["band"]["low"] is None and next(line for line in stdout.splitlines()
                                               if line.strip().startswith("G to use")).split()[3:5] == ["-", "-"]
    # no answer is not a decided answer, and no G* or interval comes from a pilot that says nothing (before:
    # "decided": true, a G* with [4, 4], and zero-width "95% CI"s beside "cannot be estimated")
    assert res["band"]["decided"] is False and res["g_star"] is None and res["g_star_ci"] == [None, None]
    for k in ("c1", "c2", "c3"):
        assert res[k]["ci_low"] is None and res[k]["ci_high"] is None
        row = next(line.split() for line in stdout.splitlines() if line.split()[:1] == [k])
        assert row[2] == "-", row


def test_a_negative_estimate_is_shown_at_zero_in_the_report_too(small_c1_plan):
    res, _, report = small_c1_plan
    assert f"| c1 | 0 (unbiased estimate {res['c1']['estimate']:.4g})" in report.replace("-0.00", "-0.00"), report


def test_plan_inputs_that_were_ignored_or_confusing(tmp_path, capsys):
    """--budget with one candidate says there is nothing to decide; --pilot with --pilot-batch, and an env JSON
    given as --pilot, are errors that say what to do; a --group that cannot be used is refused before any work."""
    env = tmp_path / "env.json"
    save_env(random_env(**SMALL_C1), env)
    rc, stdout, err = run_cli(["plan", "--env", env, "--pilot-batch", 16, "--pilot-group", 8, "--budget", 7,
                               "--n-boot", 200, "--save-pilot", tmp_path / "p.npz", "--out", tmp_path / "b7"], capsys)
    assert rc == 0, err
    assert "it is the only candidate (the only G >= 2 dividing N), so there is nothing to decide" in stdout
    rc, _, err = run_cli(["plan", "--pilot", tmp_path / "p.npz", "--pilot-batch", 8, "--budget", 64, "--out",
                          tmp_path / "pb"], capsys)
    assert rc == 2 and "a saved --pilot is used whole: drop them" in err, err
    rc, stdout, err = run_cli(["plan", "--pilot", tmp_path / "p.npz", "--budget", 64, "--n-boot", 20, "--out",
                               tmp_path / "nb"], capsys)
    assert rc == 0 and "(only 20 bootstrap replicates: the ends of the 95% intervals rest on a few of them" in stdout
    rc, _, err = run_cli(["plan", "--pilot", env, "--budget", 64, "--out", tmp_path / "pj"], capsys)
    assert rc == 2 and f"a JSON file, not a pilot .npz; an env file (from `ugrpo make-env`) goes to --env {env}" in err
    for g, said in ((1, "--group 1: a group needs G >= 2"),
                    (3, "--group G=3 does not divide --budget N=64 (B = N/G prompts per step must be an integer); "
                        "choose G among the divisors of N from 2 up: [2, 4, 8, 16, 32, 64]")):
        rc, _, err = run_cli(["plan", "--env", env, "--pilot-batch", 16, "--pilot-group", 8, "--budget", 64,
                              "--group", g, "--out", tmp_path / f"g{g}"], capsys)
        assert rc == 2 and said in err, err
        assert not (tmp_path / f"g{g}").exists()  # refused before the pilot, so no folder is left


def test_a_policy_whose_rewards_never_vary_plans_without_an_error(tmp_path, capsys):
    """Every reward 1: the exact variances computed in floating point came out as -1e-18, and the planner refused
    them ("exact constants must be >= 0"); they are 0, and the pilot cannot tell."""
    env = tmp_path / "one.json"
    save_env(random_env("softmax_bandit", n_prompts=16, n_actions=4, difficulty=-200.0, reward_spread=0.0, seed=2),
             env)
    rc, stdout, err = run_cli(["plan", "--env", env, "--pilot-batch", 16, "--pilot-group", 8, "--budget", 64,
                               "--n-boot", 200, "--out", tmp_path / "p"], capsys)
    assert rc == 0, err
    assert "the pilot cannot tell which G to use: every one of the B0 = 16 pilot prompts has all-equal rewards" \
        in stdout
    ex = results(tmp_path / "p")["exact"]
    assert ex["c2"] >= 0 and ex["c3"] >= 0
