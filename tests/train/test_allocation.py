"""Per-prompt group sizes in the trainer: config checks, ragged sampling, the loss against brute force, history,
exact resume and the metrics of a run (docs/allocation.md)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from train_helpers import assert_same_parameters, killed_and_resumed, metrics_rows, small_config

from ugrpo.lm.logprobs import completion_logprobs
from ugrpo.lm.sampling import sample_groups
from ugrpo.stats.ragged import ragged_advantages
from ugrpo.train.alloc import row_weights, step_advantages
from ugrpo.train.config import config_from_dict, load_config
from ugrpo.train.distributed import DistContext
from ugrpo.train.loop import train
from ugrpo.train.update import _chunks, update_on_rows

PROMPTS = ["1+2=", "12+37-5=", "3*4="]
SEEDS = [5, 6, 7]


# ---------------------------------------------------------------------- config


@pytest.mark.parametrize("over, match", [
    ({"allocation__rule": "nope"}, r"allocation.rule='nope' is not valid; choose one of \['uniform', 'vip'"),
    ({"allocation__rule": "ustat", "allocation__g_min": 5}, r"N=8 is below B \* allocation.g_min = 2 \* 5"),
    ({"allocation__rule": "ustat", "allocation__g_min": 3, "allocation__g_max": 2}, "g_max=2 is below"),
    ({"allocation__rule": "vip", "baseline": "grpo_mean"}, r"baseline whose per-prompt estimate is unbiased"),
    ({"allocation__rule": "vip", "scale": "std", "ddof": 2}, r"scale=std and ddof=2 needs allocation.g_min > 2"),
    ({"allocation__rule": "ustat", "monitor_every": 1}, r"monitor \(monitor_every=1\) needs allocation.g_min >= 4"),
    ({"allocation__rule": "dynamic", "monitor_every": 1}, "dynamic sampling keeps only prompts whose rewards differ"),
    ({"allocation__g_min": 1}, "g_min=1 must be >= 2"),
    ({"allocation__rule": "dynamic", "baseline": "oracle", "oracle_samples": 2}, "does not support baseline=oracle"),
    ({"allocation__dynamic_max_rounds": 0}, "dynamic_max_rounds=0 must be > 0"),
    ({"allocation__rule": "ustat", "allocation__safe_tol": 1.0}, r"allocation.safe_tol=1.0 must be .* \[0, 1\)"),
    ({"allocation__safe_tol": -0.01}, r"allocation.safe_tol=-0.01"),
    ({"allocation__safe_level": 1.0}, r"allocation.safe_level=1.0 must be a number in \[0.5, 1\)"),
])
def test_bad_allocation_configs_are_errors_before_any_work(over, match):
    with pytest.raises(ValueError, match=match):
        config_from_dict(small_config("m", ("a", "b"), **over))


def test_removed_prior_keys_are_errors_naming_the_replacement(tmp_path):
    for key in ("prior_a", "prior_b", "shrink"):
        with pytest.raises(ValueError, match=f"'allocation.{key}' .* was removed: .* fitted to the run's own history"):
            load_config(None, [f"--allocation.{key}", "2"])
    f = tmp_path / "c.yaml"
    f.write_text("allocation:\n  rule: ustat\n  shrink: 4\n")
    with pytest.raises(ValueError, match=f"'allocation.shrink' in {f} was removed"):
        load_config(str(f), [])


def test_rule_on_the_command_line_long_and_short(tmp_path):
    assert load_config(None, ["--allocation.rule", "ustat"]).allocation.rule == "ustat"
    assert load_config(None, ["--allocation", "knapsack"]).allocation.rule == "knapsack"
    f = tmp_path / "c.yaml"
    f.write_text("allocation: vip\n")
    assert load_config(f).allocation.rule == "vip"
    cfg = load_config(None, ["--allocation", "ustat", "--budget.samples_per_step", "16", "--budget.group_size", "4"])
    assert cfg.allocation.bounds(16, 4) == (2, 10)  # 4 G = 16, capped at N - (B - 1) g_min = 16 - 3 * 2


# ---------------------------------------------------------------------- sampling


def test_ragged_groups_are_prefixes_of_the_uniform_groups(model, tokenizer):
    """Row g of prompt b is seeded by (prompt seed, g): G_b samples are the first G_b of a uniform run."""
    kw = dict(seeds=SEEDS, max_new_tokens=6)
    full = sample_groups(model, tokenizer, PROMPTS, 5, **kw)
    sizes = [2, 5, 3]
    for share in (True, False):
        rag = sample_groups(model, tokenizer, PROMPTS, sizes, share_prompts=share, batch_size=4, **kw)
        assert rag.group_sizes.tolist() == sizes and rag.ragged and rag.num_prompts == 3
        assert rag.prompt_index.tolist() == [0, 0, 1, 1, 1, 1, 1, 2, 2, 2]
        rows = [b * 5 + g for b, G in enumerate(sizes) for g in range(G)]
        assert rag.texts == [full.texts[r] for r in rows]
        T = rag.completion_ids.shape[1]
        assert torch.equal(rag.completion_ids, full.completion_ids[rows, :T])
        assert (full.completion_mask[rows, T:] == 0).all()
        assert torch.equal(rag.prompt_ids, full.prompt_ids[rows])


def test_group_chunks_keep_whole_groups():
    rows = torch.arange(10)
    owner = torch.tensor([0, 0, 1, 1, 1, 1, 1, 2, 2, 2])
    chunks = _chunks(rows, 4, 3, owner)
    assert [c.tolist() for c in chunks] == [[0, 1], [2, 3, 4, 5], [6, 7, 8, 9]]  # a split group's tail may share
    assert [c.tolist() for c in _chunks(rows, 7, 3, owner)] == [[0, 1, 2, 3, 4, 5, 6], [7, 8, 9]]
    assert torch.equal(torch.cat(_chunks(rows, 3, 3, owner)), rows)


# ---------------------------------------------------------------------- the loss against brute force


def test_update_is_the_ragged_estimate_row_by_row(model, tokenizer):
    """SGD with lr 1 moves theta by (1/B) sum_b (1/G_b) sum_g A_bg grad log pi(y_bg | x_b) (M32-M33),
    computed here row by row; the trainer's path: row weights Gbar/G_b, denominator B Gbar, micro-batches."""
    import copy

    sizes = [2, 7, 3]  # N = 12, B = 3, Gbar = 4
    ro = sample_groups(model, tokenizer, PROMPTS, sizes, seeds=SEEDS, max_new_tokens=5)
    z = torch.tensor([0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0], dtype=torch.float64)
    adv = ragged_advantages(z, ro.group_sizes)
    m = copy.deepcopy(model).float()
    params = [p for p in m.parameters() if p.requires_grad]
    brute = [torch.zeros_like(p) for p in params]
    B, offset = len(sizes), 0
    for G in sizes:
        for g in range(G):
            r = offset + g
            lp = completion_logprobs(m, ro.prompt_ids[r:r + 1], ro.prompt_mask[r:r + 1], ro.completion_ids[r:r + 1],
                                     ro.completion_mask[r:r + 1])
            grads = torch.autograd.grad(lp.sum(), params, allow_unused=True)
            for acc, gr in zip(brute, grads):
                if gr is not None:
                    acc += float(adv[r]) / (B * G) * gr
        offset += G
    cfg = config_from_dict({"budget": {"samples_per_step": 12, "group_size": 4, "micro_batch": 4},
                            "optim": {"name": "sgd", "lr": 1.0}, "allocation": {"rule": "ustat"}})
    before = [p.detach().clone() for p in params]
    opt = torch.optim.SGD(params, lr=1.0)
    weighted = (adv * row_weights(ro.group_sizes, 4)).float()
    update_on_rows(m, params, opt, ro, torch.arange(12), weighted, logp_old=None, logp_ref=None, denominator=12.0,
                   cfg=cfg, ctx=DistContext())
    moved = max(float((p.detach() - q).abs().max()) for p, q in zip(params, before))
    assert moved > 1e-4
    for p, q, e in zip(params, before, brute):
        torch.testing.assert_close(p.detach() - q, e, rtol=1e-4, atol=1e-6)


