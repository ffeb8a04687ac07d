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

Heterogeneity knobs for per-prompt allocation (docs/math.md M32-M36); both default to 0, which leaves the
instance exactly as without them (they draw from a separate generator):

* ``extreme_fraction`` f in [0, 1]: a fraction f of the prompts (chosen at random) get their reward logits
  shifted by +- ``extreme_shift`` (random sign): with shift 4-6 their success rate p is near 0 or 1, so
  most prompts are (almost) all-wrong or all-right and a few are in between.
* ``score_reward_corr`` rho in [-1, 1]: couples each arm's initial logit to its reward logit. Negative rho
  makes the rewarded arms the unlikely ones, whose scores W = phi - E phi are larger, so the score norm
  E[||W||^2 | Z] differs between right and wrong answers (as on a language model). Bandit: logits =
  logit_scale (rho u_xa + sqrt(1 - rho^2) t_xa), u the standardised reward noise; linear_softmax: the
  features gain rho u_xa along theta0's direction (theta0 . phi shifts by rho |theta0| u_xa).
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
               name: str = "", description: str = "", extreme_fraction: float = 0.0,
               extreme_shift: float = 5.0, score_reward_corr: float = 0.0) -> SyntheticPolicy:
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
    extreme_fraction : in [0, 1], the share of prompts pushed near p = 0 or 1 (module docstring)
    extreme_shift : >= 0, the size of that push on the reward logits
    score_reward_corr : in [-1, 1], coupling of initial logits to reward logits (module docstring)
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
    _check("extreme_fraction", extreme_fraction, 0.0, 1.0)
    _check("extreme_shift", extreme_shift, 0.0)
    _check("score_reward_corr", score_reward_corr, -1.0, 1.0)
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

    noise = mix(P, K)
    shifts = _extreme_shifts(P, extreme_fraction, extreme_shift, seed)  # (P, 1)
    reward = torch.sigmoid(-difficulty + reward_spread * noise + shifts)  # (P, K)
    reward = reward.clamp(0.0, 1.0)
    u = (noise - noise.mean()) / noise.std().clamp_min(1e-12) if P * K > 1 else noise
    rho = score_reward_corr
    if kind == "softmax_bandit":
        logits = logit_scale * (rho * u + math.sqrt(1.0 - rho**2) * mix(P, K))
        return SoftmaxBandit(logits.tolist(), reward.tolist(), name=name, description=description)
    feats = mix(P, K, dim)  # (P, K, d)
    theta = torch.randn(dim, generator=gen, dtype=torch.float64) * (logit_scale / math.sqrt(dim))
    if rho != 0.0 and float(theta.norm()) > 0:
        feats = feats + rho * u.unsqueeze(-1) * (theta / theta.norm())
    return LinearSoftmax(theta.tolist(), feats.tolist(), reward.tolist(), name=name, description=description)


def _extreme_shifts(P: int, fraction: float, shift: float, seed: int) -> torch.Tensor:
    """(P, 1) reward-logit shifts: +-shift on round(fraction P) random prompts, 0 elsewhere (own generator)."""
    out = torch.zeros(P, 1, dtype=torch.float64)
    n = int(round(fraction * P))
    if n == 0 or shift == 0.0:
        return out
    gen = torch.Generator().manual_seed(int(seed) + 7919)
    idx = torch.randperm(P, generator=gen)[:n]
    signs = torch.where(torch.rand(n, generator=gen) < 0.5, -1.0, 1.0).to(torch.float64)
    out[idx, 0] = signs * shift
    return out
