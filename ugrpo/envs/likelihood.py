"""What a pilot of an exact synthetic policy can tell any rule: its likelihood in closed form and reward twins
(docs/math.md M64-M66).

A pilot of B0 prompts x G0 samples at theta: prompts x_b uniform over the P prompts, actions a_bg ~ pi(.|x_b),
rewards z_bg ~ Bernoulli(r(x_b, a_bg)); the scores W(x, a) are a function of (x, a). So (M64)

    log P(pilot) = sum_b [ -log P + sum_g ( log pi(a_bg | x_b) + z_bg log r + (1 - z_bg) log(1 - r) ) ],

and two policies with the same pi (hence the same scores) and reward tables r, r' differ only through the
rewards: log dQ/dP = sum over cells (x, a) of k log(r'/r) + (n - k) log((1 - r')/(1 - r)), with n, k the cell's
samples and successes (:func:`cell_counts`, :func:`reward_log_ratio`).

Reward twins of a policy (M65) keep pi, every score and every prompt's value V(x) and move only the action
contrasts of the rewards:

* ``contrast`` twins: per prompt, the reward logits get t (eps_a - c) with a random sign pattern eps (not constant;
  all patterns equally likely, independently across prompts) and c solving sum_a pi_a r'_a = V(x) (bisection). Their
  mixture's likelihood ratio is a product over prompts of averages over the patterns (:func:`mixture_log_ratio`):
  closed form. A random contrast adds to E||g(X)||^2, so c1 grows and the band moves to smaller G.
* ``shrink`` twin: r' = V(x) + lam (r - V(x)), lam in [0, 1): c1 shrinks, the band moves to larger G.

:func:`exact_constants` gives c1, c2, c3 for many reward tables at one policy at once (the batched form of
:meth:`SyntheticPolicy.exact`'s constants, M13, through the Gram matrix of the score table);
:func:`total_variation` estimates TV(P, Q) = E_P[(1 - dQ/dP)^+] from pilots drawn under P
(:func:`sample_cells`, the same draws as :meth:`SyntheticPolicy.sample_many`).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import torch
from torch import Tensor

from ..stats.exact_mse import uniform_constants
from .base import SyntheticPolicy

__all__ = ["cell_counts", "sample_cells", "pilot_log_likelihood", "reward_log_ratio", "contrast_patterns",
           "contrast_twins", "mixture_log_ratio", "shrink_twin", "exact_constants", "total_variation"]

DT = torch.float64


def _check_policy(policy: SyntheticPolicy) -> None:
    if not bool(policy.action_mask.all()):
        raise ValueError("reward twins need every prompt to have the same number of actions (no padding); "
                         f"this policy has K_x from {int(policy.n_actions.min())} to {int(policy.n_actions.max())}")


def cell_counts(n_prompts: int, n_actions: int, prompts: Tensor, actions: Tensor, rewards: Tensor) -> tuple[Tensor,
                                                                                                           Tensor]:
    """Samples n and successes k per cell (x, a) of pilots: prompts (..., B), actions and rewards (..., B, G) ->
    n, k (..., P, K) float64."""
    lead = prompts.shape[:-1]
    B, G = actions.shape[-2:]
    cell = (prompts.unsqueeze(-1) * n_actions + actions).reshape(-1, B * G)  # (S, B*G)
    z = rewards.to(DT).reshape(-1, B * G)
    n = torch.zeros(cell.shape[0], n_prompts * n_actions, dtype=DT).scatter_add_(1, cell, torch.ones_like(z))
    k = torch.zeros_like(n).scatter_add_(1, cell, z)
    return n.reshape(*lead, n_prompts, n_actions), k.reshape(*lead, n_prompts, n_actions)


def sample_cells(policy: SyntheticPolicy, B0: int, G0: int, n_pilots: int, generator: torch.Generator, *,
                 reward_mean: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """prompts (S, B0), actions and rewards (S, B0, G0) of ``n_pilots`` pilots at theta0: the draws of
    :meth:`SyntheticPolicy.sample_many` (the same generator calls, so the same values), without the scores (a
    pilot's scores are a function of its (prompt, action) pairs). ``reward_mean`` replaces r (a twin)."""
    p = policy.probs()  # (P, K)
    r = policy.reward_mean if reward_mean is None else reward_mean
    pr = torch.randint(policy.n_prompts, (n_pilots, B0), generator=generator)
    rows = p[pr]  # (S, B0, K)
    act = torch.multinomial(rows.reshape(n_pilots * B0, -1), G0, replacement=True,
                            generator=generator).reshape(n_pilots, B0, G0)
    z = torch.bernoulli(r[pr.unsqueeze(-1), act], generator=generator)
    return pr, act, z


def pilot_log_likelihood(policy: SyntheticPolicy, prompts: Tensor, actions: Tensor, rewards: Tensor, *,
                         reward_mean: Tensor | None = None) -> Tensor:
    """log P(pilot) at theta0 (M64): prompts (..., B), actions, rewards (..., B, G) -> (...)."""
    p = policy.probs()
    r = policy.reward_mean if reward_mean is None else reward_mean
    x = prompts.unsqueeze(-1).expand_as(actions)
    lp = torch.log(p[x, actions])
    rr = r[x, actions]
    z = rewards.to(DT)
    lz = torch.where(z > 0, torch.log(rr), torch.log1p(-rr))
    return (lp + lz).sum((-1, -2)) - prompts.shape[-1] * math.log(policy.n_prompts)


def _cell_log_ratio(n: Tensor, k: Tensor, r: Tensor, r_alt: Tensor) -> Tensor:
    """k log(r'/r) + (n - k) log((1 - r')/(1 - r)) per cell; 0 where the cell has no samples (or no such outcome)."""
    up = torch.where(k > 0, k * (torch.log(r_alt) - torch.log(r)), torch.zeros_like(k))
    down = torch.where(n - k > 0, (n - k) * (torch.log1p(-r_alt) - torch.log1p(-r)), torch.zeros_like(k))
    return up + down


def reward_log_ratio(n: Tensor, k: Tensor, r: Tensor, r_alt: Tensor) -> Tensor:
    """log dQ/dP of pilots (cells n, k (..., P, K)) under reward tables r_alt (Q) and r (P), same policy (M64)."""
    return _cell_log_ratio(n, k, r, r_alt).sum((-1, -2))


def contrast_patterns(K: int) -> Tensor:
    """All 2^K - 2 sign patterns eps in {-1, 1}^K that are not constant (a constant one moves no contrast): (S, K)."""
    pats = torch.tensor(list(itertools.product((1.0, -1.0), repeat=K)), dtype=DT)
    return pats[(pats != pats[:, :1]).any(1)]


def contrast_twins(policy: SyntheticPolicy, t: float, *, reward_mean: Tensor | None = None) -> Tensor:
    """Reward tables (S, P, K) of the contrast twins (M65): logit r'(x, .) = logit r(x, .) + t (eps - c_x(eps)) for
    every pattern eps of :func:`contrast_patterns`, c_x solving sum_a pi(a|x) r'(x, a) = V(x) (bisection, 80 steps).
    Cells with r in {0, 1} and prompts with fewer than two such cells keep their rewards."""
    _check_policy(policy)
    p = policy.probs()
    r = (policy.reward_mean if reward_mean is None else reward_mean).to(DT)
    free = (r > 0) & (r < 1)
    ok = free.sum(-1) >= 2  # (P,)
    ell = torch.logit(torch.where(free, r, torch.full_like(r, 0.5)))
    V = (p * r).sum(-1)  # (P,)
    eps = contrast_patterns(r.shape[1])[:, None, :] * free  # (S, P, K); fixed cells get no shift

    def value(c):  # (S, P) -> sum_a p r'
        return (p * torch.where(free, torch.sigmoid(ell + t * (eps - c.unsqueeze(-1) * free)), r)).sum(-1)

    lo = torch.full(eps.shape[:2], -1.0 - 60.0 / max(t, 1e-12), dtype=DT)
    hi = -lo
    for _ in range(80):  # value decreases in c
        mid = (lo + hi) / 2
        above = value(mid) > V
        lo, hi = torch.where(above, mid, lo), torch.where(above, hi, mid)
    c = (lo + hi) / 2
    out = torch.where(free, torch.sigmoid(ell + t * (eps - c.unsqueeze(-1) * free)), r)
    return torch.where(ok[None, :, None], out, r.expand_as(out))


def mixture_log_ratio(n: Tensor, k: Tensor, r: Tensor, twins: Tensor) -> Tensor:
    """log of the likelihood ratio of the twins' mixture (a pattern per prompt, uniform and independent across
    prompts) to r, for pilots with cells n, k (..., P, K): sum_x log mean_s prod_a L_xa(s) (M65)."""
    per = _cell_log_ratio(n.unsqueeze(-3), k.unsqueeze(-3), r, twins).sum(-1)  # (..., S, P)
    return (torch.logsumexp(per, dim=-2) - math.log(twins.shape[0])).sum(-1)


def shrink_twin(policy: SyntheticPolicy, lam: float) -> Tensor:
    """The reward table V(x) + lam (r - V(x)) (M65): same values V(x), contrasts shrunk by lam in [0, 1]."""
    if not 0.0 <= lam <= 1.0:
        raise ValueError(f"lam = {lam} must be in [0, 1]")
    r = policy.reward_mean
    V = (policy.probs() * r).sum(-1, keepdim=True)
    return V + lam * (r - V)


def exact_constants(policy: SyntheticPolicy, reward_tables: Tensor) -> np.ndarray:
    """(c1, c2, c3) of Theorem 7 at theta0 for reward tables (M, P, K): (M, 3), the constants of
    :meth:`SyntheticPolicy.exact` (M13) for many tables at once: the per-prompt moments through the Gram matrix of
    the score table, g(x).g(y) = sum_ab u_xa u_yb <W(x,a), W(y,b)>, u = pi r, combined by
    :func:`ugrpo.stats.exact_mse.uniform_constants`."""
    p = policy.probs()  # (P, K)
    W = policy.score_table(probs=p)  # (P, K, D)
    gram = torch.einsum("xad,ybd->xayb", W, W)
    w2 = (W * W).sum(-1)  # (P, K)
    r = reward_tables.to(DT).reshape(-1, *p.shape)
    u = p * r  # (M, P, K)
    V = u.sum(-1)  # (M, P)
    P = p.shape[0]
    gg = torch.einsum("mxa,xayb,myb->mxy", u, gram, u)  # (M, P, P)
    gn = torch.diagonal(gg, dim1=-2, dim2=-1)  # ||g(x)||^2
    dev2 = r - 2 * r * V.unsqueeze(-1) + V.unsqueeze(-1) ** 2  # E[(Z - V)^2 | a]
    tr_sigma = (p * dev2 * w2).sum(-1) - gn  # E||W (Z - V)||^2 - ||g(x)||^2
    return uniform_constants(gn, gg.sum((-1, -2)) / P**2, tr_sigma, (p * w2).sum(-1), V * (1 - V)).numpy()


def total_variation(log_ratio: Tensor) -> tuple[float, float]:
    """TV(P, Q) = E_P[(1 - dQ/dP)^+] from log dQ/dP of pilots drawn under P: (estimate, Monte-Carlo SE) (M66)."""
    v = (1.0 - torch.exp(log_ratio.clamp(max=50.0))).clamp(min=0.0)
    return float(v.mean()), float(v.std(correction=1)) / math.sqrt(v.numel())
