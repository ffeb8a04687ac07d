"""``ugrpo mse --model``: reference corrections (unbiased against an exact env), the batched block
estimator, and the command end to end on a randomly initialised tiny model (no downloads)."""

from __future__ import annotations

import itertools
import json
import math

import pytest
import torch

from ugrpo.envs.generate import random_env
from ugrpo.experiments.mse.env import ESTIMATORS
from ugrpo.experiments.mse.lm import _components
from ugrpo.stats.advantages import compute_advantages
from ugrpo.stats.estimator import prompt_gradients
from ugrpo.stats.mc_mse import block_squared_errors, reference_moments

from .conftest import assert_png, metrics, results, run_cli

DT = torch.float64


TASK = ["--task", "arithmetic", "--task-option", "prompt_style=compact", "--task-option", "difficulty=easy",
        "--task-option", "n_train=20", "--task-option", "n_eval=5"]


# ---------------------------------------------------------------------------------------------
# the math on exact synthetic policies


class _Sampler:
    """Samples of one given prompt from an exact env: (scores (n, D), rewards (n,))."""

    def __init__(self, env):
        self.p = env.probs(env.theta0)                        # (P, K)
        self.W = env.score_table(env.theta0)                  # (P, K, D)
        self.r = env.reward_mean                              # (P, K)

    def __call__(self, prompt: int, n: int, gen) -> tuple[torch.Tensor, torch.Tensor]:
        a = torch.multinomial(self.p[prompt], n, replacement=True, generator=gen)
        return self.W[prompt, a], torch.bernoulli(self.r[prompt, a], generator=gen)


def _study(sample, P: int, M: int, R: int, B: int, Gmax: int, gen):
    ref = [sample(p, M, gen) for p in range(P)]
    ref_s, ref_z = torch.stack([s for s, _ in ref]), torch.stack([z for _, z in ref])
    idx = torch.randint(P, (R, B), generator=gen)
    est = [sample(int(p), Gmax, gen) for p in idx.reshape(-1)]
    D = ref_s.shape[-1]
    est_s = torch.stack([s for s, _ in est]).view(R, B, Gmax, D)
    est_z = torch.stack([z for _, z in est]).view(R, B, Gmax)
    return ref_s, ref_z, idx, est_s, est_z


def test_reference_corrections_unbiased_against_exact_mse():
    """With a tiny reference (M = 5), the corrected MSE of every estimator (total and within the drawn
    prompts) and the corrected residual
    match the exact finite-G MSE (Prop. 3, docs/math.md M11-M12) within 5 SE over 3000 independent
    studies, while the uncorrected ones are more than 5 SE above it (so the test can fail)."""
    env = random_env("softmax_bandit", n_prompts=3, n_actions=3, logit_scale=0.8, seed=3)
    ex = env.exact(env.theta0)
    sample, gen = _Sampler(env), torch.Generator().manual_seed(11)
    P, M, R, B, Gmax, G = 3, 5, 4, 2, 8, 4
    corrected = {e: [] for e in (*ESTIMATORS, "residual", *(f"within_{e}" for e in ESTIMATORS))}
    raw = {e: [] for e in ("grpo", "oracle_ref_only")}
    for _ in range(3000):
        ref_s, ref_z, idx, est_s, est_z = _study(sample, P, M, R, B, Gmax, gen)
        ref = reference_moments(ref_s, ref_z)
        err = block_squared_errors(est_s, est_z, ref.v_ref[idx], ref.g_ref, G, g_draws=ref.g_x[idx])
        extra = ref.oracle_extra(B, G)
        w_ref = float(ref.within_ref_err(idx).mean())
        for e in ESTIMATORS:
            corrected[e].append(float(err[e].mean()) - ref.ref_err - (extra if e == "oracle" else 0.0))
            corrected[f"within_{e}"].append(float(err[f"within_{e}"].mean()) - w_ref - (extra if e == "oracle"
                                                                                        else 0.0))
        corrected["residual"].append(float(err["residual"].mean()) - extra)
        raw["grpo"].append(float(err["grpo"].mean()))
        raw["oracle_ref_only"].append(float(err["oracle"].mean()) - ref.ref_err)
    pm = ex.policy_moments
    exact = {e: ex.mse(e, B, G) for e in ESTIMATORS}
    exact["residual"] = pm.c3 / (B * G * (G - 1))  # Hoeffding residual, orthogonal to the oracle error
    for e in ESTIMATORS:  # within the drawn prompts: no c1/B term (grpo_mean: c1 (1 - 2/G) / B, docs/math.md M12)
        exact[f"within_{e}"] = exact[e] - pm.c1 * ((1 - 2 / G) if e == "grpo_mean" else 1) / B
    for e, vals in corrected.items():
        t = torch.tensor(vals, dtype=DT)
        z = (float(t.mean()) - exact[e]) / (float(t.std()) / math.sqrt(t.numel()))
        assert abs(z) < 5, (e, float(t.mean()), exact[e], z)
    for e, target in (("grpo", exact["grpo"]), ("oracle_ref_only", exact["oracle"])):
        t = torch.tensor(raw[e], dtype=DT)
        z = (float(t.mean()) - target) / (float(t.std()) / math.sqrt(t.numel()))
        assert z > 5, (e, z)  # the uncorrected estimate is biased upwards