def test_std_scaling_on_ragged_groups_against_a_per_group_loop(model, tokenizer):
    """scale=std with a non-uniform rule: each prompt's LOO advantages over the std of its own G_b rewards (ddof 1,
    + eps; an all-equal group gets 0), times the row weight Gbar/G_b (docs/allocation.md A2, A5)."""
    sizes = [2, 7, 3]  # N = 12, B = 3, Gbar = 4
    ro = sample_groups(model, tokenizer, PROMPTS, sizes, seeds=SEEDS, max_new_tokens=5)
    z = torch.tensor([0.0, 0.5, 1.0, 0.25, 0.0, 1.0, 1.0, 0.75, 0.0, 1.0, 1.0, 1.0], dtype=torch.float64)
    cfg = config_from_dict({"budget": {"samples_per_step": 12, "group_size": 4}, "allocation": {"rule": "ustat"},
                            "scale": "std", "eps": 1e-4})
    adv, n_zero = step_advantages(cfg, ro, z, None)
    want, off = [], 0
    for G in sizes:
        zb = z[off:off + G].tolist()
        mean = sum(zb) / G
        sd = (sum((x - mean) ** 2 for x in zb) / (G - 1)) ** 0.5
        loo = [x - (sum(zb) - x) / (G - 1) for x in zb]
        want += [0.0 if sd == 0 else a / (sd + 1e-4) * 4 / G for a in loo]
        off += G
    assert n_zero == 1  # the last prompt's three rewards are all 1
    torch.testing.assert_close(adv, torch.tensor(want, dtype=torch.float32))


