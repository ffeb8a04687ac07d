"""Monte-Carlo gradient-MSE statistics in sketch space (docs/lm-mse.md R1-R7): the reference moments from M
samples per prompt, the per-repetition squared errors of every estimator, and the corrected mean with its
interval; the ragged squared errors of per-prompt group sizes and the per-prompt moments the allocation rules
know (R8-R10). Pure tensor math, used by :mod:`ugrpo.experiments.mse.lm` (paper Fig. 4) and
:mod:`ugrpo.experiments.mse.lm_alloc`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from ugrpo.stats.advantages import compute_advantages
from ugrpo.stats.allocation import PromptStats
from ugrpo.stats.components import prompt_terms, reduce_scores
from ugrpo.stats.estimators import ESTIMATORS
from ugrpo.stats.history import PromptHistory
from ugrpo.stats.intervals import clip_interval, satterthwaite_df, t_quantile
from ugrpo.stats.predict import Posterior, posterior
from ugrpo.stats.ragged import ragged_advantages, ragged_prompt_gradients

__all__ = ["ReferenceMoments", "reference_moments", "block_squared_errors", "corrected_row", "ragged_block_errors",
           "ragged_block_gradients", "is_block_errors",
           "sample_prompt_stats", "visit_history", "history_prompt_sums", "history_prompt_posterior"]

DT = torch.float64


@dataclass(frozen=True, eq=False)
class ReferenceMoments:
    """What the M reference samples per prompt give (docs/lm-mse.md R1-R4).

    Attributes
    ----------
    g_ref : (k,) reference gradient (1/P) sum_p g_ref(x_p)
    g_x : (P, k) per-prompt reference gradients g_ref(x_p)
    v_ref : (P,) reference values V_ref(x_p) = mean reward
    tr_c : (P,) unbiased estimates of E||g_ref(x_p) - g(x_p)||^2 = tr Cov(WZ|x_p) / M
    cov : (P, k, k) estimates of Cov(g_ref(x_p)) = Cov(WZ|x_p) / M (for the spread terms of R5)
    ref_err : unbiased estimate of E||g_ref - g||^2 = (1/P^2) sum_p tr Cov(WZ|x_p) / M   (R2)
    wvar : unbiased estimate of E_X[E||W||^2 Var(Z|X)] (T2 of docs/math.md M16, averaged over prompts)
    M : reference samples per prompt
    """

    g_ref: Tensor
    g_x: Tensor
    v_ref: Tensor
    tr_c: Tensor
    cov: Tensor
    ref_err: float
    wvar: float
    M: int

    def oracle_extra(self, B: int, G: int) -> float:
        """Extra error of the oracle that uses V_ref: E_X[E||W||^2 Var(Z|X)] / (B G M)   (R3)."""
        return self.wvar / (B * G * self.M)

    def within_ref_err(self, idx: Tensor) -> Tensor:
        """(R,) unbiased E||(1/B) sum_b (g_ref(x_b) - g(x_b))||^2 for the prompt draws idx (R, B)   (R7).

        A prompt drawn n times contributes n^2 tr C_p (its reference error is the same each time).
        """
        counts = torch.zeros(idx.shape[0], self.tr_c.numel(), dtype=DT).scatter_add_(
            1, idx, torch.ones(idx.shape, dtype=DT))                  # (R, P)
        return (counts**2 @ self.tr_c) / idx.shape[1] ** 2

    def spread(self, idx: Tensor | None = None, direction: Tensor | None = None) -> float:
        """Plug-in sd of the realised reference error around its mean (docs/lm-mse.md R5).

        idx None: u = g_ref - g with covariance C = sum_p C_p / P^2 and sd ||u||^2 ~ sqrt(2 tr C^2)
        (Gaussian approximation); idx (R, B): the within-prompt target of R7, C_r = sum_p n_rp^2 C_p / B^2,
        the mean over repetitions of sqrt(2 tr C_r^2) (>= the sd of their average). ``direction`` b:
        the sd of <b, u> instead, sqrt(b^T C b).
        """
        P = self.tr_c.numel()
        if idx is None:
            C = self.cov.sum(0) / P**2                                              # (k, k)
            if direction is not None:
                b = direction.to(DT)
                return math.sqrt(max(float(b @ C @ b), 0.0))
            return math.sqrt(2 * float((C * C).sum()))
        counts = torch.zeros(idx.shape[0], P, dtype=DT).scatter_add_(1, idx, torch.ones(idx.shape, dtype=DT))
        Cr = torch.einsum("rp,pij->rij", counts**2, self.cov) / idx.shape[1] ** 2  # (R, k, k)
        return float(torch.sqrt(2 * (Cr * Cr).sum((1, 2))).mean())


def reference_moments(scores: Tensor, rewards: Tensor) -> ReferenceMoments:
    """Reference gradient, values and the two correction terms from M samples per prompt.

    Parameters
    ----------
    scores : (P, M, k) sketched (or exact) scores S W of the reference samples
    rewards : (P, M) their rewards Z

    Returns
    -------
    ReferenceMoments
    """
    if scores.ndim != 3 or rewards.shape != scores.shape[:2]:
        raise ValueError(f"reference scores (P, M, k) and rewards (P, M) do not match: {tuple(scores.shape)} vs "
                         f"{tuple(rewards.shape)}")
    P, M, _ = scores.shape
    if M < 3:
        raise ValueError(f"need M >= 3 reference samples per prompt, got {M}")
    s, z = scores.to(DT), rewards.to(DT)
    wz = s * z[..., None]                                     # (P, M, k)
    gx = wz.mean(1)                                           # (P, k) g_ref(x_p)
    tr_cov = ((wz - gx[:, None]) ** 2).sum(-1).sum(1) / (M - 1)  # (P,) unbiased tr Cov(WZ|x_p)
    ref_err = float(tr_cov.sum() / M / P**2)
    diag = (s**2).sum(-1)                                     # (P, M) ||W_j||^2
    s1, s2 = z.sum(1, keepdim=True), (z * z).sum(1, keepdim=True)
    o1, o2 = s1 - z, s2 - z * z                               # sums over the others (docs/math.md M18)
    t2 = (diag * ((M - 1) * o2 - o1 * o1)).sum(1) / (M * (M - 1) * (M - 2))  # (P,) M16
    dev = wz - gx[:, None]                                    # (P, M, k)
    cov = torch.einsum("pmi,pmj->pij", dev, dev) / ((M - 1) * M)  # (P, k, k) Cov(WZ|x_p)/M
    return ReferenceMoments(g_ref=gx.mean(0), g_x=gx, v_ref=z.mean(1), tr_c=tr_cov / M, cov=cov, ref_err=ref_err,
                            wvar=float(t2.mean()), M=M)


def block_squared_errors(scores: Tensor, rewards: Tensor, values: Tensor, g_ref: Tensor, G: int,
                         g_draws: Tensor | None = None) -> dict[str, Tensor]:
    """Per-repetition squared errors ||ghat - g_ref||^2 of each estimator at group size G.

    Parameters
    ----------
    scores : (R, B, Gmax, k) sketched scores of the estimation blocks (repetition, prompt draw, sample)
    rewards : (R, B, Gmax)
    values : (R, B) V used by the oracle (V_ref of the drawn prompt)
    g_ref : (k,) reference gradient
    G : group size <= Gmax; the block gives m = Gmax // G disjoint groups, each a (B, G) minibatch
    g_draws : (R, B, k) optional reference gradients g_ref(x_b) of the drawn prompts

    Returns
    -------
    dict estimator -> (R,) mean over the m groups of ||ghat - g_ref||^2 (paper eq. 5, 8), plus
    ``"residual"``: the same mean of ||ghat_grpo - ghat_oracle||^2 (the Hoeffding residual, eq. 2), and
    with ``g_draws`` ``"within_<estimator>"``: the mean of ||ghat - (1/B) sum_b g_ref(x_b)||^2, the error
    within the drawn prompts (no prompt-sampling term c1/B; docs/lm-mse.md R7).
    """
    R, B, Gmax, k = scores.shape
    if not 2 <= G <= Gmax:
        raise ValueError(f"group size G = {G} must be in [2, {Gmax}] (the block size)")
    m = Gmax // G
    s = scores[:, :, : m * G].to(DT).reshape(R, B, m, G, k)
    z = rewards[:, :, : m * G].to(DT).reshape(R * B * m, G)
    v = values.to(DT)[:, :, None].expand(R, B, m).reshape(-1)
    adv = torch.stack([compute_advantages(z, baseline=e, values=v if e == "oracle" else None).advantages
                       for e in ESTIMATORS], dim=-1)        # (R*B*m, G, E)
    pg = torch.bmm(adv.transpose(1, 2), s.reshape(R * B * m, G, k)) / G  # (R*B*m, E, k) per-prompt eq. (5)
    mb = pg.view(R, B, m, len(ESTIMATORS), k).mean(1)        # (R, m, E, k) minibatch eq. (8)
    err = ((mb - g_ref.to(DT)) ** 2).sum(-1).mean(1)         # (R, E)
    out = {e: err[:, i] for i, e in enumerate(ESTIMATORS)}
    gi, oi = ESTIMATORS.index("grpo"), ESTIMATORS.index("oracle")
    out["residual"] = ((mb[:, :, gi] - mb[:, :, oi]) ** 2).sum(-1).mean(1)
    if g_draws is not None:
        target = g_draws.to(DT).mean(1)[:, None, None, :]            # (R, 1, 1, k)
        werr = ((mb - target) ** 2).sum(-1).mean(1)                   # (R, E)
        out.update({f"within_{e}": werr[:, i] for i, e in enumerate(ESTIMATORS)})
    return out


def corrected_row(err: Tensor, subtract: float, extra_sd: float) -> dict[str, float]:
    """Mean of the repetitions minus the correction, with a 95% interval cut at 0.

    SE^2 = (sample variance of the R values)/R + extra_sd^2, where extra_sd bounds the spread of the
    reference's realised error around its estimate (docs/lm-mse.md R5). The interval is mse -+ t SE with t the
    Student-t quantile at the Satterthwaite degrees of freedom (R - 1 for the sampled part, extra_sd taken as known:
    :func:`~ugrpo.stats.intervals.satterthwaite_df`): 4.30 SE at R = 3 without a correction, 1.96 SE at many
    repetitions (a normal interval at a handful of repetitions is far too short). The corrected mean stays unbiased and
    may fall below 0 when the correction is as large as the noise; the interval is for an MSE, which is never
    negative, so it is cut at 0 (which never removes the true value: the coverage is unchanged).
    """
    R = err.numel()
    raw = float(err.mean())
    se_rep = float(err.std(correction=1)) / math.sqrt(R)
    se = math.sqrt(se_rep**2 + extra_sd**2)
    m = raw - subtract
    h = t_quantile(satterthwaite_df(se_rep, R, extra_sd)) * se
    lo, hi = clip_interval(m - h, m + h, hi=math.inf)
    return {"mse": m, "se": se, "ci_low": lo, "ci_high": hi, "raw_mse": raw, "raw_se": se_rep, "correction": subtract}


# ---------------------------------------------------------------------------------------------
# per-prompt group sizes (docs/lm-mse.md R8-R10)


def ragged_block_errors(scores: Tensor, rewards: Tensor, sizes: Tensor, g_ref: Tensor) -> Tensor:
    """Per-repetition ||ghat - g_ref||^2 of the ragged LOO estimate that reads the first G_b samples of each block.

    Parameters
    ----------
    scores : (R, B, Gmax, k) sketched scores of the estimation blocks
    rewards : (R, B, Gmax)
    sizes : (R, B) integer group sizes, 2 <= G_rb <= Gmax, fixed before the blocks were drawn
    g_ref : (k,) reference gradient, or (R, k) one target per repetition (e.g. the drawn prompts' mean
        reference gradient (1/B) sum_b g_ref(x_rb): the error within the drawn prompts, R7)

    Returns
    -------
    (R,) tensor: ||(1/B) sum_b (1/G_rb) sum_{g <= G_rb} A_rbg S W_rbg - g_ref||^2 with the leave-one-out
    advantage of each prompt's own group (docs/math.md M32, M37). With all G_rb = G this is
    :func:`block_squared_errors`'s ``grpo`` on the first G samples of each block.
    """
    R, B, Gmax, k = scores.shape
    sizes = torch.as_tensor(sizes)
    if sizes.shape != (R, B) or sizes.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"sizes must be an integer (R, B) = ({R}, {B}) tensor, got {tuple(sizes.shape)} {sizes.dtype}")
    if int(sizes.min()) < 2 or int(sizes.max()) > Gmax:
        raise ValueError(f"every group size must be in [2, {Gmax}] (the block size); got {int(sizes.min())}.."
                         f"{int(sizes.max())}")
    pg = ragged_block_gradients(scores, rewards, sizes)                 # (R, B, k) eq. (5) with G_rb
    return ((pg.mean(1) - g_ref.to(DT)) ** 2).sum(-1)                  # (R,)


def ragged_block_gradients(scores: Tensor, rewards: Tensor, sizes: Tensor) -> Tensor:
    """(R, B, k) each block's LOO estimate (1/G_rb) sum_{g <= G_rb} A_rbg S W_rbg from its first G_rb samples."""
    R, B, Gmax, k = scores.shape
    keep = torch.arange(Gmax) < sizes[..., None]                       # (R, B, Gmax), the first G_rb of each block
    flat_s, flat_z = scores.to(DT)[keep], rewards.to(DT)[keep]         # (n, k), (n,) in prompt order
    flat_sizes = sizes.reshape(-1).to(torch.int64)
    adv = ragged_advantages(flat_z, flat_sizes, baseline="grpo")       # (n,)
    return ragged_prompt_gradients(flat_s, adv, flat_sizes).view(R, B, k)


