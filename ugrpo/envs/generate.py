"""Random synthetic instances with interpretable knobs (seeded, reproducible).

Reward means: r(x, a) = sigmoid(-difficulty + reward_spread * (sqrt(1-h) s_a + sqrt(h) e_xa)),
with s_a (shared by all prompts) and e_xa (prompt-specific) iid N(0, 1) and h the
``prompt_heterogeneity`` in [0, 1]. Features (linear_softmax):
phi(x, a) = sqrt(1-h) F_a + sqrt(h) E_xa with F_a, E_xa iid N(0, I_d); theta0 ~ N(0, logit_scale^2/d),
so theta0 . phi has standard deviation about ``logit_scale``. Bandit logits:
logit_scale * (sqrt(1-h) t_a + sqrt(h) t_xa).

What the knobs do to the constants of Theorem 7 (c1 = E||g(X)-g||^2, c2 = E tr Sigma_oracle(X),
c3 = E[E||W||^2 Var(Z|X) + ||g(X)||^2]; optimal G* = 1 + sqrt(c3/c1)):

* ``logit_scale`` (> 0 peaks the initial policy): a more peaked pi has smaller scores
  E||W||^2 and a smaller gradient, so c1, c2, c3 all shrink (c1 fastest: it is quadratic in
  the gradient). Mild values (<= 1) keep the policy exploratory.
* ``reward_spread``: how different the arms of one prompt are. ||g(x)||^2 grows like
  reward_spread^2 while E||W||^2 Var(Z|x) barely moves, so c1 grows relative to c3 and G*
  falls. Small spreads (0.1-0.3) give large G*.
* ``difficulty``: shifts all reward logits down (hard, r near 0) or up (negative: easy, r near 1).
  Var(Z|x) = V(1-V) is largest at difficulty 0, so |difficulty| shrinks c2 and c3 (and G*).
* ``prompt_heterogeneity`` h in [0, 1]: h = 0 makes every prompt identical, h = 1 makes them
  independent. For linear_softmax this drives c1: identical prompts have g(x) = g and c1 = 0,
  independent ones point g(x) in different directions. For softmax_bandit the blocks of
  different prompts are orthogonal, so c1 = (1 - 1/P) E||g(X)||^2 whatever h is; h then only
  changes how much the prompts' values and gradient sizes vary.
"""

from __future__ import annotations

import math
from typing import Literal

import torch

from .base import SyntheticPolicy
from .policies import LinearSoftmax, SoftmaxBandit

__all__ = ["random_env"]


def _check(name: str, v: float, lo: float, hi: float = math.inf) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not (lo <= v <= hi) or not math.isfinite(v):
        raise ValueError(f"{name} = {v!r} must be a finite number in [{lo}, {hi}]")


def random_env(kind: Literal["softmax_bandit", "linear_softmax"], *, n_prompts: int, n_actions: int,
               dim: int | None = None, logit_scale: float = 0.5, reward_spread: float = 1.0,
               difficulty: float = 0.0, prompt_heterogeneity: float = 1.0, seed: int = 0,
               name: str = "", description: str = "") -> SyntheticPolicy:
    """A random instance of ``kind``; see the module docstring for each knob's effect on c1, c2, c3.

    Parameters
    ----------
    kind : ``softmax_bandit`` or ``linear_softmax``
    n_prompts : P >= 1
    n_actions : K >= 2 actions per prompt
    dim : d >= 1, the feature dimension (linear_softmax only; must be None for the bandit)
    logit_scale : >= 0, spread of the initial logits (0 = uniform policy)
    reward_spread : >= 0, spread of the reward logits between arms
    difficulty : reward logits are centred at -difficulty (0 -> rewards around 0.5)
    prompt_heterogeneity : in [0, 1], 0 = identical prompts, 1 = independent prompts
    seed : seeds a private torch.Generator (the global RNG is untouched)
    """
    if kind not in ("softmax_bandit", "linear_softmax"):
        raise ValueError(f"kind = {kind!r} is unknown; expected 'softmax_bandit' or 'linear_softmax'")
    for nm, v, lo in (("n_prompts", n_prompts, 1), ("n_actions", n_actions, 2)):
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            raise ValueError(f"{nm} = {v!r} must be an integer >= {lo}")
    _check("logit_scale", logit_scale, 0.0)
    _check("reward_spread", reward_spread, 0.0)
    _check("difficulty", difficulty, -math.inf)
    _check("prompt_heterogeneity", prompt_heterogeneity, 0.0, 1.0)
    if kind == "softmax_bandit" and dim is not None:
        raise ValueError("dim is only for kind='linear_softmax' (the bandit has D = n_prompts * n_actions)")
    if kind == "linear_softmax" and (isinstance(dim, bool) or not isinstance(dim, int) or dim < 1):
        raise ValueError(f"kind='linear_softmax' needs dim = an integer >= 1, got {dim!r}")
    gen = torch.Generator().manual_seed(int(seed))
    P, K = n_prompts, n_actions
    a, b = math.sqrt(1.0 - prompt_heterogeneity), math.sqrt(prompt_heterogeneity)

    def mix(*shape: int) -> torch.Tensor:  # sqrt(1-h) shared + sqrt(h) prompt-specific, N(0,1) each
        shared = torch.randn(1, *shape[1:], generator=gen, dtype=torch.float64)
        own = torch.randn(*shape, generator=gen, dtype=torch.float64)
        return a * shared + b * own

    reward = torch.sigmoid(-difficulty + reward_spread * mix(P, K))  # (P, K)
    reward = reward.clamp(0.0, 1.0)
    if kind == "softmax_bandit":
        logits = logit_scale * mix(P, K)
        return SoftmaxBandit(logits.tolist(), reward.tolist(), name=name, description=description)
    feats = mix(P, K, dim)  # (P, K, d)
    theta = torch.randn(dim, generator=gen, dtype=torch.float64) * (logit_scale / math.sqrt(dim))
    return LinearSoftmax(theta.tolist(), feats.tolist(), reward.tolist(), name=name, description=description)