def test_components_from_reference_pool_unbiased():
    """c1 (with the finite-population factor (P-1)/P), c2, c3, c2_vanilla, E||g(X)||^2, ||g||^2 of the
    uniform distribution over the P prompts, from P x M reference samples: mean over 1500 pools
    within 5 SE of the exact values."""
    env = random_env("softmax_bandit", n_prompts=3, n_actions=3, logit_scale=0.8, seed=3)
    pm = env.exact(env.theta0).policy_moments
    sample, gen = _Sampler(env), torch.Generator().manual_seed(5)
    keys = ("c1", "c2", "c3", "c2_vanilla", "mean_g_norm2", "g_norm2")
    vals = {k: [] for k in keys}
    for _ in range(1500):
        pool = [sample(p, 6, gen) for p in range(3)]
        comp = _components(torch.stack([s for s, _ in pool]), torch.stack([z for _, z in pool]), 0, 0)
        for k in keys:
            vals[k].append(comp[k]["estimate"] if isinstance(comp[k], dict) else comp[k])
    for k in keys:
        t = torch.tensor(vals[k], dtype=DT)
        z = (float(t.mean()) - getattr(pm, k)) / (float(t.std()) / math.sqrt(t.numel()))
        assert abs(z) < 5, (k, float(t.mean()), getattr(pm, k), z)


def test_reference_moments_match_brute_force():
    gen = torch.Generator().manual_seed(0)
    P, M, k = 3, 5, 4
    s = torch.randn(P, M, k, generator=gen, dtype=DT)
    z = (torch.rand(P, M, generator=gen) < 0.5).to(DT)
    ref = reference_moments(s, z)
    wz = s * z[..., None]
    torch.testing.assert_close(ref.g_ref, wz.mean((0, 1)))
    torch.testing.assert_close(ref.v_ref, z.mean(1))
    tr_cov = sum(float(((wz[p] - wz[p].mean(0)) ** 2).sum()) / (M - 1) for p in range(P))
    assert ref.ref_err == pytest.approx(tr_cov / M / P**2, rel=1e-12)
    t2 = [sum(float((s[p, i] ** 2).sum()) * float(z[p, j] - z[p, k]) ** 2 / 2
              for i, j, k in itertools.permutations(range(M), 3)) / (M * (M - 1) * (M - 2)) for p in range(P)]
    assert ref.wvar == pytest.approx(sum(t2) / P, rel=1e-12)
    assert ref.oracle_extra(2, 4) == pytest.approx(ref.wvar / (2 * 4 * M))