def test_std_scaling_with_an_allocation_rule_trains(tiny_model_dir, task_files, tmp_path):
    cfg = config_from_dict(small_config(tiny_model_dir, task_files, steps=4, budget__samples_per_step=16, scale="std",
                                        eval__every=0, eval__greedy=False, eval__pass1_samples=0, checkpoint_every=0,
                                        allocation__rule="knapsack"))
    train(cfg, tmp_path)
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()][1:]
    assert len(rows) == 4 and all(np.isfinite(r["loss"]) and r["samples"] == 16 for r in rows)
    assert any(r["alloc_g_hist"] != {"4": 4} for r in rows)  # the groups were ragged


# ---------------------------------------------------------------------- the trainer


@pytest.fixture(scope="module")
def ustat_run(tiny_model_dir, task_files, tmp_path_factory):
    out = tmp_path_factory.mktemp("ustat")
    cfg = config_from_dict(small_config(tiny_model_dir, task_files, budget__samples_per_step=16,
                                        allocation__rule="ustat", eval__pass1_samples=0, eval__greedy=False,
                                        task__options__reward_fn="dense_reward:varied"))
    return cfg, out, train(cfg, out)


def test_ustat_run_metrics(ustat_run):
    from ugrpo.stats.certificate import WIDEN

    cfg, out, result = ustat_run
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["samples_cum"] == 0
    assert [r["samples_cum"] for r in rows[1:]] == [16, 32, 48, 64] and result.samples == 64
    for r in rows[1:]:
        hist = r["alloc_g_hist"]
        assert sum(int(g) * c for g, c in hist.items()) == 16 and sum(hist.values()) == 4
        assert 2 <= r["alloc_g_min"] <= r["alloc_g_max"] <= 16 - 3 * 2
        assert r["alloc_predicted_ratio"] > 0 and 0 < r["reward_var_predicted"] <= 0.25
        assert r["alloc_predicted_ratio_low"] <= r["alloc_predicted_ratio"] <= r["alloc_predicted_ratio_high"]
        assert r["alloc_predicted_ratio_plugin"] > 0 and "alloc_predicted_ratio_gstar" not in r  # no monitor
        assert r["alloc_predicted_ratio_widen"] == WIDEN[0][1]    # at most 16 samples per visited prompt (M61)
        assert r["reward_var_realised"] >= 0 and r["s_alloc_scores"] > 0 and r["samples_zero_std"] >= 0
    assert len({json.dumps(r["alloc_g_hist"], sort_keys=True) for r in rows[2:]}) >= 1
    assert (out / "checkpoints/step-2/history.json").exists()
    hist = json.loads((out / "checkpoints/step-4/history.json").read_text())
    assert sum(hist["samples"]) == 64 and sum(hist["visits"]) == 16
    report = (out / "report.md").read_text()
    assert "allocation" in report.lower()
    assert "interval [" in report and "measured coverage" in report  # never shown without its coverage


def test_ustat_killed_and_resumed_reaches_the_same_parameters(ustat_run, tmp_path):
    cfg, full_out, _ = ustat_run
    killed_and_resumed(cfg, tmp_path)
    assert_same_parameters(full_out, tmp_path)
    rows_a, rows_b = metrics_rows(full_out), metrics_rows(tmp_path)
    assert [r.get("alloc_g_hist") for r in rows_b] == [r.get("alloc_g_hist") for r in rows_a]
    assert [r.get("samples_cum") for r in rows_b] == [r.get("samples_cum") for r in rows_a]
    assert (json.loads((tmp_path / "checkpoints/step-4/history.json").read_text())
            == json.loads((full_out / "checkpoints/step-4/history.json").read_text()))


