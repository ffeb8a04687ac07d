"""policy_loss against closed forms: the Algorithm-1 gradient identity, ratios, clipping, K3, aggregation."""

from __future__ import annotations

import math

import pytest
import torch

from ugrpo.stats.advantages import compute_advantages
from ugrpo.stats.estimator import policy_gradient
from ugrpo.train.loss import aggregate, k3_kl, policy_loss

# ---------------------------------------------------------------------- exact gradient on a tiny model


@pytest.fixture(scope="module")
def tiny_batch(tiny_model_dir):
    """A float64 tiny model and a hand-built batch: B=2 prompts, G=3 completions of varying length."""
    from ugrpo.lm.loading import load_policy

    model = load_policy(tiny_model_dir).model.double()
    tok = load_policy(tiny_model_dir).tokenizer
    enc = tok(["12+7=", "3*4="], padding=True, return_tensors="pt")
    G = 3
    prompt_ids = enc["input_ids"].repeat_interleave(G, 0)  # (6, P)
    prompt_mask = enc["attention_mask"].repeat_interleave(G, 0)
    gen = torch.Generator().manual_seed(0)
    completion_ids = torch.randint(4, len(tok), (6, 4), generator=gen)  # (6, 4)
    lengths = torch.tensor([4, 2, 3, 1, 4, 2])
    completion_mask = (torch.arange(4).unsqueeze(0) < lengths.unsqueeze(1)).long()  # (6, 4) right padded
    completion_ids = completion_ids.masked_fill(completion_mask == 0, tok.pad_token_id)
    rewards = torch.tensor([[1.0, 0.0, 0.0], [1.0, 1.0, 0.0]], dtype=torch.float64)  # (B, G)
    return model, (prompt_ids, prompt_mask, completion_ids, completion_mask), rewards


def _flat_grad(model) -> torch.Tensor:
    return torch.cat([p.grad.reshape(-1) if p.grad is not None else torch.zeros(p.numel(), dtype=p.dtype)
                      for p in model.parameters()])


def _logp(model, batch):
    from ugrpo.lm.logprobs import completion_logprobs

    return completion_logprobs(model, *batch)  # (N, T), the trainer's own path


def _loss_grad(model, batch, advantages, **kw) -> torch.Tensor:
    model.zero_grad(set_to_none=True)
    logp = _logp(model, batch)
    kw.setdefault("logp_old", None)
    if kw["logp_old"] == "self":
        kw["logp_old"] = logp.detach()
    policy_loss(logp, advantages, batch[3], **kw).loss.backward()
    return _flat_grad(model)


def test_seq_sum_gradient_is_minus_policy_gradient_of_stats(tiny_batch):
    """grad loss = -(1/BG) sum A_bg W_bg with W_bg from one backward pass per sample (Algorithm 1, eq. (5), (8))."""
    model, batch, rewards = tiny_batch
    B, G = rewards.shape
    adv = compute_advantages(rewards, baseline="grpo").advantages  # (B, G)
    scores = []
    for i in range(B * G):  # per-sample sequence scores W = grad sum_t log pi(y_t | x, y_<t)
        model.zero_grad(set_to_none=True)
        _logp(model, batch)[i].sum().backward()
        scores.append(_flat_grad(model).clone())
    W = torch.stack(scores).view(B, G, -1)  # (B, G, D)
    expected = -policy_gradient(W, adv)  # (D,)
    got = _loss_grad(model, batch, adv.reshape(-1), aggregation="seq_sum")
    scale = expected.abs().max()
    assert scale > 1e-3  # the check is not vacuous
    # Exact up to float32 rounding: Qwen2's RMSNorm and completion_logprobs compute in float32
    # even in a float64 model, so summing before or after backward differs by ~1e-7 relative.
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-6 * scale)
    # a wrong estimator (vanilla advantages instead of grpo) is far outside that tolerance
    wrong = -policy_gradient(W, compute_advantages(rewards, baseline="vanilla").advantages)
    assert (wrong - got).abs().max() > 1e-3 * scale


