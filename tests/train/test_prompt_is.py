"""Prompt importance sampling in the trainer (docs/allocation.md A8, docs/math.md M52-M59): config checks, the
weighted loss against brute force, the per-step metrics, the prompt draw from the law, and an exact resume."""

from __future__ import annotations

import copy
import dataclasses
import json
import re

import numpy as np
import pytest
import torch
from train_helpers import assert_same_parameters, killed_and_resumed, metrics_rows, small_config

from ugrpo.lm.logprobs import completion_logprobs
from ugrpo.lm.sampling import sample_groups
from ugrpo.report.coverage import is_coverage_phrase
from ugrpo.stats.history import PromptHistory, ScoreNorms
from ugrpo.stats.is_certificate import IS_WIDEN
from ugrpo.stats.is_guard import guarded_law
from ugrpo.stats.prompt_is import batch_sizes, is_law
from ugrpo.stats.ragged import ragged_advantages
from ugrpo.train.alloc import Allocator, step_advantages
from ugrpo.train.config import config_from_dict
from ugrpo.train.distributed import DistContext
from ugrpo.train.loop import train
from ugrpo.train.rollout import prompt_generator
from ugrpo.train.steplog import line
from ugrpo.train.update import update_on_rows


@pytest.mark.parametrize("over, match", [
    ({"allocation__rule": "ustat-is", "allocation__is_lambda": 0.0}, r"allocation.is_lambda=0.0 must be .*\(0, 1\]"),
    ({"allocation__rule": "uniform-is", "allocation__is_lambda": 1.5}, r"allocation.is_lambda=1.5"),
    ({"allocation__rule": "ustat-is", "monitor_every": 1}, "drawn from the law q rather than uniformly"),
    ({"allocation__rule": "uniform-is", "loss__kl_coef": 0.1}, r"loss.kl_coef=0.1: the KL term .* without the weights"),
    ({"allocation__rule": "ustat-is", "allocation__is_spend": "maybe"},
     r"allocation.is_spend='maybe' is not valid; choose one of \['expected', 'exact'\]"),
    ({"allocation__rule": "uniform-is", "budget__group_size": 2, "budget__samples_per_step": 8},
     r"is_guard=true needs budget.group_size >= 3 .* got 2"),
    ({"allocation__rule": "ustat-is", "allocation__is_certificate_every": 0},
     r"allocation.is_certificate_every=0 must be > 0"),
    ({"allocation__rule": "ustat-is", "allocation__is_law_every": -2}, r"allocation.is_law_every=-2 must be > 0"),
])
def test_bad_prompt_is_configs_name_the_field(over, match):
    with pytest.raises(ValueError, match=match):
        config_from_dict(small_config("m", ("a", "b"), **over))


def test_weighted_update_is_the_importance_sampled_estimate_row_by_row(model, tokenizer):
    """SGD with lr 1 moves theta by (1/B) sum_b w_b (1/G_b) sum_g A_bg grad log pi(y_bg | x_b), w_b = 1/(P q(x_b))
    (M52), computed row by row; the trainer's path: step_advantages with the weights, denominator B Gbar."""
    prompts = ["1+2=", "12+37-5=", "3*4="]
    sizes = [2, 7, 3]  # N = 12, B = 3, Gbar = 4
    w = torch.tensor([0.5, 2.0, 1.25], dtype=torch.float64)
    ro = sample_groups(model, tokenizer, prompts, sizes, seeds=[5, 6, 7], max_new_tokens=5)
    z = torch.tensor([0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0], dtype=torch.float64)
    adv = ragged_advantages(z, ro.group_sizes)
    m = copy.deepcopy(model).float()
    params = [p for p in m.parameters() if p.requires_grad]
    brute = [torch.zeros_like(p) for p in params]
    offset = 0
    for b, G in enumerate(sizes):
        for r in range(offset, offset + G):
            lp = completion_logprobs(m, ro.prompt_ids[r:r + 1], ro.prompt_mask[r:r + 1], ro.completion_ids[r:r + 1],
                                     ro.completion_mask[r:r + 1])
            for acc, gr in zip(brute, torch.autograd.grad(lp.sum(), params, allow_unused=True)):
                if gr is not None:
                    acc += float(w[b] * adv[r]) / (3 * G) * gr
        offset += G
    cfg = config_from_dict({"budget": {"samples_per_step": 12, "group_size": 4}, "optim": {"name": "sgd", "lr": 1.0},
                            "allocation": {"rule": "ustat-is"}})
    weighted, _ = step_advantages(cfg, ro, z, None, w)
    before = [p.detach().clone() for p in params]
    update_on_rows(m, params, torch.optim.SGD(params, lr=1.0), ro, torch.arange(12), weighted, logp_old=None,
                   logp_ref=None, denominator=12.0, cfg=cfg, ctx=DistContext())
    assert max(float((p.detach() - q).abs().max()) for p, q in zip(params, before)) > 1e-4
    for p, q, e in zip(params, before, brute):
        torch.testing.assert_close(p.detach() - q, e, rtol=1e-4, atol=1e-6)