def test_allocation_cannot_change_on_resume(ustat_run):
    from dataclasses import replace

    from ugrpo.errors import ResumeError
    from ugrpo.train.config import AllocationConfig
    from ugrpo.train.resume import check_resume_config

    cfg, out, _ = ustat_run
    saved = json.loads((out / "config.json").read_text())
    with pytest.raises(ResumeError, match="allocation.rule is 'vip' but the run .* used 'ustat'"):
        check_resume_config(saved, replace(cfg, allocation=AllocationConfig(rule="vip")), out)


# ---------------------------------------------------------------------- dynamic (DAPO)


def test_dynamic_without_all_equal_groups_is_the_uniform_run(tiny_model_dir, task_files, tmp_path):
    """With rewards that are never all equal, round 0 is the whole step: the same parameters as uniform."""
    over = dict(steps=2, budget__samples_per_step=16, checkpoint_every=0, eval__greedy=False, eval__pass1_samples=0,
                task__options__reward_fn="dense_reward:varied")
    train(config_from_dict(small_config(tiny_model_dir, task_files, **over)), tmp_path / "u")
    train(config_from_dict(small_config(tiny_model_dir, task_files, allocation__rule="dynamic", **over)),
          tmp_path / "d")
    a = load_file(str(tmp_path / "u/checkpoints/step-2/model.safetensors"))
    b = load_file(str(tmp_path / "d/checkpoints/step-2/model.safetensors"))
    assert all(torch.equal(a[k], b[k]) for k in a)
    rows = [json.loads(x) for x in (tmp_path / "d/metrics.jsonl").read_text().splitlines()]
    assert [(r["samples"], r["dynamic_rounds"], r["samples_zero_std"]) for r in rows[1:]] == [(16, 1, 0)] * 2


def test_dynamic_replaces_all_equal_groups_and_counts_every_sample(tiny_model_dir, task_files, tmp_path):
    cfg = config_from_dict(small_config(tiny_model_dir, task_files, steps=3, budget__samples_per_step=16,
                                        checkpoint_every=0, eval__greedy=False, eval__pass1_samples=0,
                                        allocation__rule="dynamic", allocation__dynamic_max_rounds=3))
    result = train(cfg, tmp_path)
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()][1:]
    assert any(r["dynamic_rounds"] > 1 for r in rows)  # the 'sevens' reward gives all-zero groups
    for r in rows:
        assert 1 <= r["dynamic_rounds"] <= 3 and r["samples"] >= 16 and r["samples"] % 4 == 0
        # informative groups come first: the batch has all-equal groups only when the rounds ran out
        assert r["frac_reward_zero_std"] == 0 or r["dynamic_rounds"] == 3
        # every group drawn beyond the first B replaced an all-equal one
        assert r["samples"] - 16 <= r["samples_zero_std"]
    assert result.samples == rows[-1]["samples_cum"] == sum(r["samples"] for r in rows)


