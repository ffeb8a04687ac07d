"""GRPO's gradient as a U-statistic: the Lemma 1 kernel and the Hoeffding decomposition.

Paper: Lemma 1 and eq. (6) (the U-statistic form), eq. (2) (Hoeffding decomposition).
Formulas: docs/math.md eq. M5 (kernel), M6 (decomposition), M7 (residual moments).

The brute-force :func:`pairwise_ustatistic` loops over ``itertools.combinations`` on purpose:
it is the reference that the vectorised LOO estimator (:mod:`ugrpo.stats.advantages` +
:mod:`ugrpo.stats.estimator`) is tested against. Use it for small G only.

Deviation from the paper: the paper writes the residual (term (iii) of eq. (2)) through
h, h_1 and h_0; here it is the closed form of docs/math.md eq. M6,
-1/(G(G-1)) sum_{i != k} W_i (Z_k - V), computed in O(G D) via
sum_{i != k} W_i (Z_k - V) = S sum_i W_i - sum_i W_i (Z_i - V), S = sum_k (Z_k - V).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ["HoeffdingParts", "grpo_kernel", "pairwise_ustatistic", "hoeffding_decomposition"]


def grpo_kernel(w_i: Tensor, w_j: Tensor, z_i: Tensor | float, z_j: Tensor | float) -> Tensor:
    """Lemma 1 kernel h = 1/2 (W_i - W_j)(Z_i - Z_j), paper eq. (6), docs/math.md eq. M5.

    Parameters
    ----------
    w_i, w_j : (D,) tensors, the scores grad log pi(Y_i | x) and grad log pi(Y_j | x)
    z_i, z_j : scalar rewards

    Returns
    -------
    (D,) tensor. Symmetric: ``grpo_kernel(a, b, x, y) == grpo_kernel(b, a, y, x)``.

    Examples
    --------
    >>> grpo_kernel(torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0]), 1.0, 0.0)
    tensor([ 0.5000, -0.5000])
    """
    if w_i.shape != w_j.shape:
        raise ValueError(f"w_i and w_j must have the same shape, got {tuple(w_i.shape)} and {tuple(w_j.shape)}")
    return 0.5 * (w_i - w_j) * (torch.as_tensor(z_i, dtype=w_i.dtype) - torch.as_tensor(z_j, dtype=w_i.dtype))


def _check_group(scores: Tensor, rewards: Tensor, *, name: str = "scores") -> None:
    if not isinstance(scores, Tensor) or not isinstance(rewards, Tensor):
        raise TypeError("scores and rewards must be torch tensors")
    if scores.ndim not in (2, 3):
        raise ValueError(f"{name} must have shape (G, D) or (B, G, D); got {tuple(scores.shape)}")
    if rewards.shape != scores.shape[:-1]:
        raise ValueError(
            f"rewards shape {tuple(rewards.shape)} does not match {name} shape {tuple(scores.shape)}: "
            f"expected rewards of shape {tuple(scores.shape[:-1])}"
        )
    if scores.shape[-2] < 2:
        raise ValueError(f"a U-statistic of order 2 needs group size G >= 2, got G = {scores.shape[-2]}")
    if not torch.isfinite(rewards).all():
        raise ValueError("rewards contain non-finite values (NaN or inf); fix the reward function")
    if not torch.isfinite(scores).all():
        raise ValueError(f"{name} contain non-finite values (NaN or inf)")


def pairwise_ustatistic(scores: Tensor, rewards: Tensor) -> Tensor:
    """Brute-force U-statistic C(G,2)^-1 sum_{i<j} h(i, j), paper eq. (6), docs/math.md eq. M5.

    O(G^2 D) with a Python loop over pairs: a test reference, not a production path.

    Parameters
    ----------
    scores : (G, D) tensor, W_i = grad log pi(Y_i | x)
    rewards : (G,) tensor, Z_i

    Returns
    -------
    (D,) tensor, equal to the LOO estimate 1/G sum_i W_i (Z_i - Zbar^(-i)) (Lemma 1).

    Examples
    --------
    >>> W = torch.tensor([[1.0], [-1.0]])
    >>> pairwise_ustatistic(W, torch.tensor([1.0, 0.0]))
    tensor([1.])
    """
    _check_group(scores, rewards)
    if scores.ndim != 2:
        raise ValueError(f"pairwise_ustatistic takes one group: scores (G, D), got {tuple(scores.shape)}")
    G = scores.shape[0]
    total = torch.zeros(scores.shape[1], dtype=scores.dtype)
    for i, j in itertools.combinations(range(G), 2):
        total = total + grpo_kernel(scores[i], scores[j], rewards[i], rewards[j])
    return total / (G * (G - 1) / 2)


@dataclass(frozen=True, eq=False)  # holds tensors: compare fields explicitly
class HoeffdingParts:
    """The three terms of the Hoeffding decomposition of ghat_GRPO(x), paper eq. (2), docs/math.md M6.

    ``true_grad + first_order + residual`` equals the GRPO (LOO) estimate.

    Attributes
    ----------
    true_grad : (D,) or (B, D), h_0 = g(x), the prompt's true gradient (as given)
    first_order : same shape, ghat_oracle(x) - g(x) = 1/G sum_i W_i (Z_i - V) - g(x)
    residual : same shape, the degenerate term -1/(G(G-1)) sum_{i != k} W_i (Z_k - V);
        mean 0, orthogonal to ``first_order``, E||residual||^2 = c3(x)/(G(G-1)) (M7)
    """

    true_grad: Tensor
    first_order: Tensor
    residual: Tensor

    @property
    def estimate(self) -> Tensor:
        """The GRPO estimate, true_grad + first_order + residual."""
        return self.true_grad + self.first_order + self.residual


def hoeffding_decomposition(scores: Tensor, rewards: Tensor, value: Tensor | float,
                            true_grad: Tensor) -> HoeffdingParts:
    """Split ghat_GRPO(x) into g(x) + (ghat_oracle - g(x)) + residual, paper eq. (2), docs/math.md M6.

    Parameters
    ----------
    scores : (G, D) tensor for one prompt, or (B, G, D) for B prompts
    rewards : (G,) or (B, G) tensor
    value : V(x) = E[Z | x]: a float or 0-d tensor for one prompt, a (B,) tensor for B prompts
    true_grad : g(x) = E[W Z | x]: (D,) for one prompt, (B, D) for B prompts

    Returns
    -------
    HoeffdingParts with tensors of shape (D,) or (B, D).

    Notes
    -----
    .. math::
        \\hat g_{GRPO} = g(x) + \\Big[\\tfrac1G\\sum_i W_i (Z_i - V) - g(x)\\Big]
        - \\frac{1}{G(G-1)} \\sum_{i \\ne k} W_i (Z_k - V)

    The identity holds for any V and g(x); the moment properties (mean 0, orthogonality)
    need the true V(x) and g(x).

    Examples
    --------
    >>> W = torch.tensor([[1.0], [-1.0]]); Z = torch.tensor([1.0, 0.0])
    >>> parts = hoeffding_decomposition(W, Z, 0.5, torch.tensor([0.25]))
    >>> parts.estimate
    tensor([1.])
    """
    _check_group(scores, rewards)
    batched = scores.ndim == 3
    v = torch.as_tensor(value, dtype=scores.dtype)
    want_v = scores.shape[:1] if batched else torch.Size([])
    if v.shape != want_v:
        raise ValueError(f"value must have shape {tuple(want_v)} (one V(x) per prompt), got {tuple(v.shape)}")
    want_g = scores.shape[:1] + scores.shape[-1:] if batched else scores.shape[-1:]
    if true_grad.shape != want_g:
        raise ValueError(f"true_grad must have shape {tuple(want_g)} (g(x) per prompt), got {tuple(true_grad.shape)}")
    if not torch.isfinite(v).all() or not torch.isfinite(true_grad).all():
        raise ValueError("value and true_grad must be finite")
    return _hoeffding(scores, rewards.to(scores.dtype), v, true_grad.to(scores.dtype))


def _hoeffding(scores: Tensor, rewards: Tensor, value: Tensor, true_grad: Tensor) -> HoeffdingParts:
    G = scores.shape[-2]
    centred = rewards - value.unsqueeze(-1)                        # (..., G)  Z_i - V
    oracle = (scores * centred.unsqueeze(-1)).sum(-2)              # (..., D)  sum_i W_i (Z_i - V)
    s = centred.sum(-1, keepdim=True)                              # (..., 1)  S = sum_k (Z_k - V)
    cross = s * scores.sum(-2) - oracle                            # (..., D)  sum_{i != k} W_i (Z_k - V)
    return HoeffdingParts(
        true_grad=true_grad.clone(),
        first_order=oracle / G - true_grad,
        residual=-cross / (G * (G - 1)),
    )
