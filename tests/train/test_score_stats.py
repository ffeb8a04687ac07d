"""ustat's score statistics in the trainer (docs/allocation.md A3c, docs/math.md M70-M72): read off the update's own
forward they leave every gradient as it was, bit for bit, and the history they give equals brute force (per-sample
autograd gradients of an untied copy of the output projection at the sampling parameters), with ragged groups split
over micro-batches, for Algorithm 1 and for Algorithm 2 with KL, clipping and token_mean."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from torch import nn

from ugrpo.lm.sampling import sample_groups
from ugrpo.lm.scores import ScoreSpec, per_sample_scores
from ugrpo.stats.history import PromptHistory
from ugrpo.stats.ragged import ragged_advantages
from ugrpo.train.alloc import Allocator, row_weights
from ugrpo.train.config import config_from_dict
from ugrpo.train.distributed import DistContext
from ugrpo.train.setup import Reference
from ugrpo.train.update import step_updates

PROMPTS = ["1+2=", "12+37-5=", "3*4=", "9-8="]
SIZES = [3, 6, 2, 5]  # N = 16, B = 4, Gbar = 4
TAU = 0.9
CONFIGS = {
    "alg1-micro-batches": {"budget": {"samples_per_step": 16, "group_size": 4, "micro_batch": 3}},
    "alg2-kl-clip-token-mean": {"budget": {"samples_per_step": 16, "group_size": 4, "micro_batch": 5},
                                "algorithm": 2, "minibatches": 2,
                                "loss": {"clip_low": 0.2, "clip_high": 0.2, "kl_coef": 0.1,
                                         "aggregation": "token_mean"}},
}


@pytest.fixture(scope="module")
def step(model, tokenizer):
    ro = sample_groups(model, tokenizer, PROMPTS, SIZES, seeds=[5, 6, 7, 8], max_new_tokens=5, temperature=TAU)
    z = torch.tensor([1, 0, 1, 0, 0, 1, 1, 0, 1, 1, 1, 0.5, 0, 1, 0, 0.25], dtype=torch.float64)
    return ro, z


def _brute(model, ro, z) -> dict:
    """The history sums of one step from exact per-sample scores of the output projection (autograd, row by row)."""
    untied = copy.deepcopy(model)
    untied.lm_head.weight = nn.Parameter(model.lm_head.weight.detach().clone())
    W = per_sample_scores(untied, ro, params=ScoreSpec(select="modules", patterns=("lm_head.weight",)),
                          temperature=TAU)
    h = PromptHistory(len(PROMPTS))
    h.update(np.arange(len(PROMPTS)), np.array(SIZES), z.numpy(), W.double().numpy())
    return h.sums


@pytest.mark.parametrize("name", list(CONFIGS))
def test_history_from_the_update_forward_is_brute_force_and_the_update_unchanged(model, step, name):
    ro, z = step
    cfg = config_from_dict({**CONFIGS[name], "sampling": {"temperature": TAU}, "optim": {"name": "sgd", "lr": 0.5},
                            "allocation": {"rule": "ustat"}})
    start = copy.deepcopy(model).double().train()  # float64 weights: T0 subtracts two near-equal sums
    want = _brute(start, ro, z)  # at the sampling parameters
    adv = (ragged_advantages(z, ro.group_sizes) * row_weights(ro.group_sizes, 4)).float()
    runs = []
    for with_stats in (True, False):
        m = copy.deepcopy(start)
        params = [p for p in m.parameters() if p.requires_grad]
        ref = Reference.build(cfg, m, "cpu") if cfg.loss.kl_coef else None
        alloc = Allocator(cfg, len(PROMPTS))
        scores = alloc.step_scores(m, ro, z, ro.prompt_index, forward=with_stats)
        assert (scores.on_logits is not None) == with_stats  # with_stats=False: measured at once, own forward
        step_updates(m, params, torch.optim.SGD(params, lr=0.5), ro, torch.arange(4), adv, reference=ref, cfg=cfg,
                     ctx=DistContext(), on_logits=scores.on_logits)
        norms, seconds = scores.result()
        alloc.observe(np.arange(len(PROMPTS)), np.array(SIZES), z.numpy(), norms)
        runs.append((m, alloc.history.sums))
        assert seconds > 0
    (m1, got), (m2, separate) = runs
    moved = max(float((p - q).detach().abs().max()) for p, q in zip(m1.parameters(), start.parameters()))
    assert moved > 1e-4
    assert all(torch.equal(p, q) for p, q in zip(m1.parameters(), m2.parameters()))  # the statistics changed nothing
    for k in want:
        torch.testing.assert_close(got[k], want[k], rtol=2e-5, atol=1e-8, msg=k)
        torch.testing.assert_close(separate[k], want[k], rtol=2e-5, atol=1e-8, msg=k)
    assert want["w2_success"].sum() > 0 and want["t0_sq"].sum() > 0


@pytest.mark.parametrize("rule", ["uniform", "vip", "knapsack", "dynamic"])
def test_rules_without_scores_measure_nothing_and_touch_no_forward(model, step, rule):
    """The other rules' step is the plain trainer's: no callback in the update's forward, nothing measured."""
    ro, z = step
    alloc = Allocator(config_from_dict({"budget": {"samples_per_step": 16, "group_size": 4},
                                        "allocation": {"rule": rule}}), len(PROMPTS))
    scores = alloc.step_scores(model, ro, z, ro.prompt_index, forward=True)
    assert scores.on_logits is None and scores.result() == (None, 0.0)


def test_active_dropout_makes_the_statistics_run_their_own_eval_forward(tokenizer, step):
    """A training forward with dropout is not pi_theta's: the statistics then come from their own forward."""
    from ugrpo.lm.tiny import build_tiny_model

    ro, z = step
    m = build_tiny_model(tokenizer, seed=0).train()
    m.config.attention_dropout = 0.3
    alloc = Allocator(config_from_dict({"budget": {"samples_per_step": 16, "group_size": 4},
                                        "sampling": {"temperature": TAU}, "allocation": {"rule": "ustat"}}),
                      len(PROMPTS))
    scores = alloc.step_scores(m, ro, z, ro.prompt_index, forward=True)
    assert scores.on_logits is None and m.training  # measured already, the mode restored
    norms, _ = scores.result()
    m.config.attention_dropout = 0.0
    want = _brute(m.eval(), ro, z)
    h = PromptHistory(len(PROMPTS))
    h.update(np.arange(len(PROMPTS)), np.array(SIZES), z.numpy(), norms)
    torch.testing.assert_close(h.sums["w2_failure"], want["w2_failure"], rtol=2e-5, atol=1e-8)