def test_kl_term_counts_each_prompt_once_with_ragged_groups(model, tokenizer):
    """With sizes G_b the KL term's rows carry Gbar / G_b like the advantages (docs/allocation.md A5): SGD with lr 1,
    zero advantages and seq_sum moves theta by -kappa (1/B) sum_b (1/G_b) sum_g grad sum_t k3_bgt, computed row by
    row (before: -kappa (1/N) sum over rows, which counts prompt b G_b / Gbar times)."""
    import copy

    from ugrpo.train.loss import k3_kl
    from ugrpo.train.update import step_updates

    prompts, sizes, kappa = ["1+2=", "12+37-5=", "3*4="], [2, 7, 3], 0.5  # N = 12, B = 3, Gbar = 4
    ro = sample_groups(model, tokenizer, prompts, sizes, seeds=[5, 6, 7], max_new_tokens=5)
    m = copy.deepcopy(model).float()
    ref = copy.deepcopy(model).float()
    with torch.no_grad():  # a reference away from the policy, so that the KL has a gradient
        for p in m.parameters():
            p.add_(0.05 * torch.randn_like(p))
    params = [p for p in m.parameters() if p.requires_grad]

    def logp(net, r):
        return completion_logprobs(net, ro.prompt_ids[r:r + 1], ro.prompt_mask[r:r + 1], ro.completion_ids[r:r + 1],
                                   ro.completion_mask[r:r + 1])

    brute = [torch.zeros_like(p) for p in params]
    offset = 0
    for G in sizes:
        for r in range(offset, offset + G):
            with torch.no_grad():
                lr = logp(ref, r)
            kl = (k3_kl(logp(m, r), lr) * ro.completion_mask[r:r + 1]).sum()
            for acc, gr in zip(brute, torch.autograd.grad(kl, params, allow_unused=True)):
                if gr is not None:
                    acc -= kappa / (3 * G) * gr
        offset += G

    class Reference:
        def logprobs(self, model, rollout, temperature, micro_batch):
            with torch.no_grad():
                return torch.cat([logp(ref, r) for r in range(12)])

    cfg = config_from_dict({"budget": {"samples_per_step": 12, "group_size": 4}, "optim": {"name": "sgd", "lr": 1.0},
                            "allocation": {"rule": "ustat"}, "loss": {"kl_coef": kappa}})
    before = [p.detach().clone() for p in params]
    step_updates(m, params, torch.optim.SGD(params, lr=1.0), ro, torch.arange(3), torch.zeros(12),
                 reference=Reference(), cfg=cfg, ctx=DistContext())
    assert max(float((p.detach() - q).abs().max()) for p, q in zip(params, before)) > 1e-5
    for p, q, e in zip(params, before, brute):
        torch.testing.assert_close(p.detach() - q, e, rtol=1e-4, atol=1e-6)


def test_ragged_algorithm_2_token_mean_kl_and_micro_batches_run(tiny_model_dir, task_files, tmp_path):
    """Ragged groups through Algorithm 2 (prompt-range minibatches, ratio, clip, KL to the reference, token_mean)."""
    cfg = config_from_dict(small_config(
        tiny_model_dir, task_files, steps=4, algorithm=2, minibatches=2, loss__clip_low=0.2, loss__clip_high=0.2,
        loss__kl_coef=0.1, loss__aggregation="token_mean", budget__samples_per_step=16, budget__micro_batch=3,
        eval__every=0, eval__greedy=False, eval__pass1_samples=0, checkpoint_every=0, allocation__rule="knapsack"))
    train(cfg, tmp_path)
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()][1:]
    assert all(np.isfinite(r["loss"]) and r["samples"] == 16 for r in rows)
    assert rows[-1]["kl"] > 0 and rows[-1]["ratio_mean"] != 1.0
    assert any(r["alloc_g_hist"] != {"4": 4} for r in rows)  # the groups were ragged


def test_concat_rollouts_repads_without_changing_log_probs(model, tokenizer):
    from ugrpo.lm.sampling import concat_rollouts

    a = sample_groups(model, tokenizer, ["1+2=", "3*4="], 2, seeds=[1, 2], max_new_tokens=4)
    b = sample_groups(model, tokenizer, ["12+37-5="], 3, seeds=[3], max_new_tokens=6)
    cat = concat_rollouts([(b, torch.arange(3)), (a, torch.tensor([2, 3]))], tokenizer.pad_token_id)
    assert cat.group_sizes.tolist() == [3, 2] and cat.texts == b.texts + a.texts[2:]

    def lp(r, rows):
        return completion_logprobs(model, r.prompt_ids[rows], r.prompt_mask[rows], r.completion_ids[rows],
                                   r.completion_mask[rows]).detach()

    got = lp(cat, torch.arange(5))
    want = [lp(b, torch.arange(3)), lp(a, torch.tensor([2, 3]))]
    for rows, w in zip((slice(0, 3), slice(3, 5)), want):
        T = w.shape[1]
        torch.testing.assert_close(got[rows, :T], w, rtol=0, atol=1e-5)
        assert (cat.completion_mask[rows, T:] == 0).all()


def test_rewards_outside_the_unit_interval_stop_a_history_rule(tiny_model_dir, task_files, tmp_path):
    cfg = config_from_dict(small_config(tiny_model_dir, task_files, steps=1, allocation__rule="vip",
                                        eval__greedy=False, eval__pass1_samples=0,
                                        task__options__reward_fn="dense_reward:above_one"))
    with pytest.raises(ValueError, match=r"allocation.rule=vip needs rewards in \[0, 1\].*has reward 1\."):
        train(cfg, tmp_path)
    assert not (tmp_path / "checkpoints").exists()


