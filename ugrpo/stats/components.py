"""Unbiased estimates of the scaling-law constants c1, c2, c3 from a pilot batch (paper Thm 7).

A pilot is B0 prompts with G0 samples each: rewards (B0, G0) and either the per-sample scores
W = grad log pi(Y|x) as a (B0, G0, D) tensor (exact, or random-projection sketches from
:func:`gaussian_sketch`: the same code path) or their Gram matrix (B0 G0, B0 G0) in b-major order
(row b*G0 + i). Everything depends on the scores only through inner products, and linearly,
so Gaussian sketches keep every estimate unbiased (docs/math.md M19).

Per prompt (docs/math.md M14-M18), over ordered triples of distinct samples i, j, k:

* T0 = 1/(G(G-1)) sum_{i != j} Z_i Z_j <W_i, W_j>          -> ||g(x)||^2
* T1 = mean K_ii (Z_i - Z_j)(Z_i - Z_k)                      -> E||W||^2 (Z - V)^2
* T2 = mean K_ii (Z_j - Z_k)^2 / 2                           -> E||W||^2 Var(Z|x)
* c2_b = T1 - T0, c3_b = T2 + T0; c2, c3 = their means over prompts
* c1 = mean_b T0_b - 1/(B(B-1)) sum_{b != b'} <gbar_b, gbar_b'>, gbar_b = 1/G sum_i Z_bi W_bi; by default
  (``c1_baseline="leave-out"``, M67) both terms take the rewards centred within each prompt (T0 with the mean of
  the other G - 2 rewards, gbar_b with the leave-one-out mean): still unbiased, unchanged by a shift of the
  rewards, and less noisy wherever the mean reward is far from 0

Intervals: bootstrap over prompts (docs/math.md M20), studentised (symmetric bootstrap-t, M39: each replicate is divided
by its own standard error, from the influence values; the interval is the estimate -+ the level-quantile of |t| times
the sample's standard error). The default, "studentized-log", does this for c1 on the scale log(c1 + s), s the pilot's
within-prompt noise term, where c1 + s is the (always >= 0) spread of the prompts' mean gradients and its right-skewed,
variance-like distribution is close to symmetric; c2 and c3 on the log scale of the constant itself (means of
right-skewed per-prompt terms). Also: the equal-tailed bootstrap-t, or percentile (``method=...``); the percentile
intervals under-cover at small B0.
Every interval is clipped to [0, inf), the range of c1, c2, c3. Cost: O(B0 G0 D) with scores
(no (B0 G0)^2 Gram is built), O(n_boot B0^2) for the bootstrap.

Deviations from the paper: the paper defines c1..c3 as suprema over theta and gives c3 only
up to O(.); these are the exact constants at one theta (the pilot's policy), with c3 the
explicit residual coefficient of docs/math.md M13.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from .bootstrap_ci import METHODS, Estimate, confidence_draws, log_shifts, summarise

__all__ = ["MIN_PILOT_GROUP", "C1_BASELINES", "VarianceComponents", "gaussian_sketch", "point_estimates",
           "estimate_components", "reduce_scores", "prompt_terms", "centred_c1_terms"]

MIN_PILOT_GROUP = 4
"""Smallest pilot group size G0 accepted (the c2 and c3 estimators average over ordered triples)."""

DT = torch.float64

@dataclass(frozen=True, eq=False)  # holds tensors: compare fields explicitly
class VarianceComponents:
    """c1, c2, c3 of Theorem 7 estimated from a pilot (docs/math.md M13-M20).

    Attributes
    ----------
    c1 : E||g(X) - g||^2, the prompt-sampling variance
    c2 : E tr Sigma_oracle(X), the oracle per-sample variance
    c3 : E[E||W||^2 Var(Z|X) + ||g(X)||^2], the GRPO residual coefficient
    n_prompts : B0
    group_size : G0
    frac_zero_std : fraction of pilot prompts whose G0 rewards are all equal
    replicates : (n_boot, 3) float64 tensor of bootstrap (c1, c2, c3); rows whose resample
        holds a single distinct prompt have c1 = NaN (c1's cross term is undefined there)
    level : confidence level of the intervals
    n_boot_degenerate : number of such NaN-c1 replicates (excluded from c1's interval)
    method : "studentized-log" (symmetric bootstrap-t, c1 on the log(c1 + s) scale, c2 and c3 on log c), "studentized"
        (symmetric bootstrap-t), "studentized-equal-tailed" or "percentile" (docs/math.md M39)
    replicate_se : (n_boot, 3) standard errors of the replicates (the bootstrap-t denominators), or None
    sample_se : the pilot's own standard errors of (c1, c2, c3), or None
    c1_shift : s, the within-prompt noise term of c1's log scale (M39), or None
    c1_baseline : how c1's terms use the rewards: "leave-out" (centred within each prompt, M67) or "none" (raw)
    """

    c1: Estimate
    c2: Estimate
    c3: Estimate
    n_prompts: int
    group_size: int
    frac_zero_std: float
    replicates: Tensor
    level: float = 0.95
    n_boot_degenerate: int = 0
    method: str = "percentile"
    replicate_se: Tensor | None = None
    sample_se: tuple[float, float, float] | None = None
    c1_shift: float | None = None
    c1_baseline: str = "none"

    def confidence_draws(self) -> np.ndarray:
        """Draws (2 n_boot, 3) of the confidence distribution of (c1, c2, c3) behind the intervals, unclipped
        (:func:`ugrpo.stats.bootstrap_ci.confidence_draws`; the replicates themselves without standard errors)."""
        point = np.array([self.c1.estimate, self.c2.estimate, self.c3.estimate], dtype=float)
        rse = None if self.replicate_se is None else self.replicate_se.numpy()
        se = None if self.sample_se is None else np.array(self.sample_se, dtype=float)
        return confidence_draws(point, self.replicates.numpy(), self.method, se, rse, self.c1_shift, self.level)

    @property
    def c1_distinguishable_from_zero(self) -> bool:
        """True when c1's interval excludes 0 (ci_low > 0)."""
        return bool(self.c1.ci_low > 0)


def gaussian_sketch(scores: Tensor, k: int, generator: torch.Generator | None = None) -> Tensor:
    """Gaussian random projection W -> S W with S (k, D), entries N(0, 1/k) (docs/math.md M19).

    E_S <S a, S b> = <a, b>, and every estimate of this module is linear in the inner
    products, so estimates from sketches are unbiased for the estimates from exact scores.

    Parameters
    ----------
    scores : (..., D) tensor
    k : sketch dimension (>= 1)
    generator : torch.Generator for S (seed it for reproducibility)

    Returns
    -------
    (..., k) tensor in the dtype of ``scores``.

    Examples
    --------
    >>> gaussian_sketch(torch.ones(2, 3, 10), 4, torch.Generator().manual_seed(0)).shape
    torch.Size([2, 3, 4])
    """
    if not isinstance(scores, Tensor) or scores.ndim < 1:
        raise ValueError("scores must be a tensor of shape (..., D)")
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1:
        raise ValueError(f"sketch dimension k must be an int >= 1, got {k!r}")
    D = scores.shape[-1]
    S = torch.randn(k, D, generator=generator, dtype=scores.dtype) / k**0.5  # (k, D)
    return scores @ S.T


# ---------------------------------------------------------------------------------------------
# validation


def _all_finite(t: Tensor) -> bool:
    """True when every entry is finite; one reduction instead of an elementwise mask (large score tensors)."""
    if bool(torch.isfinite(t.sum())):
        return True
    return bool(torch.isfinite(t).all())  # the sum can overflow for huge finite entries: check exactly


def _check_rewards(rewards: Tensor) -> None:
    if not isinstance(rewards, Tensor) or rewards.ndim < 2:
        raise ValueError(f"rewards must be a tensor of shape (B0, G0); got {getattr(rewards, 'shape', type(rewards))}")
    B0, G0 = rewards.shape[-2:]
    if G0 < MIN_PILOT_GROUP:
        raise ValueError(
            f"G0 >= {MIN_PILOT_GROUP} needed: the c2 and c3 estimators are U-statistics of order 3 within a prompt "
            f"(averages over ordered triples of distinct samples); got pilot rewards of shape {tuple(rewards.shape)} "
            f"(G0 = {G0}). Sample at least {MIN_PILOT_GROUP} completions per pilot prompt."
        )
    if B0 < 2:
        raise ValueError(
            f"B0 >= 2 pilot prompts needed: c1 compares the gradients of distinct prompts; got rewards of shape "
            f"{tuple(rewards.shape)} (B0 = {B0}). Use more pilot prompts (tens, for a usable c1)."
        )
    if not torch.is_floating_point(rewards):
        raise TypeError(f"rewards must be a floating-point tensor, got dtype {rewards.dtype}")
    bad = ~torch.isfinite(rewards)
    if bad.any():
        idx = tuple(int(i) for i in bad.nonzero()[0])
        raise ValueError(
            f"rewards contain {int(bad.sum())} non-finite value(s) (NaN or inf), first at index {idx}; "
            f"fix the reward function or drop those prompts from the pilot"
        )


def _check_inputs(rewards: Tensor, scores: Tensor | None, gram: Tensor | None) -> None:
    _check_rewards(rewards)
    if (scores is None) == (gram is None):
        raise ValueError("pass exactly one of scores=(B0, G0, D) or gram=(B0*G0, B0*G0)")
    if scores is not None:
        if not isinstance(scores, Tensor) or scores.shape[:-1] != rewards.shape or scores.ndim != rewards.ndim + 1:
            raise ValueError(
                f"scores must have shape rewards.shape + (D,) = {tuple(rewards.shape)} + (D,); "
                f"got {tuple(getattr(scores, 'shape', ()))}"
            )
        # finiteness of scores is checked on ||W_i||^2 after the reduction (one pass less over (B0, G0, D))
    else:
        if rewards.ndim != 2:
            raise ValueError(f"the gram path takes one pilot: rewards (B0, G0), got {tuple(rewards.shape)}")
        n = rewards.numel()
        if not isinstance(gram, Tensor) or gram.shape != (n, n):
            raise ValueError(
                f"gram must have shape (B0*G0, B0*G0) = ({n}, {n}) in b-major order (row b*G0 + i); "
                f"got {tuple(getattr(gram, 'shape', ()))}"
            )
        if not _all_finite(gram):
            raise ValueError("gram contains non-finite values (NaN or inf)")
        asym = float((gram - gram.T).abs().max())
        scale = float(gram.diagonal().abs().max()) or 1.0
        if asym > 1e-6 * scale:
            raise ValueError(
                f"gram is not symmetric (max |K - K^T| = {asym:.3g}); it must hold the inner products <W_i, W_j>"
            )


# ---------------------------------------------------------------------------------------------
# computation


def reduce_scores(rewards: Tensor, scores: Tensor | None, gram: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
    """Everything the estimators need: rewards Z (..., B, G), diag K_ii (..., B, G), M_bb' = <gbar_b, gbar_b'>."""
    z = rewards.to(DT)
    G = z.shape[-1]
    if scores is not None:
        w = scores.to(DT)
        diag = torch.linalg.vector_norm(w, dim=-1) ** 2         # (..., B, G)   K_ii = ||W_i||^2
        gbar = torch.einsum("...bg,...bgd->...bd", z, w) / G    # (..., B, D)
        M = gbar @ gbar.transpose(-1, -2)                       # (..., B, B)
    else:
        B = z.shape[0]
        K = gram.to(DT).reshape(B, G, B, G)                     # K[b, i, c, j] = <W_bi, W_cj>
        diag = torch.einsum("bibi->bi", K)                       # (B, G)
        M = torch.einsum("bi,bicj,cj->bc", z, K, z) / G**2      # (B, B)
    return z, diag, M


def _check_diag(diag: Tensor) -> None:
    """||W_i||^2 is NaN/inf exactly when a score has a NaN/inf entry (or overflows): name the first sample."""
    bad = ~torch.isfinite(diag)
    if bad.any():
        idx = tuple(int(i) for i in bad.nonzero()[0])
        raise ValueError(
            f"scores (or gram diagonal) contain non-finite values (NaN or inf) or overflow, first at sample index "
            f"{idx} (..., prompt, sample); fix the score computation"
        )


def prompt_terms(z: Tensor, diag: Tensor, M: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Per-prompt T0, T1, T2 (docs/math.md M14-M16) in O(G) per prompt via the sums of M18."""
    G = z.shape[-1]
    zKz = torch.diagonal(M, dim1=-2, dim2=-1) * G**2            # (..., B)  ||sum_i Z_i W_i||^2
    t0 = (zKz - (z * z * diag).sum(-1)) / (G * (G - 1))         # (..., B)
    s1, s2 = z.sum(-1, keepdim=True), (z * z).sum(-1, keepdim=True)
    a = G * z - s1                                               # sum_{j != i} (Z_i - Z_j)
    b = G * z * z - 2 * z * s1 + s2                              # sum_{j != i} (Z_i - Z_j)^2
    n3 = G * (G - 1) * (G - 2)
    t1 = (diag * (a * a - b)).sum(-1) / n3
    o1, o2 = s1 - z, s2 - z * z                                  # sums over j != i of Z_j, Z_j^2
    t2 = (diag * ((G - 1) * o2 - o1 * o1)).sum(-1) / n3
    return t0, t1, t2


C1_BASELINES = ("leave-out", "none")
"""Rewards in c1's terms (docs/math.md M67): ``leave-out`` centres them within each prompt (T0 with the mean of the
other G - 2 rewards of the prompt, the prompts' mean gradients with the leave-one-out mean): unbiased, unchanged by
a shift of the rewards, and 1.4-2.8x less spread on the planner benchmark's pilots; ``none``: raw (M14, M17)."""


def centred_c1_terms(rewards: Tensor, scores: Tensor | None, gram: Tensor | None) -> tuple[Tensor, Tensor]:
    """c1's per-prompt terms with the rewards centred within each prompt (docs/math.md M67).

    T0'_b = 1/(G(G-1)) sum_{i != j} (Z_i - m_ij)(Z_j - m_ij) K_ij, m_ij the mean of the other G - 2 rewards of the
    prompt (independent of samples i and j, so E T0'_b = ||g(x_b)||^2 as E W = 0), and M'_bc = <gh_b, gh_c> with
    gh_b = 1/G sum_i (Z_i - mean of the other G - 1) W_i = 1/(G-1) sum_i (Z_i - Zbar_b) W_i (unbiased for g(x_b): the
    GRPO leave-one-out baseline). Both are unchanged when every reward moves by the same amount.

    Returns
    -------
    t0 (..., B) and M (..., B, B), in place of :func:`prompt_terms`' T0 and :func:`reduce_scores`' M in c1.

    Examples
    --------
    >>> Z = torch.tensor([[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0]])
    >>> t0, M = centred_c1_terms(Z, torch.ones(2, 4, 1), None)
    >>> t0.tolist(), centred_c1_terms(Z + 5.0, torch.ones(2, 4, 1), None)[0].tolist()  # the same after a shift
    ([0.125, 0.16666666666666666], [0.125, 0.16666666666666666])
    """
    z = rewards.to(DT)
    G = z.shape[-1]
    zc = z - z.mean(-1, keepdim=True)
    if scores is not None:
        w = scores.to(DT)
        K = w @ w.transpose(-1, -2)                              # (..., B, G, G) within-prompt inner products
        gh = torch.einsum("...bg,...bgd->...bd", zc, w) / (G - 1)  # (..., B, D)
        M = gh @ gh.transpose(-1, -2)                            # (..., B, B)
    else:
        B = z.shape[0]
        K4 = gram.to(DT).reshape(B, G, B, G)
        K = torch.einsum("bibj->bij", K4)                        # (B, G, G)
        M = torch.einsum("bi,bicj,cj->bc", zc, K4, zc) / (G - 1) ** 2
    tot = z.sum(-1)[..., None, None]
    zi, zj = z.unsqueeze(-1), z.unsqueeze(-2)
    m = (tot - zi - zj) / (G - 2)                                # (..., B, G, G) mean of the other G - 2
    off = 1.0 - torch.eye(G, dtype=DT)
    t0 = ((zi - m) * (zj - m) * K * off).sum((-1, -2)) / (G * (G - 1))
    return t0, M


def _c1_terms(rewards, scores, gram, t0, M, c1_baseline: str) -> tuple[Tensor, Tensor]:
    return centred_c1_terms(rewards, scores, gram) if c1_baseline == "leave-out" else (t0, M)


def _point(t0: Tensor, t1: Tensor, t2: Tensor, t0_c1: Tensor, M_c1: Tensor) -> Tensor:
    B = t0.shape[-1]
    off = M_c1.sum((-2, -1)) - torch.diagonal(M_c1, dim1=-2, dim2=-1).sum(-1)
    c1 = t0_c1.mean(-1) - off / (B * (B - 1))
    return torch.stack([c1, (t1 - t0).mean(-1), (t2 + t0).mean(-1)], dim=-1)


def _bootstrap_replicates(t0: Tensor, t1: Tensor, t2: Tensor, M: Tensor, counts: Tensor, t0_c2: Tensor | None = None
                          ) -> tuple[Tensor, Tensor]:
    """Replicates (n_boot, 3) and their standard errors (n_boot, 3) from resample counts (n_boot, B) (M20, M39).

    ``t0``, ``M``: c1's per-prompt terms (centred or raw, M67); ``t0_c2``: the T0 of c2 = T1 - T0 and c3 = T2 + T0
    (default ``t0``). Per-prompt terms are averaged with the counts as weights; c1's cross term uses only pairs
    of distinct original prompts, weighted by w_b w_b'. The standard error of a replicate is the
    weighted standard deviation of its influence values (per-prompt terms; for c1 the U-statistic's
    t0_b - 2 <gbar_b, mean of the other gbar>) over sqrt(B); counts = ones gives the sample's own.
    """
    t0_c2 = t0 if t0_c2 is None else t0_c2
    B = t0.shape[0]
    w = counts.to(DT)                                            # (R, B)
    M_off = M - torch.diag(torch.diagonal(M))                    # (B, B)
    A = w @ M_off                                                # (R, B)  sum_c w_c M_bc (c != b)
    num = (A * w).sum(1)
    den = w.sum(1) ** 2 - (w * w).sum(1)
    cross = torch.where(den > 0, num / den.clamp_min(1), torch.full_like(num, float("nan")))
    c1 = w @ t0 / B - cross
    psi = t0[None, :] - 2 * B * A / den.clamp_min(1)[:, None]   # (R, B) influence values of c1
    se = torch.stack([_c1_se(psi, t0, M_off, w, den), _weighted_se((t1 - t0_c2).expand_as(w), w),
                      _weighted_se((t2 + t0_c2).expand_as(w), w)], dim=1)
    return torch.stack([c1, w @ (t1 - t0_c2) / B, w @ (t2 + t0_c2) / B], dim=1), se


def _c1_se(psi: Tensor, t0: Tensor, M_off: Tensor, w: Tensor, den: Tensor) -> Tensor:
    """SE of c1, a U-statistic of order 2 over prompts with kernel h_bc = (t0_b + t0_c)/2 - <gbar_b, gbar_c>.

    Var = [4 (n-2) zeta1 + 2 zeta2] / (n (n-1)) (Hoeffding), zeta1 = Var(psi)/4 from the influence
    values psi (R, B), zeta2 = Var(h) over pairs of distinct prompts, both count-weighted (docs/math.md M39).
    The zeta2 term matters at small B0, where the first-order SE alone is too small.
    """
    B = psi.shape[1]
    H = (t0[:, None] + t0[None, :]) / 2 - M_off
    H = H - torch.diag(torch.diagonal(H))                        # pairs b != c only
    pair_w = den.clamp_min(1)
    m1 = torch.einsum("rb,bc,rc->r", w, H, w) / pair_w
    m2 = torch.einsum("rb,bc,rc->r", w, H * H, w) / pair_w
    zeta2 = (m2 - m1 * m1).clamp_min(0)
    zeta1 = _weighted_se(psi, w) ** 2 * B / 4                    # Var(psi) / 4
    return ((4 * (B - 2) * zeta1 + 2 * zeta2) / (B * (B - 1))).sqrt()


def _weighted_se(x: Tensor, w: Tensor) -> Tensor:
    """Standard error of the count-weighted mean of x (R, B): weighted sd / sqrt(B), one per row."""
    B = x.shape[1]
    mean = (w * x).sum(1, keepdim=True) / B
    return ((w * (x - mean) ** 2).sum(1) / (B - 1) / B).sqrt()


def point_estimates(rewards: Tensor, *, scores: Tensor | None = None, gram: Tensor | None = None,
                    c1_baseline: str = "leave-out") -> Tensor:
    """Unbiased (c1, c2, c3) of one or many pilots, no intervals (docs/math.md M14-M18, M67).

    Parameters
    ----------
    rewards : (..., B0, G0) tensor, B0 >= 2, G0 >= 4
    scores : (..., B0, G0, D) tensor (exact or sketched scores), or
    gram : (B0*G0, B0*G0) tensor of <W_i, W_j> in b-major order (one pilot only)
    c1_baseline : "leave-out" (rewards centred within prompts in c1's terms, M67) or "none" (M17 as written)

    Returns
    -------
    (..., 3) float64 tensor (c1, c2, c3); leading dimensions index independent pilots.

    Examples
    --------
    >>> Z = torch.tensor([[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0]])
    >>> W = torch.ones(2, 4, 1)
    >>> point_estimates(Z, scores=W)
    tensor([0.1458, 0.2083, 0.3750], dtype=torch.float64)
    >>> point_estimates(Z, scores=W, c1_baseline="none")
    tensor([-0.0417,  0.2083,  0.3750], dtype=torch.float64)
    """
    _check_inputs(rewards, scores, gram)
    _check_baseline(c1_baseline)
    z, diag, M = reduce_scores(rewards, scores, gram)
    _check_diag(diag)
    t0, t1, t2 = prompt_terms(z, diag, M)
    return _point(t0, t1, t2, *_c1_terms(rewards, scores, gram, t0, M, c1_baseline))


def _check_baseline(c1_baseline: str) -> None:
    if c1_baseline not in C1_BASELINES:
        raise ValueError(f"c1_baseline = {c1_baseline!r} is unknown; choose one of {C1_BASELINES}")


def estimate_components(
    rewards: Tensor,
    *,
    scores: Tensor | None = None,
    gram: Tensor | None = None,
    n_boot: int = 1000,
    level: float = 0.95,
    generator: torch.Generator | None = None,
    method: str = "studentized-log",
    c1_baseline: str = "leave-out",
) -> VarianceComponents:
    """c1, c2, c3 of Theorem 7 from a pilot, with bootstrap intervals over prompts (docs/math.md M13-M20, M39, M67).

    Parameters
    ----------
    rewards : (B0, G0) tensor, B0 >= 2 prompts, G0 >= 4 samples each
    scores : (B0, G0, D) tensor of scores W (exact or from :func:`gaussian_sketch`), or
    gram : (B0*G0, B0*G0) tensor of inner products <W_i, W_j>, b-major (row b*G0 + i)
    n_boot : bootstrap replicates over prompts; 0 skips the bootstrap (intervals are NaN)
    level : confidence level of the intervals
    generator : torch.Generator for the resampling (seed it for reproducible intervals)
    method : "studentized-log" (the default: symmetric bootstrap-t, c1's on the log(c1 + s) scale, c2's and c3's on
        the log scale; it covers best at small pilots, M39), "studentized" (symmetric bootstrap-t on the original
        scale), "studentized-equal-tailed" or "percentile"
    c1_baseline : "leave-out" (the default: c1's terms with the rewards centred within each prompt, unbiased and
        unchanged by a shift of the rewards, M67) or "none" (the raw rewards, M14, M17)

    Returns
    -------
    VarianceComponents

    Notes
    -----
    Unbiased for the constants at the pilot's policy: E[T0] = ||g(x)||^2,
    E[T1] = E||W||^2 (Z - V)^2, E[T2] = E||W||^2 Var(Z|x) (docs/math.md M14-M17).
    Individual estimates can be negative (c1 especially, when prompts differ little).

    Examples
    --------
    >>> gen = torch.Generator().manual_seed(0)
    >>> Z = (torch.rand(8, 4, generator=gen) < 0.5).double()
    >>> vc = estimate_components(Z, scores=torch.randn(8, 4, 3, generator=gen, dtype=torch.float64),
    ...                          n_boot=200, generator=gen)
    >>> vc.n_prompts, vc.group_size, vc.replicates.shape
    (8, 4, torch.Size([200, 3]))
    """
    _check_inputs(rewards, scores, gram)
    if rewards.ndim != 2:
        raise ValueError(f"estimate_components takes one pilot: rewards (B0, G0), got {tuple(rewards.shape)}")
    if isinstance(n_boot, bool) or not isinstance(n_boot, numbers.Integral) or n_boot < 0:
        raise ValueError(f"n_boot must be an int >= 0, got {n_boot!r}")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    if method not in METHODS:
        raise ValueError(f"method = {method!r} is unknown; choose one of {METHODS}")
    _check_baseline(c1_baseline)
    return _estimate(rewards, scores, gram, n_boot, level, generator, method, c1_baseline)


def _estimate(rewards, scores, gram, n_boot, level, generator, method="studentized-log",
              c1_baseline="leave-out") -> VarianceComponents:
    z, diag, M = reduce_scores(rewards, scores, gram)
    _check_diag(diag)
    B0, G0 = rewards.shape
    t0, t1, t2 = prompt_terms(z, diag, M)
    t0_c1, M_c1 = _c1_terms(rewards, scores, gram, t0, M, c1_baseline)
    point = _point(t0, t1, t2, t0_c1, M_c1)
    if n_boot > 0:
        idx = torch.randint(0, B0, (n_boot, B0), generator=generator)
        counts = torch.zeros(n_boot, B0, dtype=DT).scatter_add_(1, idx, torch.ones(n_boot, B0, dtype=DT))
        reps, rep_se = _bootstrap_replicates(t0_c1, t1, t2, M_c1, counts, t0)
    else:
        reps = rep_se = torch.empty(0, 3, dtype=DT)
    se = _bootstrap_replicates(t0_c1, t1, t2, M_c1, torch.ones(1, B0, dtype=DT), t0)[1][0]  # the sample's own SEs
    arr, arr_se = reps.numpy(), rep_se.numpy()
    # c1 + s = mean_b ||gbar_b||^2 - cross term >= 0 (half the mean squared distance between prompts' mean
    # gradients); s = mean_b (||gbar_b||^2 - T0_b) estimates the within-prompt noise E||gbar_b - g(x_b)||^2 (with the
    # centred terms of M67, gh_b and T0'_b in place of gbar_b and T0_b)
    shifts = log_shifts(float((torch.diagonal(M_c1) - t0_c1).mean()))  # c2, c3: on log c itself (M39)
    est = [summarise(float(point[i]), arr[:, i], level, method, float(se[i]), arr_se[:, i], shifts[i])
           for i in range(3)]
    spread = rewards.max(dim=1).values - rewards.min(dim=1).values
    return VarianceComponents(
        c1=est[0], c2=est[1], c3=est[2], n_prompts=B0, group_size=G0,
        frac_zero_std=float((spread == 0).double().mean()), replicates=reps, level=level,
        n_boot_degenerate=int(torch.isnan(reps[:, 0]).sum()), method=method, replicate_se=rep_se,
        sample_se=tuple(float(v) for v in se), c1_shift=shifts[0], c1_baseline=c1_baseline,
    )
