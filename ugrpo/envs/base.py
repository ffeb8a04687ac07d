"""Exact synthetic policies: a finite set of prompts, a finite set of actions per prompt.

Both kinds of policy in this package are log-linear: for prompt x and action a,

    pi_theta(a | x) = exp(theta . phi(x, a)) / sum_b exp(theta . phi(x, b)),
    W(x, a) = grad_theta log pi_theta(a | x) = phi(x, a) - sum_b pi_theta(b | x) phi(x, b),

and the reward of (x, a) is Z ~ Bernoulli(r(x, a)). Prompts X are drawn uniformly (with
replacement) from the P prompts. ``softmax_bandit`` is the special case where phi(x, a) is the
one-hot vector of arm (x, a), so theta is all logits concatenated (tabular softmax).

Because everything is finite, every quantity of the paper is an exact finite sum over
(x, a, z): the value V(x) = sum_a pi r, the prompt gradient g(x) = E[W Z | x] (docs/paper.md sec. 1,
the intended form of the printed g(x; theta)), the minibatch target g = E_X g(X) (paper eq. (8)),
tr Sigma_oracle(x) (paper eq. (7)) and the constants c1, c2, c3 of Theorem 7 (eq. (11)).

Layout: prompts may have different numbers of actions K_x; tensors are padded to Kmax with
``action_mask`` False on the padding, which gets probability 0, reward 0 and score 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from ugrpo.errors import check_allocation

from ..stats.estimators import EstimatorName
from ..stats.exact_mse import PolicyMoments, PromptMoments, minibatch_mse, policy_moments

__all__ = ["SyntheticPolicy", "ExactQuantities", "SampledBatch", "EstimatorName", "SIGMA_MAX_DIM"]

SIGMA_MAX_DIM = 256
"""``ExactQuantities.sigma_oracle_x`` (P, D, D) is materialised only when D <= this."""
_SIGMA_MAX_ENTRIES = 50_000_000  # and P * D * D <= this (400 MB of float64)


@dataclass(frozen=True)
class SampledBatch:
    """One on-policy batch of Algorithm 1 (docs/paper.md sec. 2).

    Attributes
    ----------
    prompts : (B,) long, prompt indices drawn uniformly with replacement
    actions : (B, G) long, A^(b,g) ~ pi_theta(. | X^(b))
    rewards : (B, G) float64, Z^(b,g) ~ Bernoulli(r(X^(b), A^(b,g)))
    scores : (B, G, D) float64, W^(b,g) = grad log pi_theta(A^(b,g) | X^(b))
    values : (B,) float64, the exact V(X^(b)) (the oracle baseline of Table 1)
    """

    prompts: Tensor
    actions: Tensor
    rewards: Tensor
    scores: Tensor
    values: Tensor


@dataclass(frozen=True)
class ExactQuantities:
    """Every exact quantity of the paper at one theta (finite sums over prompts, actions, rewards).

    Attributes
    ----------
    theta : (D,) the parameter these were computed at
    J : J(theta) = E_X sum_a pi(a|X) r(X, a)
    g_x : (P, D), g(x) = E[W Z | x] = sum_a pi(a|x) r(x,a) W(x,a)
    g : (D,), g = E_X g(X) = grad J (paper eq. (8))
    V : (P,), V(x) = E[Z | x]
    e_w2 : (P,), E ||W||^2 given x
    sigma_oracle_x : (P, D, D) Sigma_oracle(x) = Cov(W (Z - V(x)) | x) (paper eq. (7)),
        or None when D > SIGMA_MAX_DIM (or P D^2 too large)
    prompt_moments : list of P PromptMoments
    policy_moments : PolicyMoments (c1, c2, c3 of Theorem 7 at this theta)
    """

    theta: Tensor
    J: float
    g_x: Tensor
    g: Tensor
    V: Tensor
    e_w2: Tensor
    sigma_oracle_x: Tensor | None
    prompt_moments: list[PromptMoments]
    policy_moments: PolicyMoments

    def mse(self, estimator: EstimatorName, B: int, G: int) -> float:
        """Exact minibatch MSE E||ghat - g||^2 of ``estimator`` with B prompts x G samples.

        Delegates to :func:`ugrpo.stats.exact_mse.minibatch_mse` (paper Prop. 3 eq. (9), with
        the exact finite-G residual of docs/math.md) on :attr:`policy_moments`.
        """
        return float(minibatch_mse(self.policy_moments, estimator, B, G))


class SyntheticPolicy:
    """A log-linear policy over P prompts with exact gradients, values and variance components.

    Subclasses set the features and call ``_setup``; everything else is shared.

    Attributes
    ----------
    kind : ``"softmax_bandit"`` or ``"linear_softmax"``
    n_prompts : P
    dim : D, the number of parameters
    theta0 : (D,) float64, the initial parameter stored with the instance
    reward_mean : (P, Kmax) float64, r(x, a) (0 on padding)
    n_actions : (P,) long, K_x
    action_mask : (P, Kmax) bool
    features : (P, Kmax, D) float64, phi(x, a) (0 on padding)
    j_star_exact : whether :meth:`J_star` is exact (True) or a numerical optimum (False)
    name, description : free text
    """

    kind: str = ""
    j_star_exact: bool = True

    def _setup(self, features: Tensor, reward_mean: Tensor, action_mask: Tensor, theta0: Tensor,
               name: str, description: str) -> None:
        self.features = features.to(torch.float64)  # (P, Kmax, D)
        self.reward_mean = reward_mean.to(torch.float64)  # (P, Kmax)
        self.action_mask = action_mask.to(torch.bool)  # (P, Kmax)
        self.n_actions = self.action_mask.sum(dim=1)  # (P,)
        self.theta0 = theta0.to(torch.float64).clone()  # (D,)
        self.name = name
        self.description = description
        self.n_prompts, self.max_actions, self.dim = self.features.shape
        if self.theta0.shape != (self.dim,):
            raise ValueError(f"theta0 must have shape ({self.dim},), got {tuple(self.theta0.shape)}")

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(name={self.name!r}, P={self.n_prompts}, "
                f"Kmax={self.max_actions}, D={self.dim})")

    # ------------------------------------------------------------------ policy
    def _theta(self, theta: Tensor | None) -> Tensor:
        if theta is None:
            return self.theta0
        theta = torch.as_tensor(theta, dtype=torch.float64)
        if theta.shape[-1:] != (self.dim,):
            raise ValueError(f"theta must have last dimension D = {self.dim}, got shape {tuple(theta.shape)}")
        if not torch.isfinite(theta).all():
            raise ValueError("theta contains non-finite entries (did SGD diverge? lower the learning rate)")
        return theta

    def probs(self, theta: Tensor | None = None) -> Tensor:
        """pi_theta(a | x), padded ``(P, Kmax)`` (zeros on padding); theta may be batched ``(..., D)``."""
        theta = self._theta(theta)
        logits = torch.einsum("pkd,...d->...pk", self.features, theta)  # (..., P, Kmax)
        logits = logits.masked_fill(~self.action_mask, -math.inf)
        return torch.softmax(logits, dim=-1)

    def score_table(self, theta: Tensor | None = None, probs: Tensor | None = None) -> Tensor:
        """W(x, a) = phi(x, a) - sum_b pi(b|x) phi(x, b), padded ``(..., P, Kmax, D)`` (0 on padding)."""
        if probs is None:
            probs = self.probs(theta)
        mean_phi = torch.einsum("...pk,pkd->...pd", probs, self.features)  # (..., P, D)
        W = self.features - mean_phi.unsqueeze(-2)  # (..., P, Kmax, D)
        return W * self.action_mask.unsqueeze(-1).to(W.dtype)

    def J(self, theta: Tensor | None = None) -> Tensor | float:
        """J(theta) = E_X sum_a pi(a|X) r(X,a) (docs/paper.md sec. 1); a float, or (S,) for batched theta."""
        v = (self.probs(theta) * self.reward_mean).sum(-1).mean(-1)
        return float(v) if v.ndim == 0 else v

    def J_star(self) -> float:
        """sup_theta J(theta); see the subclass for whether it is exact."""
        raise NotImplementedError

    def j_star_upper_bound(self) -> float:
        """mean_x max_a r(x, a), an upper bound on J_star for any policy class."""
        r = self.reward_mean.masked_fill(~self.action_mask, -math.inf)
        return float(r.max(dim=1).values.mean())

    def gap(self, theta: Tensor | None = None) -> Tensor | float:
        """Suboptimality gap J_star - J(theta) (docs/paper.md sec. 1); batched theta gives (S,)."""
        return self.J_star() - self.J(theta)

    def grad_J(self, theta: Tensor | None = None) -> Tensor:
        """The exact policy gradient g = E_X sum_a pi r W (paper eq. (3), (8)); ``(..., D)``."""
        p = self.probs(theta)
        W = self.score_table(probs=p)
        return torch.einsum("...pk,pk,...pkd->...d", p, self.reward_mean, W) / self.n_prompts

    # ------------------------------------------------------------------ exact moments
    def exact(self, theta: Tensor | None = None, *, sigma: bool | None = None) -> ExactQuantities:
        """All exact moments at theta (one unbatched ``(D,)`` parameter).

        Sums over actions a and reward outcomes z in {0, 1}: with p = pi(a|x), r = r(x,a),
        E[Z^2 | a] = r and E[(Z - V)^2 | a] = r - 2 r V + V^2.

        Parameters
        ----------
        theta : (D,), default ``theta0``
        sigma : materialise Sigma_oracle(x) (P, D, D); default when D <= SIGMA_MAX_DIM and
            P D^2 <= 5e7.
        """
        theta = self._theta(theta)
        if theta.ndim != 1:
            raise ValueError(f"exact() takes one theta of shape ({self.dim},), got {tuple(theta.shape)}")
        p = self.probs(theta)  # (P, K)
        r = self.reward_mean  # (P, K)
        W = self.score_table(probs=p)  # (P, K, D)
        w2 = (W * W).sum(-1)  # (P, K)
        V = (p * r).sum(-1)  # (P,)
        g_x = torch.einsum("pk,pkd->pd", p * r, W)  # (P, D)
        g = g_x.mean(0)  # (D,)
        e_w2 = (p * w2).sum(-1)  # (P,)
        g_norm2 = (g_x * g_x).sum(-1)  # (P,)
        e_wz2 = (p * r * w2).sum(-1)  # E||W Z||^2
        dev2 = r - 2 * r * V[:, None] + V[:, None] ** 2  # E[(Z - V)^2 | a]  (P, K)
        e_wzv2 = (p * dev2 * w2).sum(-1)  # E||W (Z - V)||^2
        var_z = V * (1 - V)  # Z | x is Bernoulli(V(x))
        tr_or = e_wzv2 - g_norm2
        tr_vz = e_wz2 - g_norm2
        if sigma is None:
            P, D = self.n_prompts, self.dim
            sigma = D <= SIGMA_MAX_DIM and P * D * D <= _SIGMA_MAX_ENTRIES
        sigma_x = None
        if sigma:
            second = torch.einsum("pk,pkd,pke->pde", p * dev2, W, W)  # E[W W^T (Z-V)^2 | x]
            sigma_x = second - g_x[:, :, None] * g_x[:, None, :]  # (P, D, D)
        pms = [
            PromptMoments(value=float(V[i]), var_z=float(var_z[i]), e_w2=float(e_w2[i]),
                          g_norm2=float(g_norm2[i]), tr_sigma_oracle=float(tr_or[i]),
                          tr_cov_wz=float(tr_vz[i]))
            for i in range(self.n_prompts)
        ]
        pol = policy_moments(pms, g_x)  # uniform prompts: c1, c2, c3 of Theorem 7 (stats formulas)
        return ExactQuantities(theta=theta.clone(), J=float(V.mean()), g_x=g_x, g=g, V=V, e_w2=e_w2,
                               sigma_oracle_x=sigma_x, prompt_moments=pms, policy_moments=pol)

    # ------------------------------------------------------------------ sampling
    def sample(self, theta: Tensor | None, B: int, G: int, generator: torch.Generator) -> SampledBatch:
        """Draw one batch of Algorithm 1: B prompts uniformly with replacement, G actions each.

        Fully vectorised (one multinomial and one bernoulli call). See :meth:`sample_many` for
        S independent batches at S parameters at once.
        """
        theta = self._theta(theta)
        if theta.ndim != 1:
            raise ValueError(f"sample() takes one theta of shape ({self.dim},); use sample_many for batches")
        out = self.sample_many(theta.unsqueeze(0), B, G, generator)
        return SampledBatch(*(t.squeeze(0) for t in (out.prompts, out.actions, out.rewards,
                                                      out.scores, out.values)))

    def sample_many(self, theta: Tensor, B: int, G: int,
                    generator: torch.Generator | Sequence[torch.Generator]) -> SampledBatch:
        """S independent batches at thetas ``(S, D)``; every field gains a leading S axis.

        ``generator`` is one torch.Generator for all S rows, or a sequence of S generators, one per
        row (row s then depends only on generator s, so it equals ``sample(theta[s], ..., gen_s)``).
        The score table is computed once for all rows.
        """
        _check_positive_int(B, "B")
        _check_positive_int(G, "G")
        theta = self._theta(theta)
        S = theta.shape[0] if theta.ndim == 2 else 1
        check_allocation(8.0 * S * B * G * (self.dim + 4), f"a batch of {S} x {B} prompts x {G} samples",
                         "use a smaller batch, group size or number of repetitions")
        if theta.ndim != 2:
            raise ValueError(f"sample_many takes thetas of shape (S, {self.dim}), got {tuple(theta.shape)}")
        S = theta.shape[0]
        gens = [generator] if isinstance(generator, torch.Generator) else list(generator)
        if not all(isinstance(g, torch.Generator) for g in gens) or len(gens) not in (1, S):
            raise TypeError(f"generator must be a torch.Generator or a sequence of S = {S} of them")
        p = self.probs(theta)  # (S, P, K)
        W = self.score_table(probs=p)  # (S, P, K, D)
        V = (p * self.reward_mean).sum(-1)  # (S, P)
        chunks = [(slice(0, S), gens[0])] if len(gens) == 1 else [(slice(s, s + 1), g) for s, g in enumerate(gens)]
        prompts, actions, rewards = [], [], []
        for sl, gen in chunks:
            n = sl.stop - sl.start
            pr = torch.randint(self.n_prompts, (n, B), generator=gen)  # (n, B)
            rows = torch.gather(p[sl], 1, pr.unsqueeze(-1).expand(n, B, p.shape[-1]))  # (n, B, K)
            act = torch.multinomial(rows.reshape(n * B, -1), G, replacement=True, generator=gen).reshape(n, B, G)
            rmean = self.reward_mean[pr.unsqueeze(-1), act]  # (n, B, G)
            prompts.append(pr)
            actions.append(act)
            rewards.append(torch.bernoulli(rmean, generator=gen))
        prompts, actions, rewards = torch.cat(prompts), torch.cat(actions), torch.cat(rewards)
        s_idx = torch.arange(S).unsqueeze(1)  # (S, 1)
        scores = W[s_idx.unsqueeze(-1), prompts.unsqueeze(-1), actions]  # (S, B, G, D)
        values = V[s_idx, prompts]  # (S, B)
        return SampledBatch(prompts=prompts, actions=actions, rewards=rewards, scores=scores, values=values)


def _check_positive_int(v: int, name: str) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"{name} must be a positive integer, got {v!r}")
