"""The two kinds of exact synthetic policy: ``softmax_bandit`` and ``linear_softmax``.

* ``SoftmaxBandit``: one softmax per prompt with its own logits; theta is all logits
  concatenated (D = sum_x K_x), so W(x, a) = e_a - pi_x in block x and 0 elsewhere. With a per-prompt
  ``score_scale`` s_x the block's features are s_x e_a and its parameters logits / s_x: the same policy, scores
  s_x (e_a - pi_x) (||W||^2 times s_x^2; an SGD step moves that prompt's logits s_x^2 times as far).
* ``LinearSoftmax``: one shared theta in R^d, pi(a|x) propto exp(theta . phi(x, a)),
  W(x, a) = phi(x, a) - sum_b pi(b|x) phi(x, b).

J_star (the ``max_theta E^{pi_theta} Z`` of the suboptimality gap, docs/paper.md sec. 1):
* softmax_bandit: exactly mean_x max_a r(x, a). It is a supremum, not a maximum: it is
  approached as the logit of the best arm goes to +infinity, so the gap of any finite theta is
  > 0 (unless all arms of every prompt tie).
* linear_softmax: no closed form in general. It is computed numerically (L-BFGS on the exact
  J from several deterministic starts) and is therefore exact only up to that optimisation
  tolerance: ``j_star_exact`` is False and ``J_star_bracket()`` returns (best J found,
  mean_x max_a r), which contains the true supremum.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from .base import SyntheticPolicy

__all__ = ["SoftmaxBandit", "LinearSoftmax"]


def _pad(rows: Sequence[Sequence[float]], kmax: int) -> tuple[Tensor, Tensor]:
    out = torch.zeros(len(rows), kmax, dtype=torch.float64)
    mask = torch.zeros(len(rows), kmax, dtype=torch.bool)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.as_tensor(row, dtype=torch.float64)
        mask[i, : len(row)] = True
    return out, mask


class SoftmaxBandit(SyntheticPolicy):
    """Tabular softmax over P prompts (K_x arms each); theta = concatenated logits.

    Parameters
    ----------
    logits : per prompt, a list of K_x initial logits (K_x may differ)
    reward_mean : per prompt, K_x success probabilities r(x, a) in [0, 1]
    score_scale : optional per-prompt s_x > 0 (default 1): features s_x e_a, parameters logits / s_x (same
        policy, scores times s_x)
    """

    kind = "softmax_bandit"
    j_star_exact = True

    def __init__(self, logits: Sequence[Sequence[float]], reward_mean: Sequence[Sequence[float]],
                 *, name: str = "", description: str = "", score_scale: Sequence[float] | None = None) -> None:
        if len(logits) != len(reward_mean) or len(logits) == 0:
            raise ValueError(f"need one logits row per reward_mean row and at least one prompt; "
                             f"got {len(logits)} logits rows and {len(reward_mean)} reward_mean rows")
        ks = [len(row) for row in logits]
        for i, (a, b) in enumerate(zip(logits, reward_mean)):
            if len(a) != len(b):
                raise ValueError(f"prompt {i}: {len(a)} logits but {len(b)} reward means")
        scale = [1.0] * len(ks) if score_scale is None else [float(v) for v in score_scale]
        if len(scale) != len(ks) or not all(math.isfinite(v) and v > 0 for v in scale):
            raise ValueError(f"score_scale must be {len(ks)} finite numbers > 0 (one per prompt), got {score_scale}")
        self.score_scale = scale
        kmax, D = max(ks), sum(ks)
        r, mask = _pad(reward_mean, kmax)
        feats = torch.zeros(len(ks), kmax, D, dtype=torch.float64)
        off = 0
        self.offsets = []  # start of prompt x's block in theta
        for i, k in enumerate(ks):
            feats[i, torch.arange(k), off + torch.arange(k)] = scale[i]
            self.offsets.append(off)
            off += k
        theta0 = torch.tensor([v / s for row, s in zip(logits, scale) for v in row], dtype=torch.float64)
        self._setup(feats, r, mask, theta0, name, description)

    def J_star(self) -> float:
        """Exactly mean_x max_a r(x, a): a supremum approached as the best logits diverge."""
        return self.j_star_upper_bound()

    def logits_list(self, theta: Tensor | None = None) -> list[list[float]]:
        """theta split back into per-prompt logits (the JSON layout): block x times its score_scale."""
        theta = self._theta(theta)
        ks = self.n_actions.tolist()
        return [(theta[o: o + k] * s).tolist() for o, k, s in zip(self.offsets, ks, self.score_scale)]


class LinearSoftmax(SyntheticPolicy):
    """Contextual linear softmax: pi(a|x) propto exp(theta . phi(x, a)), theta in R^d shared.

    Parameters
    ----------
    theta : d initial parameters
    features : per prompt, K_x rows of d numbers phi(x, a)
    reward_mean : per prompt, K_x success probabilities
    j_star_starts : number of random L-BFGS starts (besides theta0 and 0) for J_star; J is not
        concave in theta, so several starts guard against local maxima (they cannot exclude them)
    """

    kind = "linear_softmax"
    j_star_exact = False

    def __init__(self, theta: Sequence[float], features: Sequence[Sequence[Sequence[float]]],
                 reward_mean: Sequence[Sequence[float]], *, name: str = "", description: str = "",
                 j_star_starts: int = 12) -> None:
        if len(features) != len(reward_mean) or len(features) == 0:
            raise ValueError(f"need one features block per reward_mean row and at least one prompt; "
                             f"got {len(features)} and {len(reward_mean)}")
        d = len(theta)
        ks = [len(f) for f in features]
        kmax = max(ks)
        feats = torch.zeros(len(ks), kmax, d, dtype=torch.float64)
        for i, f in enumerate(features):
            if len(f) != len(reward_mean[i]):
                raise ValueError(f"prompt {i}: {len(f)} feature rows but {len(reward_mean[i])} reward means")
            feats[i, : len(f)] = torch.as_tensor(f, dtype=torch.float64).reshape(len(f), d)
        r, mask = _pad(reward_mean, kmax)
        self.j_star_starts = j_star_starts
        self._j_star: tuple[float, Tensor] | None = None
        self._setup(feats, r, mask, torch.as_tensor(theta, dtype=torch.float64), name, description)

    def J_star(self) -> float:
        """Numerical sup_theta J (cached): the best J found by L-BFGS, never above the upper bound.

        Exact only up to the optimisation tolerance; see :meth:`J_star_bracket`.
        """
        return self._optimise()[0]

    def theta_star(self) -> Tensor:
        """The parameter attaining :meth:`J_star` (numerically)."""
        return self._optimise()[1].clone()

    def refine_j_star(self, thetas: Tensor) -> float:
        """Improve the numerical J_star with extra L-BFGS starts (e.g. the end points of SGD runs)."""
        val, th = self._optimise()
        for t0 in self._theta(thetas).reshape(-1, self.dim):
            v, t = self._lbfgs(t0)
            if v > val:
                val, th = min(v, self.j_star_upper_bound()), t
        self._j_star = (val, th)
        return val

    def J_star_bracket(self) -> tuple[float, float]:
        """(best J found, mean_x max_a r): the true supremum lies in this interval."""
        return self.J_star(), self.j_star_upper_bound()

    def _optimise(self) -> tuple[float, Tensor]:
        if self._j_star is not None:
            return self._j_star
        old_threads = torch.get_num_threads()
        torch.set_num_threads(1)  # tiny tensors: one thread is several times faster on busy cores
        try:
            self._j_star = self._multistart()
        finally:
            torch.set_num_threads(old_threads)
        return self._j_star

    def _multistart(self) -> tuple[float, Tensor]:
        gen = torch.Generator().manual_seed(0)
        starts = [self.theta0.clone(), torch.zeros(self.dim, dtype=torch.float64)]
        base = max(1.0, float(self.theta0.norm()))
        scales = (0.5, 1.0, 2.0, 4.0)  # random directions at several radii (J is not concave)
        starts += [torch.randn(self.dim, generator=gen, dtype=torch.float64) * (base * scales[i % 4] / self.dim ** 0.5)
                   for i in range(self.j_star_starts)]
        best_val, best_theta = -float("inf"), self.theta0.clone()
        for th0 in starts:
            val, th = self._lbfgs(th0)
            if val > best_val:
                best_val, best_theta = val, th
        return min(best_val, self.j_star_upper_bound()), best_theta

    def _lbfgs(self, theta0: Tensor, rounds: int = 3) -> tuple[float, Tensor]:
        theta = theta0.clone().requires_grad_(True)
        opt = torch.optim.LBFGS([theta], lr=1.0, max_iter=100, tolerance_grad=1e-12,
                                tolerance_change=1e-15, history_size=20, line_search_fn="strong_wolfe")

        def closure() -> Tensor:
            opt.zero_grad()
            loss = -(self.probs(theta) * self.reward_mean).sum(-1).mean()
            loss.backward()
            return loss

        prev = -float("inf")
        for _ in range(rounds):
            opt.step(closure)
            with torch.no_grad():
                val = self.J(theta.detach())
            if val - prev < 1e-12:
                break
            prev = val
        th = theta.detach()
        return float(self.J(th)), th
