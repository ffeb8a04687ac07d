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

Score-norm knobs (per-prompt multipliers s_x of the scores W, so E[||W||^2 | x, Z] is multiplied by s_x^2; all
default to no change, and they draw from their own generators). In a ``softmax_bandit`` the initial policy is
unchanged (features s_x e_a, parameters logits / s_x); in a ``linear_softmax`` the component of phi(x, .)
orthogonal to theta0 is multiplied by s_x, so theta0 . phi (the initial policy) is unchanged and the scores
grow by s_x in every direction but theta0's:

* ``score_scale_spread`` S >= 1: s_x = S^(u_x - 1/2), u_x iid uniform on [0, 1]: score scales spread S-fold
  across prompts (||W||^2 S^2-fold), independent of the rewards.
* ``hard_score_scale`` k > 0: the prompts whose mean reward over arms lies below the median of all prompts' get
  s_x times k (k > 1: hard prompts carry larger scores, so m_z(x) correlates with p).
* ``rare_fraction`` f in [0, 1], ``rare_shift``, ``rare_score_scale``: round(f P) randomly chosen prompts (not
  among the extreme ones) get their reward logits shifted down by ``rare_shift`` (p near 0: rare hard prompts)
  and s_x times ``rare_score_scale`` (e.g. 31.6 for 1000x larger ||W||^2).
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
               extreme_shift: float = 5.0, score_reward_corr: float = 0.0, score_scale_spread: float = 1.0,
               hard_score_scale: float = 1.0, rare_fraction: float = 0.0, rare_shift: float = 5.0,
               rare_score_scale: float = 1.0) -> SyntheticPolicy:
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
    score_scale_spread : >= 1, the spread of per-prompt score scales (module docstring)
    hard_score_scale : > 0, score multiplier of the prompts with below-median mean reward
    rare_fraction, rare_shift, rare_score_scale : the share of rare hard prompts, the downward push of their reward
        logits (>= 0) and their score multiplier (> 0)
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
    _check("score_scale_spread", score_scale_spread, 1.0)
    _check("hard_score_scale", hard_score_scale, 1e-6)
    _check("rare_fraction", rare_fraction, 0.0, 1.0)
    _check("rare_shift", rare_shift, 0.0)
    _check("rare_score_scale", rare_score_scale, 1e-6)
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
    rare = _rare_prompts(P, rare_fraction, shifts, seed)  # (P,) bool
    shifts = torch.where(rare.unsqueeze(1), torch.full_like(shifts, -float(rare_shift)), shifts)
    reward = torch.sigmoid(-difficulty + reward_spread * noise + shifts)  # (P, K)
    reward = reward.clamp(0.0, 1.0)
    scale = _score_scales(reward, rare, score_scale_spread, hard_score_scale, rare_score_scale, seed)  # (P,)
    u = (noise - noise.mean()) / noise.std().clamp_min(1e-12) if P * K > 1 else noise
    rho = score_reward_corr
    if kind == "softmax_bandit":
        logits = logit_scale * (rho * u + math.sqrt(1.0 - rho**2) * mix(P, K))
        return SoftmaxBandit(logits.tolist(), reward.tolist(), name=name, description=description,
                             score_scale=None if bool((scale == 1).all()) else scale.tolist())
    feats = mix(P, K, dim)  # (P, K, d)
    theta = torch.randn(dim, generator=gen, dtype=torch.float64) * (logit_scale / math.sqrt(dim))
    if rho != 0.0 and float(theta.norm()) > 0:
        feats = feats + rho * u.unsqueeze(-1) * (theta / theta.norm())
    if not bool((scale == 1).all()):  # scale phi orthogonally to theta0: the initial logits stay theta0 . phi
        t = theta / theta.norm() if float(theta.norm()) > 0 else torch.zeros_like(theta)
        par = (feats @ t).unsqueeze(-1) * t
        feats = par + scale.view(P, 1, 1) * (feats - par)
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


def _rare_prompts(P: int, fraction: float, shifts: torch.Tensor, seed: int) -> torch.Tensor:
    """(P,) bool: round(fraction P) prompts chosen at random among those without an extreme shift (own generator)."""
    out = torch.zeros(P, dtype=torch.bool)
    free = torch.nonzero(shifts[:, 0] == 0).flatten()
    n = min(int(round(fraction * P)), len(free))
    if n == 0:
        return out
    gen = torch.Generator().manual_seed(int(seed) + 104729)
    out[free[torch.randperm(len(free), generator=gen)[:n]]] = True
    return out


def _score_scales(reward: torch.Tensor, rare: torch.Tensor, spread: float, hard: float, rare_scale: float,
                  seed: int) -> torch.Tensor:
    """(P,) score multipliers s_x (module docstring); all ones with the default knobs."""
    P = reward.shape[0]
    scale = torch.ones(P, dtype=torch.float64)
    if spread > 1.0:
        gen = torch.Generator().manual_seed(int(seed) + 15485863)
        scale = scale * spread ** (torch.rand(P, generator=gen, dtype=torch.float64) - 0.5)
    if hard != 1.0:
        mean = reward.mean(1)
        scale = torch.where(mean < mean.median(), scale * hard, scale)
    if rare_scale != 1.0:
        scale = torch.where(rare, scale * rare_scale, scale)
    return scale