def is_block_errors(scores: Tensor, rewards: Tensor, sizes: Tensor, weights: Tensor, ratio: Tensor,
                    g_ref: Tensor) -> Tensor:
    """Per-repetition mean over its B blocks of r_rb ||w_rb ghat_rb - g_ref||^2: the single-draw error of a
    prompt-IS law, estimated from UNIFORMLY drawn prompts (docs/lm-mse.md R11).

    A block of prompt x drawn uniformly, weighted by the likelihood ratio r = q(x) / (1/P) = P q(x), has the
    expectation of a block of x drawn from q: E_unif[r ||w ghat(x) - t||^2] = E_q ||w ghat(X) - t||^2 with
    w = 1/(P q(x)) (M52) and ghat from the first G_x samples. With ``weights`` and ``ratio`` all 1 and one size G it
    is uniform's single-draw error. The B draws of a step are iid, so a step's MSE is this expectation minus the
    reference term, over B (M53).

    Parameters
    ----------
    scores, rewards, sizes : as :func:`ragged_block_errors` (the blocks of uniformly drawn prompts)
    weights : (R, B) the law's weights w = 1/(P q(x_rb))
    ratio : (R, B) the likelihood ratios P q(x_rb)
    g_ref : (k,) the reference gradient
    """
    pg = ragged_block_gradients(scores, rewards, torch.as_tensor(sizes))                       # (R, B, k)
    e = ((weights.to(DT)[..., None] * pg - g_ref.to(DT)) ** 2).sum(-1)                         # (R, B)
    return (ratio.to(DT) * e).mean(1)


