"""The online G* monitor in ``ugrpo train``: logged keys, recomputation from public functions, warn-once, errors.

The recomputation test rebuilds monitored batches independently: the parameters before the update
of step s are the step-(s-1) checkpoint, the prompts and samples follow the loop's public seeding
(``choose_prompts``, ``prompt_seed``), the scores come from ``sketch_scores`` with the monitor's
projection seed, and ``estimate_components`` with its bootstrap seed must give the logged numbers.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch
from safetensors.torch import load_file
from train_helpers import small_config

from ugrpo.lm.loading import format_prompt, load_policy
from ugrpo.lm.sampling import sample_groups
from ugrpo.lm.sketch import sketch_scores
from ugrpo.stats.bootstrap_ci import Estimate
from ugrpo.stats.components import estimate_components
from ugrpo.stats.planner import plan_group_size
from ugrpo.tasks.base import score
from ugrpo.tasks.registry import get_task
from ugrpo.train.config import config_from_dict, load_config
from ugrpo.train.loop import choose_prompts, prompt_seed, train
from ugrpo.train.monitor import (
    MONITOR_KEYS,
    MonitorRecord,
    TrainMonitor,
    advise,
    bootstrap_seed,
    console_column,
    measure,
    monitor_row,
    sketch_seed,
    warning_text,
)
from ugrpo.train.steplog import line as _line

MON = {"monitor_every": 2, "monitor_sketch_dim": 64, "monitor_n_boot": 100, "monitor_pool": 2}


@pytest.fixture(scope="module")
def monitored_run(tiny_model_dir, task_files, tmp_path_factory):
    """4 steps, N=16, G=4 (B=4), monitored at steps 2 and 4 (step 4 pools steps 2 and 4); checkpoints every step."""
    out = tmp_path_factory.mktemp("monitored")
    cfg = config_from_dict(small_config(tiny_model_dir, task_files, budget__samples_per_step=16,
                                        checkpoint_every=1, eval__every=0, eval__n_problems=0, **MON))
    train(cfg, out)
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    return cfg, out, rows


def _batch(cfg, out, step):
    """(rewards (B, G), sketched scores (B, G, k)) of ``step``'s batch, rebuilt from the step-(step-1) checkpoint."""
    policy = load_policy(cfg.model.name, device="cpu", seed=cfg.seed)
    model, tok = policy.model, policy.tokenizer
    model.load_state_dict(load_file(str(out / f"checkpoints/step-{step - 1}/model.safetensors")), strict=False)
    task = get_task(cfg.task.name, **cfg.task.options)
    problems = task.train_problems()
    B, G = cfg.budget.prompts_per_step, cfg.budget.group_size
    idx = choose_prompts(len(problems), B, cfg.seed, step)
    chosen = [problems[i] for i in idx]
    roll = sample_groups(model, tok, [format_prompt(tok, p.prompt, chat=cfg.model.chat) for p in chosen], G,
                         seeds=[prompt_seed(cfg.seed, step, b) for b in range(B)], temperature=cfg.sampling.temperature,
                         top_p=cfg.sampling.top_p, max_new_tokens=cfg.sampling.max_new_tokens)
    z = torch.tensor(score(task, roll.texts, [p for p in chosen for _ in range(G)]).rewards,
                     dtype=torch.float64).view(B, G)
    w = sketch_scores(model, roll, cfg.monitor_sketch_dim, seed=sketch_seed(cfg.seed),
                      temperature=cfg.sampling.temperature)
    return z, w.double().view(B, G, -1)


def test_keys_on_monitored_steps_only(monitored_run):
    _, _, rows = monitored_run
    assert [r["step"] for r in rows] == [0, 1, 2, 3, 4]
    has = [any(k.startswith("monitor_") for k in r) for r in rows]
    assert has == [False, False, True, False, True]
    for r in (rows[2], rows[4]):
        assert set(MONITOR_KEYS) <= set(r), set(MONITOR_KEYS) - set(r)
        assert r["monitor_seconds"] > 0 and r["monitor_seconds"] < r["s_per_step"]
        assert isinstance(r["monitor_message"], str) and r["monitor_message"]
        for c in ("c1", "c2", "c3"):
            assert r[f"monitor_{c}_low"] <= r[f"monitor_{c}"] <= r[f"monitor_{c}_high"] or r[f"monitor_{c}_low"] is None
    assert (rows[2]["monitor_n_prompts"], rows[2]["monitor_n_batches"]) == (4, 1)
    assert (rows[4]["monitor_n_prompts"], rows[4]["monitor_n_batches"]) == (8, 2)  # pooled with step 2


