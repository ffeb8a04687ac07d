"""``ugrpo sweep --config --allocation``: samples spent per evaluation, accuracy-vs-samples curves, samples to reach
uniform's final accuracy (hand-computed on made-up rows), the paired bootstrap (enumerated for two seeds), the
verdicts, and one small sweep end to end."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

os.environ.setdefault("HF_HUB_OFFLINE", "1")
TESTS_TRAIN = str(Path(__file__).resolve().parents[1] / "train")
if TESTS_TRAIN not in sys.path:
    sys.path.insert(0, TESTS_TRAIN)

from train_helpers import EVAL_PROMPTS, TRAIN_PROMPTS, small_config, write_jsonl  # noqa: E402

from ugrpo.experiments.sweep.lm_alloc import (  # noqa: E402
    FALLBACK,
    allocation_section,
    bootstrap_ratio,
    compare_rules,
    curve,
    eval_points,
    first_reach,
    reach_ratio,
)

from .conftest import assert_png, results, run_cli  # noqa: E402

METRICS = ("eval_accuracy", "eval_pass1")


# ---------------------------------------------------------------------------------------------- samples spent


def test_eval_points_reads_samples_cum_and_falls_back_to_step_times_n():
    rows = [{"step": 0, "eval_accuracy": 0.4, "eval_pass1": 0.3, "samples_cum": 0},
            {"step": 1, "loss": 0.2, "samples": 150, "samples_cum": 150},
            {"step": 2, "eval_accuracy": 0.5, "eval_pass1": 0.35, "samples": 170, "samples_cum": 320}]
    pts, src = eval_points(rows, 128, METRICS, rule="dynamic")  # a variable spend: 320, not 2 * 128
    assert src == "samples_cum"
    assert pts == {0: {"eval_accuracy": 0.4, "eval_pass1": 0.3, "samples": 0},
                   2: {"eval_accuracy": 0.5, "eval_pass1": 0.35, "samples": 320}}
    old = [{k: v for k, v in r.items() if k not in ("samples", "samples_cum")} for r in rows]  # today's uniform runs
    pts, src = eval_points(old, 128, METRICS, rule="uniform")
    assert src == FALLBACK and [p["samples"] for p in pts.values()] == [0, 256]
    with pytest.raises(ValueError, match="dynamic spends a variable number of samples per step"):
        eval_points(old, 128, METRICS, rule="dynamic")


# ---------------------------------------------------------------------------------------------- curves and reach


def test_first_reach_interpolates_and_says_not_reached():
    assert first_reach([0, 100, 200], [0.4, 0.5, 0.6], 0.6) == 200.0
    assert first_reach([0, 100, 200], [0.4, 0.65, 0.7], 0.6) == pytest.approx(80.0)  # 100 * 0.2 / 0.25
    assert first_reach([0, 100, 200], [0.4, 0.7, 0.5], 0.6) == pytest.approx(200 / 3)  # first crossing, not last
    assert first_reach([0, 100, 200], [0.6, 0.5, 0.7], 0.6) == 0.0
    assert first_reach([0, 140, 280], [0.4, 0.5, 0.55], 0.6) is None


U = np.array([[0.4, 0.5, 0.6], [0.4, 0.6, 0.6]])  # uniform, 2 seeds x 3 evaluations at 0, 100, 200 samples
S = np.array([[0.0, 100.0, 200.0], [0.0, 100.0, 200.0]])
A = np.array([[0.4, 0.6, 0.7], [0.4, 0.7, 0.7]])  # a rule that learns faster
D = np.array([[0.4, 0.5, 0.55], [0.4, 0.5, 0.55]])  # a rule that never reaches 0.6, spending more per step
SD = np.array([[0.0, 150.0, 300.0], [0.0, 130.0, 260.0]])


def test_curve_means_intervals_and_spread():
    cv = curve(A, S, [0, 10, 20])
    assert [p["samples"] for p in cv] == [0.0, 100.0, 200.0] and [p["seeds"] for p in cv] == [2, 2, 2]
    assert cv[1]["mean"] == pytest.approx(0.65)
    half = 12.706204736174698 * 0.05  # t_{0.975,1} * s / sqrt(2) with s / sqrt(2) = |0.7 - 0.6| / 2
    assert (cv[1]["ci_low"], cv[1]["ci_high"]) == (pytest.approx(0.65 - half), 1.0)  # 0.65 + 0.635: cut to 1
    raw = curve(A, S, [0, 10, 20], bounds=None)[1]
    assert (raw["ci_low"], raw["ci_high"]) == (pytest.approx(0.65 - half), pytest.approx(0.65 + half))
    assert cv[2]["ci_low"] == cv[2]["ci_high"] == pytest.approx(0.7)  # no spread: a zero-width interval
    dyn = curve(D, SD, [0, 10, 20])
    assert (dyn[1]["samples"], dyn[1]["samples_min"], dyn[1]["samples_max"]) == (140.0, 130.0, 150.0)


def test_reach_ratio_hand_computed():
    r = reach_ratio({"uniform": U, "ustat": A, "dynamic": D}, {"uniform": S, "ustat": S, "dynamic": SD})
    # uniform's mean curve 0.4, 0.55, 0.6: target 0.6, first reached at 200 samples (its last evaluation)
    assert r["uniform"] == {"target": pytest.approx(0.6), "samples_to_reach": 200.0, "uniform_samples_to_reach": 200.0,
                            "ratio": 1.0}
    # ustat's mean curve 0.4, 0.65, 0.7 crosses 0.6 at 100 * 0.2 / 0.25 = 80 samples
    assert r["ustat"]["samples_to_reach"] == pytest.approx(80.0) and r["ustat"]["ratio"] == pytest.approx(0.4)
    assert r["dynamic"]["samples_to_reach"] is None and r["dynamic"]["ratio"] is None  # not reached
    flat = reach_ratio({"uniform": np.array([[0.5, 0.4], [0.5, 0.4]]), "ustat": A[:, :2]}, {"uniform": S[:, :2],
                                                                                        "ustat": S[:, :2]})
    assert flat["uniform"]["uniform_samples_to_reach"] == 0.0 and flat["ustat"]["ratio"] is None  # no ratio


def test_paired_bootstrap_enumerated_for_two_seeds():
    """Two seeds: a paired resample is (0, 0), (1, 1) (1/4 each) or mixed (1/2). Ratios by hand: seed 0 alone,
    uniform reaches 0.6 at 200 and ustat at 100 -> 0.5; seed 1 alone, 100 and 200/3 -> 2/3; mixed -> 80/200 = 0.4.
    Each case has probability >= 1/4, so the 2.5% and 97.5% quantiles are the smallest and largest case."""
    b = bootstrap_ratio({"uniform": U, "ustat": A, "dynamic": D}, {"uniform": S, "ustat": S, "dynamic": SD},
                        reps=400, seed=1)
    assert b["ustat"]["ci_low"] == pytest.approx(0.4) and b["ustat"]["ci_high"] == pytest.approx(2 / 3)
    assert b["ustat"]["not_reached"] == 0.0 and b["ustat"]["undefined"] == 0.0
    assert b["uniform"]["ci_low"] == b["uniform"]["ci_high"] == 1.0
    assert b["dynamic"] == {"ci_low": None, "ci_high": None, "not_reached": 1.0, "undefined": 0.0, "reps": 400}
    # a rule that reaches the target in some resamples only: (0, 0) never (infinite ratio, probability 1/4);
    # (1, 1) 2/3 as above; mixed: its mean 0.4, 0.6, 0.625 reaches 0.6 at 100, uniform's at 200 -> 0.5.
    # More than 2.5% infinite: the upper end is unbounded (None)
    part = np.array([[0.4, 0.5, 0.55], [0.4, 0.7, 0.7]])
    b = bootstrap_ratio({"uniform": U, "part": part}, {"uniform": S, "part": S}, reps=400, seed=1)
    assert b["part"]["ci_high"] is None and 0.15 < b["part"]["not_reached"] < 0.35
    assert b["part"]["ci_low"] == pytest.approx(0.5)
    with pytest.raises(ValueError, match="same seeds"):
        bootstrap_ratio({"uniform": U, "ustat": A[:1]}, {"uniform": S, "ustat": S[:1]})


def _cv(mean, lo, hi, samples=200.0):
    return [{"checkpoint": 20, "samples": samples, "mean": mean, "ci_low": lo, "ci_high": hi, "seeds": 8}]


def _reach(ratio, need):
    return {"target": 0.6, "samples_to_reach": need, "uniform_samples_to_reach": 200.0, "ratio": ratio}


def _boot(lo, hi, not_reached=0.0):
    return {"ci_low": lo, "ci_high": hi, "not_reached": not_reached, "undefined": 0.0}


def test_verdicts_say_too_small_to_decide_when_intervals_overlap():
    """The final-accuracy verdict is paired by seed: e is 0.02 below uniform on every seed, its marginal interval
    overlapping uniform's (the previous non-overlap rule said "too small to decide"; issue 22)."""
    curves = {"uniform": _cv(0.6, 0.55, 0.65), "a": _cv(0.62, 0.58, 0.66), "b": _cv(0.7, 0.66, 0.74),
              "c": _cv(0.5, 0.45, 0.549), "d": _cv(0.6, 0.55, 0.65), "e": _cv(0.58, 0.54, 0.62)}
    u = [0.55, 0.6, 0.65]
    finals = {"uniform": u, "a": [x + d for x, d in zip(u, (0.05, -0.03, 0.04))], "b": [x + 0.1 for x in u],
              "c": [x - 0.1 + d for x, d in zip(u, (0.0, 0.001, -0.001))],
              "d": [x + d for x, d in zip(u, (0, .01, -.01))],
              "e": [x - 0.02 + d for x, d in zip(u, (0.0, 0.001, -0.001))]}
    reach = {"uniform": _reach(1.0, 200.0), "a": _reach(0.5, 100.0), "b": _reach(0.4, 80.0), "c": _reach(None, None),
             "d": _reach(0.9, 180.0), "e": _reach(None, None)}
    boot = {"uniform": _boot(1.0, 1.0), "a": _boot(0.3, 0.8), "b": _boot(0.2, 0.55), "c": _boot(None, None, 1.0),
            "d": _boot(0.7, 1.2), "e": _boot(0.6, None, 0.8)}
    out = {c["rule"]: c for c in compare_rules(curves, reach, boot, finals)}
    assert "final_verdict" not in out["uniform"]
    assert out["e"]["final_verdict"] == "lower than uniform (95% paired interval of the difference below 0)"
    assert out["e"]["final_diff"] == pytest.approx(-0.02) and out["e"]["final_diff_ci_high"] < 0
    assert out["d"]["final_verdict"] == "too small to decide (the 95% paired interval of the difference contains 0)"
    assert out["a"]["final_verdict"].startswith("too small to decide")
    assert out["a"]["samples_verdict"].startswith("fewer samples than uniform")
    assert out["a"]["goal_verdict"] == "too small to decide (the 95% interval contains 0.6x)"
    assert out["b"]["final_verdict"].startswith("higher than uniform")
    assert out["b"]["goal_verdict"].startswith("met")
    assert out["c"]["final_verdict"].startswith("lower than uniform")  # 0.549 < 0.55
    assert out["c"]["samples_verdict"].startswith("more samples than uniform: it does not reach")
    assert out["c"]["goal_verdict"].startswith("not met: it does not reach")
    assert out["d"]["samples_verdict"] == "too small to decide (the 95% interval contains 1x)"
    assert out["d"]["goal_verdict"].startswith("not met (95% interval above 0.6x)")
    # the mean curve does not reach the target, but 20% of resamples do, down to 0.6x: nothing is decided
    assert out["e"]["samples_verdict"] == ("too small to decide (the 95% interval contains 1x); the mean curve does "
                                           "not reach it within the run")
    assert out["e"]["goal_verdict"].startswith("too small to decide (the 95% interval contains 0.6x)")


