"""Exact synthetic policies for the stats tests: softmax bandits with Bernoulli rewards.

A policy here is P prompts x K arms: probs (P, K), per-arm scores W = grad log pi(a|x) (P, K, D)
and Bernoulli reward means (P, K). Everything the stats module computes is checked against
exact expectations obtained by enumerating every (arm, reward) outcome of G samples.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch
from torch import Tensor

from ugrpo.stats.exact_mse import PolicyMoments, PromptMoments, policy_moments
from ugrpo.stats.ragged import ragged_advantages, ragged_prompt_gradients

DT = torch.float64


@dataclass(frozen=True)
class Bandit:
    probs: Tensor    # (P, K)
    scores: Tensor   # (P, K, D)
    means: Tensor    # (P, K) Bernoulli reward means
    weights: Tensor  # (P,) prompt distribution

    @property
    def P(self) -> int:
        return self.probs.shape[0]

    @property
    def D(self) -> int:
        return self.scores.shape[2]


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def softmax_bandit(P: int, K: int, seed: int, *, spread: float = 1.5) -> Bandit:
    """Tabular softmax: separate logits per prompt, theta in R^(P K), W = e_(p,a) - pi(.|p)."""
    gen = _gen(seed)
    logits = spread * torch.randn(P, K, generator=gen, dtype=DT)
    probs = torch.softmax(logits, dim=1)
    scores = torch.zeros(P, K, P * K, dtype=DT)
    for p in range(P):
        scores[p, :, p * K:(p + 1) * K] = torch.eye(K, dtype=DT) - probs[p]
    means = torch.rand(P, K, generator=gen, dtype=DT)
    return Bandit(probs, scores, means, torch.full((P,), 1.0 / P, dtype=DT))


def linear_softmax(P: int, K: int, D: int, seed: int) -> Bandit:
    """Linear-softmax with shared parameters: pi(a|x) ∝ exp(theta . phi(x,a)), W = phi - E_pi phi."""
    gen = _gen(seed)
    phi = torch.randn(P, K, D, generator=gen, dtype=DT)
    theta = torch.randn(D, generator=gen, dtype=DT)
    probs = torch.softmax(phi @ theta, dim=1)
    scores = phi - (probs.unsqueeze(2) * phi).sum(1, keepdim=True)
    means = torch.rand(P, K, generator=gen, dtype=DT)
    w = torch.rand(P, generator=gen, dtype=DT) + 0.5
    return Bandit(probs, scores, means, w / w.sum())


def true_grads(b: Bandit) -> Tensor:
    """g(x_p) = sum_a pi_a r_a W_a, shape (P, D)."""
    return torch.einsum("pk,pkd->pd", b.probs * b.means, b.scores)


def prompt_moments_exact(b: Bandit, p: int) -> PromptMoments:
    pi, r, W = b.probs[p], b.means[p], b.scores[p]
    w2 = (W**2).sum(1)                                     # (K,)
    V = float((pi * r).sum())
    g2 = float((true_grads(b)[p] ** 2).sum())
    e_w2z2 = float((pi * w2 * r).sum())                    # E||W Z||^2 (Z^2 = Z)
    e_cent = r * (1 - V) ** 2 + (1 - r) * V**2             # E[(Z - V)^2 | a]
    return PromptMoments(
        value=V,
        var_z=V * (1 - V),
        e_w2=float((pi * w2).sum()),
        g_norm2=g2,
        tr_sigma_oracle=float((pi * w2 * e_cent).sum()) - g2,
        tr_cov_wz=e_w2z2 - g2,
    )


def policy_moments_exact(b: Bandit) -> PolicyMoments:
    return policy_moments([prompt_moments_exact(b, p) for p in range(b.P)], true_grads(b), b.weights)


def enumerate_group(b: Bandit, p: int, G: int) -> tuple[Tensor, Tensor, Tensor]:
    """All (2K)^G outcomes of G iid samples at prompt p.

    Returns probabilities (N,), scores (N, G, D), rewards (N, G).
    """
    K = b.probs.shape[1]
    single = [(a, z) for a in range(K) for z in (0, 1)]
    prob1 = torch.tensor([b.probs[p, a] * (b.means[p, a] if z else 1 - b.means[p, a]) for a, z in single], dtype=DT)
    idx = torch.tensor(list(itertools.product(range(len(single)), repeat=G)))  # (N, G)
    arms = torch.tensor([a for a, _ in single])[idx]
    rewards = torch.tensor([float(z) for _, z in single], dtype=DT)[idx]
    probs = prob1[idx].prod(1)
    return probs, b.scores[p][arms], rewards


def loo_estimates(b: Bandit, p: int, G: int) -> tuple[Tensor, Tensor]:
    """(probabilities (n,), LOO estimates (n, D)) of every outcome of G samples at prompt p."""
    probs, W, Z = enumerate_group(b, p, G)
    n = Z.shape[0]
    adv = ragged_advantages(Z.reshape(-1), torch.full((n,), G))
    return probs, ragged_prompt_gradients(W.reshape(-1, W.shape[-1]), adv, torch.full((n,), G))


def batch_outcomes(terms: list[tuple[Tensor, Tensor]]) -> tuple[Tensor, Tensor]:
    """Every joint outcome of independent prompt terms [(probabilities (n_b,), values (n_b, D))]: their product
    probabilities (prod n_b,) and the summed values (prod n_b, D), divided by the number of terms B (a batch mean)."""
    probs, total = terms[0]
    for p2, t2 in terms[1:]:
        probs = (probs[:, None] * p2[None, :]).reshape(-1)
        total = (total[:, None, :] + t2[None, :, :]).reshape(-1, total.shape[-1])
    return probs, total / len(terms)


def sample(b: Bandit, B: int, G: int, gen: torch.Generator) -> tuple[Tensor, Tensor, Tensor]:
    """Draw B prompts ~ weights and G samples each: prompts (B,), scores (B, G, D), rewards (B, G)."""
    prompts = torch.multinomial(b.weights, B, replacement=True, generator=gen)
    arms = torch.multinomial(b.probs[prompts], G, replacement=True, generator=gen)  # (B, G)
    r = b.means[prompts.unsqueeze(1), arms]
    rewards = (torch.rand(B, G, generator=gen, dtype=DT) < r).to(DT)
    return prompts, b.scores[prompts.unsqueeze(1), arms], rewards