def sample_prompt_stats(scores: Tensor, rewards: Tensor) -> PromptStats:
    """Per-prompt p, c2(x), c3(x) from M >= 3 samples of each prompt (the rules' "true" moments, R9).

    p = mean reward; c2(x) = T1 - T0 and c3(x) = T2 + T0 with the unbiased per-prompt U-statistics T0, T1, T2
    of docs/math.md M14-M16 (the terms ``estimate_components`` averages over prompts), clipped at 0.

    Parameters
    ----------
    scores : (P, M, k) sketched scores
    rewards : (P, M) rewards in [0, 1]
    """
    if scores.ndim != 3 or rewards.shape != scores.shape[:2] or scores.shape[1] < 3:
        raise ValueError(f"need scores (P, M, k) and rewards (P, M) with M >= 3; got {tuple(scores.shape)}, "
                         f"{tuple(rewards.shape)}")
    z, diag, gram = reduce_scores(rewards, scores, None)
    t0, t1, t2 = prompt_terms(z, diag, gram)
    return PromptStats(value=z.mean(1).numpy(), c2=(t1 - t0).clamp_min(0).numpy(),
                       c3=(t2 + t0).clamp_min(0).numpy(), g_norm2=t0.clamp_min(0).numpy())


def visit_history(scores: Tensor, rewards: Tensor, *, held_out: bool = False) -> PromptHistory:
    """The :class:`ugrpo.stats.history.PromptHistory` of V earlier visits of h samples to each of the P prompts, one
    step per visit (step v visits every prompt once; docs/math.md M46-M49, R9); ``held_out``: with the prompt-IS
    guard's folds (step v in fold v % 2, M76).

    Parameters
    ----------
    scores : (P, V, h, k) sketched scores of the history samples (h >= 2; h >= 3 with ``held_out``)
    rewards : (P, V, h) rewards in [0, 1]
    """
    if scores.ndim != 4 or rewards.shape != scores.shape[:3] or scores.shape[2] < 2:
        raise ValueError(f"need history scores (P, V, h, k) and rewards (P, V, h) with h >= 2; got "
                         f"{tuple(scores.shape)}, {tuple(rewards.shape)}")
    P, V, h, k = scores.shape
    hist = PromptHistory(P, held_out=held_out)
    for v in range(V):
        hist.update(np.arange(P), np.full(P, h), rewards[:, v].reshape(-1).to(DT).numpy(),
                    scores[:, v].reshape(P * h, k).to(DT).numpy())
    return hist


def history_prompt_sums(scores: Tensor, rewards: Tensor) -> dict[str, np.ndarray]:
    """The per-prompt history sums (:class:`ugrpo.stats.history.PromptHistory`'s fields, second moments included)
    of V earlier visits of h samples each: :func:`visit_history`'s."""
    return visit_history(scores, rewards).sums


def history_prompt_posterior(scores: Tensor, rewards: Tensor) -> Posterior:
    """The predictor's posterior of the P prompts (:func:`ugrpo.stats.predict.posterior`) from
    :func:`history_prompt_sums`."""
    return posterior(history_prompt_sums(scores, rewards))