def test_block_squared_errors_match_prompt_gradients():
    """Each of the m = Gmax // G disjoint groups is an ordinary (B, G) minibatch (eq. 5, 8)."""
    gen = torch.Generator().manual_seed(1)
    R, B, Gmax, k, G = 2, 3, 7, 3, 3  # m = 2 groups; the 7th sample is unused
    s = torch.randn(R, B, Gmax, k, generator=gen, dtype=DT)
    z = (torch.rand(R, B, Gmax, generator=gen) < 0.4).to(DT)
    v, g = torch.rand(R, B, generator=gen, dtype=DT), torch.randn(k, generator=gen, dtype=DT)
    gd = torch.randn(R, B, k, generator=gen, dtype=DT)
    err = block_squared_errors(s, z, v, g, G, g_draws=gd)
    for e in (*ESTIMATORS, "residual", *(f"within_{e}" for e in ESTIMATORS)):
        want = torch.zeros(R, dtype=DT)
        for j in range(2):
            sl = slice(j * G, (j + 1) * G)

            def ghat(est, sl=sl):
                adv = torch.stack([compute_advantages(z[r, :, sl], baseline=est,
                                                      values=v[r] if est == "oracle" else None
                                                      ).advantages for r in range(R)])
                return torch.stack([prompt_gradients(s[r, :, sl], adv[r]).mean(0) for r in range(R)])

            if e == "residual":
                d = ghat("grpo") - ghat("oracle")
            elif e.startswith("within_"):
                d = ghat(e.removeprefix("within_")) - gd.mean(1)
            else:
                d = ghat(e) - g
            want += (d**2).sum(-1) / 2
        torch.testing.assert_close(err[e], want)
    with pytest.raises(ValueError, match="group size G = 8"):
        block_squared_errors(s, z, v, g, 8)


# ---------------------------------------------------------------------------------------------
# the command


def test_lm_mse_end_to_end(tmp_path, capsys, tiny_model_dir, task_args):
    out = tmp_path / "m"
    rc, stdout, err = run_cli(["mse", "--model", tiny_model_dir, *task_args, "--groups", "4,8", "--batch", 2, "--reps",
                               3,
                               "--ref-samples", 8, "--prompts", 4, "--sketch-dim", 16, "--max-new-tokens", 4,
                               "--seed", 3, "--out", out, "--no-progress"], capsys)
    assert rc == 0, err
    for f in ("config.json", "metrics.jsonl", "results.json", "mse.png", "mse_within.png", "report.md"):
        assert (out / f).exists(), f
    assert_png(out / "mse.png")
    res = results(out)
    assert {"rows", "hoeffding_grpo", "comparisons", "components", "reference", "policy", "sketch", "cost"} <= set(res)
    assert [(r["G"], r["estimator"]) for r in res["rows"]] == [(G, e) for G in (4, 8) for e in ESTIMATORS]
    for r in res["rows"]:
        assert {"estimator", "G", "B", "mse", "ci_low", "ci_high", "exact"} <= set(r)
        assert r["exact"] is None and r["B"] == 2 and r["reps"] == 3
        assert 0 <= r["ci_low"] <= max(r["mse"], 0) <= r["ci_high"] and math.isfinite(r["predicted"])
        assert r["mse"] == pytest.approx(r["raw_mse"] - r["correction"])
        w = r["within_prompts"]
        assert 0 <= w["ci_low"] <= max(w["mse"], 0) <= w["ci_high"]
    assert len(metrics(out)) == 8
    cost = res["cost"]
    assert cost["samples"] == 4 * 8 + 3 * 2 * 8 and cost["samples_reference"] == 32
    assert cost["seconds_total"] > 0 and cost["tokens"] > 0
    assert res["reference"]["M"] == 8 and res["reference"]["P"] == 4 and res["reference"]["ref_err"] >= 0
    assert res["sketch"]["dim"] == 16 and res["sketch"]["D"] > 100_000
    assert 0.1 < res["policy"]["accuracy"] < 0.9  # rewards vary, so the estimators differ
    assert res["components"]["c2"]["estimate"] > 0 and res["reference"]["ref_err"] > 0
    assert [s["G"] for s in res["hoeffding_grpo"]] == [4, 8]
    assert "grpo_over_oracle" in res["comparisons"][0] and "G  estimator" in stdout
    assert "Hoeffding" in (out / "report.md").read_text()
    text = " ".join((out / "report.md").read_text().split())
    sentence = next(x for x in text.split("- ") if x.startswith("Vanilla's MSE"))
    assert sentence.count("4, 8") == 1 and ", of G = " not in sentence, sentence  # not "at G = 4, 8, of G = 4, 8"
    # same seed -> same samples and sketches -> same numbers
    out2 = tmp_path / "m2"
    rc, _, err = run_cli(["mse", "--model", tiny_model_dir, *task_args, "--groups", "4,8", "--batch", 2, "--reps", 3,
                          "--ref-samples", 8, "--prompts", 4, "--sketch-dim", 16, "--max-new-tokens", 4,
                          "--seed", 3, "--out", out2, "--no-progress"], capsys)
    assert rc == 0, err
    assert [r["mse"] for r in results(out2)["rows"]] == [r["mse"] for r in res["rows"]]
    # --chunk-size 5 (groups of 8 cut across generate calls and backward passes): memory only, the same numbers
    # to float32 rounding of the scores (other batch shapes)
    out3 = tmp_path / "m3"
    rc, _, err = run_cli(["mse", "--model", tiny_model_dir, *task_args, "--groups", "4,8", "--batch", 2, "--reps", 3,
                          "--ref-samples", 8, "--prompts", 4, "--sketch-dim", 16, "--max-new-tokens", 4,
                          "--seed", 3, "--chunk-size", 5, "--out", out3, "--no-progress"], capsys)
    assert rc == 0, err
    assert json.loads((out3 / "config.json").read_text())["chunk_size"] == 5
    assert [r["mse"] for r in results(out3)["rows"]] == pytest.approx([r["mse"] for r in res["rows"]], rel=1e-3)