def test_ratio_one_on_policy_matches_algorithm_1(tiny_batch):
    """Algorithm 2 at theta = theta_old (ratio 1, with or without clipping) has Algorithm 1's gradient."""
    model, batch, rewards = tiny_batch
    adv = compute_advantages(rewards, baseline="grpo").advantages.reshape(-1)
    for agg in ("seq_sum", "token_mean", "seq_mean"):
        g1 = _loss_grad(model, batch, adv, aggregation=agg)
        g2 = _loss_grad(model, batch, adv, aggregation=agg, logp_old="self")
        g3 = _loss_grad(model, batch, adv, aggregation=agg, logp_old="self", clip_low=0.2, clip_high=0.28)
        torch.testing.assert_close(g2, g1, rtol=1e-12, atol=1e-14)
        torch.testing.assert_close(g3, g1, rtol=1e-12, atol=1e-14)


# ---------------------------------------------------------------------- hand-built tensors


def _hand(ratios, adv_per_row):
    """logp_old = 0, logp = log(ratio): one token per row, so mu_t is exactly the given ratio."""
    logp = torch.log(torch.tensor(ratios, dtype=torch.float64)).unsqueeze(1).requires_grad_(True)  # (N, 1)
    return logp, torch.zeros_like(logp), torch.tensor(adv_per_row, dtype=torch.float64), torch.ones_like(logp)


def test_clipping_value_gradient_and_clip_frac():
    ratios = [1.5, 0.5, 1.1, 0.7, 1.5, 0.5]
    A = [1.0, -1.0, 1.0, 1.0, -2.0, 2.0]
    logp, old, adv, mask = _hand(ratios, A)
    out = policy_loss(logp, adv, mask, logp_old=old, clip_low=0.2, clip_high=0.2, aggregation="seq_sum")
    # per token min(mu A, clip(mu, 0.8, 1.2) A):
    # 1.5*1 -> clip 1.2 (active); 0.5*-1 -> 0.8*-1=-0.8 active; 1.1*1 unclipped; 0.7*1 = 0.7 (min keeps 0.7, not
    # active);
    # 1.5*-2 = -3 (min keeps -3, not active); 0.5*2 = 1.0 (min keeps 1.0, not active)
    objective = [1.2, -0.8, 1.1, 0.7, -3.0, 1.0]
    assert out.loss.item() == pytest.approx(-sum(objective) / 6, abs=1e-12)
    assert out.clip_frac.item() == pytest.approx(2 / 6)
    assert out.ratio_mean.item() == pytest.approx(sum(ratios) / 6)
    out.loss.backward()
    # d/dlogp of mu A = mu A on unclipped tokens, 0 on clipped ones; loss has a -1/N factor
    expected = torch.tensor([0.0, 0.0, 1.1, 0.7, -3.0, 1.0], dtype=torch.float64).unsqueeze(1) * (-1 / 6)
    torch.testing.assert_close(logp.grad, expected)


def test_one_sided_clipping():
    logp, old, adv, mask = _hand([1.5, 0.5], [1.0, -1.0])
    only_high = policy_loss(logp, adv, mask, logp_old=old, clip_high=0.2, aggregation="seq_sum")
    assert only_high.loss.item() == pytest.approx(-(1.2 - 0.5) / 2)
    assert only_high.clip_frac.item() == pytest.approx(0.5)
    only_low = policy_loss(logp, adv, mask, logp_old=old, clip_low=0.2, aggregation="seq_sum")
    assert only_low.loss.item() == pytest.approx(-(1.5 - 0.8) / 2)


