"""UGRPOTrainer(allocation=...): per-prompt group sizes inside a real TRL GRPOTrainer run (issue 21).

Each test runs real TRL steps on the tiny model (built in code, random weights, CPU) with a {0, 1} reward whose
success rate differs between prompts. Checked: the sizes vary per prompt and sum to the generation batch; TRL
generated exactly G_b rows of prompt b; one SGD step (lr 1) moves the parameters by the ragged estimate
(1/B) sum_b (1/G_b) sum_g A_bg W_bg computed row by row, for three of TRL's loss normalisations; the history
survives a TRL checkpoint and resume; bad settings are errors naming the option.
"""

from __future__ import annotations

import copy
import json
import warnings

import numpy as np
import pytest
import torch

pytest.importorskip("trl", reason="the TRL integration needs `trl` (pip install 'ugrpo[trl]')")

from datasets import Dataset  # noqa: E402
from transformers import TrainerCallback  # noqa: E402

from tests.integrations.trl_helpers import VARIED, Recorder, any_digit_reward, grpo_config  # noqa: E402
from ugrpo.integrations.trl import AdvantageSpec, AllocationSpec, UGRPOTrainer  # noqa: E402
from ugrpo.integrations.trl_alloc import HISTORY_FILE, TrlAllocation  # noqa: E402
from ugrpo.lm.logprobs import completion_logprobs  # noqa: E402
from ugrpo.lm.tiny import build_tiny_model  # noqa: E402
from ugrpo.lm.tokenizer import build_char_tokenizer  # noqa: E402
from ugrpo.stats.history import PromptHistory  # noqa: E402

G = 4  # num_generations = Gbar
SMALL = VARIED  # 8 prompts, 4 per step: every prompt is revisited, so the history tells them apart


@pytest.fixture(scope="module")
def tok():
    return build_char_tokenizer()


def _trainer(tok, tmp_path, rule="vip", *, prompts=SMALL, reward=any_digit_reward, spec=None, allocation=None,
             **config):
    kw = dict(max_steps=6, num_generations=G, per_device_train_batch_size=16)
    kw.update(config)
    rec = Recorder(reward)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = UGRPOTrainer(model=build_tiny_model(tok, size="1m", seed=0), reward_funcs=rec,
                               args=grpo_config(tmp_path, **kw), train_dataset=Dataset.from_dict({"prompt": prompts}),
                               processing_class=tok, advantages=spec or AdvantageSpec(),
                               allocation=allocation or AllocationSpec(rule=rule))
    return rec.attach(trainer), rec