def test_estimates_equal_estimate_components_on_the_same_batches(monitored_run):
    cfg, out, rows = monitored_run
    z2, w2 = _batch(cfg, out, 2)
    z4, w4 = _batch(cfg, out, 4)
    N = cfg.budget.samples_per_step
    for step, z, w in ((2, z2, w2), (4, torch.cat([z2, z4]), torch.cat([w2, w4]))):
        vc = estimate_components(z, scores=w, n_boot=cfg.monitor_n_boot,
                                 generator=torch.Generator().manual_seed(bootstrap_seed(cfg.seed, step)))
        row = rows[step]
        for c in ("c1", "c2", "c3"):
            est = getattr(vc, c)
            got = (row[f"monitor_{c}"], row[f"monitor_{c}_low"], row[f"monitor_{c}_high"])
            assert got == pytest.approx((est.estimate, est.ci_low, est.ci_high), rel=1e-5, abs=1e-9), (step, c)
        plan = plan_group_size(vc, N)
        assert row["monitor_g_star"] == plan.g_star and row["monitor_message"].startswith(plan.message)
        assert row["monitor_g_recommended"] == plan.g_recommended
        assert (row["monitor_g_band_low"], row["monitor_g_band_high"]) == plan.g_band
        if plan.g_star is not None:
            assert [row["monitor_g_star_low"], row["monitor_g_star_high"]] == list(plan.g_star_ci)
    assert (z2.max(1).values > z2.min(1).values).any(), "the test batch must have reward variation to have power"


def test_report_plot_and_console_column(monitored_run):
    """--monitor-every results reach the report (section, table, two plots) and the console line."""
    _, out, rows = monitored_run
    report = (out / "report.md").read_text()
    assert "## Group size (the G* monitor)" in report and "![group size](monitor_g.png)" in report
    assert (out / "monitor_g.png").stat().st_size > 0 and (out / "monitor_c.png").stat().st_size > 0
    for r in (rows[2], rows[4]):
        assert f"| {r['step']} | " in report.split("## Group size")[1]
        assert f"G_use={r['monitor_g_recommended']}" in _line(r) and "c1=" in _line(r)
    assert "G_use" not in _line(rows[1])


# ------------------------------------------------------------------------------------------ warn once


def _record(g_star, ci, lb=None, G=8, step=1) -> MonitorRecord:
    e = Estimate(1.0, 0.5, 1.5, 0.2)
    return MonitorRecord(step=step, c1=e, c2=e, c3=e, budget=128, num_generations=G, g_star=g_star, g_star_ci=ci,
                         g_star_lower_bound=lb, message="m", seconds=0.0)


