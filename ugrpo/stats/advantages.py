"""Advantages A = Z - C on a dense ``(B, G)`` reward tensor (paper eq. (4), (5), Algorithm 2).

Every baseline of the paper's Table 1 plus the practical variants:

* ``vanilla``   C = 0 (minibatch REINFORCE)
* ``grpo``      C = leave-one-out group mean, paper eq. (4); the U-statistic form of Lemma 1
* ``grpo_mean`` C = full group mean (what most trainers do); equals (G-1)/G times ``grpo``
* ``oracle``    C = V(x), the true value, supplied by the caller

Std scaling (``scale="std"``) follows the paper's Algorithm 2: the numerator keeps the
chosen baseline, the denominator is the sample std around the *full* group mean with the
given ``ddof`` (paper: ddof=1). A group whose rewards are all equal has std 0: what it gets
is the explicit ``zero_std`` policy, and such groups are always counted.

The computation lives in :func:`ugrpo.stats.ragged.compute_ragged_advantages` (groups of any sizes); every function
here checks its ``(B, G)`` input, calls it with B equal groups of G and reshapes back, which gives the dense
results bit for bit (equal groups reduce on the ``(B, G)`` view).

Formulas: docs/math.md section 1 (M1-M4).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import torch
from torch import Tensor

from ugrpo.stats.estimators import EstimatorName
from ugrpo.stats.ragged import AdvantageResult, _advantages, _all_equal, _check_options

__all__ = [
    "BaselineName",
    "BASELINES",
    "AdvantageResult",
    "vanilla_advantages",
    "loo_advantages",
    "mean_advantages",
    "oracle_advantages",
    "zero_std_groups",
    "compute_advantages",
]

BaselineName = EstimatorName
ScaleName = Literal["none", "std"]
ZeroStdPolicy = Literal["zero", "eps", "unscaled"]


def _check_rewards(rewards: Tensor, *, min_group: int = 1) -> None:
    if not isinstance(rewards, Tensor):
        raise TypeError(f"rewards must be a torch.Tensor of shape (B, G), got {type(rewards).__name__}")
    if rewards.ndim != 2:
        raise ValueError("rewards must have shape (B, G) (B prompts, G samples each); got shape "
                         f"{tuple(rewards.shape)}")
    if rewards.shape[1] < min_group:
        raise ValueError(
            f"this baseline needs group size G >= {min_group}, got G = {rewards.shape[1]} "
            f"(rewards shape {tuple(rewards.shape)}); sample more completions per prompt"
        )
    if not torch.is_floating_point(rewards):
        raise TypeError(f"rewards must be a floating-point tensor, got dtype {rewards.dtype}")
    bad = ~torch.isfinite(rewards)
    if bad.any():
        b, g = (int(i) for i in bad.nonzero()[0])
        raise ValueError(
            f"rewards contain {int(bad.sum())} non-finite value(s), first at [prompt {b}, sample {g}] = "
            f"{rewards[b, g].item()}; fix the reward function or drop those samples"
        )


def _dense(rewards: Tensor, baseline: str, values: Tensor | None = None, *, scale: str = "none", ddof: int = 1,
           eps: float = 1e-6, zero_std: str = "zero") -> AdvantageResult:
    """The ragged implementation on B equal groups of G (checked input), reshaped back to (B, G)."""
    B, G = rewards.shape
    r = _advantages(rewards.reshape(-1), None, G, baseline, values, scale, ddof, eps, zero_std)
    return AdvantageResult(advantages=r.advantages.view(B, G), zero_std=r.zero_std, n_zero_std=r.n_zero_std)


def _check_values(rewards: Tensor, values) -> Tensor:
    if not isinstance(values, Tensor):
        values = torch.as_tensor(values, dtype=rewards.dtype)
    if values.shape != rewards.shape[:1]:
        raise ValueError(
            f"values must have shape (B,) = ({rewards.shape[0]},) to match rewards {tuple(rewards.shape)}; "
            f"got {tuple(values.shape)}"
        )
    if not torch.isfinite(values).all():
        raise ValueError("values (the oracle V(x)) contain non-finite entries")
    return values.to(rewards.dtype)


def vanilla_advantages(rewards: Tensor) -> Tensor:
    """A = Z: no baseline (Table 1, vanilla minibatch REINFORCE).

    Parameters
    ----------
    rewards : (B, G) tensor

    Examples
    --------
    >>> vanilla_advantages(torch.tensor([[1.0, 0.0]]))
    tensor([[1., 0.]])
    """
    _check_rewards(rewards)
    return _dense(rewards, "vanilla").advantages


def loo_advantages(rewards: Tensor) -> Tensor:
    """A = Z^(g) - Zbar^(-g): rewards minus the leave-one-out group mean, paper eq. (4).

    Uses the identity Z^(g) - Zbar^(-g) = G/(G-1) (Z^(g) - Zbar) (docs/math.md eq. M2),
    which needs one pass instead of G.

    Parameters
    ----------
    rewards : (B, G) tensor, G >= 2

    Examples
    --------
    >>> loo_advantages(torch.tensor([[1.0, 0.0, 0.0]]))
    tensor([[ 1.0000, -0.5000, -0.5000]])
    """
    _check_rewards(rewards, min_group=2)
    return _dense(rewards, "grpo").advantages


def mean_advantages(rewards: Tensor) -> Tensor:
    """A = Z^(g) - Zbar: rewards minus the full group mean (TRL/verl/OpenRLHF default).

    Equals (G-1)/G times :func:`loo_advantages` (docs/math.md eq. M3), so the gradient it
    gives is biased by that factor.

    Examples
    --------
    >>> mean_advantages(torch.tensor([[1.0, 0.0]]))
    tensor([[ 0.5000, -0.5000]])
    """
    _check_rewards(rewards, min_group=2)
    return _dense(rewards, "grpo_mean").advantages


def oracle_advantages(rewards: Tensor, values: Tensor) -> Tensor:
    """A = Z - V(x): the oracle baseline of Table 1, V(x) = E[Z | x] given per prompt.

    Parameters
    ----------
    rewards : (B, G) tensor
    values : (B,) tensor, the true (or independently estimated) value of each prompt
    """
    _check_rewards(rewards)
    return _dense(rewards, "oracle", _check_values(rewards, values)).advantages


BASELINES: dict[str, Callable[..., Tensor]] = {
    "vanilla": vanilla_advantages,
    "grpo": loo_advantages,
    "grpo_mean": mean_advantages,
    "oracle": oracle_advantages,
}


def zero_std_groups(rewards: Tensor, *, atol: float = 0.0) -> Tensor:
    """Boolean ``(B,)`` mask of groups whose rewards are all equal (max - min <= atol).

    These groups have zero sample std; TRL logs their fraction as ``frac_reward_zero_std``.
    """
    _check_rewards(rewards)
    return _all_equal(rewards.reshape(-1), None, rewards.shape[1], atol)


def compute_advantages(
    rewards: Tensor,
    *,
    baseline: BaselineName = "grpo",
    values: Tensor | None = None,
    scale: ScaleName = "none",
    ddof: int = 1,
    eps: float = 1e-6,
    zero_std: ZeroStdPolicy = "zero",
) -> AdvantageResult:
    """Advantages for one batch: baseline, optional std scaling, explicit zero-std handling.

    Baselines: paper Table 1 / eq. (4), docs/math.md M1-M3; std scaling: paper Algorithm 2,
    docs/math.md M4.

    Parameters
    ----------
    rewards : (B, G) tensor
    baseline : one of ``vanilla``, ``grpo`` (LOO mean, eq. (4)), ``grpo_mean``, ``oracle``
    values : (B,) tensor, required for ``oracle``
    scale : ``none`` (Algorithm 1) or ``std`` (Algorithm 2: divide by se(Z^(b,.)))
    ddof : divisor G - ddof inside the std; the paper's se uses ddof=1 (TRL uses 1 too;
        some trainers use 0)
    eps : added to the std in the denominator, (A / (std + eps)); TRL uses 1e-4, verl 1e-6
    zero_std : what an all-equal group gets when ``scale="std"``:
        ``zero`` -> advantage 0 (its centred numerator is 0 for grpo/grpo_mean anyway);
        ``eps`` -> divide by eps (the TRL/verl behaviour, numerator / (0 + eps));
        ``unscaled`` -> keep the unscaled advantage (only differs for vanilla/oracle).
        Ignored for ``scale="none"``; such groups are counted either way.

    Returns
    -------
    AdvantageResult
    """
    _check_options(baseline, scale, zero_std, eps)
    if baseline == "oracle":
        if values is None:
            raise ValueError("baseline='oracle' needs values=V(x) of shape (B,)")
        _check_rewards(rewards)
        values = _check_values(rewards, values)
    else:
        _check_rewards(rewards, min_group=2 if baseline in ("grpo", "grpo_mean") else 1)
    if scale == "std":
        G = rewards.shape[1]
        if G - ddof < 1:
            raise ValueError(f"std scaling with ddof={ddof} needs G > ddof, got G = {G}")
        if zero_std == "eps" and eps == 0:
            raise ValueError("zero_std='eps' with eps=0 divides by zero on all-equal groups; set eps > 0")
    return _dense(rewards, baseline, values, scale=scale, ddof=ddof, eps=eps, zero_std=zero_std)
