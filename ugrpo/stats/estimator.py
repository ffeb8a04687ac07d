"""The policy-gradient estimate of Algorithm 1 from per-sample scores (paper eq. (5), (8)).

ghat = 1/(B G) sum_b sum_g W_bg A_bg, with W_bg = grad log pi(Y_bg | x_b) the sequence score
(docs/math.md M1).
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["policy_gradient", "prompt_gradients"]


def _check(scores: Tensor, advantages: Tensor) -> None:
    if scores.ndim != 3:
        raise ValueError(f"scores must have shape (B, G, D); got {tuple(scores.shape)}")
    if advantages.shape != scores.shape[:2]:
        raise ValueError(
            f"advantages shape {tuple(advantages.shape)} does not match scores (B, G) = {tuple(scores.shape[:2])}"
        )


def prompt_gradients(scores: Tensor, advantages: Tensor) -> Tensor:
    """Per-prompt estimates ghat(x_b) = 1/G sum_g W_bg A_bg, paper eq. (5). Returns (B, D)."""
    _check(scores, advantages)
    return torch.einsum("bgd,bg->bd", scores, advantages.to(scores.dtype)) / scores.shape[1]


def policy_gradient(scores: Tensor, advantages: Tensor) -> Tensor:
    """Minibatch estimate ghat = 1/B sum_b ghat(x_b) = 1/(BG) sum W A, paper eq. (8). Returns (D,).

    Examples
    --------
    >>> W = torch.tensor([[[1.0], [-1.0]]])          # B=1, G=2, D=1
    >>> policy_gradient(W, torch.tensor([[0.5, -0.5]]))
    tensor([0.5000])
    """
    return prompt_gradients(scores, advantages).mean(dim=0)