def test_monitor_on_ragged_groups_reads_each_prompts_first_g_min_samples(model, tokenizer):
    """The G* monitor with per-prompt G_b measures exactly what it measures on the dense (B, g_min) pilot made of
    every prompt's first g_min samples (which are the uniform run's first samples: same seeds)."""
    from ugrpo.train.monitor import TrainMonitor

    sizes = [4, 6, 5]
    ragged = sample_groups(model, tokenizer, PROMPTS, sizes, seeds=SEEDS, max_new_tokens=4)
    dense = sample_groups(model, tokenizer, PROMPTS, 4, seeds=SEEDS, max_new_tokens=4)
    z = torch.arange(15, dtype=torch.float64) % 3 / 2  # flat rewards in row order, varied within groups
    rows = ragged.first_rows(4)
    assert rows.tolist() == [0, 1, 2, 3, 4, 5, 6, 7, 10, 11, 12, 13]
    assert [ragged.texts[i] for i in rows.tolist()] == dense.texts
    kw = dict(every=1, budget=15, group_size=5, sketch_dim=16, n_boot=20, seed=1)
    got = TrainMonitor(**kw, pilot_group=4).observe(1, model, ragged, z)
    want = TrainMonitor(**kw, pilot_group=4).observe(1, model, dense, z[rows].view(3, 4))
    got.pop("monitor_seconds"), want.pop("monitor_seconds")
    assert got == want and got["monitor_c2"] > 0


@pytest.mark.parametrize("scores", ["sketch", "output"])
def test_ustat_run_with_the_monitor(tiny_model_dir, task_files, tmp_path, scores):
    cfg = config_from_dict(small_config(
        tiny_model_dir, task_files, steps=2, budget__samples_per_step=20, budget__group_size=5, monitor_every=1,
        monitor_n_boot=20, allocation__rule="ustat", allocation__g_min=4, allocation__scores=scores, eval__every=0,
        eval__greedy=False, eval__pass1_samples=0, checkpoint_every=0, task__options__reward_fn="dense_reward:varied"))
    train(cfg, tmp_path)
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()][1:]
    assert all(r["monitor_n_prompts"] == 4 and r["alloc_g_min"] >= 4 and r["samples"] == 20 for r in rows)
    # the certificate against uniform G* needs c1 from an earlier monitored step: none at step 1, at step 2; only
    # when the history's scores are the monitor's (all trainable parameters), not the output projection's
    assert "alloc_predicted_ratio_gstar" not in rows[0]
    if scores == "output":
        assert "alloc_predicted_ratio_gstar" not in rows[1] and rows[1]["s_alloc_scores"] > 0
        return
    r = rows[1]
    assert r["alloc_predicted_ratio_gstar_low"] <= r["alloc_predicted_ratio_gstar"] <= \
        r["alloc_predicted_ratio_gstar_high"] and 20 % r["alloc_gstar"] == 0


def test_console_line_carries_the_measured_coverage_read_from_the_shipped_table(tmp_path, monkeypatch):
    import ugrpo.report.coverage as cov
    from ugrpo.train.steplog import line

    row = {"step": 5, "reward_mean": 0.5, "alloc_g_hist": {"4": 2}, "alloc_g_min": 3, "alloc_g_max": 12,
           "alloc_predicted_ratio": 0.849, "alloc_predicted_ratio_low": 0.792, "alloc_predicted_ratio_high": 0.939}
    table = {"level": 0.95, "source": "benchmarks/bench_certificate_calibration.py",
             "cells": [{"instance": "a", "history_steps": 2, "coverage": 0.71, "se": 0.03, "reps": 200},
                       {"instance": "b", "history_steps": 10, "coverage": 0.965, "se": 0.01, "reps": 200},
                       {"instance": "a", "seed_offset": 9000, "history_steps": 2, "coverage": 0.85, "se": 0.03,
                        "reps": 100, "miss_overstated": 0.12, "miss_understated": 0.03}]}
    (tmp_path / "c.json").write_text(json.dumps(table))
    monkeypatch.setattr(cov, "COVERAGE_FILE", tmp_path / "c.json")
    cov.certificate_coverage.cache_clear()
    try:
        assert "G_b=3..12 predicted_mse_ratio=0.849 (95% interval 0.792-0.939, measured coverage 0.71-0.96, " \
            "below 95% in 2 of 3 cells)" in line(row)
        long = cov.coverage_phrase()
        assert "0.71-0.965 over 3 cells" in long and "below 0.90 in 2: a at 2 steps 0.71, a (new instance, " \
            "offset 9000) at 2 steps 0.85 (true ratio above 0.12, below 0.03);" in long
        monkeypatch.setattr(cov, "COVERAGE_FILE", tmp_path / "absent.json")
        cov.certificate_coverage.cache_clear()
        assert "coverage not measured" in line(row)  # no table: it says so, it never invents a number
    finally:
        cov.certificate_coverage.cache_clear()