def _run(rule, seed, accs, spent, *, cum=True):
    evals = {c: {"eval_accuracy": a, "eval_pass1": a / 2, "samples": s} for c, a, s in zip((0, 10, 20), accs, spent)}
    return {"budget": 8, "G": 4, "rule": rule, "seed": seed, "name": f"N8-G4-{rule}-s{seed}", "evals": evals,
            "samples_source": "samples_cum" if cum else FALLBACK}


def test_allocation_section_from_runs():
    runs = [_run("uniform", s, U[s], S[s], cum=False) for s in (0, 1)] + [_run("ustat", s, A[s], S[s]) for s in (1, 0)]
    sec = allocation_section(runs, [0, 10, 20], METRICS, reps=200)
    assert sec["rules"] == ["uniform", "ustat"] and sec["fallback_runs"] == ["N8-G4-uniform-s0", "N8-G4-uniform-s1"]
    assert "2 of 4 runs have none" in sec["samples"]
    acc = next(e for e in sec["cells"] if e["metric"] == "eval_accuracy")
    ustat = next(c for c in acc["comparison"] if c["rule"] == "ustat")
    assert ustat["ratio"] == pytest.approx(0.4) and ustat["samples_to_reach"] == pytest.approx(80.0)
    assert (ustat["ratio_ci_low"], ustat["ratio_ci_high"]) == (pytest.approx(0.4), pytest.approx(2 / 3))  # paired
    assert ustat["final"] == pytest.approx(0.7) and ustat["samples_final"] == 200.0
    p1 = next(e for e in sec["cells"] if e["metric"] == "eval_pass1")  # half the accuracy: the same crossings
    assert next(c for c in p1["comparison"] if c["rule"] == "ustat")["ratio"] == pytest.approx(0.4)
    no_uniform = allocation_section([r for r in runs if r["rule"] == "ustat"], [0, 10, 20], METRICS, reps=10)
    assert all(e["comparison"] is None for e in no_uniform["cells"])


