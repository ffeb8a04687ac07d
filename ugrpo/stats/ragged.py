"""Ragged groups: B prompts with G_b samples each, as one flat tensor plus the group sizes (docs/math.md M37).

Representation: ``rewards`` (n,) and ``scores`` (n, D) hold prompt 0's G_0 samples, then prompt 1's, ...;
``sizes`` (B,) long holds G_b, with n = sum_b G_b. Every function is vectorised with segment sums
(``index_add``), no Python loop over prompts; with equal sizes they equal the dense ``(B, G)`` functions of
:mod:`ugrpo.stats.advantages`, :mod:`ugrpo.stats.estimator` and :mod:`ugrpo.stats.ustat`.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = [
    "segment_ids",
    "segment_sum",
    "ragged_advantages",
    "ragged_prompt_gradients",
    "ragged_policy_gradient",
    "ragged_hoeffding",
    "dense_to_ragged",
    "ragged_t0",
    "ragged_reward_spread",
]

_MIN_GROUP = {"vanilla": 1, "oracle": 1, "grpo": 2, "grpo_mean": 2}


def _check_sizes(sizes: Tensor, n: int, *, min_group: int = 1) -> Tensor:
    if not isinstance(sizes, Tensor) or sizes.ndim != 1 or sizes.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"sizes must be a 1-d integer tensor (G_b per prompt), got {sizes!r}")
    if sizes.numel() == 0:
        raise ValueError("sizes is empty: no prompts")
    if int(sizes.min()) < min_group:
        b = int((sizes < min_group).nonzero()[0])
        raise ValueError(f"prompt {b} has G_b = {int(sizes[b])} samples; this needs G_b >= {min_group}")
    if int(sizes.sum()) != n:
        raise ValueError(f"sizes sum to {int(sizes.sum())} but there are {n} samples; sum_b G_b must equal n")
    return sizes.to(torch.int64)


def _check_rewards(rewards: Tensor) -> None:
    if not isinstance(rewards, Tensor) or rewards.ndim != 1 or not torch.is_floating_point(rewards):
        raise TypeError(f"rewards must be a flat (n,) floating-point tensor, got {getattr(rewards, 'shape', rewards)}")
    if not torch.isfinite(rewards).all():
        i = int((~torch.isfinite(rewards)).nonzero()[0])
        raise ValueError(f"rewards contain non-finite values, first at sample {i}; fix the reward function")


def segment_ids(sizes: Tensor) -> Tensor:
    """(n,) prompt index of every sample: [0]*G_0 + [1]*G_1 + ...

    Examples
    --------
    >>> segment_ids(torch.tensor([2, 3]))
    tensor([0, 0, 1, 1, 1])
    """
    return torch.repeat_interleave(torch.arange(sizes.numel(), device=sizes.device), sizes)


def segment_sum(x: Tensor, sizes: Tensor) -> Tensor:
    """Per-prompt sums of x (n, ...) -> (B, ...), via ``index_add``.

    Examples
    --------
    >>> segment_sum(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([1, 2]))
    tensor([1., 5.])
    """
    out = torch.zeros((sizes.numel(),) + tuple(x.shape[1:]), dtype=x.dtype, device=x.device)
    return out.index_add_(0, segment_ids(sizes), x)


def dense_to_ragged(x: Tensor) -> tuple[Tensor, Tensor]:
    """A dense (B, G, ...) tensor -> (flat (B G, ...), sizes (B,) all equal to G)."""
    B, G = x.shape[:2]
    return x.reshape((B * G,) + tuple(x.shape[2:])), torch.full((B,), G, dtype=torch.int64)


def ragged_advantages(rewards: Tensor, sizes: Tensor, *, baseline: str = "grpo",
                      values: Tensor | None = None) -> Tensor:
    """Advantages A = Z - C on ragged groups (paper eq. (4), Table 1; docs/math.md M1-M3, M37).

    ``grpo``: Z_i - Zbar^(-i) = G_b/(G_b-1) (Z_i - Zbar_b) (M2, with each prompt's own G_b);
    ``grpo_mean``: Z_i - Zbar_b; ``vanilla``: Z_i; ``oracle``: Z_i - V(x_b) with ``values`` (B,).

    Parameters
    ----------
    rewards : (n,) flat rewards
    sizes : (B,) group sizes, sum = n
    baseline : ``vanilla``, ``grpo``, ``grpo_mean`` or ``oracle``
    values : (B,) V(x_b), required for ``oracle``

    Returns
    -------
    (n,) tensor

    Examples
    --------
    >>> ragged_advantages(torch.tensor([1.0, 0.0, 1.0, 0.0, 0.0]), torch.tensor([2, 3]))
    tensor([ 1.0000, -1.0000,  1.0000, -0.5000, -0.5000])
    """
    if baseline not in _MIN_GROUP:
        raise ValueError(f"unknown baseline {baseline!r}; choose one of {sorted(_MIN_GROUP)}")
    _check_rewards(rewards)
    sizes = _check_sizes(sizes, rewards.numel(), min_group=_MIN_GROUP[baseline])
    if baseline == "vanilla":
        return rewards.clone()
    ids = segment_ids(sizes)
    if baseline == "oracle":
        if values is None:
            raise ValueError("baseline='oracle' needs values=V(x_b) of shape (B,)")
        values = torch.as_tensor(values, dtype=rewards.dtype)
        if values.shape != sizes.shape:
            raise ValueError(f"values must have shape ({sizes.numel()},), one V(x) per prompt; "
                             f"got {tuple(values.shape)}")
        return rewards - values[ids]
    g = sizes.to(rewards.dtype)
    centred = rewards - (segment_sum(rewards, sizes) / g)[ids]
    return centred * (g / (g - 1))[ids] if baseline == "grpo" else centred


def _check_scores(scores: Tensor, n: int) -> None:
    if not isinstance(scores, Tensor) or scores.ndim != 2 or scores.shape[0] != n:
        raise ValueError(f"scores must have shape (n, D) = ({n}, D), one row per sample; got "
                         f"{tuple(getattr(scores, 'shape', ()))}")
    if not torch.isfinite(scores).all():
        raise ValueError("scores contain non-finite values (NaN or inf)")


def ragged_prompt_gradients(scores: Tensor, advantages: Tensor, sizes: Tensor) -> Tensor:
    """Per-prompt estimates ghat(x_b) = 1/G_b sum_{i in b} W_i A_i (paper eq. (5)); (B, D).

    Examples
    --------
    >>> W = torch.tensor([[1.0], [-1.0], [2.0], [0.0], [0.0]])
    >>> ragged_prompt_gradients(W, torch.ones(5), torch.tensor([2, 3]))
    tensor([[0.0000],
            [0.6667]])
    """
    _check_scores(scores, advantages.numel())
    sizes = _check_sizes(sizes, advantages.numel())
    s = segment_sum(scores * advantages.to(scores.dtype).unsqueeze(1), sizes)
    return s / sizes.to(scores.dtype).unsqueeze(1)


def ragged_policy_gradient(scores: Tensor, advantages: Tensor, sizes: Tensor) -> Tensor:
    """Minibatch estimate (1/B) sum_b ghat(x_b) with per-prompt G_b (docs/math.md M32); (D,).

    Each prompt has weight 1/B whatever its G_b: this keeps the estimate unbiased (M32). (Summing all
    W A and dividing by n = sum G_b would weight prompts by G_b/n, a different target when the G_b depend on x.)
    """
    return ragged_prompt_gradients(scores, advantages, sizes).mean(0)


def ragged_hoeffding(scores: Tensor, rewards: Tensor, sizes: Tensor, values: Tensor,
                     true_grad: Tensor) -> tuple[Tensor, Tensor]:
    """(first_order, residual), each (B, D): the Hoeffding split of ghat_grpo(x_b) with G_b samples (M6, M37).

    first_order_b = 1/G_b sum_i W_i (Z_i - V_b) - g(x_b);
    residual_b = -1/(G_b(G_b-1)) [S_b sum_i W_i - sum_i W_i (Z_i - V_b)], S_b = sum_i (Z_i - V_b).
    g(x_b) + first_order_b + residual_b equals the U-statistic (LOO) estimate of prompt b.
    """
    _check_rewards(rewards)
    sizes = _check_sizes(sizes, rewards.numel(), min_group=2)
    _check_scores(scores, rewards.numel())
    values = torch.as_tensor(values, dtype=scores.dtype)
    if values.shape != sizes.shape or true_grad.shape != (sizes.numel(), scores.shape[1]):
        raise ValueError(f"values must be ({sizes.numel()},) and true_grad ({sizes.numel()}, {scores.shape[1]}); "
                         f"got {tuple(values.shape)} and {tuple(true_grad.shape)}")
    g = sizes.to(scores.dtype).unsqueeze(1)
    centred = rewards.to(scores.dtype) - values[segment_ids(sizes)]
    oracle = segment_sum(scores * centred.unsqueeze(1), sizes)            # (B, D)
    s = segment_sum(centred, sizes).unsqueeze(1)                          # (B, 1)
    cross = s * segment_sum(scores, sizes) - oracle
    return oracle / g - true_grad.to(scores.dtype), -cross / (g * (g - 1))


def ragged_t0(rewards: Tensor, scores: Tensor, sizes: Tensor) -> Tensor:
    """(B,) unbiased ||g(x_b)||^2 per group: (||sum_i Z_i W_i||^2 - sum_i Z_i^2 ||W_i||^2) / (G_b (G_b - 1)) (M14).

    The ragged form of ``T0`` in :func:`ugrpo.stats.components.prompt_terms`; with sketched scores (E <S W_i,
    S W_j> = <W_i, W_j>) it stays unbiased over the sketch too. Needs G_b >= 2.

    Examples
    --------
    >>> ragged_t0(torch.tensor([1.0, 1.0]), torch.tensor([[1.0, 0.0], [0.0, 2.0]]), torch.tensor([2]))
    tensor([0.])
    """
    _check_rewards(rewards)
    sizes = _check_sizes(sizes, rewards.numel(), min_group=2)
    _check_scores(scores, rewards.numel())
    w2 = (scores * scores).sum(-1)                                               # (n,)
    zw = segment_sum(scores * rewards.unsqueeze(1), sizes)                       # (B, k)
    g = sizes.to(scores.dtype)
    return ((zw * zw).sum(-1) - segment_sum(rewards**2 * w2, sizes)) / (g * (g - 1))


def ragged_reward_spread(rewards: Tensor, sizes: Tensor) -> tuple[Tensor, Tensor]:
    """((B,) bool: the group's rewards are all equal, (B,) unbiased within-group variance; 0 for G_b = 1).

    The ragged form of :func:`ugrpo.stats.advantages.zero_std_groups` (atol 0) and the per-group sample variance.

    Examples
    --------
    >>> ragged_reward_spread(torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0]), torch.tensor([2, 3]))
    (tensor([ True, False]), tensor([0.0000, 0.3333]))
    """
    _check_rewards(rewards)
    sizes = _check_sizes(sizes, rewards.numel())
    ids = segment_ids(sizes)
    mean = segment_sum(rewards, sizes) / sizes.to(rewards.dtype)
    ss = segment_sum((rewards - mean[ids]) ** 2, sizes)
    lo = torch.full((sizes.numel(),), float("inf"), dtype=rewards.dtype).scatter_reduce(0, ids, rewards, "amin")
    hi = torch.full((sizes.numel(),), -float("inf"), dtype=rewards.dtype).scatter_reduce(0, ids, rewards, "amax")
    return lo == hi, ss / (sizes - 1).clamp_min(1).to(rewards.dtype)