def test_a_scoring_warning_under_the_pool_bar_is_written_above_it(tmp_path, capsys, monkeypatch, tiny_model_dir):
    """The one-line scoring warning (``logging``; the reward function raises from the second prompt's batch on) is
    written above the sampling bar (``ugrpo.console.logs_above_bar``), on a line of its own, not appended to the
    bar's line; no logging set up, as under ``ugrpo``; the handlers are restored after the run."""
    import logging
    from pathlib import Path

    monkeypatch.setattr(logging.root, "handlers", [])  # pytest's capture handlers off: the console as the CLI has it
    tests_train = Path(__file__).resolve().parents[1] / "train"
    monkeypatch.syspath_prepend(str(tests_train))  # dense_reward
    import dense_reward

    monkeypatch.setitem(dense_reward._batches, "n", 0)
    rc, _, err = run_cli(["mse", "--model", tiny_model_dir, "--task", "custom", "--task-option",
                          f"data_path={tests_train.parents[1] / 'examples' / 'data' / 'arith-mixed-train.jsonl'}",
                          "--task-option", "reward_fn=dense_reward:fails_after_first_batch", "--groups", 4,
                          "--batch", 2, "--reps", 2, "--ref-samples", 4, "--prompts", 4, "--sketch-dim", 4,
                          "--max-new-tokens", 2, "--out", tmp_path / "m"], capsys)
    assert rc == 0, err
    at = [x for x in err.split("\n") if "flaky verifier" in x]
    assert len(at) == 1 and "mse pool (sample+sketch)" in err, err
    assert at[0].split("\r")[-1].startswith("task 'custom': reward_fn 'dense_reward:fails_after_first_batch' raised "
                                            "RuntimeError: flaky verifier"), repr(at[0])
    assert logging.root.handlers == []


def test_lm_mse_bad_inputs_exit_2(tmp_path, capsys, tiny_model_dir):
    base = ["mse", "--model", tiny_model_dir, "--out", tmp_path / "o", "--no-progress"]
    cases = [
        (["--task", "nope"], "unknown task 'nope'"),
        ([], "--model needs --task"),
        ([*TASK, "--task-option", "colour=red"], "unknown option(s) colour"),
        ([*TASK, "--prompts", 50], "--prompts P = 50"),
        ([*TASK, "--groups", "1,4"], "--groups: 1 is below the minimum 2"),
        ([*TASK, "--ref-samples", 2], "--ref-samples = 2 must be an integer >= 3"),
        ([*TASK, "--env", "builtin:demo"], "not both"),
        ([*TASK, "--chunk-size", 0], "--chunk-size = 0 must be an integer >= 1"),
    ]
    for extra, msg in cases:
        rc, _, err = run_cli([*base, *extra], capsys)
        assert rc == 2 and err.startswith("ugrpo mse: "
                                          "error:") and msg in err and len(err.strip().splitlines()) == 1, (extra, err)
    rc, _, err = run_cli(["mse", "--model", tmp_path / "missing", *TASK, "--prompts", 4, "--out", tmp_path / "o"],
                         capsys)
    assert rc == 2 and "missing" in err and len(err.strip().splitlines()) == 1
