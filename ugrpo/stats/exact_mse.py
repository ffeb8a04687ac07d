"""Exact finite-G mean squared error of each gradient estimator (paper Thm 2, Prop 3; docs/math.md).

The paper states Theorem 2 and Proposition 3 up to O(E||W||^2 / G^2); the formulas here are
the exact finite-G versions (docs/math.md eqs. M8-M13), checked in the tests by exact
enumeration of all outcomes of small softmax bandits.

* the per-prompt error of the leave-one-out estimate, f(G) = c2/G + c3/(G(G-1)): :func:`prompt_error` (M9, M33),
  and the minibatch MSE with one G at N = B G samples, the Theorem 7 bound: :func:`uniform_mse` (M11, M21); the
  one home of both formulas (every planner, allocation rule and certificate calls them; tests/test_architecture.py
  checks that f is written nowhere else)
* per prompt: :func:`prompt_mse` (M8-M10)
* prompt averages: :func:`policy_moments` -> :class:`PolicyMoments` (M13)
* minibatch of B prompts: :func:`minibatch_mse` (M11 for the unbiased estimators, M12 for
  the biased ``grpo_mean``)

Deviation from the paper: c3 is given explicitly, E[E||W||^2 Var(Z|X) + ||g(X)||^2], with
the residual written as c3/(BG(G-1)) instead of the paper's O(1/(BG^2)).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ugrpo.stats.estimators import ESTIMATORS, GROUP_BASELINES, EstimatorName

if TYPE_CHECKING:  # torch is imported where it is used: the config schema reads this module, and --help stays fast
    from torch import Tensor

__all__ = [
    "EstimatorName",
    "ESTIMATORS",
    "PromptMoments",
    "PolicyMoments",
    "prompt_error",
    "uniform_mse",
    "prompt_mse",
    "policy_moments",
    "prompt_c3",
    "uniform_constants",
    "minibatch_mse",
    "hoeffding_split",
]


@dataclass(frozen=True)
class PromptMoments:
    """Moments of one prompt x; W = grad log pi(Y|x), Z the reward, V = E[Z|x], g(x) = E[W Z|x].

    Attributes
    ----------
    value : V(x)
    var_z : Var(Z | x)
    e_w2 : E ||W||^2
    g_norm2 : ||g(x)||^2
    tr_sigma_oracle : tr Sigma_oracle(x) = E||W (Z - V)||^2 - ||g(x)||^2   (paper eq. (7))
    tr_cov_wz : tr Cov(W Z | x) = E||W Z||^2 - ||g(x)||^2   (vanilla's per-sample variance)
    """

    value: float
    var_z: float
    e_w2: float
    g_norm2: float
    tr_sigma_oracle: float
    tr_cov_wz: float

    def __post_init__(self) -> None:
        # variances, so >= 0: a computed -1e-18 (E Z^2 - V^2 of a prompt whose rewards never vary) is rounding
        for name in ("var_z", "tr_sigma_oracle", "tr_cov_wz"):
            v = getattr(self, name)
            if -1e-12 * max(1.0, self.e_w2) <= v < 0:
                object.__setattr__(self, name, 0.0)

    @property
    def c3(self) -> float:
        """E||W||^2 Var(Z|x) + ||g(x)||^2: the coefficient of 1/(G(G-1)) in GRPO's MSE (:func:`prompt_c3`)."""
        return prompt_c3(self.e_w2, self.var_z, self.g_norm2)


def prompt_c3(e_w2, var_z, g_norm2):
    """E||W||^2 Var(Z|x) + ||g(x)||^2, one prompt's coefficient of 1/(G(G-1)) in GRPO's MSE (M9); floats or arrays.

    Examples
    --------
    >>> prompt_c3(0.5, 0.25, 0.125)
    0.25
    """
    return e_w2 * var_z + g_norm2


@dataclass(frozen=True)
class PolicyMoments:
    """Prompt-averaged moments (prompts X ~ f); the constants of Theorem 7 at one theta.

    Attributes
    ----------
    c1 : E||g(X) - g||^2                              (prompt-sampling variance, eq. (9) term 1)
    c2 : E tr Sigma_oracle(X)                         (eq. (9) term 2)
    c3 : E[ E||W||^2 Var(Z|X) + ||g(X)||^2 ]          (exact residual coefficient, docs/math.md)
    c2_vanilla : E tr Cov(W Z | X)
    mean_g_norm2 : E||g(X)||^2
    g_norm2 : ||g||^2, g = E g(X)
    """

    c1: float
    c2: float
    c3: float
    c2_vanilla: float
    mean_g_norm2: float
    g_norm2: float


def prompt_error(c2, c3, G):
    """f(G) = c2/G + c3/(G(G-1)): the exact per-prompt MSE of the leave-one-out estimate with G samples (M9, M33).

    The one definition of this formula in the package. Floats, numpy arrays or torch tensors, broadcast
    elementwise (e.g. c2, c3 of shape (B,) with sizes G_b (B,), or (B, 1) against candidates (1, K), or matrices
    for the covariance of :func:`ugrpo.stats.asymptotics.estimator_covariance`); needs G >= 2 (not checked here).

    Examples
    --------
    >>> prompt_error(1.0, 2.0, 2)
    1.5
    >>> import numpy as np
    >>> prompt_error(np.array([1.0]), np.array([2.0]), np.array([2]))
    array([1.5])
    """
    return c2 / G + c3 / (G * (G - 1))


def uniform_mse(c1, c2, c3, N, G):
    """(c1 + f(G)) G / N = c1/B + c2/(BG) + c3/(BG(G-1)) with B = N/G: the minibatch MSE of the LOO estimate with
    one group size G at N samples (paper Thm 7 / eq. (11) with the exact residual; docs/math.md M11, M21).

    Floats, numpy arrays or torch tensors, broadcast like :func:`prompt_error`; G may be non-integer (the continuous
    bound). :func:`ugrpo.stats.planner.bound` is the checked public form.

    Examples
    --------
    >>> uniform_mse(1.0, 2.0, 4.0, 10, 5)
    0.8
    """
    return (c1 + prompt_error(c2, c3, G)) * G / N


def _check_estimator(estimator: str, G: int) -> None:
    if estimator not in ESTIMATORS:
        raise ValueError(f"unknown estimator {estimator!r}; choose one of {list(ESTIMATORS)}")
    if isinstance(G, bool) or not isinstance(G, numbers.Integral):
        raise TypeError(f"group size G must be an int, got {G!r}")
    need = 2 if estimator in GROUP_BASELINES else 1
    if G < need:
        raise ValueError(f"estimator {estimator!r} needs group size G >= {need}, got G = {G}")


def _check_moments(m: PromptMoments) -> None:
    for name in ("value", "var_z", "e_w2", "g_norm2", "tr_sigma_oracle", "tr_cov_wz"):
        x = getattr(m, name)
        if not math.isfinite(x):
            raise ValueError(f"PromptMoments.{name} = {x} is not finite")
        if name != "value" and x < -1e-12 * max(1.0, abs(m.e_w2)):
            raise ValueError(f"PromptMoments.{name} = {x} is negative; it is a second moment and must be >= 0")


def prompt_mse(m: PromptMoments, estimator: EstimatorName, G: int) -> float:
    """Exact E||ghat(x) - g(x)||^2 for one prompt with G samples (paper Thm 2, eq. (7); docs/math.md M8-M10).

    Parameters
    ----------
    m : PromptMoments of the prompt
    estimator : ``vanilla``, ``oracle``, ``grpo`` (LOO, eq. (4)) or ``grpo_mean`` (full mean)
    G : group size (>= 2 for ``grpo`` and ``grpo_mean``)

    Returns
    -------
    float

    Notes
    -----
    .. math::
        \\mathrm{MSE}_{vanilla} = \\mathrm{tr\\,Cov}(WZ)/G, \\quad
        \\mathrm{MSE}_{oracle} = \\mathrm{tr}\\,\\Sigma_{oracle}/G,

        \\mathrm{MSE}_{grpo} = \\mathrm{tr}\\,\\Sigma_{oracle}/G
            + (E\\|W\\|^2 \\sigma^2 + \\|g(x)\\|^2) / (G(G-1)),

        \\mathrm{MSE}_{grpo\\_mean} = ((G-1)/G)^2 \\mathrm{MSE}_{grpo} + \\|g(x)\\|^2/G^2.

    Examples
    --------
    >>> m = PromptMoments(value=0.5, var_z=0.25, e_w2=0.5, g_norm2=0.125, tr_sigma_oracle=0.0, tr_cov_wz=0.125)
    >>> prompt_mse(m, "grpo", 2)
    0.125
    """
    _check_estimator(estimator, G)
    _check_moments(m)
    return float(_prompt_mse(m.tr_cov_wz, m.tr_sigma_oracle, m.c3, m.g_norm2, estimator, int(G)))


def _prompt_mse(tr_cov_wz: float, tr_sigma: float, c3: float, g_norm2: float, estimator: str, G: int) -> float:
    if estimator == "vanilla":
        return tr_cov_wz / G
    if estimator == "oracle":
        return tr_sigma / G
    grpo = prompt_error(tr_sigma, c3, G)
    if estimator == "grpo":
        return grpo
    return ((G - 1) / G) ** 2 * grpo + g_norm2 / G**2


def policy_moments(
    prompt_moments: Sequence[PromptMoments], g_x: Tensor, weights: Tensor | Sequence[float] | None = None
) -> PolicyMoments:
    """Average per-prompt moments over the prompt distribution f (paper Prop 3, Thm 7; docs/math.md M13).

    Parameters
    ----------
    prompt_moments : P PromptMoments, one per prompt
    g_x : (P, D) tensor, the per-prompt true gradients g(x_p)
    weights : (P,) prompt probabilities f(x_p) (non-negative, normalised here); default uniform

    Returns
    -------
    PolicyMoments with c1 = E||g(X) - g||^2, c2 = E tr Sigma_oracle(X),
    c3 = E[E||W||^2 Var(Z|X) + ||g(X)||^2], c2_vanilla = E tr Cov(WZ|X),
    mean_g_norm2 = E||g(X)||^2, g_norm2 = ||g||^2 with g = E g(X).

    Examples
    --------
    >>> m = PromptMoments(value=0.5, var_z=0.25, e_w2=0.5, g_norm2=0.125, tr_sigma_oracle=0.0, tr_cov_wz=0.125)
    >>> import torch
    >>> pm = policy_moments([m, m], torch.tensor([[0.25, -0.25], [-0.25, 0.25]]))
    >>> round(pm.c1, 6), round(pm.c3, 6)
    (0.125, 0.25)
    """
    P = len(prompt_moments)
    if P == 0:
        raise ValueError("prompt_moments is empty; pass one PromptMoments per prompt")
    for m in prompt_moments:
        if not isinstance(m, PromptMoments):
            raise TypeError(f"prompt_moments must hold PromptMoments, got {type(m).__name__}")
        _check_moments(m)
    import torch

    g_x = torch.as_tensor(g_x, dtype=torch.float64)
    if g_x.ndim != 2 or g_x.shape[0] != P:
        raise ValueError(f"g_x must have shape (P, D) = ({P}, D) to match {P} prompt moments; got {tuple(g_x.shape)}")
    if weights is None:
        w = torch.full((P,), 1.0 / P, dtype=torch.float64)
    else:
        w = torch.as_tensor(weights, dtype=torch.float64)
        if w.shape != (P,):
            raise ValueError(f"weights must have shape ({P},), one per prompt; got {tuple(w.shape)}")
        if (w < 0).any() or not torch.isfinite(w).all() or w.sum() <= 0:
            raise ValueError("weights must be finite, non-negative and not all zero")
        w = w / w.sum()
    return _policy_moments(prompt_moments, g_x, w)


def _policy_moments(prompt_moments: Sequence[PromptMoments], g_x: Tensor, w: Tensor) -> PolicyMoments:
    import torch

    def avg(values: Sequence[float]) -> float:
        return float((w * torch.tensor(values, dtype=torch.float64)).sum())

    g = (w.unsqueeze(1) * g_x).sum(0)                                  # (D,)
    c1 = float((w * ((g_x - g) ** 2).sum(1)).sum())
    return PolicyMoments(
        c1=c1,
        c2=avg([m.tr_sigma_oracle for m in prompt_moments]),
        c3=avg([m.c3 for m in prompt_moments]),
        c2_vanilla=avg([m.tr_cov_wz for m in prompt_moments]),
        mean_g_norm2=avg([m.g_norm2 for m in prompt_moments]),
        g_norm2=float((g**2).sum()),
    )


def uniform_constants(g_norm2: Tensor, mean_g_norm2: Tensor, tr_sigma_oracle: Tensor, e_w2: Tensor,
                      var_z: Tensor) -> Tensor:
    """(..., 3): c1, c2, c3 of Theorem 7 under uniform prompts from per-prompt moments on the last axis, batched over
    the leading ones (the tensor form of :func:`policy_moments`; M13): c1 = mean_x ||g(x)||^2 - ||g||^2
    (``mean_g_norm2`` = ||mean_x g(x)||^2, shape (...)), c2 = mean_x tr Sigma_oracle(x), c3 = mean_x
    :func:`prompt_c3`.

    Examples
    --------
    >>> import torch
    >>> t = lambda *v: torch.tensor(v, dtype=torch.float64)  # the two prompts of policy_moments' example
    >>> uniform_constants(t(0.125, 0.125), torch.tensor(0.0), t(0.0, 0.0), t(0.5, 0.5), t(0.25, 0.25)).tolist()
    [0.125, 0.0, 0.25]
    """
    import torch

    c1 = g_norm2.mean(-1) - mean_g_norm2
    return torch.stack([c1, tr_sigma_oracle.mean(-1), prompt_c3(e_w2, var_z, g_norm2).mean(-1)], -1)


def minibatch_mse(pm: PolicyMoments, estimator: EstimatorName, B: int, G: int) -> float:
    """Exact E||ghat - g||^2 for B iid prompts with G samples each (paper Prop 3, eq. (9); docs/math.md M11-M12).

    Parameters
    ----------
    pm : PolicyMoments
    estimator : ``vanilla``, ``oracle``, ``grpo`` or ``grpo_mean``
    B : number of prompts (>= 1)
    G : group size

    Returns
    -------
    float

    Notes
    -----
    Unbiased estimators (M11): MSE = c1/B + E[MSE(X)]/B, e.g. grpo = c1/B + c2/(BG) + c3/(BG(G-1)).
    ``grpo_mean`` has mean (G-1)/G g, so (M12)
    MSE = (1/B)(E MSE_mean(X) + c1 (1 - 2/G)) + (1 - 1/B) ||g||^2/G^2.

    Examples
    --------
    >>> pm = PolicyMoments(c1=1.0, c2=2.0, c3=4.0, c2_vanilla=3.0, mean_g_norm2=1.5, g_norm2=0.5)
    >>> minibatch_mse(pm, "grpo", B=2, G=2)
    2.0
    """
    _check_estimator(estimator, G)
    if isinstance(B, bool) or not isinstance(B, numbers.Integral) or B < 1:
        raise ValueError(f"number of prompts B must be an int >= 1, got {B!r}")
    if not isinstance(pm, PolicyMoments):
        raise TypeError(f"pm must be PolicyMoments, got {type(pm).__name__}")
    return float(_minibatch_mse(pm, estimator, int(B), int(G)))


def _minibatch_mse(pm: PolicyMoments, estimator: str, B: int, G: int) -> float:
    if estimator != "grpo_mean":
        mean_prompt = _prompt_mse(pm.c2_vanilla, pm.c2, pm.c3, pm.mean_g_norm2, estimator, G)
        return pm.c1 / B + mean_prompt / B
    mean_prompt = _prompt_mse(pm.c2_vanilla, pm.c2, pm.c3, pm.mean_g_norm2, "grpo_mean", G)
    return (mean_prompt + pm.c1 * (1 - 2 / G)) / B + (1 - 1 / B) * pm.g_norm2 / G**2


def hoeffding_split(c1: float, c2: float, c3: float, B: int, G: int) -> dict[str, float | int | None]:
    """GRPO's minibatch MSE split by the Hoeffding decomposition (paper eq. (2), (9); docs/math.md M11, M13).

    oracle part = c1/B + c2/(BG) (the first-order term, equal to the oracle's MSE);
    residual = c3/(BG(G-1)) (the degenerate second-order term, orthogonal to the first).

    Examples
    --------
    >>> hoeffding_split(1.0, 2.0, 4.0, B=2, G=2)["residual"]
    1.0
    """
    if B < 1 or G < 2:
        raise ValueError(f"the split needs B >= 1 and G >= 2, got B = {B}, G = {G}")
    oracle_part = c1 / B + c2 / (B * G)
    residual = prompt_error(0.0, c3, G) / B
    total = oracle_part + residual
    return {"G": G, "oracle_part": oracle_part, "residual": residual, "total": total,
            "residual_share": residual / total if total > 0 else None}
