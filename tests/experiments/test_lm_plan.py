"""``ugrpo plan --model``: a sketched LM pilot, its pilot.npz round trip, costs, and bad inputs
(a randomly initialised tiny model saved to tmp_path; no downloads)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from ugrpo.experiments.plan.pilot_io import load_pilot
from ugrpo.stats.components import estimate_components

from .conftest import assert_png, results, run_cli

TASK = ["--task", "arithmetic", "--task-option", "prompt_style=compact", "--task-option", "difficulty=easy",
        "--task-option", "n_train=20", "--task-option", "n_eval=5"]
PILOT = ["--pilot-batch", 6, "--pilot-group", 8, "--sketch-dim", 16, "--max-new-tokens", 4, "--n-boot", 200]


def test_lm_plan_and_pilot_roundtrip(tmp_path, capsys, tiny_model_dir, task_args):
    out = tmp_path / "p"
    rc, stdout, err = run_cli(["plan", "--model", tiny_model_dir, *task_args, *PILOT, "--budget", 48, "--group", 8,
                               "--seed", 4, "--out", out], capsys)
    assert rc == 0, err
    for f in ("config.json", "metrics.jsonl", "results.json", "plan.png", "report.md", "pilot.npz"):
        assert (out / f).exists(), f
    assert_png(out / "plan.png")
    res = results(out)
    assert {"c1", "c2", "c3", "g_star", "g_star_ci", "candidates", "budget", "pilot", "pilot_cost",
            "step_cost"} <= set(res)
    assert res["pilot"]["B0"] == 6 and res["pilot"]["G0"] == 8 and res["pilot"]["samples"] == 48
    pc, sc = res["pilot_cost"], res["step_cost"]
    assert pc["samples"] == 48 and pc["seconds"] > 0 and pc["seconds_sketch"] > 0
    assert sc["samples"] == 48 and sc["seconds"] > 0 and "estimated" in sc["how"]
    assert res["current_group"]["G"] == 8 and res["current_group"]["ratio_to_best"] >= 1
    assert "Cost" in (out / "report.md").read_text() and "pilot:" in stdout
    # the pilot file: sketched scores (B0, G0, k), rewards, meta naming the model
    pilot = load_pilot(out / "pilot.npz")
    assert tuple(pilot.scores.shape) == (6, 8, 16) and pilot.meta["sketch_dim"] == 16
    assert pilot.meta["model"] == str(tiny_model_dir) and pilot.meta["pilot_cost"]["samples"] == 48
    assert 0.1 < float(pilot.rewards.mean()) < 0.9 and pilot.meta["task"] == "custom"
    # c's equal estimate_components on the saved arrays with the same bootstrap seed
    vc = estimate_components(pilot.rewards, scores=pilot.scores, n_boot=200, generator=torch.Generator().manual_seed(4))
    for k in ("c1", "c2", "c3"):
        assert res[k]["estimate"] == pytest.approx(getattr(vc, k).estimate, rel=1e-12, abs=1e-12)
    # recomputation from the pilot file: identical c's at the same budget, and for another budget
    for N2 in (48, 96):
        out2 = tmp_path / f"re{N2}"
        rc, _, err = run_cli(["plan", "--pilot", out / "pilot.npz", "--budget", N2, "--seed", 4, "--n-boot", 200,
                              "--out", out2], capsys)
        assert rc == 0, err
        res2 = results(out2)
        for k in ("c1", "c2", "c3"):
            assert res2[k] == res[k], k
        assert res2["budget"] == N2 and res2["pilot"]["meta"]["model"] == str(tiny_model_dir)
    assert json.loads((out / "config.json").read_text())["command"] == "plan"


def test_chunk_size_changes_memory_not_the_plan(tmp_path, capsys, tiny_model_dir, task_args):
    """--chunk-size 5 (groups of 8 cut across generate calls and backward passes) gives the same samples and
    rewards, bit for bit, scores equal to float32 rounding (other batch shapes: 8e-6 of scores of order 0.1-1) and
    so the same constants as the default 512 rows per pass; its config records it."""
    got = {}
    for chunk in (None, 5):
        out = tmp_path / f"c{chunk}"
        extra = [] if chunk is None else ["--chunk-size", chunk]
        rc, _, err = run_cli(["plan", "--model", tiny_model_dir, *task_args, *PILOT, "--budget", 48, "--seed", 4,
                              *extra, "--out", out], capsys)
        assert rc == 0, err
        got[chunk] = load_pilot(out / "pilot.npz"), results(out)
        assert json.loads((out / "config.json").read_text())["chunk_size"] == (chunk or 512)
    (p0, r0), (p5, r5) = got[None], got[5]
    assert torch.equal(p0.rewards, p5.rewards)
    torch.testing.assert_close(p0.scores, p5.scores, rtol=1e-4, atol=1e-5 * float(p0.scores.abs().max()))
    for k in ("c1", "c2", "c3"):
        assert r5[k]["estimate"] == pytest.approx(r0[k]["estimate"], rel=1e-4), k


def test_lm_plan_bad_inputs_exit_2(tmp_path, capsys, tiny_model_dir):
    base = ["plan", "--model", tiny_model_dir, "--budget", 48, "--out", tmp_path / "o"]
    cases = [
        ([*TASK, "--pilot-batch", 6, "--pilot-group", 3], "G0 = 3"),
        ([*TASK, *PILOT, "--group", 5], "--group G=5 does not divide --budget N=48 (B = N/G prompts per step must "
                                        "be an integer); choose G among the divisors of N from 2 up: [2, 3, 4, 6"),
        (["--task", "nope", *PILOT], "unknown task 'nope'"),
        ([*PILOT], "--model needs --task"),
        ([*TASK], "--pilot-batch"),
        ([*TASK, *PILOT, "--env", "builtin:demo"], "exactly one of --env, --pilot or --model"),
        ([*TASK, *PILOT, "--chunk-size", 0], "--chunk-size >= 1"),
    ]
    for extra, msg in cases:
        rc, _, err = run_cli([*base, *extra], capsys)
        assert rc == 2 and err.startswith("ugrpo plan: "
                                          "error:") and msg in err and len(err.strip().splitlines()) == 1, (extra, err)
    rc, _, err = run_cli(["plan", "--env", "builtin:demo", "--pilot-batch", 8, "--pilot-group", 4, "--budget", 32,
                          "--task", "arithmetic", "--out", tmp_path / "o"], capsys)
    assert rc == 2 and "need --model" in err
    assert not np.any([(tmp_path / "o" / "pilot.npz").exists()])