def test_shipped_coverage_table_is_the_committed_benchmark_result_of_what_the_trainer_does():
    from pathlib import Path

    import ugrpo.report.coverage as cov

    root = Path(__file__).resolve().parents[2]
    bench = json.loads((root / "benchmarks/results/certificate_calibration.json").read_text())
    table = json.loads(cov.COVERAGE_FILE.read_text())
    from ugrpo.stats.certificate import WIDEN
    from ugrpo.stats.population import REPLICATES

    # what the trainer does: its population draws (M60) and its widening factors (M61), no --no-widen
    assert bench["replicates"] == table["replicates"] == REPLICATES
    assert bench["widening"] == table["widening"] == [[None if hi == float("inf") else hi, k] for hi, k in WIDEN]
    assert 0 in bench["seed_offsets"] and len(bench["seed_offsets"]) > 1   # the fixed instances and new ones
    keys = ("instance", "seed_offset", "history_steps", "coverage", "reps", "miss_overstated", "miss_understated")
    assert [tuple(c[k] for k in keys) for c in table["cells"]] == [tuple(r[k] for k in keys) for r in bench["rows"]]
    cov.certificate_coverage.cache_clear()
    try:
        low = sum(r["coverage"] < 0.95 for r in bench["rows"])
        assert f"below 95% in {low} of {len(bench['rows'])} cells" in cov.coverage_phrase(short=True)
    finally:
        cov.certificate_coverage.cache_clear()


def test_prompt_is_report_quotes_the_shipped_is_coverage(tmp_path, monkeypatch):
    """The prompt-IS certificate's coverage in the train report comes from the shipped table, which is the committed
    benchmark result pooled per history length; no table: it says so."""
    from pathlib import Path

    import ugrpo.report.coverage as cov

    root = Path(__file__).resolve().parents[2]
    bench = json.loads((root / "benchmarks/results/is_certificate.json").read_text())
    shipped = json.loads(cov.IS_COVERAGE_FILE.read_text())
    for cell in shipped["by_history_steps"]:
        rows = [r for r in bench["rows"] if r["history_steps"] == cell["history_steps"]]
        assert cell["reps"] == sum(r["reps"] for r in rows)
        assert cell["coverage"] == pytest.approx(sum(r["coverage"] * r["reps"] for r in rows) / cell["reps"])
    table = {"level": 0.95, "source": "bench", "by_history_steps": [
        {"history_steps": 2, "coverage": 0.614, "reps": 60}, {"history_steps": 10, "coverage": 0.736, "reps": 60}]}
    (tmp_path / "is.json").write_text(json.dumps(table))
    monkeypatch.setattr(cov, "IS_COVERAGE_FILE", tmp_path / "is.json")
    assert cov.is_coverage_phrase() == ("its nominal 95% interval held the true ratio in 61% (2 steps of history), "
                                        "74% (10 steps of history) of the lab's histories (bench)")
    table.update(widening=[[25.0, 2.0], [None, 1.5]])
    table["by_history_steps"][0]["cell_min"] = 0.833
    (tmp_path / "is.json").write_text(json.dumps(table))
    assert cov.is_coverage_phrase() == ("its nominal 95% interval, widened by a factor calibrated by simulation on "
                                        "other instances (M89), held the true ratio in 61% (2 steps of history; "
                                        "lowest cell 83%), 74% (10 steps of history) of the lab's histories (bench)")
    assert cov.is_coverage_phrase(short=True) == "lab coverage 61% (2 steps), 74% (10 steps)"
    monkeypatch.setattr(cov, "IS_COVERAGE_FILE", tmp_path / "absent.json")
    assert "not been measured" in cov.is_coverage_phrase()
    assert cov.is_coverage_phrase(short=True) == "coverage not measured"