# ---------------------------------------------------------------------------------------------- end to end


@pytest.fixture(scope="module")
def lm_config(tmp_path_factory, tiny_model_dir) -> Path:
    d = tmp_path_factory.mktemp("lmalloc")
    files = write_jsonl(d / "train.jsonl", TRAIN_PROMPTS), write_jsonl(d / "eval.jsonl", EVAL_PROMPTS)
    path = d / "cfg.yaml"
    path.write_text(yaml.safe_dump(small_config(tiny_model_dir, files, eval__pass1_samples=2)))
    return path


def test_sweep_config_allocation_end_to_end(tmp_path, capsys, lm_config):
    """Two rules x 2 seeds: run folders N8-G4-{rule}-s{seed} with allocation.rule set, samples_cum read, the
    allocation section, plot and report; the same command again skips every run."""
    out = tmp_path / "al"
    argv = ["sweep", "--config", lm_config, "--budget", "8", "--groups", "4", "--seeds", "2", "--steps", "2",
            "--allocation", "uniform,ustat", "--workers", "1", "--no-progress", "--out", out]
    rc, stdout, err = run_cli(argv, capsys)
    assert rc == 0, err
    names = [f"N8-G4-{r}-s{s}" for r in ("uniform", "ustat") for s in (0, 1)]
    assert sorted(p.name for p in (out / "runs").iterdir()) == sorted(names)
    for n in names:
        cfg = json.loads((out / "runs" / n / "config.json").read_text())
        assert cfg["allocation"]["rule"] == n.split("-")[2] and cfg["budget"]["group_size"] == 4
    res = results(out)
    assert res["allocation"]["fallback_runs"] == [] and res["allocation"]["rules"] == ["uniform", "ustat"]
    cell = next(e for e in res["allocation"]["cells"] if e["metric"] == "eval_accuracy")
    for rule, cv in cell["curves"].items():
        rows = [[json.loads(x) for x in (out / "runs" / f"N8-G4-{rule}-s{s}" / "metrics.jsonl").read_text().splitlines()
                 if x.strip()] for s in (0, 1)]
        spent = [[r["samples_cum"] for r in rs if "eval_accuracy" in r] for rs in rows]
        assert spent[0] == spent[1] == [0, 16]  # evaluations at steps 0 and 2, N = 8 per step for both rules
        assert [p["samples"] for p in cv] == [0.0, 16.0]
    assert {r["rule"] for r in res["rows"]} == {"uniform", "ustat"}
    assert_png(out / "allocation.png")
    report = (out / "report.md").read_text()
    assert "## Allocation rules" in report and "allocation.png" in report and "Table 2" not in report
    assert "ustat" in stdout and "samples to reach" in stdout
    rc, stdout, err = run_cli(argv, capsys)
    assert rc == 0 and "0 started, 0 resumed, 4 skipped" in stdout, err
    # another rule list in the same folder extends (or subsets) the sweep: run folders are keyed by rule
    rc, stdout, err = run_cli([*argv[:12], "uniform", *argv[13:]], capsys)
    assert rc == 0 and "0 started, 0 resumed, 2 skipped" in stdout, err