def test_advise_cases():
    cands = [2, 4, 8, 16, 32, 64, 128]
    assert advise(_record(8, (4, 16)), cands) is None  # inside
    a = advise(_record(32, (16, 64)), cands)
    assert (a.kind, a.suggestion, a.interval) == ("outside_interval", 32, (16, 64))
    assert warning_text(a, 10, 128) == ("group_size G=8 is outside the monitor's 95% interval [16, 64] for G* "
                                        "(step 10, N=128); try --budget.group-size 32")
    b = advise(_record(None, None, lb=23.4), cands)
    assert (b.kind, b.suggestion, b.lower_bound) == ("below_bound", 32, 23.4)
    assert "try --budget.group-size 32" in warning_text(b, 3, 128)
    assert advise(_record(None, None, lb=5.0), cands) is None  # G=8 above the lower bound: nothing to say
    assert advise(_record(None, None, lb=float("inf")), cands) is None  # e.g. all rewards equal: no information
    assert advise(_record(None, None, lb=200.0), cands).suggestion is None  # no candidate that large
    assert "try a larger --budget.group-size" in warning_text(advise(_record(None, None, lb=200.0), cands), 3, 128)
    row = monitor_row(_record(None, None, lb=float("inf")))
    assert row["monitor_g_star"] is None and row["monitor_g_star_low"] is None and row["monitor_g_star_high"] is None
    assert row["monitor_g_band_low"] is None and console_column(row) == "c1=1 c3=1 G_use=None"
    # a record with a band: the band decides, and the recommendation is the suggestion
    banded = replace(_record(None, None, lb=23.4), g_recommended=16, g_band=(8, 32))
    assert advise(banded, cands) is None  # G = 8 inside the band (the lower bound is not used)
    out = advise(replace(banded, g_band=(16, 32)), cands)
    assert (out.kind, out.suggestion, out.interval) == ("outside_band", 16, (16, 32))
    assert advise(replace(banded, g_band=(16, 32), decided=False), cands) is None  # a batch that cannot decide
    assert warning_text(out, 4, 128) == ("group_size G=8 is outside the monitor's 95% band [16, 32] of near-optimal "
                                         "G (step 4, N=128); try --budget.group-size 16")
    row = monitor_row(banded)
    assert (row["monitor_g_recommended"], row["monitor_g_band_low"], row["monitor_g_band_high"]) == (16, 8, 32)
    assert console_column(row) == "c1=1 c3=1 G_use=16 band=[8,32]" and console_column({"step": 1}) is None


def _separated_batch(B=64, G=8, k=16, seed=0):
    """One score direction u_b per prompt, scores +-u_b (mean 0, as a score's is) and reward 1 on the + side:
    g(x_b) = u_b / 2, c1 = E||u||^2 / 4 and c3 = E||u||^2 / 2, so G* = 2 with a tight interval (rewards that vary
    within prompts: a pilot whose rewards never vary says nothing, docs/math.md M41)."""
    gen = torch.Generator().manual_seed(seed)
    u = torch.randn(B, 1, k, generator=gen, dtype=torch.float64)
    sign = torch.where(torch.arange(G) % 2 == 0, 1.0, -1.0).to(torch.float64)  # (G,)
    w = sign[None, :, None] * u + 0.01 * torch.randn(B, G, k, generator=gen, dtype=torch.float64)  # (B, G, k)
    z = (sign > 0).to(torch.float64).expand(B, G).clone()
    return z, w


def test_a_batch_that_cannot_decide_gives_no_advice(monkeypatch):
    """A 16 x 4 batch whose c1 estimate is below 0: the previous monitor warned "outside the band [8, 128]; try 8";
    the batch cannot decide, so the monitor says so (G_use=...?) and gives no advice."""
    from ugrpo.envs.generate import random_env

    env = random_env("softmax_bandit", n_prompts=64, n_actions=4, reward_spread=0.3, seed=78)
    b = env.sample(env.theta0, 16, 4, torch.Generator().manual_seed(6))
    cands = [2, 4, 8, 16, 32, 64, 128]
    rec = measure(b.rewards, b.scores, budget=128, candidates=cands, n_boot=200, seed=6, step=1)
    assert rec.c1.estimate < 0 and not rec.decided and rec.g_recommended is not None
    assert advise(rec, cands) is None
    assert advise(replace(rec, decided=True, g_band=(8, 128)), cands) is not None  # the same record, decided: advice
    B, G, k = b.scores.shape
    monkeypatch.setattr("ugrpo.lm.sketch.sketch_scores", lambda model, roll, kk, **kw: b.scores.reshape(B * G, k))
    mon = TrainMonitor(every=1, budget=128, group_size=4, sketch_dim=k, n_boot=200, seed=0)
    row = mon.observe(1, None, None, b.rewards)
    assert "monitor_warning" not in row and row["monitor_decided"] is False
    assert f"G_use={row['monitor_g_recommended']}?" in console_column(row)