def test_allocator_draws_from_the_law_of_the_history():
    """The step's prompts are iid from q with the uniform draw's generator; sizes and weights follow the law; unguarded,
    the law is the predictor's posterior means through is_law (one predictor, M49)."""
    cfg = config_from_dict({"budget": {"samples_per_step": 32, "group_size": 8},
                            "allocation": {"rule": "ustat-is", "is_lambda": 0.2, "is_guard": False}})
    al = Allocator(cfg, 12)
    rng = np.random.default_rng(0)
    for _ in range(6):  # a history in which prompts 0-5 always succeed and the others vary
        idx = rng.integers(12, size=4)
        z = np.where(idx[:, None] < 6, 1.0, rng.integers(0, 2, (4, 8))).reshape(-1)
        al.history.update(idx, np.full(4, 8), z, rng.standard_normal((32, 3)))
    idx = al.prompts(7)
    law = is_law("ustat-is", al.history.stats(None, scores=True), 4, 32, lam=0.2, g_max=32)
    np.testing.assert_allclose(al.law(7).law.q, law.q)
    assert idx.tolist() == law.draw(prompt_generator(cfg.seed, 7)).tolist()
    sizes, row = al.choose(idx, 7)
    assert sizes.tolist() == law.sizes[idx].tolist()
    np.testing.assert_allclose(al.prompt_weights(torch.arange(4)).numpy(), 1 / (12 * law.q[idx]))
    assert law.q[:6].max() < law.q[6:].min()  # the saturated prompts are drawn less often
    assert 1 <= row["is_ess"] <= 4 and row["is_weight_max"] <= 1 / 0.2 + 1e-9
    assert row["is_q_entropy"] <= np.log(12) and row["is_expected_samples"] == pytest.approx(law.expected_samples)
    assert row["is_predicted_ratio_low"] <= row["is_predicted_ratio"] <= row["is_predicted_ratio_high"]
    empty = Allocator(cfg, 12)  # no history: every prompt has the population's prediction, q uniform
    np.testing.assert_allclose(empty.law(1).law.q, 1 / 12, rtol=1e-6)


@pytest.mark.parametrize("first_step", [1, 0])
def test_the_certificate_cadence_starts_at_the_run_s_first_step(first_step):
    """``is_certificate_every = 2``: the certificate on the first step and every second after, from step 1 in
    ``ugrpo train`` and from TRL's global_step 0 (the adapter's ``first_step``)."""
    cfg = config_from_dict({"budget": {"samples_per_step": 32, "group_size": 8},
                            "allocation": {"rule": "ustat-is", "is_guard": False, "is_certificate_every": 2}})
    al = Allocator(cfg, 12, first_step=first_step)
    steps = range(first_step, first_step + 5)
    assert ["is_predicted_ratio" in al.choose(al.prompts(s), s)[1] for s in steps] == [True, False, True, False, True]


