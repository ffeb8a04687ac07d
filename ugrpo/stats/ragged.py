"""Ragged groups: B prompts with G_b samples each, as one flat tensor plus the group sizes (docs/math.md M37).

Representation: ``rewards`` (n,) and ``scores`` (n, D) hold prompt 0's G_0 samples, then prompt 1's, ...;
``sizes`` (B,) long holds G_b, with n = sum_b G_b. Every function is vectorised with segment sums
(``index_add``), no Python loop over prompts; with equal sizes they equal the dense ``(B, G)`` functions of
:mod:`ugrpo.stats.advantages`, :mod:`ugrpo.stats.estimator` and :mod:`ugrpo.stats.ustat`.

This module is THE implementation of advantages for groups of any sizes (:func:`compute_ragged_advantages`:
every baseline, std scaling with ``ddof``/``eps`` and the three ``zero_std`` policies, the all-equal count); the
dense API of :mod:`ugrpo.stats.advantages` reshapes to flat, calls it with equal sizes and reshapes back. When
every G_b is the same G, the group reductions (mean, std, max/min) run on the ``(B, G)`` view, so equal groups get
the dense results bit for bit; unequal groups use segment sums.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = [
    "segment_ids",
    "segment_sum",
    "AdvantageResult",
    "compute_ragged_advantages",
    "ragged_advantages",
    "ragged_all_equal",
    "ragged_prompt_gradients",
    "ragged_policy_gradient",
    "ragged_hoeffding",
    "dense_to_ragged",
    "ragged_t0",
    "ragged_t0_from_norms",
    "ragged_terms_from_norms",
    "ragged_reward_spread",
]

_MIN_GROUP = {"vanilla": 1, "oracle": 1, "grpo": 2, "grpo_mean": 2}
ZERO_STD_POLICIES: tuple[str, ...] = ("zero", "eps", "unscaled")


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


def _equal_size(sizes: Tensor) -> int | None:
    """G when every group has G samples (the reductions then run on the (B, G) view, as the dense API does)."""
    G = int(sizes[0])
    return G if bool((sizes == G).all()) else None


def _all_equal(rewards: Tensor, sizes: Tensor | None, G: int | None, atol: float = 0.0) -> Tensor:
    """(B,) bool: max - min of the group's rewards <= atol."""
    if G is not None:
        v = rewards.view(-1, G)
        return v.max(dim=1).values - v.min(dim=1).values <= atol
    ids = segment_ids(sizes)
    lo = torch.full((sizes.numel(),), float("inf"), dtype=rewards.dtype, device=rewards.device)
    hi = torch.full((sizes.numel(),), -float("inf"), dtype=rewards.dtype, device=rewards.device)
    return hi.scatter_reduce(0, ids, rewards, "amax") - lo.scatter_reduce(0, ids, rewards, "amin") <= atol


@dataclass(frozen=True)
class AdvantageResult:
    """Advantages of one batch and what happened to its degenerate groups.

    Attributes
    ----------
    advantages : (B, G) tensor from the dense :func:`ugrpo.stats.advantages.compute_advantages`, flat (n,) from
        :func:`compute_ragged_advantages`
    zero_std : (B,) bool tensor, groups whose rewards were all equal
    n_zero_std : number of such groups (always counted, whatever ``zero_std`` policy)
    """

    advantages: Tensor
    zero_std: Tensor
    n_zero_std: int

    @property
    def frac_zero_std(self) -> float:
        return self.n_zero_std / max(1, self.zero_std.numel())


def _advantages(rewards: Tensor, sizes: Tensor | None, G: int | None, baseline: str, values: Tensor | None,
                scale: str, ddof: int, eps: float, zero_std: str) -> AdvantageResult:
    """The computation of :func:`compute_ragged_advantages` on checked input. ``G``: the common group size, or None
    for unequal ``sizes``; with G the samples are the (B, G) view and a per-group (B,) value broadcasts over its
    row, exactly the dense code, else they stay flat and a per-group value is indexed by each sample's group."""
    centre = baseline in ("grpo", "grpo_mean") or scale == "std"
    if G is not None:
        z = rewards.view(-1, G)
        rows = lambda x: x.unsqueeze(1)  # noqa: E731
        mean = z.mean(dim=1) if centre else None
    else:
        ids, g = segment_ids(sizes), sizes.to(rewards.dtype)
        z = rewards
        rows = lambda x: x[ids]  # noqa: E731
        mean = segment_sum(rewards, sizes) / g if centre else None
    if baseline == "vanilla":
        adv = z.clone()
    elif baseline == "oracle":
        adv = z - rows(values)
    else:
        adv = z - rows(mean)
        if baseline == "grpo":  # Z_i - Zbar^(-i) = G_b/(G_b-1) (Z_i - Zbar_b), M2
            adv = adv * (G / (G - 1)) if G is not None else adv * rows(g / (g - 1))
    mask = _all_equal(rewards, sizes, G)
    if scale == "std":  # Algorithm 2: the sample std around the full group mean, divisor G_b - ddof (M4)
        if G is not None:
            std = z.std(dim=1, correction=ddof)
        else:
            std = (segment_sum((rewards - rows(mean)) ** 2, sizes) / (g - ddof)).sqrt()
        scaled = adv / rows(std + eps)
        if zero_std == "zero":
            scaled = torch.where(rows(mask), torch.zeros_like(scaled), scaled)
        elif zero_std == "unscaled":
            scaled = torch.where(rows(mask), adv, scaled)
        adv = scaled
    return AdvantageResult(advantages=adv.reshape(-1), zero_std=mask, n_zero_std=int(mask.sum()))


