"""The policy loss of Algorithm 1 and Algorithm 2 (paper section 2, Appendix A, eq. (13)).

Algorithm 1 (on-policy, ``logp_old=None``), ``seq_sum`` aggregation::

    loss = -(1 / (B G)) sum_{b,g} A_bg sum_t logp_bgt          # grad(loss) = -ghat, paper eq. (5), (8)

so one SGD step on ``loss`` is the paper's ascent step theta <- theta + eta ghat.

Algorithm 2 (``logp_old`` given): token-level ratio mu_t = exp(logp_t - logp_old_t) (not the
sequence product, as in the paper), optional PPO clipping
min(mu_t A, clip(mu_t, 1 - clip_low, 1 + clip_high) A), and the K3 KL estimate (paper
eq. (13)) k3_t = pi_ref/pi - log(pi_ref/pi) - 1 per token, differentiated by autograd
(docs/paper.md section 2: the printed gradient factor does not match the derivative of K3).
At mu = 1 the ratio term has the same value and gradient as Algorithm 1.

Deviations / options beyond the paper: ``token_mean`` (DAPO, TRL "dapo"/"bnpo") and
``seq_mean`` (original GRPO length normalisation, TRL "grpo") aggregations, which the paper
does not analyse (docs/paper.md section 2, "remaining gaps").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

__all__ = ["Aggregation", "LossOutput", "policy_loss", "aggregate", "k3_kl"]

Aggregation = Literal["seq_sum", "token_mean", "seq_mean"]


@dataclass(frozen=True)
class LossOutput:
    """Result of :func:`policy_loss`.

    Attributes
    ----------
    loss : scalar tensor to minimise (pg term + kl_coef * kl), differentiable
    kl : detached scalar, the K3 KL term aggregated like the loss (0 without ``logp_ref``)
    clip_frac : detached scalar, fraction of valid tokens where the clipped term is active
    ratio_mean : detached scalar, mean importance ratio over valid tokens (1 without ``logp_old``)
    """

    loss: Tensor
    kl: Tensor
    clip_frac: Tensor
    ratio_mean: Tensor


def aggregate(per_token: Tensor, mask: Tensor, aggregation: Aggregation, denominator: float | None = None) -> Tensor:
    """Reduce ``(N, T)`` per-token terms to a scalar.

    Parameters
    ----------
    per_token : (N, T) tensor
    mask : (N, T) tensor of 0/1 (1 = a completion token)
    aggregation : ``seq_sum`` -> sum_i sum_t x_it / N;  ``token_mean`` -> sum_it x_it / sum_it mask_it;
        ``seq_mean`` -> sum_i (sum_t x_it / |y_i|) / N
    denominator : overrides the local N (``seq_sum``, ``seq_mean``) or token count
        (``token_mean``): the *global* count when a batch is split into micro-batches or
        across processes, so that the pieces' losses add up to the loss of the whole batch.
    """
    m = mask.to(per_token.dtype)
    x = per_token * m  # (N, T)
    if aggregation == "seq_sum":
        total = x.sum()
        denom = per_token.shape[0]
    elif aggregation == "token_mean":
        total = x.sum()
        denom = m.sum()
    elif aggregation == "seq_mean":
        lengths = m.sum(dim=1).clamp(min=1.0)  # (N,); an empty completion contributes 0
        total = (x.sum(dim=1) / lengths).sum()
        denom = per_token.shape[0]
    else:
        raise ValueError(f"unknown aggregation {aggregation!r}; choose seq_sum, token_mean or seq_mean")
    if denominator is not None:
        denom = denominator
    if isinstance(denom, Tensor):
        denom = denom.clamp(min=1.0)
    elif denom <= 0:
        denom = 1.0
    return total / denom


def k3_kl(logp: Tensor, logp_ref: Tensor) -> Tensor:
    """Per-token K3 estimate of KL(pi || pi_ref), paper eq. (13): r - log r - 1 with r = pi_ref / pi.

    Parameters
    ----------
    logp, logp_ref : (N, T) tensors of token log-probabilities under pi_theta and pi_ref

    Examples
    --------
    >>> k3_kl(torch.tensor([[0.0]]), torch.tensor([[0.0]]))
    tensor([[0.]])
    """
    log_r = logp_ref - logp
    return torch.exp(log_r) - log_r - 1.0


def _check(logp: Tensor, advantages: Tensor, mask: Tensor, **others: Tensor | None) -> None:
    if logp.ndim != 2:
        raise ValueError(f"logp must have shape (N, T) (N completions, T tokens); got {tuple(logp.shape)}")
    if advantages.shape != logp.shape[:1]:
        raise ValueError(f"advantages must have shape (N,) = ({logp.shape[0]},); got {tuple(advantages.shape)}")
    if mask.shape != logp.shape:
        raise ValueError(f"mask shape {tuple(mask.shape)} must equal logp shape {tuple(logp.shape)}")
    for name, t in others.items():
        if t is not None and t.shape != logp.shape:
            raise ValueError(f"{name} shape {tuple(t.shape)} must equal logp shape {tuple(logp.shape)}")


def policy_loss(
    logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    logp_old: Tensor | None = None,
    logp_ref: Tensor | None = None,
    clip_low: float | None = None,
    clip_high: float | None = None,
    kl_coef: float = 0.0,
    aggregation: Aggregation = "seq_sum",
    denominator: float | Tensor | None = None,
    kl_weights: Tensor | None = None,
) -> LossOutput:
    """Loss whose gradient is minus the policy-gradient estimate of Algorithm 1 / 2.

    Parameters
    ----------
    logp : (N, T) token log-probabilities under the current policy (differentiable)
    advantages : (N,) advantage A of each completion (from ``ugrpo.stats``; row i = sample
        (b, g) in the ``rewards.view(-1)`` order)
    mask : (N, T) 1 on completion tokens, 0 on padding
    logp_old : (N, T) log-probabilities under the sampling policy pi_old (Algorithm 2);
        None = on-policy Algorithm 1 (no ratio)
    logp_ref : (N, T) log-probabilities under the reference policy; needed when kl_coef > 0
    clip_low, clip_high : PPO epsilons; the ratio term is min(mu A, clip(mu, 1-clip_low,
        1+clip_high) A); None leaves that side unclipped. Need ``logp_old``.
    kl_coef : kappa, the weight of the K3 KL term (paper eq. (13))
    aggregation : ``seq_sum`` (paper), ``token_mean`` or ``seq_mean``; see :func:`aggregate`
    denominator : the global sequence / token count when this call sees only part of a batch
    kl_weights : (N,) weight of each completion's KL term, or None (all 1). Per-prompt group sizes G_b pass
        Gbar / G_b, so that each prompt's KL counts once as with one G (the row weight its advantages carry,
        docs/allocation.md A5), not G_b / Gbar times

    Returns
    -------
    LossOutput

    Notes
    -----
    With ``seq_sum`` and ``logp_old=None``,
    :math:`\\nabla \\text{loss} = -\\frac{1}{BG}\\sum_{b,g} A_{bg} \\sum_t \\nabla\\log\\pi_{bgt}
    = -\\hat g` (paper Algorithm 1, eq. (5), (8)).
    """
    _check(logp, advantages, mask, logp_old=logp_old, logp_ref=logp_ref)
    if (clip_low is not None or clip_high is not None) and logp_old is None:
        raise ValueError("clipping needs logp_old (the sampling policy's log-probs); pass logp_old or no clip")
    if kl_coef > 0 and logp_ref is None:
        raise ValueError(f"kl_coef={kl_coef} > 0 needs logp_ref (the reference policy's log-probs)")
    m = mask.to(logp.dtype)
    n_tok = m.sum().clamp(min=1.0)
    A = advantages.to(logp.dtype).unsqueeze(1)  # (N, 1)
    zero = logp.new_zeros(())
    if logp_old is None:
        per_token = A * logp  # (N, T); Algorithm 1
        clip_frac, ratio_mean = zero, logp.new_ones(())
    else:
        ratio = torch.exp(logp - logp_old.detach())  # (N, T) token-level mu_t
        per_token = ratio * A
        clipped = per_token
        if clip_low is not None or clip_high is not None:
            lo = 1.0 - clip_low if clip_low is not None else 0.0
            hi = 1.0 + clip_high if clip_high is not None else float("inf")
            clipped = torch.minimum(per_token, torch.clamp(ratio, lo, hi) * A)
            active = ((ratio < lo) & (A < 0)) | ((ratio > hi) & (A > 0))
            clip_frac = (active.to(logp.dtype) * m).sum().detach() / n_tok
        else:
            clip_frac = zero
        per_token = clipped
        ratio_mean = ((ratio * m).sum() / n_tok).detach()
    loss = -aggregate(per_token, mask, aggregation, denominator)
    kl = zero
    if logp_ref is not None:
        k3 = k3_kl(logp, logp_ref.detach())
        if kl_weights is not None:
            k3 = k3 * kl_weights.to(k3).unsqueeze(1)
        kl_term = aggregate(k3, mask, aggregation, denominator)
        if kl_coef > 0:
            loss = loss + kl_coef * kl_term
        kl = kl_term.detach()
    return LossOutput(loss=loss, kl=kl, clip_frac=clip_frac, ratio_mean=ratio_mean)