def test_the_law_every_k_steps_is_kept_between_and_rebuilt_exactly_after_a_resume():
    """``is_law_every = 3``: the law of step 1 serves steps 1-3 (from the history before step 1, whatever the
    history learns meanwhile) and step 4 reads the history then; an allocator restored between two recomputations
    (the history of step 2 and the saved source) rebuilds step 1's law to the last bit."""
    cfg = config_from_dict({"budget": {"samples_per_step": 32, "group_size": 8},
                            "allocation": {"rule": "ustat-is", "is_guard": False, "is_law_every": 3}})
    al = Allocator(cfg, 12)
    rng = np.random.default_rng(1)

    def visit(a):
        idx = rng.integers(12, size=4)
        z = np.where(idx[:, None] < 6, 1.0, rng.integers(0, 2, (4, 8))).reshape(-1)
        a.history.update(idx, np.full(4, 8), z, rng.standard_normal((32, 3)))

    for _ in range(4):
        visit(al)
    first = al.law(1)
    visit(al)
    saved_history, saved_source = al.history.to_json(), al.law_source_json()
    assert al.law(2) is first and saved_source["step"] == 1
    visit(al)
    assert al.law(3) is first
    fresh = is_law("ustat-is", al.history.stats(None, scores=True), 4, 32, lam=0.1, g_max=32)
    assert not np.allclose(first.law.q, fresh.q)  # the history moved on; the law did not
    np.testing.assert_allclose(al.law(4).law.q, fresh.q)
    back = Allocator(cfg, 12)
    back.history = PromptHistory.from_json(saved_history, 12, "h")
    back.restore_law_source(saved_source, "law_history.json")
    assert np.array_equal(back.law(3).law.q, first.law.q) and np.array_equal(back.law(3).law.sizes, first.law.sizes)
    with pytest.raises(ValueError, match="law_history.json: expected"):
        back.restore_law_source({"step": "one"}, "law_history.json")


def test_exact_spend_allocator_keeps_the_law_and_splits_exactly_n():
    """allocation.is_spend: exact (M88): the prompts are the law's draw as with the expected spend, the batch's sizes
    those of batch_sizes (ustat's solver at the weights), summing to exactly N where M56's G_x would not."""
    cfg = config_from_dict({"budget": {"samples_per_step": 32, "group_size": 8},
                            "allocation": {"rule": "ustat-is", "is_guard": False, "is_spend": "exact"}})
    al = Allocator(cfg, 12)
    rng = np.random.default_rng(0)
    for _ in range(6):  # prompts 0-5 always succeed, the others vary
        idx = rng.integers(12, size=4)
        z = np.where(idx[:, None] < 6, 1.0, rng.integers(0, 2, (4, 8))).reshape(-1)
        al.history.update(idx, np.full(4, 8), z, rng.standard_normal((32, 3)))
    idx = al.prompts(7)
    gl = al.law(7)
    assert gl.law.rule == "ustat-is" and idx.tolist() == gl.law.draw(prompt_generator(cfg.seed, 7)).tolist()
    sizes, row = al.choose(idx, 7)
    want = batch_sizes(gl.law, gl.moments, idx, 32, spend="exact", g_min=2, g_max=al.g_max)
    assert sizes.tolist() == want.tolist() and sizes.sum() == 32 and sizes.min() >= 2
    assert row["is_expected_samples"] == 32.0
    np.testing.assert_allclose(al.prompt_weights(torch.arange(4)).numpy(), gl.law.weights(idx))
    joint = {int(gl.law.sizes[gl.law.draw(np.random.default_rng(s))].sum()) for s in range(20)}
    assert len(joint) > 1  # the joint law's G_x spend different totals on different draws