def test_k3_value_and_gradient_by_hand():
    logp = torch.tensor([[-1.0, -0.5], [-2.0, -0.1]], dtype=torch.float64, requires_grad=True)
    ref = torch.tensor([[-0.7, -0.5], [-2.5, -1.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1], [1, 0]])
    r = torch.exp(ref - logp.detach())  # pi_ref / pi
    k3 = r - torch.log(r) - 1
    torch.testing.assert_close(k3_kl(logp.detach(), ref), k3)
    assert (k3 >= 0).all() and k3[0, 1] == 0  # K3 >= 0, = 0 where pi = pi_ref
    kappa = 0.3
    out = policy_loss(logp, torch.zeros(2, dtype=torch.float64), mask, logp_ref=ref, kl_coef=kappa,
                      aggregation="seq_sum")
    expected_kl = (k3 * mask).sum() / 2
    assert out.kl.item() == pytest.approx(expected_kl.item())
    assert out.loss.item() == pytest.approx(kappa * expected_kl.item())
    out.loss.backward()
    # d k3 / d logp = 1 - pi_ref / pi  (the true derivative of K3; docs/paper.md section 2)
    torch.testing.assert_close(logp.grad, kappa * (1 - r) * mask / 2)


def test_aggregation_modes_on_hand_built_masks():
    x = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0], [1, 1, 0]])
    assert aggregate(x, mask, "seq_sum").item() == pytest.approx((6 + 4 + 15) / 3)
    assert aggregate(x, mask, "token_mean").item() == pytest.approx((6 + 4 + 15) / 6)
    assert aggregate(x, mask, "seq_mean").item() == pytest.approx((6 / 3 + 4 / 1 + 15 / 2) / 3)
    with pytest.raises(ValueError, match="unknown aggregation"):
        aggregate(x, mask, "mean")


@pytest.mark.parametrize("agg", ["seq_sum", "token_mean", "seq_mean"])
def test_padding_and_splitting_do_not_change_the_loss(agg):
    gen = torch.Generator().manual_seed(1)
    logp = -torch.rand(4, 5, generator=gen, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 0, 0, 0, 0], [1, 1, 1, 1, 1], [1, 1, 0, 0, 0]])
    adv = torch.tensor([1.0, -0.5, 0.25, 2.0], dtype=torch.float64)
    whole = policy_loss(logp, adv, mask, aggregation=agg).loss
    padded = policy_loss(torch.cat([logp, torch.full((4, 3), -9.0, dtype=torch.float64)], 1), adv,
                         torch.cat([mask, torch.zeros(4, 3, dtype=torch.long)], 1), aggregation=agg).loss
    assert padded.item() == pytest.approx(whole.item(), abs=1e-12)
    denom = float(mask.sum()) if agg == "token_mean" else 4.0  # the global count, as the trainer passes it
    pieces = sum(policy_loss(logp[s], adv[s], mask[s], aggregation=agg, denominator=denom).loss
                 for s in (slice(0, 1), slice(1, 4)))
    assert pieces.item() == pytest.approx(whole.item(), abs=1e-12)


def test_bad_inputs_raise_clear_errors():
    logp = torch.zeros(2, 3)
    mask = torch.ones(2, 3)
    with pytest.raises(ValueError, match=r"advantages must have shape \(N,\)"):
        policy_loss(logp, torch.zeros(3), mask)
    with pytest.raises(ValueError, match="mask shape"):
        policy_loss(logp, torch.zeros(2), torch.ones(2, 4))
    with pytest.raises(ValueError, match="clipping needs logp_old"):
        policy_loss(logp, torch.zeros(2), mask, clip_high=0.2)
    with pytest.raises(ValueError, match="needs logp_ref"):
        policy_loss(logp, torch.zeros(2), mask, kl_coef=0.1)


def test_k3_is_zero_iff_equal_policies():
    assert k3_kl(torch.tensor([[math.log(0.3)]]), torch.tensor([[math.log(0.3)]])).item() == 0.0
    assert k3_kl(torch.tensor([[math.log(0.3)]]), torch.tensor([[math.log(0.6)]])).item() > 0.0