def _check_options(baseline: str, scale: str, zero_std: str, eps: float) -> None:
    if baseline not in _MIN_GROUP:
        raise ValueError(f"unknown baseline {baseline!r}; choose one of {sorted(_MIN_GROUP)}")
    if scale not in ("none", "std"):
        raise ValueError(f"unknown scale {scale!r}; choose 'none' or 'std'")
    if zero_std not in ZERO_STD_POLICIES:
        raise ValueError(f"unknown zero_std policy {zero_std!r}; choose 'zero', 'eps' or 'unscaled'")
    if eps < 0:
        raise ValueError(f"eps must be >= 0, got {eps}")


def compute_ragged_advantages(rewards: Tensor, sizes: Tensor, *, baseline: str = "grpo",
                              values: Tensor | None = None, scale: str = "none", ddof: int = 1, eps: float = 1e-6,
                              zero_std: str = "zero") -> AdvantageResult:
    """Advantages A = Z - C on ragged groups, optional std scaling, explicit zero-std handling (paper eq. (4),
    Table 1, Algorithm 2; docs/math.md M1-M4, M37).

    ``grpo``: Z_i - Zbar^(-i) = G_b/(G_b-1) (Z_i - Zbar_b) (M2, with each prompt's own G_b);
    ``grpo_mean``: Z_i - Zbar_b; ``vanilla``: Z_i; ``oracle``: Z_i - V(x_b) with ``values`` (B,).
    ``scale="std"`` divides prompt b's advantages by s_b + eps, s_b the std of its G_b rewards around their full
    mean with divisor G_b - ``ddof``; an all-equal group (s_b = 0) gets what ``zero_std`` says: ``zero`` -> 0,
    ``eps`` -> numerator / eps (TRL/verl), ``unscaled`` -> the unscaled advantage. All-equal groups are counted
    whatever the scale. Std scaling is biased per prompt (docs/allocation.md A5).

    Parameters
    ----------
    rewards : (n,) flat rewards
    sizes : (B,) group sizes, sum = n
    baseline : ``vanilla``, ``grpo``, ``grpo_mean`` or ``oracle``
    values : (B,) V(x_b), required for ``oracle``
    scale, ddof, eps, zero_std : as in :func:`ugrpo.stats.advantages.compute_advantages` (every G_b > ddof)

    Returns
    -------
    AdvantageResult with flat (n,) advantages

    Examples
    --------
    >>> r = compute_ragged_advantages(torch.tensor([1.0, 0.0, 1.0, 1.0, 1.0]), torch.tensor([2, 3]), scale="std")
    >>> r.advantages, r.n_zero_std
    (tensor([ 1.4142, -1.4142,  0.0000,  0.0000,  0.0000]), 1)
    """
    _check_options(baseline, scale, zero_std, eps)
    _check_rewards(rewards)
    sizes = _check_sizes(sizes, rewards.numel(), min_group=_MIN_GROUP[baseline])
    if baseline == "oracle":
        if values is None:
            raise ValueError("baseline='oracle' needs values=V(x_b) of shape (B,)")
        values = torch.as_tensor(values, dtype=rewards.dtype)
        if values.shape != sizes.shape:
            raise ValueError(f"values must have shape ({sizes.numel()},), one V(x) per prompt; "
                             f"got {tuple(values.shape)}")
    if scale == "std":
        if int(sizes.min()) - ddof < 1:
            b = int((sizes - ddof < 1).nonzero()[0])
            raise ValueError(f"std scaling with ddof={ddof} needs G_b > ddof for every prompt; prompt {b} has "
                             f"G_b = {int(sizes[b])}")
        if zero_std == "eps" and eps == 0:
            raise ValueError("zero_std='eps' with eps=0 divides by zero on all-equal groups; set eps > 0")
    return _advantages(rewards, sizes, _equal_size(sizes), baseline, values, scale, ddof, eps, zero_std)


def ragged_advantages(rewards: Tensor, sizes: Tensor, *, baseline: str = "grpo", values: Tensor | None = None,
                      scale: str = "none", ddof: int = 1, eps: float = 1e-6, zero_std: str = "zero") -> Tensor:
    """The (n,) advantages of :func:`compute_ragged_advantages` (paper eq. (4), Table 1; docs/math.md M1-M4, M37).

    Examples
    --------
    >>> ragged_advantages(torch.tensor([1.0, 0.0, 1.0, 0.0, 0.0]), torch.tensor([2, 3]))
    tensor([ 1.0000, -1.0000,  1.0000, -0.5000, -0.5000])
    """
    return compute_ragged_advantages(rewards, sizes, baseline=baseline, values=values, scale=scale, ddof=ddof,
                                     eps=eps, zero_std=zero_std).advantages