def test_guarded_allocator_uses_the_held_out_guard_and_feeds_its_folds():
    """With allocation.is_guard (the default) the step's law is guarded_law's of the history (M78), every size is at
    least 3, and observe() puts the draw's weights 1/(P q(x_b)) into the held-out sums of the step's fold (M76)."""
    cfg = config_from_dict({"budget": {"samples_per_step": 32, "group_size": 8}, "allocation": {"rule": "ustat-is"}})
    al = Allocator(cfg, 12)
    assert al.g_min == 3 and al.history.folds is not None
    rng = np.random.default_rng(1)
    for step in range(6):
        idx = al.prompts(step)
        sizes, row = al.choose(idx, step)
        gl = al.law(step)
        assert sizes.min() >= 3 and row["is_guard_choice"] == gl.choice
        n = int(sizes.sum())
        z = rng.integers(0, 2, n).astype(float)
        scores = rng.standard_normal((n, 3)) * (1 + np.repeat(idx, sizes)[:, None] % 3)
        before = {k: al.history.folds[step % 2][k].copy() for k in ("ht_t0", "t0_sum")}
        al.observe(idx, sizes, z, ScoreNorms.from_scores(z, scores, sizes))
        after = al.history.folds[step % 2]
        w = 1.0 / (12 * gl.law.q)  # the weight depends on the prompt only
        np.testing.assert_allclose(after["ht_t0"] - before["ht_t0"], w * (after["t0_sum"] - before["t0_sum"]),
                                   rtol=1e-9, atol=1e-12)
    want = guarded_law("ustat-is", al.history, 4, 32, lam=0.1, g_min=3, g_max=32)
    got = al.law(6)
    assert got.choice == want.choice and np.allclose(got.law.q, want.law.q) and (got.law.sizes == want.law.sizes).all()


@pytest.fixture(scope="module")
def is_run(tiny_model_dir, task_files, tmp_path_factory):
    out = tmp_path_factory.mktemp("ustat-is")
    cfg = config_from_dict(small_config(tiny_model_dir, task_files, budget__samples_per_step=16,
                                        allocation__rule="ustat-is", eval__pass1_samples=0, eval__greedy=False,
                                        task__options__reward_fn="dense_reward:varied"))
    return cfg, out, train(cfg, out)


def test_prompt_is_run_metrics_and_report(is_run):
    cfg, out, result = is_run
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()][1:]
    assert len(rows) == 4 and result.samples == sum(r["samples"] for r in rows)
    for r in rows:
        hist = r["alloc_g_hist"]
        assert sum(int(g) * c for g, c in hist.items()) == r["samples"] and sum(hist.values()) == 4
        assert 1 <= r["is_ess"] <= 4 and 0 < r["is_weight_min"] <= r["is_weight_max"] <= 10 + 1e-9
        assert 0 < r["is_q_entropy"] <= r["is_q_entropy_max"] + 1e-12 and r["is_expected_samples"] > 0
        assert r["is_predicted_ratio_low"] <= r["is_predicted_ratio"] <= r["is_predicted_ratio_high"]
        assert r["is_predicted_ratio_widen"] in [k for _, k in IS_WIDEN]  # the calibrated certificate (M89)
        assert r["samples_zero_std"] >= 0 and r["s_alloc_scores"] > 0
        assert r["is_guard_choice"] in ("ustat-is", "uniform-is", "own", "uniform") and r["is_guard_fallback"] >= 0
        assert r["alloc_g_min"] >= 3  # the guard's held-out U-statistics (M78)
    assert [r["is_guard_choice"] for r in rows[:2]] == ["uniform", "uniform"]  # no held-out visits yet
    history = json.loads((out / "checkpoints/step-4/history.json").read_text())
    assert sum(history["visits"]) == 16 and sum(history["samples"]) == result.samples
    assert history["steps"] == 4 and [sum(f["visits"]) for f in history["folds"]] == [8, 8]
    report = (out / "report.md").read_text()
    assert "Prompt importance sampling" in report and "effective sample size" in report
    assert "held-out guard (M78) used" in report
    top = max(r["is_weight_max"] for r in rows)  # the mean of the steps' largest weights is not the largest
    assert f"(the largest of any step {top:.3f}; at most 1/lambda)" in report
    assert re.search(r"samples per step [0-9.]+ spent against 16 expected", report)  # a count, not 16.000
    from ugrpo.report.train import _reward_label

    assert "not the uniform-prompt mean" in _reward_label({"allocation": {"rule": "ustat-is"}})
    assert _reward_label({"allocation": {"rule": "uniform"}}) == "train reward (mean of B*G)"
    assert is_coverage_phrase() in report  # the shipped coverage of the calibrated certificate (M89, A8)
    last = rows[-1]  # the report names the last step's interval; the console line each step's, with the coverage
    assert (f"the last step's (step {last['step']}) 95% interval [{last['is_predicted_ratio_low']:.3f}, "
            f"{last['is_predicted_ratio_high']:.3f}]") in report
    text = line(last)
    assert (f"predicted_S_ratio={last['is_predicted_ratio']:.3g} (95% interval {last['is_predicted_ratio_low']:.3g}-"
            f"{last['is_predicted_ratio_high']:.3g}, {is_coverage_phrase(short=True)})") in text
    assert is_coverage_phrase(short=True).startswith("lab coverage 99")  # the shipped M89 table: 99.3%, 99.6%