def test_warning_fires_once(monkeypatch, capsys):
    z, w = _separated_batch()
    B, G, k = w.shape
    monkeypatch.setattr("ugrpo.lm.sketch.sketch_scores", lambda model, roll, kk, **kw: w.reshape(B * G, k))
    mon = TrainMonitor(every=1, budget=B * G, group_size=G, sketch_dim=k, n_boot=200, seed=0)
    first = mon.observe(1, None, None, z)
    second = mon.observe(2, None, None, z)
    # the same data, measured directly: G* = 2, and G = 8 is outside its interval
    rec = measure(z, w, budget=B * G, candidates=mon.candidates, n_boot=200, seed=bootstrap_seed(0, 1), step=1)
    assert rec.g_star == 2 and rec.g_star_ci[1] < G and rec.g_band[1] < G and rec.g_recommended == 2
    assert first["monitor_g_star"] == 2
    assert first["monitor_warning"].startswith("group_size G=8 is outside the monitor's 95% band [2, ")
    assert first["monitor_warning"].endswith("try --budget.group-size 2")
    assert "monitor_warning" not in second and second["monitor_n_batches"] == 1
    assert capsys.readouterr().out.count("WARNING: group_size G=8") == 1
    resumed = TrainMonitor(every=1, budget=B * G, group_size=G, sketch_dim=k, warned=True)  # warned before --resume
    assert "monitor_warning" not in resumed.observe(3, None, None, z)


def test_pool_concatenates_recent_batches(monkeypatch):
    z, w = _separated_batch(B=8, G=4, k=4)
    B, G, k = w.shape
    batches = [(z, w), (z, 2 * w), (z, 3 * w)]
    it = iter(batches)
    current = {}

    def fake(model, roll, kk, **kw):
        current["w"] = next(it)[1]
        return current["w"].reshape(B * G, k)

    monkeypatch.setattr("ugrpo.lm.sketch.sketch_scores", fake)
    mon = TrainMonitor(every=1, budget=B * G, group_size=G, sketch_dim=k, n_boot=50, pool=2)
    rows = [mon.observe(s, None, None, z) for s in (1, 2, 3)]
    vc = estimate_components(torch.cat([z, z]), scores=torch.cat([2 * w, 3 * w]), n_boot=50,
                             generator=torch.Generator().manual_seed(bootstrap_seed(0, 3)))
    assert rows[2]["monitor_c3"] == pytest.approx(vc.c3.estimate, rel=1e-12)
    assert rows[2]["monitor_c1"] == pytest.approx(vc.c1.estimate, rel=1e-12, abs=1e-12)
    assert [r["monitor_n_prompts"] for r in rows] == [8, 16, 16]


# ------------------------------------------------------------------------------------------ config


def test_config_errors(tiny_model_dir, task_files):
    with pytest.raises(ValueError, match=r"the c2/c3 estimators need G >= 4.*G=2"):
        config_from_dict(small_config(tiny_model_dir, task_files, budget__group_size=2, monitor_every=5))
    config_from_dict(small_config(tiny_model_dir, task_files, budget__group_size=2))  # off: G=2 is fine
    with pytest.raises(ValueError, match=r"B = N/G >= 2 prompts"):
        config_from_dict(small_config(tiny_model_dir, task_files, budget__group_size=8, monitor_every=1))
    with pytest.raises(ValueError, match="monitor_n_boot=1"):
        config_from_dict(small_config(tiny_model_dir, task_files, monitor_every=1, monitor_n_boot=1))
    with pytest.raises(ValueError, match="monitor_pool=0"):
        config_from_dict(small_config(tiny_model_dir, task_files, monitor_pool=0))
    with pytest.raises(ValueError, match="monitor_every=-1"):
        config_from_dict(small_config(tiny_model_dir, task_files, monitor_every=-1))


def test_cli_flag_names(tmp_path):
    cfg = load_config(None, ["--monitor-every", "5", "--monitor-pool", "3", "--monitor-sketch-dim", "32"])
    assert (cfg.monitor_every, cfg.monitor_pool, cfg.monitor_sketch_dim, cfg.monitor_n_boot) == (5, 3, 32, 200)
