"""UGRPOTrainer(allocation=...): per-prompt group sizes inside a real TRL GRPOTrainer run (issue 21).

Each test runs real TRL steps on the tiny model (built in code, random weights, CPU) with a {0, 1} reward whose success rate differs between prompts.
Checked: the sizes vary per prompt and sum to the generation batch; TRL generated exactly G_b rows of prompt b;
one SGD step (lr 1) moves the parameters by the ragged estimate (1/B) sum_b (1/G_b) sum_g A_bg W_bg computed row by
row, for three of TRL's loss normalisations; the history survives a TRL checkpoint and resume; bad settings are
errors naming the option.
"""

from __future__ import annotations

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

G = 4  # num_generations = Gbar
SMALL = VARIED  # 8 prompts, 4 per step: every prompt is revisited, so the history tells them apart


@pytest.fixture(scope="module")
def tok():
    return build_char_tokenizer()


def _trainer(tok, tmp_path, rule="vip", *, prompts=SMALL, reward=any_digit_reward, spec=AdvantageSpec(), **config):
    kw = dict(max_steps=6, num_generations=G, per_device_train_batch_size=16)
    kw.update(config)
    rec = Recorder(reward)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = UGRPOTrainer(model=build_tiny_model(tok, size="1m", seed=0), reward_funcs=rec,
                               args=grpo_config(tmp_path, **kw), train_dataset=Dataset.from_dict({"prompt": prompts}),
                               processing_class=tok, advantages=spec, allocation=AllocationSpec(rule=rule))
    return rec.attach(trainer), rec


def _train(trainer, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.train(**kw)


@pytest.mark.parametrize("rule", ["vip", "ustat"])
def test_sizes_vary_per_prompt_and_sum_to_the_budget(tok, tmp_path, rule):
    trainer, rec = _trainer(tok, tmp_path, rule)
    _train(trainer)
    log = trainer.ugrpo_allocation.log
    assert len(log) == 6 == len(rec.batches)
    assert (log[0].sizes == G).all()  # no history yet: the prior is the same for every prompt
    g_min, g_max = AllocationSpec(rule=rule).bounds(16, G)
    for a, batch, rewards in zip(log, rec.batches, rec.rewards):
        assert a.sizes.sum() == 16 and len(a.sizes) == 4 and len(set(a.prompts.tolist())) == 4
        assert g_min <= a.sizes.min() and a.sizes.max() <= g_max
        # TRL generated G_b rows of prompt b, prompt-major, and scored each once
        text = trainer.processing_class.batch_decode(batch["prompt_ids"], skip_special_tokens=True)
        assert text == [SMALL[p] for p in np.repeat(a.prompts, a.sizes)] and len(rewards) == 16
    assert any(len(set(a.sizes.tolist())) > 1 for a in log[2:])  # the groups became ragged
    hist = trainer.ugrpo_allocation.allocator.history.sums
    assert hist["samples"].sum() == 6 * 16 and hist["visits"].sum() == 6 * 4
    if rule == "ustat":
        assert (hist["w2_success"] + hist["w2_failure"]).sum() > 0  # the score sketch fed the history
    rows = [r for r in trainer.state.log_history if "ugrpo/alloc_g_min" in r]
    assert len(rows) == 6
    for key in ("ugrpo/alloc_g_max", "ugrpo/alloc_g_mean", "ugrpo/alloc_predicted_ratio",
                "ugrpo/alloc_predicted_ratio_low", "ugrpo/alloc_predicted_ratio_high", "ugrpo/samples_zero_std"):
        assert all(key in r for r in rows), key
    assert all(r["ugrpo/alloc_g_mean"] == G for r in rows)
    assert [r["ugrpo/alloc_g_max"] for r in rows] == [float(a.sizes.max()) for a in log]


def _seed_history(trainer):
    """Earlier visits that tell the 4 prompts apart (success rates 0.5, 0, 1, 0.25 over 40 samples each: vip gives
    them 6, 2, 3, 5 of the 16 samples)."""
    h = trainer.ugrpo_allocation.allocator.history
    for p, k in enumerate([20, 0, 40, 10]):
        h.update(np.array([p]), np.array([40]), np.r_[np.ones(k), np.zeros(40 - k)])


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


def test_resume_from_a_trl_checkpoint_keeps_the_history(tok, tmp_path):
    """Stop after step 4 (a checkpoint every 4 steps), resume to step 6: the checkpoint holds the history, the resumed
    run starts from it (its sizes are those the saved history gives, not the uniform ones of an empty history) and
    adds its own batches to it. (TRL restarts its sampler's permutation on resume, so the resumed prompts are not
    those an uninterrupted run would draw; the history does not depend on that.)"""
    part, _ = _trainer(tok, tmp_path, "vip", max_steps=6, save_strategy="steps", save_steps=4)
    part.add_callback(_StopAt(4))
    _train(part)
    ckpt = tmp_path / "trl" / "checkpoint-4"
    saved = json.loads((ckpt / HISTORY_FILE).read_text())
    assert saved["history"] == part.ugrpo_allocation.allocator.history.to_json() and saved["rule"] == "vip"
    assert sum(saved["history"]["visits"]) == 4 * 4
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