def test_the_certificate_every_k_steps_reports_less_and_trains_the_same(is_run, tmp_path):
    """``allocation.is_certificate_every = 3``: the certificate on steps 1 and 4 only (the same numbers as when it
    is computed every step: its draws are seeded by the step), nothing of it on steps 2 and 3 (nor on their console
    lines), and the same training: parameters, draws, sizes and the other metrics."""
    cfg, full_out, _ = is_run
    sparse = copy.deepcopy(cfg)
    object.__setattr__(sparse.allocation, "is_certificate_every", 3)
    train(sparse, tmp_path)
    assert_same_parameters(full_out, tmp_path)
    rows_a, rows_b = metrics_rows(full_out), metrics_rows(tmp_path)
    cert = ("is_predicted_ratio", "is_predicted_ratio_low", "is_predicted_ratio_high", "is_predicted_ratio_plugin",
            "is_predicted_ratio_widen")
    assert [r["step"] for r in rows_b if "is_predicted_ratio" in r] == [1, 4]
    for a, b in zip(rows_a, rows_b):
        assert all((b[k] == a[k]) if "is_predicted_ratio" in b else (k not in b) for k in cert)
        keys = set(a) - set(cert) - {k for k in a if k.startswith("s_") or k == "tokens_per_s"}
        assert {k: b[k] for k in keys} == {k: a[k] for k in keys}
    report = (tmp_path / "report.md").read_text()
    assert "over the 2 of 4 steps that computed it, the last step's (step 4) 95% interval" in report
    by_step = {r["step"]: r for r in rows_b}
    assert "predicted_S_ratio" not in line(by_step[2]) and "ess=" in line(by_step[2])
    assert "predicted_S_ratio" in line(by_step[4])


def test_the_law_every_k_steps_run_killed_and_resumed_equals_the_unkilled_run(is_run, tmp_path):
    """``is_law_every = 3`` in a run: steps 1-3 draw from one law (the same q), step 4 from a new one; killed after
    step 2 (checkpoint 2 keeps the history the law read) and resumed, it reaches the unkilled run's parameters,
    draws, sizes and metrics."""
    cfg, _, _ = is_run
    sparse = copy.deepcopy(cfg)
    object.__setattr__(sparse.allocation, "is_law_every", 3)
    object.__setattr__(sparse.allocation, "is_guard", False)  # so that the law moves from the first steps
    full = tmp_path / "full"
    train(sparse, full)
    rows = [r for r in metrics_rows(full) if r["step"]]
    assert len({r["is_q_entropy"] for r in rows[:3]}) == 1 and rows[3]["is_q_entropy"] != rows[0]["is_q_entropy"]
    assert (full / "checkpoints/step-2/law_history.json").is_file()
    killed_and_resumed(sparse, tmp_path / "resumed", at=2)
    assert_same_parameters(full, tmp_path / "resumed")
    keys = ("alloc_g_hist", "samples_cum", "is_weight_max", "is_ess", "is_q_entropy", "is_predicted_ratio")
    assert ([[r.get(k) for k in keys] for r in metrics_rows(tmp_path / "resumed")]
            == [[r.get(k) for k in keys] for r in metrics_rows(full)])