def _train(trainer, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.train(**kw)


@pytest.mark.parametrize("rule", ["vip", "ustat"])
def test_sizes_vary_per_prompt_and_sum_to_the_budget(tok, tmp_path, rule):
    trainer, rec = _trainer(tok, tmp_path, rule)
    allocator = trainer.ugrpo_allocation.allocator
    assert (allocator.choose(np.arange(4), 0)[0] == G).all()  # no history yet: the prior is the same for every prompt
    _seed_all(trainer)  # 6 steps of 4 samples would not tell the 8 prompts apart: the fitted prior pools them
    _train(trainer)
    log = trainer.ugrpo_allocation.log
    assert len(log) == 6 == len(rec.batches)
    g_min, g_max = AllocationSpec(rule=rule).bounds(16, G)
    for a, batch, rewards in zip(log, rec.batches, rec.rewards):
        assert a.sizes.sum() == 16 and len(a.sizes) == 4 and len(set(a.prompts.tolist())) == 4
        assert g_min <= a.sizes.min() and a.sizes.max() <= g_max
        # TRL generated G_b rows of prompt b, prompt-major, and scored each once
        text = trainer.processing_class.batch_decode(batch["prompt_ids"], skip_special_tokens=True)
        assert text == [SMALL[p] for p in np.repeat(a.prompts, a.sizes)] and len(rewards) == 16
    assert any(len(set(a.sizes.tolist())) > 1 for a in log)  # the groups are ragged
    hist = trainer.ugrpo_allocation.allocator.history.sums
    assert hist["samples"].sum() == 6 * 16 + 8 * 40 and hist["visits"].sum() == 6 * 4 + 8
    if rule == "ustat":
        assert (hist["w2_success"] + hist["w2_failure"]).sum() > 0  # the score statistics fed the history
    rows = [r for r in trainer.state.log_history if "ugrpo/alloc_g_min" in r]
    assert len(rows) == 6
    for key in ("ugrpo/alloc_g_max", "ugrpo/alloc_g_mean", "ugrpo/alloc_predicted_ratio",
                "ugrpo/alloc_predicted_ratio_low", "ugrpo/alloc_predicted_ratio_high", "ugrpo/samples_zero_std"):
        assert all(key in r for r in rows), key
    assert all(r["ugrpo/alloc_g_mean"] == G for r in rows)
    assert [r["ugrpo/alloc_g_max"] for r in rows] == [float(a.sizes.max()) for a in log]


@pytest.mark.parametrize("scores", ["output", "sketch"])
def test_ustat_history_of_a_generation_batch_against_brute_force(tok, tmp_path, scores):
    """One generation batch of ragged groups: the history's sums from the adapter's score statistics at the sampling
    parameters. ``output``: equal to the sums of exact per-sample scores of the output projection (autograd on an
    untied copy, row by row); ``sketch``: the sketched norms, whose mean over sketches is the exact norm of all
    trainable parameters (M19), are positive and the counts match."""
    from torch import nn

    from ugrpo.lm.scores import ScoreSpec, per_sample_scores
    from ugrpo.stats.history import PromptHistory

    trainer, rec = _trainer(tok, tmp_path, "ustat", prompts=SMALL[:4], max_steps=1, shuffle_dataset=False,
                            max_completion_length=8)
    trainer.ugrpo_allocation.allocator.al = AllocationSpec(rule="ustat", scores=scores, safe_tol=0.5)
    _seed_history(trainer)
    before = {k: v.copy() for k, v in trainer.ugrpo_allocation.allocator.history.sums.items()}
    start = build_tiny_model(tok, size="1m", seed=0).eval()  # the sampling parameters
    _train(trainer)
    (alloc,) = trainer.ugrpo_allocation.log
    batch, z = rec.batches[0], np.asarray(rec.rewards[0], dtype=np.float64)
    got = {k: v - before[k] for k, v in trainer.ugrpo_allocation.allocator.history.sums.items()}
    assert got["samples"].sum() == 16 and got["visits"].sum() == 4
    if scores == "sketch":
        assert (got["w2_success"] + got["w2_failure"]).sum() > 0
        return
    untied = copy.deepcopy(start)
    untied.lm_head.weight = nn.Parameter(start.lm_head.weight.detach().clone())
    tensors = tuple(batch[k] for k in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask"))
    W = per_sample_scores(untied, tensors, params=ScoreSpec(select="modules", patterns=("lm_head.weight",)))
    h = PromptHistory(len(got["visits"]))
    h.update(alloc.prompts, alloc.sizes, z, W.double().numpy())
    for k, v in h.sums.items():
        np.testing.assert_allclose(got[k], v, rtol=1e-3, atol=1e-6, err_msg=k)  # float32 model: T0 cancels digits
    assert got["w2_success"].sum() > 0 and got["w2_failure"].sum() > 0


def _seed_history(trainer):
    """Earlier visits that tell the 4 prompts apart (success rates 0.5, 0, 1, 0.25 over 40 samples each: vip gives
    them 6, 2, 3, 5 of the 16 samples)."""
    h = trainer.ugrpo_allocation.allocator.history
    for p, k in enumerate([20, 0, 40, 10]):
        h.update(np.array([p]), np.array([40]), np.r_[np.ones(k), np.zeros(40 - k)])


def _seed_all(trainer):
    """Earlier visits of all 8 prompts of SMALL, 40 samples each with success rates 0.5, 0, 1, 0.05, 0.95, 0.025,
    0.975, 0.5 (no two pairs alike: any 4 prompts differ in p(1-p)) and seeded N(0, I) sketched scores: enough for
    the fitted predictor to tell them apart."""
    h = trainer.ugrpo_allocation.allocator.history
    rng = np.random.default_rng(0)
    for p, k in enumerate([20, 0, 40, 2, 38, 1, 39, 20]):
        h.update(np.array([p]), np.array([40]), np.r_[np.ones(k), np.zeros(40 - k)],
                 rng.standard_normal((40, trainer.ugrpo_allocation.allocator.al.sketch_dim)))


@pytest.mark.parametrize("loss_type", ["dr_grpo", "dapo", "grpo"])
def test_update_is_the_ragged_estimate_row_by_row(tok, tmp_path, loss_type):
    """SGD with lr 1: theta moves by (1/B) sum_b (1/G_b) sum_g A_bg W_bg (M32) with TRL's normalisation of W:
    dr_grpo W = grad log pi(y|x) / L_max, dapo W = grad log pi(y|x) N / T (T the batch's completion tokens),
    grpo W = grad log pi(y|x) / |y| (TRL's per-sequence token mean). A_bg is the leave-one-out advantage with the
    prompt's own G_b, computed here by hand; the gradient of each row separately."""
    L = 8
    trainer, rec = _trainer(tok, tmp_path, "vip", prompts=SMALL[:4], max_steps=1, optim="sgd", learning_rate=1.0,
                            lr_scheduler_type="constant", max_grad_norm=0.0, weight_decay=0.0, loss_type=loss_type,
                            max_completion_length=L, shuffle_dataset=False)
    _seed_history(trainer)
    start = build_tiny_model(tok, size="1m", seed=0).eval()  # a fresh copy: TRL wrapped the trainer's model's forward
    start.load_state_dict(trainer.model.state_dict())
    params = [p for p in start.parameters() if p.requires_grad]
    before = [p.detach().clone() for p in params]
    _train(trainer)
    (alloc,) = trainer.ugrpo_allocation.log
    sizes = alloc.sizes.tolist()
    assert len(set(sizes)) > 1 and sum(sizes) == 16  # ragged: the seeded history told the prompts apart
    batch, z = rec.batches[0], torch.tensor(rec.rewards[0], dtype=torch.float64)
    B, N = len(sizes), sum(sizes)
    T = float(batch["completion_mask"].sum())
    brute = [torch.zeros_like(p) for p in params]
    r = 0
    for Gb in sizes:
        group = z[r:r + Gb]
        for g in range(Gb):
            adv = float(group[g] - (group.sum() - group[g]) / (Gb - 1))  # leave-one-out, paper eq. (4)
            lp = completion_logprobs(start, batch["prompt_ids"][r + g:r + g + 1], batch["prompt_mask"][r + g:r + g + 1],
                                     batch["completion_ids"][r + g:r + g + 1],
                                     batch["completion_mask"][r + g:r + g + 1])
            norm = {"dr_grpo": 1 / L, "dapo": N / T,
                    "grpo": 1 / max(float(batch["completion_mask"][r + g].sum()), 1.0)}[loss_type]
            for acc, gr in zip(brute, torch.autograd.grad(lp.sum(), params, allow_unused=True)):
                if gr is not None:
                    acc += adv / (B * Gb) * norm * gr
        r += Gb
    after = [p.detach() for p in trainer.model.parameters() if p.requires_grad]
    moved = max(float((p - q).abs().max()) for p, q in zip(after, before))
    assert moved > 1e-4
    for p, q, e in zip(after, before, brute):
        torch.testing.assert_close(p - q, e, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("rule", ["uniform-is", "ustat-is"])
def test_prompt_is_draws_from_the_law_and_weights_the_update_row_by_row(tok, tmp_path, rule):
    """uniform-is / ustat-is (unguarded: the law of the seeded history): the batch's prompts are the Allocator's draw
    from the law q at that step (not TRL's sampler's), each with num_generations rows (uniform-is) or the exact-spend
    sizes of M88 (ustat-is: G_b summing to generation_batch_size), and one SGD step (lr 1, dr_grpo) moves theta by
    (1/B) sum_b w_b (1/G_b) sum_g A_bg W_bg with w_b = 1/(P q(x_b)) (M52), computed row by row."""
    from ugrpo.stats.prompt_is import batch_sizes
    from ugrpo.train.rollout import prompt_generator

    L = 8
    spec = AllocationSpec(rule=rule, is_guard=False)
    trainer, rec = _trainer(tok, tmp_path, allocation=spec, max_steps=1, optim="sgd", learning_rate=1.0,
                            lr_scheduler_type="constant", max_grad_norm=0.0, weight_decay=0.0, loss_type="dr_grpo",
                            max_completion_length=L)
    _seed_all(trainer)
    start = build_tiny_model(tok, size="1m", seed=0).eval()
    start.load_state_dict(trainer.model.state_dict())
    params = [p for p in start.parameters() if p.requires_grad]
    before = [p.detach().clone() for p in params]
    _train(trainer)
    (alloc,) = trainer.ugrpo_allocation.log
    allocator = trainer.ugrpo_allocation.allocator
    gl = allocator.law(0)
    law = gl.law
    assert alloc.prompts.tolist() == law.draw(prompt_generator(trainer.args.seed, 0)).tolist()
    assert law.q.max() > 1.5 * law.q.min()
    if rule == "uniform-is":
        assert (alloc.sizes == G).all()
    else:  # M88: the law's q, then the batch's own sizes at exactly N = 16 (not the law's G_x)
        want = batch_sizes(law, gl.moments, alloc.prompts, 16, spend="exact", g_min=allocator.g_min,
                           g_max=allocator.g_max)
        assert alloc.sizes.tolist() == want.tolist() and alloc.sizes.sum() == 16 and len(set(alloc.sizes)) > 1
    sizes = alloc.sizes.tolist()
    batch, z = rec.batches[0], torch.tensor(rec.rewards[0], dtype=torch.float64)
    text = trainer.processing_class.batch_decode(batch["prompt_ids"], skip_special_tokens=True)
    assert text == [SMALL[p] for p in np.repeat(alloc.prompts, sizes)]
    w = 1.0 / (len(SMALL) * law.q[alloc.prompts])
    brute = [torch.zeros_like(p) for p in params]
    r0 = 0
    for b, Gb in enumerate(sizes):
        group = z[r0:r0 + Gb]
        for g in range(Gb):
            r = r0 + g
            adv = float(group[g] - (group.sum() - group[g]) / (Gb - 1))
            lp = completion_logprobs(start, batch["prompt_ids"][r:r + 1], batch["prompt_mask"][r:r + 1],
                                     batch["completion_ids"][r:r + 1], batch["completion_mask"][r:r + 1])
            for acc, gr in zip(brute, torch.autograd.grad(lp.sum(), params, allow_unused=True)):
                if gr is not None:
                    acc += w[b] * adv / (4 * Gb * L) * gr
        r0 += Gb
    after = [p.detach() for p in trainer.model.parameters() if p.requires_grad]
    assert max(float((p - q).abs().max()) for p, q in zip(after, before)) > 1e-4
    for p, q, e in zip(after, before, brute):
        torch.testing.assert_close(p - q, e, rtol=1e-4, atol=1e-6)
    row = next(r for r in trainer.state.log_history if "ugrpo/is_ess" in r)
    assert row["ugrpo/is_weight_max"] == pytest.approx(w.max()) and 1 <= row["ugrpo/is_ess"] <= 4


@pytest.mark.parametrize("rule, law_every", [("uniform-is", 1), ("ustat-is", 1), ("ustat-is", 3)])
def test_prompt_is_resume_continues_the_law_and_its_draws(tok, tmp_path, rule, law_every):
    """A run checkpointed at step 4 and resumed from there draws at steps 4 and 5 the prompts (and, ustat-is, the
    exact-spend sizes) the uninterrupted run drew (the law of the restored history, the draw seeded by (seed, step)),
    unlike TRL's own sampler; with ``is_law_every = 3`` steps 4 and 5 draw from the law of step 3, which the
    checkpoint's saved source rebuilds."""
    spec = AllocationSpec(rule=rule, is_guard=False, is_law_every=law_every)
    full, _ = _trainer(tok, tmp_path, allocation=spec, max_steps=6, save_strategy="steps", save_steps=4)
    _seed_all(full)
    _train(full)
    resumed, _ = _trainer(tok, tmp_path, allocation=spec, max_steps=6)
    _train(resumed, resume_from_checkpoint=str(tmp_path / "trl" / "checkpoint-4"))
    a, b = full.ugrpo_allocation.log[4:], resumed.ugrpo_allocation.log
    assert [x.step for x in b] == [4, 5]
    assert [x.prompts.tolist() for x in b] == [x.prompts.tolist() for x in a]
    assert [x.sizes.tolist() for x in b] == [x.sizes.tolist() for x in a]
    assert all(x.sizes.sum() == 16 for x in full.ugrpo_allocation.log)
    np.testing.assert_allclose(resumed.ugrpo_allocation.allocator.history.sums["visits"],
                               full.ugrpo_allocation.allocator.history.sums["visits"])
    # guarded (the default): the checkpoint carries the guard's folds and step count, and restore reads them back
    guarded = TrlAllocation(full.args, AllocationSpec(rule="uniform-is"), AdvantageSpec(), len(SMALL))
    guarded.allocator.history = PromptHistory(len(SMALL), held_out=True)
    guarded.allocator.history.update(np.arange(4), np.full(4, 4), np.tile([1.0, 0.0, 0.0, 1.0], 4), np.eye(16)[:, :3])
    guarded.save(tmp_path)
    back = TrlAllocation(full.args, AllocationSpec(rule="uniform-is"), AdvantageSpec(), len(SMALL))
    back.restore(tmp_path)
    assert back.allocator.history.to_json() == guarded.allocator.history.to_json() and back.allocator.history.steps == 1


def test_generation_batches_that_share_an_optimizer_step_draw_apart_and_resume(tok, tmp_path):
    """gradient_accumulation_steps = 2 with steps_per_generation = 1: two generation batches per optimizer step. Each
    batch is the Allocator's step by its own number (0, 1, 2, ...), so the two batches of one global_step draw from
    their own seeds (before: both used global_step and drew the same prompts); a run resumed from checkpoint-2 (4
    batches) draws batches 4 and 5 as the uninterrupted run did (the count is saved with the history); a checkpoint
    without the count (an older one) goes on from TRL's global_step; a bad count is an error naming it."""
    from ugrpo.train.rollout import prompt_generator

    spec = AllocationSpec(rule="uniform-is", is_guard=False)
    kw = dict(allocation=spec, max_steps=3, per_device_train_batch_size=8, gradient_accumulation_steps=2,
              steps_per_generation=1)
    full, _ = _trainer(tok, tmp_path, save_strategy="steps", save_steps=2, **kw)
    _seed_all(full)
    _train(full)
    log, allocator = full.ugrpo_allocation.log, full.ugrpo_allocation.allocator
    assert [a.batch for a in log] == [0, 1, 2, 3, 4, 5] and [a.step for a in log] == [0, 0, 1, 1, 2, 2]
    last = log[-1]  # the Allocator keeps the latest law: batch 5's draw is seeded by (seed, 5), not by global_step 2
    assert last.prompts.tolist() == allocator.law(5).law.draw(prompt_generator(0, 5)).tolist()
    assert any(log[2 * k].prompts.tolist() != log[2 * k + 1].prompts.tolist() for k in range(3))
    saved = json.loads((tmp_path / "trl" / "checkpoint-2" / HISTORY_FILE).read_text())
    assert saved["batches"] == 4
    resumed, _ = _trainer(tok, tmp_path, **kw)
    _train(resumed, resume_from_checkpoint=str(tmp_path / "trl" / "checkpoint-2"))
    assert [a.batch for a in resumed.ugrpo_allocation.log] == [4, 5]
    assert [a.prompts.tolist() for a in resumed.ugrpo_allocation.log] == [a.prompts.tolist() for a in log[4:]]
    old = TrlAllocation(full.args, spec, AdvantageSpec(), len(SMALL))
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / HISTORY_FILE).write_text(json.dumps({k: v for k, v in saved.items() if k != "batches"}))
    old.restore(tmp_path / "old")
    assert old.batches is None
    old.generate_every = 2  # as with steps_per_generation x num_iterations = 2: step 3 is inside a generation batch
    (tmp_path / "old" / "trainer_state.json").write_text(json.dumps({"global_step": 3}))
    with pytest.warns(UserWarning, match=r"step 3 falls inside a generation batch .* every steps_per_generation x "
                                         r"num_iterations = 2 .* save at multiples of 2"):
        old.restore(tmp_path / "old")
    (tmp_path / "old" / "trainer_state.json").write_text(json.dumps({"global_step": 4}))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        old.restore(tmp_path / "old")
    (tmp_path / "old" / HISTORY_FILE).write_text(json.dumps({**saved, "batches": -1}))
    with pytest.raises(ValueError, match="'batches' must be the number of generation batches"):
        old.restore(tmp_path / "old")


def test_no_metric_is_logged_as_none_before_the_guard_has_held_out_visits(tok, tmp_path):
    """Guarded uniform-is: before any held-out visit the guard uses uniform prompts (fallback 2, the last of its three
    candidates) and has no held-out ratio; the ratio is left out of the step's log rather than logged as None (TRL
    turns an all-NaN metric into None, and TensorBoard's and MLflow's callbacks warn about None at every log)."""
    trainer, _ = _trainer(tok, tmp_path, allocation=AllocationSpec(rule="uniform-is"), max_steps=3)
    _train(trainer)
    rows = [r for r in trainer.state.log_history if "ugrpo/is_ess" in r]
    assert len(rows) == 3
    assert all(v is not None for r in rows for k, v in r.items() if k.startswith("ugrpo/")), rows
    assert rows[0]["ugrpo/is_guard_fallback"] == 2 and "ugrpo/is_guard_ratio" not in rows[0]


def test_resume_from_a_trl_checkpoint_keeps_the_history(tok, tmp_path):
    """Stop after step 4 (a checkpoint every 4 steps), resume to step 6: the checkpoint holds the history, the resumed
    run starts from it (its sizes are those the saved history gives, not the uniform ones of an empty history) and
    adds its own batches to it. (TRL restarts its sampler's permutation on resume, so the resumed prompts are not
    those an uninterrupted run would draw; the history does not depend on that.)"""
    part, _ = _trainer(tok, tmp_path, "vip", max_steps=6, save_strategy="steps", save_steps=4)
    _seed_all(part)  # a history that tells the prompts apart, so the restored sizes differ from uniform
    part.add_callback(_StopAt(4))
    _train(part)
    ckpt = tmp_path / "trl" / "checkpoint-4"
    saved = json.loads((ckpt / HISTORY_FILE).read_text())
    assert saved["history"] == part.ugrpo_allocation.allocator.history.to_json() and saved["rule"] == "vip"
    assert sum(saved["history"]["visits"]) == 4 * 4 + 8
    resumed, _ = _trainer(tok, tmp_path, "vip", max_steps=6)
    seen = _Snapshot(resumed)
    resumed.add_callback(seen)
    _train(resumed, resume_from_checkpoint=str(ckpt))
    assert seen.history == saved["history"]  # restored before the first resumed step
    log = resumed.ugrpo_allocation.log
    assert [a.step for a in log] == [4, 5]
    fresh = TrlAllocation(resumed.args, AllocationSpec(rule="vip"), AdvantageSpec(), len(SMALL))
    want = fresh.allocator.choose(log[0].prompts, 4)[0]
    assert (want == G).all()  # an empty history gives uniform sizes ...
    fresh.restore(ckpt)
    assert fresh.allocator.choose(log[0].prompts, 4)[0].tolist() == log[0].sizes.tolist() != want.tolist()  # ... not
    added = {k: np.asarray(v) - np.asarray(saved["history"][k]) for k, v in
             resumed.ugrpo_allocation.allocator.history.to_json().items() if k in ("visits", "samples")}
    per_prompt = np.zeros(len(SMALL))
    for a in log:
        np.add.at(per_prompt, a.prompts, a.sizes)
    np.testing.assert_array_equal(added["samples"], per_prompt)
    assert added["visits"].sum() == 2 * 4
    # a checkpoint without the history cannot resume an allocation run
    (ckpt / HISTORY_FILE).unlink()
    again, _ = _trainer(tok, tmp_path, "vip", max_steps=6)
    with pytest.raises(ValueError, match=f"{HISTORY_FILE} is missing.*allocation rule 'vip'"):
        _train(again, resume_from_checkpoint=str(ckpt))


class _Snapshot(TrainerCallback):
    """The trainer's allocation history when training begins (after a resume has restored it)."""

    def __init__(self, trainer):
        self.trainer, self.history = trainer, None

    def on_train_begin(self, args, state, control, **kwargs):
        self.history = self.trainer.ugrpo_allocation.allocator.history.to_json()


class _StopAt(TrainerCallback):
    """Stop training after global step ``k`` (the checkpoint of that step is still written)."""

    def __init__(self, k):
        self.k = k

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step >= self.k:
            control.should_training_stop = True
        return control


# ---------------------------------------------------------------------- refusals and the config


def _build(tok, tmp_path, *, data=None, config=None, **kw):
    kw.setdefault("allocation", AllocationSpec(rule="vip"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return UGRPOTrainer(model=build_tiny_model(tok, size="1m", seed=0), reward_funcs=any_digit_reward,
                            args=grpo_config(tmp_path, **{"num_generations": G, "per_device_train_batch_size": 16,
                                                          **(config or {})}),
                            train_dataset=Dataset.from_dict({"prompt": SMALL}) if data is None else data,
                            processing_class=tok, **kw)


def _rollout(prompts, trainer):
    raise AssertionError("never called")


@pytest.mark.parametrize("kw, match", [
    (dict(advantages=None), r"needs ugrpo's advantages \(advantages=None keeps TRL's"),
    (dict(config=dict(use_vllm=True, vllm_mode="server")), r"does not support use_vllm=True with vllm_mode='server'"),
    (dict(rollout_func=_rollout), "does not support rollout_func"),
    (dict(data=Dataset.from_dict({"prompt": SMALL}).to_iterable_dataset()), "needs a map-style datasets.Dataset"),
    (dict(advantages=AdvantageSpec(baseline="grpo_mean")), r"\): allocation_rule=vip needs a baseline whose "
                                                           "per-prompt estimate is unbiased.*got baseline=grpo_mean"),
    (dict(advantages=AdvantageSpec(scale="std"), allocation=AllocationSpec(rule="vip", g_max=5)), None),
    (dict(allocation=AllocationSpec(rule="vip", g_max=3)), r"allocation g_max=3 is below num_generations=4: .* "
                                                           "cannot spend the N = 16 samples; raise allocation_g_max"),
    (dict(allocation=AllocationSpec(rule="ustat", g_min=5)), r"allocation g_min=5 is above num_generations=4"),
    (dict(allocation=AllocationSpec(rule="uniform-is"), config=dict(beta=0.1)),
     r"allocation rule uniform-is with beta=0.1: TRL's KL term .* set beta=0.0"),
    (dict(allocation=AllocationSpec(rule="ustat-is"), config=dict(entropy_coef=0.01)),
     r"allocation rule ustat-is with entropy_coef=0.01 \(use_adaptive_entropy=False\): TRL's entropy bonus .* set "
     "entropy_coef=0.0"),
    (dict(allocation=AllocationSpec(rule="uniform-is"), config=dict(use_adaptive_entropy=True)),
     r"use_adaptive_entropy=True\): TRL's entropy bonus"),
    (dict(allocation=AllocationSpec(rule="uniform-is"), config=dict(num_generations=2, per_device_train_batch_size=8)),
     r"is_guard=True needs num_generations >= 3 .* got 2"),
    (dict(callbacks=[None]), "GroupSizeMonitor with a non-uniform allocation is not supported"),
])
def test_refused_settings_are_errors_naming_the_option(tok, tmp_path, kw, match):
    if kw.get("callbacks") == [None]:
        from ugrpo.integrations.trl import GroupSizeMonitor

        kw["callbacks"] = [GroupSizeMonitor(every=1)]
    if match is None:  # a valid neighbour of the refused settings builds
        assert _build(tok, tmp_path, **kw).ugrpo_allocation.allocator.g_max == 5
        return
    with pytest.raises(ValueError, match=match):
        _build(tok, tmp_path, **kw)


def test_rewards_outside_the_unit_interval_are_an_error_naming_the_sample(tok, tmp_path):
    def twice(prompts, completions, **kwargs):
        return [2.0 * r for r in any_digit_reward(prompts, completions)]

    trainer, _ = _trainer(tok, tmp_path, "vip", reward=twice, max_steps=1)
    with pytest.raises(ValueError, match=r"rule='vip'\)\): allocation_rule=vip needs rewards in \[0, 1\].*sample "
                                         r"\d+ of this step has reward 2.0.*allocation_rule uniform\.?$"):
        _train(trainer)


def test_rewards_outside_the_unit_interval_from_reward_weights_name_them(tok, tmp_path):
    """Two reward functions in [0, 1] with reward_weights [1, 0.5]: TRL's sum reaches 1.5, and the error says that the
    weighted sum is the cause, in the adapter's names."""
    rec = Recorder(any_digit_reward)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = UGRPOTrainer(model=build_tiny_model(tok, size="1m", seed=0), reward_funcs=[rec, any_digit_reward],
                               args=grpo_config(tmp_path, max_steps=1, num_generations=G,
                                                per_device_train_batch_size=16, reward_weights=[1.0, 0.5]),
                               train_dataset=Dataset.from_dict({"prompt": SMALL}), processing_class=tok,
                               advantages=AdvantageSpec(), allocation=AllocationSpec(rule="vip"))
    rec.attach(trainer)
    with pytest.raises(ValueError, match=r"allocation_rule=vip needs rewards in \[0, 1\].*has reward 1.5.*weighted "
                                         r"sum of the 2 reward function\(s\) with reward_weights=\[1.0, 0.5\]"):
        _train(trainer)


def test_refused_rules():
    with pytest.raises(ValueError, match="allocation rule dynamic is not supported in the TRL adapter yet"):
        AllocationSpec(rule="dynamic")
    assert AllocationSpec(rule="ustat-is").is_spend == "exact"  # M88: the only spend a fixed generation batch allows
    with pytest.raises(ValueError, match="allocation rule ustat-is with is_spend='expected' is not supported in the "
                                         "TRL adapter: .*only in expectation.*exactly generation_batch_size rows.*use "
                                         "is_spend='exact'"):
        AllocationSpec(rule="ustat-is", is_spend="expected")
    with pytest.raises(ValueError, match=r"allocation.is_spend='sometimes' is not valid; choose one of "
                                         r"\['expected', 'exact'\]"):
        AllocationSpec(rule="ustat-is", is_spend="sometimes")
    with pytest.raises(ValueError, match=r"allocation rule 'nope' is not valid; choose one of \['uniform', 'vip'"):
        AllocationSpec(rule="nope")
    with pytest.raises(ValueError, match="allocation.g_min=1 must be >= 2"):
        AllocationSpec(rule="vip", g_min=1)


def test_ugrpo_config_from_a_trl_yaml_sets_the_trainer(tok, tmp_path):
    """TrlParser reads ugrpo's fields from a TRL YAML (and the command line); the trainer takes them from the config."""
    from trl import TrlParser

    from ugrpo.integrations.trl import UGRPOConfig

    f = tmp_path / "grpo.yaml"
    f.write_text("num_generations: 4\nper_device_train_batch_size: 16\nmax_completion_length: 8\nuse_cpu: true\n"
                 "report_to: none\nadvantage_baseline: vanilla\nallocation_rule: knapsack\nallocation_g_min: 3\n")
    (cfg,) = TrlParser((UGRPOConfig,)).parse_args_and_config(
        ["--config", str(f), "--output_dir", str(tmp_path / "out"), "--allocation_g_max", "7"])
    assert isinstance(cfg, UGRPOConfig) and cfg.num_generations == 4
    assert cfg.allocation_spec() == AllocationSpec(rule="knapsack", g_min=3, g_max=7)
    assert cfg.advantage_spec() == AdvantageSpec(baseline="vanilla")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = UGRPOTrainer(model=build_tiny_model(tok, size="1m", seed=0), reward_funcs=any_digit_reward,
                               args=cfg, train_dataset=Dataset.from_dict({"prompt": SMALL}), processing_class=tok)
    assert trainer.ugrpo_advantages == AdvantageSpec(baseline="vanilla")
    assert trainer.ugrpo_allocation.spec.rule == "knapsack" and trainer.ugrpo_allocation.allocator.g_min == 3
    mon = UGRPOConfig(output_dir=str(tmp_path / "m"), use_cpu=True, report_to="none", num_generations=4,
                      per_device_train_batch_size=16, monitor_every=3, monitor_pool=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        watched = UGRPOTrainer(model=build_tiny_model(tok, size="1m", seed=0), reward_funcs=any_digit_reward,
                               args=mon, train_dataset=Dataset.from_dict({"prompt": SMALL}), processing_class=tok)
    assert watched.ugrpo_allocation is None and (watched.ugrpo_monitor.every, watched.ugrpo_monitor.pool) == (3, 1)
    g = tmp_path / "grpo-is.yaml"  # the prompt-IS fields too (the floor, the guard, the certificate's cadence)
    g.write_text("num_generations: 4\nper_device_train_batch_size: 16\nuse_cpu: true\nreport_to: none\n"
                 "allocation_rule: ustat-is\nallocation_is_lambda: 0.25\nallocation_is_guard: false\n"
                 "allocation_is_certificate_every: 5\n")
    (is_cfg,) = TrlParser((UGRPOConfig,)).parse_args_and_config(["--config", str(g), "--output_dir", str(tmp_path)])
    assert is_cfg.allocation_spec() == AllocationSpec(rule="ustat-is", is_lambda=0.25, is_guard=False,
                                                      is_certificate_every=5)
    with pytest.raises(ValueError, match=r"allocation_is_lambda=0.0 must be"):
        UGRPOConfig(output_dir=str(tmp_path / "x"), use_cpu=True, report_to="none", allocation_rule="uniform-is",
                    allocation_is_lambda=0.0)
    with pytest.raises(ValueError, match="allocation_rule both set it"):
        UGRPOTrainer(model=build_tiny_model(tok, size="1m", seed=0), reward_funcs=any_digit_reward, args=cfg,
                     train_dataset=Dataset.from_dict({"prompt": SMALL}), processing_class=tok,
                     allocation=AllocationSpec(rule="vip"))


@pytest.mark.parametrize("field, value, match", [
    ("allocation_rule", "nope", r"UGRPOConfig.allocation_rule='nope': allocation rule 'nope' is not valid"),
    ("allocation_rule", "dynamic", "allocation rule dynamic is not supported in the TRL adapter yet"),
    ("allocation_g_min", 1, "allocation_g_min=1 must be >= 2"),
    ("advantage_scale", "mad", r"advantage_scale='mad'; choose 'none' or 'std'"),
    ("advantage_baseline", "oracle", "needs a value function, which a config cannot hold"),
    ("monitor_every", -1, r"UGRPOConfig.monitor_every=-1 must be an integer >= 0"),
])
def test_bad_ugrpo_config_fields_are_errors_naming_the_field(tmp_path, field, value, match):
    from ugrpo.integrations.trl import UGRPOConfig

    with pytest.raises(ValueError, match=match):
        UGRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none", **{field: value})


# ---------------------------------------------------------------------- two processes


TWO_PROCESS_RUNS = {"ustat": "ustat:0.2:true:8", "uniform-is": "uniform-is:0.0:false", "ustat-is": "ustat-is:0.0:false"}
"""the runs of the driver: safe_tol 0.2 for ustat (the thin history's plug-in sizes pass the guard, and with 8 steps
some step's sizes split a group between the processes: with exact norms of a random model's prompts the sizes vary
little); the prompt-IS rules unguarded, so that the law moves from the first step"""


@pytest.fixture(scope="module")
def two_process_runs(tmp_path_factory):
    """One 1-process driver (16 rows) and one torchrun with 2 gloo processes (8 rows each) running every rule of
    :data:`TWO_PROCESS_RUNS` in turn (one interpreter start per launch: ~1 min for all three rules, not ~2)."""
    import os
    import socket
    import subprocess
    import sys
    from pathlib import Path

    torchrun = Path(sys.executable).with_name("torchrun")
    if not torchrun.exists():
        pytest.skip("torchrun is not installed next to the Python interpreter")
    repo = Path(__file__).resolve().parents[2]
    driver = str(repo / "tests" / "integrations" / "trl_alloc_driver.py")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, PYTHONPATH=str(repo), OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false")
    for var in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):  # a launcher's, not this process's
        env.pop(var, None)
    root = tmp_path_factory.mktemp("two-process")
    one, two = root / "one", root / "two"
    runs = list(TWO_PROCESS_RUNS.values())
    for cmd in ([sys.executable, driver, str(one), "16", *runs],
                [str(torchrun), "--nproc_per_node", "2", "--master_addr", "127.0.0.1", "--master_port", str(port),
                 driver, str(two), "8", *runs]):
        proc = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return one, two


@pytest.mark.slow  # the fixture's two launches: ~1 min in all
@pytest.mark.parametrize("rule", list(TWO_PROCESS_RUNS))
def test_two_processes_give_the_sizes_and_parameters_of_one(two_process_runs, rule):
    """torchrun with 2 gloo processes (8 rows each) against 1 process (16 rows), same global batch, same seeds:
    ``ustat`` (gathered rewards and score norms; ``scores: output`` measures whole groups per process): the same G_b
    at every step, including a step whose group is split between the processes; ``uniform-is`` (unguarded, so the law
    moves from the first step): the same drawn prompts and weights; ``ustat-is`` (unguarded, exact spend, M88): the
    same drawn prompts, weights and G_x, which differ between prompts at some step; all: the same parameters after
    the SGD steps (tests/integrations/trl_alloc_driver.py)."""
    from safetensors.torch import load_file

    one, two = (d / rule for d in two_process_runs)
    steps = 8 if rule == "ustat" else 6
    sizes_one, sizes_two = (json.loads((d / "sizes.json").read_text()) for d in (one, two))
    if rule != "ustat":  # the weights agree to the float32 rounding of the score norms (groups are measured by
        w_one, w_two = sizes_one[-1].pop("weights"), sizes_two[-1].pop("weights")  # the process holding them)
        np.testing.assert_allclose(w_two, w_one, rtol=1e-6)
        assert max(w_one) != min(w_one)  # the law is not uniform
    assert sizes_one == sizes_two and len(sizes_one) == steps
    if rule == "ustat":
        split = [s for s in sizes_one if 8 not in np.cumsum(s["sizes"]).tolist()]
        assert split, sizes_one  # some step has a group whose rows sit on both processes
    if rule == "ustat-is":
        assert any(len(set(s["sizes"])) > 1 for s in sizes_one), sizes_one  # the exact-spend sizes are not uniform
    a, b = (load_file(str(d / "model.safetensors")) for d in (one, two))
    start = {k: v.detach() for k, v in build_tiny_model(build_char_tokenizer(), size="1m", seed=0).named_parameters()}
    assert max(float((a[k] - start[k]).abs().max()) for k in a) > 1e-4  # the runs moved the parameters
    for k in a:  # SGD: linear in the all-reduced gradient, so only float rounding differs
        torch.testing.assert_close(b[k], a[k], rtol=0, atol=1e-5)