def ragged_all_equal(rewards: Tensor, sizes: Tensor, *, atol: float = 0.0) -> Tensor:
    """(B,) bool: the groups whose rewards are all equal (max - min <= atol); they have zero sample std.

    >>> ragged_all_equal(torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0]), torch.tensor([2, 3]))
    tensor([ True, False])
    """
    _check_rewards(rewards)
    sizes = _check_sizes(sizes, rewards.numel())
    return _all_equal(rewards, sizes, _equal_size(sizes), atol)


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
    return _t0(rewards, w2, (zw * zw).sum(-1), sizes)


def _t0(rewards: Tensor, w2: Tensor, zw2: Tensor, sizes: Tensor) -> Tensor:
    g = sizes.to(w2.dtype)
    return (zw2 - segment_sum(rewards**2 * w2, sizes)) / (g * (g - 1))


def ragged_t0_from_norms(rewards: Tensor, w2: Tensor, zw2: Tensor, sizes: Tensor) -> Tensor:
    """(B,) the T0 of :func:`ragged_t0` from ||W_i||^2 (n,) and ||sum_{i in b} Z_i W_i||^2 (B,) alone (M14, M72).

    >>> ragged_t0_from_norms(torch.tensor([1.0, 1.0]), torch.tensor([1.0, 4.0]), torch.tensor([5.0]), torch.tensor([2]))
    tensor([0.])
    """
    _check_rewards(rewards)
    sizes = _check_sizes(sizes, rewards.numel(), min_group=2)
    if w2.shape != rewards.shape or zw2.shape != sizes.shape:
        raise ValueError(f"w2 must have shape {tuple(rewards.shape)} (one per sample) and zw2 {tuple(sizes.shape)} "
                         f"(one per group); got {tuple(w2.shape)} and {tuple(zw2.shape)}")
    return _t0(rewards, w2, zw2, sizes)


def ragged_terms_from_norms(rewards: Tensor, w2: Tensor, zw2: Tensor, sizes: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(B,) each: the unbiased per-group T0, T1, T2 of docs/math.md M14-M16 from ||W_i||^2 (n,) and
    ||sum_{i in b} Z_i W_i||^2 (B,) alone (M18, M72): E T0 = ||g(x)||^2, E T1 = E||W||^2 (Z - V)^2,
    E T2 = E||W||^2 Var(Z). The ragged form of :func:`ugrpo.stats.components.prompt_terms`; needs G_b >= 3.

    Every group's second moment with G samples, a(G) = E||ghat_G||^2 = ||g||^2 + c2/G + c3/(G(G-1)) (M9), is then
    estimated without bias by T0 + (T1 - T0)/G + (T2 + T0)/(G(G-1)) (docs/math.md M75).

    >>> t = ragged_terms_from_norms(torch.tensor([1.0, 0.0, 0.0]), torch.tensor([6.0, 1.0, 1.0]), torch.tensor([6.0]),
    ...                             torch.tensor([3]))
    >>> [round(float(x), 4) for x in t]  # T1 = 2 K_00 / 6 (i = 0, both orders of j, k); T2 = (K_11 + K_22) / 6
    [0.0, 2.0, 0.3333]
    """
    t0 = ragged_t0_from_norms(rewards, w2, zw2, sizes)
    sizes = _check_sizes(sizes, rewards.numel(), min_group=3)
    z, k = rewards.to(w2.dtype), w2
    ids = segment_ids(sizes)
    g = sizes.to(w2.dtype)
    s1, s2 = segment_sum(z, sizes)[ids], segment_sum(z * z, sizes)[ids]              # (n,) group sums per sample
    gi = g[ids]
    a = gi * z - s1                                                                   # sum_{j != i} (Z_i - Z_j)
    q = gi * z * z - 2 * z * s1 + s2                                                  # sum_{j != i} (Z_i - Z_j)^2
    o1, o2 = s1 - z, s2 - z * z                                                       # the others' sums
    n3 = g * (g - 1) * (g - 2)
    t1 = segment_sum(k * (a * a - q), sizes) / n3
    t2 = segment_sum(k * ((gi - 1) * o2 - o1 * o1), sizes) / n3
    return t0, t1, t2


def ragged_reward_spread(rewards: Tensor, sizes: Tensor) -> tuple[Tensor, Tensor]:
    """((B,) bool: the group's rewards are all equal, (B,) unbiased within-group variance; 0 for G_b = 1).

    The all-equal test of :func:`ragged_all_equal` and the per-group sample variance.

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
    return _all_equal(rewards, sizes, _equal_size(sizes)), ss / (sizes - 1).clamp_min(1).to(rewards.dtype)