def test_the_certificate_cadence_may_change_on_resume_and_old_manifests_still_resume(is_run, tmp_path):
    """``allocation.is_certificate_every`` only reports, so ``--resume`` may change it (RESUMABLE): killed after step 2
    and resumed with every 2, the run reaches the unkilled run's parameters, draws and sizes, and the certificate is
    on step 3 only of the resumed steps. A manifest written before the field was resumable (its hash includes the
    field) still resumes; another changed field is still refused."""
    from ugrpo.errors import ResumeError
    from ugrpo.runlock import config_hash
    from ugrpo.train.resume import RESUMABLE, _strip, check_resume_config

    cfg, full_out, _ = is_run
    out = tmp_path / "run"

    def kill(step, row):
        if step == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(cfg, out, on_step=kill)
    manifest = json.loads((out / "run.json").read_text())
    old_form = config_hash(_strip(dataclasses.asdict(cfg), RESUMABLE[:5]))  # as the run's version hashed it
    (out / "run.json").write_text(json.dumps({**manifest, "config_hash": old_form}))
    sparse = copy.deepcopy(cfg)
    object.__setattr__(sparse.allocation, "is_certificate_every", 2)
    train(sparse, out, resume=True)
    assert_same_parameters(full_out, out)
    rows_a, rows_b = metrics_rows(full_out), metrics_rows(out)
    keys = ("alloc_g_hist", "samples_cum", "is_weight_max", "is_ess", "is_guard_choice")
    assert [[r.get(k) for k in keys] for r in rows_b] == [[r.get(k) for k in keys] for r in rows_a]
    has = {r["step"]: "is_predicted_ratio" in r for r in rows_b if r["step"]}
    assert has == {1: True, 2: True, 3: True, 4: False}
    assert json.loads((out / "config.json").read_text())["allocation"]["is_certificate_every"] == 2
    other = copy.deepcopy(sparse)
    object.__setattr__(other.allocation, "is_lambda", 0.5)
    with pytest.raises(ResumeError, match=r"allocation.is_lambda is 0.5 but the run .* used 0.1"):
        check_resume_config(json.loads((out / "config.json").read_text()), other, out)


def test_prompt_is_killed_and_resumed_equals_the_unkilled_run(is_run, tmp_path):
    cfg, full_out, _ = is_run
    killed_and_resumed(cfg, tmp_path)
    assert_same_parameters(full_out, tmp_path)
    keys = ("alloc_g_hist", "samples_cum", "is_weight_max", "is_ess", "is_guard_choice", "is_guard_ratio")
    rows_a, rows_b = metrics_rows(full_out), metrics_rows(tmp_path)
    assert [[r.get(k) for k in keys] for r in rows_b] == [[r.get(k) for k in keys] for r in rows_a]
    assert (json.loads((tmp_path / "checkpoints/step-4/history.json").read_text())
            == json.loads((full_out / "checkpoints/step-4/history.json").read_text()))
    assert PromptHistory.from_json(json.loads((tmp_path / "checkpoints/step-4/history.json").read_text()), 10, "x",
                                   held_out=True).folds is not None


def test_exact_spend_run_spends_n_every_step(tiny_model_dir, task_files, tmp_path):
    """`ugrpo train` with allocation.rule ustat-is, is_spend exact (M88): every step spends exactly N samples over its B
    drawn prompts, each G_b >= 3 (the guard), and logs N as its expected samples."""
    cfg = config_from_dict(small_config(tiny_model_dir, task_files, budget__samples_per_step=16,
                                        allocation__rule="ustat-is", allocation__is_spend="exact",
                                        eval__pass1_samples=0, eval__greedy=False,
                                        task__options__reward_fn="dense_reward:varied"))
    train(cfg, tmp_path)
    rows = metrics_rows(tmp_path)[1:]  # the first row is the run's header
    assert len(rows) == 4
    for r in rows:
        hist = r["alloc_g_hist"]
        assert r["samples"] == 16 and sum(int(g) * c for g, c in hist.items()) == 16 and sum(hist.values()) == 4
        assert r["alloc_g_min"] >= 3 and r["is_expected_samples"] == 16.0
    assert any(r["is_guard_choice"] == "ustat-is" and len(r["alloc_g_hist"]) > 1 for r in rows)  # ragged, yet N