@pytest.mark.parametrize("extra, expect", [
    (["--allocation", "uniform,greedy"], "unknown rule(s) ['greedy']"),
    (["--allocation", "uniform,uniform"], "lists a rule twice"),
    (["--allocation", "ustat", "--allocation.rule", "vip"], "the sweep sets allocation.rule itself"),
    (["--allocation", "ustat", "--g-min", "3"], "with --config set the trainer's allocation fields"),
])
def test_allocation_bad_inputs_before_any_work(tmp_path, capsys, lm_config, extra, expect):
    rc, _, err = run_cli(["sweep", "--config", lm_config, "--budget", "8", "--groups", "4", *extra, "--no-progress",
                          "--out", tmp_path / "o"], capsys)
    assert rc == 2 and expect in err, err
    assert not (tmp_path / "o" / "runs").exists()


def test_resume_tolerates_a_field_the_old_record_lacks_at_its_default():
    from dataclasses import asdict

    from ugrpo.experiments.sweep.lm import check_lm_resume
    from ugrpo.train.config import config_from_dict

    new = asdict(config_from_dict({}))
    old = {k: v for k, v in new.items() if k != "allocation"}  # written before the allocation section existed
    check_lm_resume({"train_config": old}, new, "OUT")
    changed = {**new, "allocation": {**new["allocation"], "g_min": 3}}
    with pytest.raises(ValueError, match="allocation.g_min = '<absent>'"):
        check_lm_resume({"train_config": old}, changed, "OUT")


def test_command_line_keeps_override_tokens_in_order():
    """The report's command line shows ``--eval.every 20``, not ``--overrides --eval.every --overrides 20``."""
    import argparse

    from ugrpo.experiments.common import command_line

    args = argparse.Namespace(command="sweep", steps=100, overrides=["--eval.every", "20", "--optim.lr", "1e-4"],
                              allocation="uniform,ustat", ray=False, ray_address=None)
    assert command_line("sweep", args) == ["ugrpo", "sweep", "--allocation", "uniform,ustat", "--eval.every", "20",
                                           "--optim.lr", "1e-4", "--steps", "100"]
