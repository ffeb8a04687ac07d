"""Per-prompt history: what an allocation rule knows before a step (docs/allocation.md, docs/math.md M38, M46-M49).

One :class:`PromptHistory` serves the trainer (:mod:`ugrpo.train.alloc`, saved in checkpoints), the synthetic
Algorithm 1 runs (:mod:`ugrpo.envs.algorithm1`, one per seed) and the simulated history of ``ugrpo allocate``.
For each of the P prompts, sums over its earlier visits (numpy float64 arrays of shape (P,)):

* ``visits``      groups drawn for it
* ``samples``     samples drawn for it (n_x)
* ``successes``   rewards summed over those samples (s_x; rewards in [0, 1], fractional ones allowed: a reward z
  counts as z successes and 1 - z failures, the binomial likelihood's usual extension to fractional counts)
* ``w2_success``, ``w2_failure``  sums of ||W||^2 weighted by z and by 1 - z (``ustat`` only; ``vip``/``knapsack``
  measure no scores, so these stay 0)
* ``t0_sum``      sum over visits of the unbiased per-visit estimate of ||g(x)||^2 (M14)

With ``held_out=True`` (the prompt-IS rules' guard, docs/math.md M75-M78) the history also keeps every one of these
sums twice more, split by the parity of the step (``folds[0]``: steps 0, 2, 4, ...; ``folds[1]``: steps 1, 3, ...),
and per fold the held-out sums :data:`HELD_OUT` of the per-visit U-statistics T0, T1, T2 (M14-M16), plain and
weighted by the visit's importance weight w = 1/(P q(x)) of the law that drew it (1 for a uniform draw), with their
weighted second moments: what :mod:`ugrpo.stats.is_guard` needs to judge a law fitted on one fold by the other.

A step's scores come as :class:`ScoreNorms` (||W_n||^2 per sample and ||sum_{n in b} Z_n W_n||^2 per group: all the
sums need, M72; the trainer's exact output-projection statistics, :mod:`ugrpo.lm.output_scores`) or as score vectors
(N, k) (exact, or sketched with unbiased inner products), from which the same two are taken.

:meth:`PromptHistory.posterior` and :meth:`PromptHistory.stats` hand them to the one predictor,
:mod:`ugrpo.stats.predict` (a hierarchical model fitted to the whole history, docs/math.md M46-M49): the posterior
every rule, the safe rule and the certificate use, and its means. :func:`bernoulli_stats` is M38's map from
(p, m_1, m_0, ||g||^2) to (p, c2, c3), :func:`beta_moments` the Beta moments. In the trainer every process
updates the history with the GLOBAL rewards of a step, so all compute the same allocation; it is saved in every
checkpoint as JSON (``history.json``, :meth:`PromptHistory.to_json`) and restored on ``--resume``
(:meth:`ugrpo.train.alloc.Allocator.restore`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ugrpo.stats.allocation import PromptStats
from ugrpo.stats.predict import REQUIRED, SECOND_MOMENTS, Posterior, posterior, posterior_means
from ugrpo.stats.ragged import ragged_t0_from_norms, ragged_terms_from_norms, segment_sum

__all__ = ["FIELDS", "SECOND", "HELD_OUT", "PromptHistory", "ScoreNorms", "check_unit_rewards", "bernoulli_stats",
           "beta_moments"]

FIELDS: tuple[str, ...] = REQUIRED
"""the first-moment sums every prediction reads"""
# second-moment sums (the within-prompt spreads of the predictor, M47-M48): sums of z ||W||^4, (1 - z) ||W||^4
# and of the squared per-visit T0; absent from older history.json files (then they would cover only the steps
# after the resume, so the predictor uses its defaults for the spreads for the rest of that run)
SECOND: tuple[str, ...] = SECOND_MOMENTS
HELD_OUT: tuple[str, ...] = ("t1_sum", "t2_sum", "ht_t0", "ht_t1", "ht_t2", "ht_00", "ht_01", "ht_02", "ht_11",
                             "ht_12", "ht_22")
"""per fold (``held_out=True``): sums over visits of T1 and T2 (T0's is ``t0_sum``), of w T_i and of w^2 T_i T_j
(i <= j), w = 1/(P q(x)) the visit's importance weight (docs/math.md M76)"""


def check_unit_rewards(rewards: np.ndarray, rule: str) -> None:
    """Rewards must lie in [0, 1] for the Beta posterior on p (M38); the error names the first bad value."""
    bad = np.flatnonzero((rewards < 0) | (rewards > 1) | ~np.isfinite(rewards))
    if bad.size:
        raise ValueError(f"allocation.rule={rule} needs rewards in [0, 1] (a Beta posterior on the success rate); "
                         f"sample {int(bad[0])} of this step has reward {float(rewards[bad[0]])!r}. Rescale the "
                         "task's rewards to [0, 1] or use --allocation.rule uniform")


@dataclass(frozen=True)
class ScoreNorms:
    """What the history keeps of one step's scores (docs/math.md M72): every sum of :class:`PromptHistory` is a
    function of these two and the rewards.

    Attributes
    ----------
    w2 : (N,) ||W_n||^2 of every sample, prompt-major
    zw2 : (B,) ||sum_{n in b} Z_n W_n||^2 of every group
    """

    w2: np.ndarray
    zw2: np.ndarray

    def __post_init__(self) -> None:
        for name in ("w2", "zw2"):
            v = np.asarray(getattr(self, name), dtype=np.float64)
            if v.ndim != 1:
                raise ValueError(f"ScoreNorms.{name} must be 1-d, got shape {v.shape}")
            if not np.isfinite(v).all() or (v < 0).any():
                i = int(np.flatnonzero(~np.isfinite(v) | (v < 0))[0])
                raise ValueError(f"ScoreNorms.{name}[{i}] = {float(v[i])!r}: squared norms must be finite and >= 0 "
                                 "(a non-finite forward pass?)")
            object.__setattr__(self, name, v)

    @classmethod
    def from_scores(cls, rewards: np.ndarray, scores: np.ndarray, sizes: np.ndarray) -> ScoreNorms:
        """From score vectors (N, k) (exact, or sketched: then both are unbiased, M19) in prompt-major order."""
        z = torch.as_tensor(np.asarray(rewards, dtype=np.float64))
        w = torch.as_tensor(np.asarray(scores, dtype=np.float64))
        zw = segment_sum(w * z.unsqueeze(1), torch.as_tensor(np.asarray(sizes, dtype=np.int64)))  # (B, k)
        return cls((w * w).sum(-1).numpy(), (zw * zw).sum(-1).numpy())

    @classmethod
    def concat(cls, parts: Sequence[ScoreNorms]) -> ScoreNorms:
        """The parts of several processes (each holding whole groups) in global prompt order."""
        return cls(np.concatenate([p.w2 for p in parts]), np.concatenate([p.zw2 for p in parts]))


class PromptHistory:
    """Sums over earlier visits of each of P prompts (module docstring); pure numpy."""

    def __init__(self, n_prompts: int, *, held_out: bool = False) -> None:
        self.P = int(n_prompts)
        self.sums = {k: np.zeros(self.P) for k in FIELDS + SECOND}
        self.second = True  # the SECOND sums cover the whole history
        self.steps = 0  # updates so far; step t goes to fold t % 2
        self.folds = [{k: np.zeros(self.P) for k in FIELDS + SECOND + HELD_OUT} for _ in range(2)] \
            if held_out else None

    def update(self, prompts: np.ndarray, sizes: np.ndarray, rewards: np.ndarray,
               scores: ScoreNorms | np.ndarray | None = None, weights: np.ndarray | None = None) -> None:
        """Add one step: prompt indices and G_b (B,), flat rewards (N,) and optionally the step's scores, as
        :class:`ScoreNorms` or as score vectors (N, k) (exact or sketched). ``weights`` (B,): the importance weights
        1/(P q(x_b)) of the law the prompts were drawn from (prompt IS, M52; None: a uniform draw, all 1); only the
        held-out sums use them."""
        z = torch.as_tensor(np.asarray(rewards, dtype=np.float64))
        g = torch.as_tensor(np.asarray(sizes, dtype=np.int64))
        per_visit = {"visits": np.ones(len(g)), "samples": g.double().numpy(),
                     "successes": segment_sum(z, g).numpy()}
        norms = None
        if scores is not None:
            norms = scores if isinstance(scores, ScoreNorms) else ScoreNorms.from_scores(rewards, scores, sizes)
            if norms.w2.shape != z.shape or norms.zw2.shape != g.shape:
                raise ValueError(f"the step's score norms have {norms.w2.shape[0]} samples and {norms.zw2.shape[0]} "
                                 f"groups but the step has {z.shape[0]} and {g.shape[0]}")
            w2 = torch.as_tensor(norms.w2)
            per_visit["w2_success"] = segment_sum(z * w2, g).numpy()
            per_visit["w2_failure"] = segment_sum((1 - z) * w2, g).numpy()
            t0 = ragged_t0_from_norms(z, w2, torch.as_tensor(norms.zw2), g).numpy()
            per_visit["t0_sum"], per_visit["t0_sq"] = t0, t0**2
            per_visit["w4_success"] = segment_sum(z * w2**2, g).numpy()
            per_visit["w4_failure"] = segment_sum((1 - z) * w2**2, g).numpy()
        idx = np.asarray(prompts, dtype=np.int64)
        for k, v in per_visit.items():
            np.add.at(self.sums[k], idx, v)  # a prompt drawn twice counts twice
        if self.folds is not None:
            fold = self.folds[self.steps % 2]
            for k, v in {**per_visit, **_held_out_terms(z, g, norms, weights)}.items():
                np.add.at(fold[k], idx, v)
        self.steps += 1

    def sums_for_prediction(self) -> dict[str, np.ndarray]:
        """The sums the predictor reads (the second-moment ones only when they cover the whole history)."""
        return {k: v for k, v in self.sums.items() if k in FIELDS or (self.second and k in SECOND)}

    def posterior(self, prompts: np.ndarray | None = None, *, scores: bool) -> Posterior:
        """The predictor's posterior of the drawn prompts (docs/math.md M46-M49); ``scores=False`` (``vip``,
        ``knapsack``: no scores measured) holds ||W||^2 = 1 and ||g||^2 = 0."""
        return posterior(self.sums_for_prediction(), prompts, scores=scores)

    def stats(self, prompts: np.ndarray | None = None, *, scores: bool) -> PromptStats:
        """Posterior means of (p, c2, c3) of the drawn prompts (M49): what every rule optimises."""
        return posterior_means(self.posterior(prompts, scores=scores))

    def reward_variance(self, prompts: np.ndarray) -> np.ndarray:
        """(B,) posterior mean E[p(1-p)] of the drawn prompts (M46)."""
        return self.stats(prompts, scores=False).c2

    def to_json(self) -> dict:
        """A JSON-safe dict (lists of floats); float64 round-trips exactly through JSON's repr."""
        out = {"n_prompts": self.P, "second_moments": self.second, "steps": self.steps,
               **{k: v.tolist() for k, v in self.sums.items()}}
        if self.folds is not None:
            out["folds"] = [{k: v.tolist() for k, v in f.items()} for f in self.folds]
        return out

    @classmethod
    def from_json(cls, data: dict, n_prompts: int, where: str, *, held_out: bool = False) -> PromptHistory:
        """The inverse of :meth:`to_json`; a ValueError naming ``where`` if it does not fit ``n_prompts`` (the file
        is read by the trainer, :meth:`ugrpo.train.alloc.Allocator.restore`) or, with ``held_out``, has no folds."""
        saved = data.get("n_prompts") if isinstance(data, dict) else None
        if saved != n_prompts:
            raise ValueError(f"{where}: the allocation history is for {saved} train prompts but this run has "
                             f"{n_prompts}; resume with the same task settings")
        h = cls(n_prompts, held_out=held_out)
        h.second = bool(data.get("second_moments", True)) and all(k in data for k in SECOND)
        h.steps = int(data.get("steps", 0))
        # (target, source, fields, name prefix): the sums (SECOND optional there), then each fold (all required)
        parts = [(h.sums, data, FIELDS + tuple(k for k in SECOND if k in data), "")]
        if held_out:
            folds = data.get("folds")
            if not isinstance(folds, list) or len(folds) != 2 or not all(isinstance(f, dict) for f in folds):
                raise ValueError(f"{where}: the allocation history has no held-out folds, which the prompt-IS "
                                 "guard needs (it was written by an older version or without the guard); start a new "
                                 "run, or set allocation.is_guard false")
            parts += [(h.folds[i], f, FIELDS + SECOND + HELD_OUT, f"folds[{i}].") for i, f in enumerate(folds)]
        for target, src, fields, name in parts:
            for k in fields:
                v = np.asarray(src.get(k, []), dtype=np.float64)
                if v.shape != (n_prompts,) or not np.isfinite(v).all():
                    raise ValueError(f"{where}: field {name}{k!r} of the allocation history is not {n_prompts} "
                                     "finite numbers")
                target[k] = v
        return h


def _held_out_terms(z: torch.Tensor, g: torch.Tensor, norms: ScoreNorms | None,
                    weights: np.ndarray | None) -> dict[str, np.ndarray]:
    """Per visit (B,): T1, T2 and the importance-weighted w T_i, w^2 T_i T_j of :data:`HELD_OUT` (M76)."""
    if norms is None:
        raise ValueError("the held-out sums of the prompt-IS guard need the step's score norms (scores=None)")
    if int(g.min()) < 3:
        b = int((g < 3).nonzero()[0])
        raise ValueError(f"the prompt-IS guard's held-out check needs at least 3 samples per visit (the U-statistics "
                         f"T1, T2 of M15-M16), but prompt {b} of this step has {int(g[b])}; raise allocation.g_min to "
                         "3 or set allocation.is_guard false")
    t0, t1, t2 = (t.numpy() for t in ragged_terms_from_norms(z, torch.as_tensor(norms.w2),
                                                             torch.as_tensor(norms.zw2), g))
    w = np.ones(len(t0)) if weights is None else np.asarray(weights, dtype=np.float64)
    if w.shape != t0.shape or not np.isfinite(w).all() or (w <= 0).any():
        raise ValueError(f"weights must be {len(t0)} finite positive importance weights 1/(P q(x)), got {weights!r}")
    t = (t0, t1, t2)
    out = {"t1_sum": t1, "t2_sum": t2, **{f"ht_t{i}": w * t[i] for i in range(3)}}
    out.update({f"ht_{i}{j}": w * w * t[i] * t[j] for i in range(3) for j in range(i, 3)})
    return out


def bernoulli_stats(p_moments: tuple[np.ndarray, np.ndarray, np.ndarray], m1: np.ndarray, m0: np.ndarray,
                    g2: np.ndarray) -> PromptStats:
    """Per-prompt (p, c2, c3) for Bernoulli rewards from E p^k (k = 1, 2, 3) and E[||W||^2 | Z = z] (M38).

    With m_z = E[||W||^2 | Z = z]: E||W (Z - p)||^2 = p(1-p)^2 m1 + (1-p) p^2 m0 and
    E||W||^2 Var(Z) = (p m1 + (1-p) m0) p(1-p); both are polynomials in p, so their posterior means need only
    E p, E p^2, E p^3. c2 = E||W(Z-p)||^2 - ||g||^2 (clipped at 0), c3 = E||W||^2 Var(Z) + ||g||^2.
    """
    e1, e2, e3 = p_moments
    e_w2v2 = m1 * (e1 - 2 * e2 + e3) + m0 * (e2 - e3)
    m2_var = m1 * (e2 - e3) + m0 * (e1 - 2 * e2 + e3)
    return PromptStats(value=e1, c2=np.clip(e_w2v2 - g2, 0.0, None), c3=m2_var + g2, g_norm2=g2)


def beta_moments(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(E p, E p^2, E p^3) of Beta(a, b); E p(1-p) = E p - E p^2 (M38's polynomials at a Beta posterior).

    >>> [float(m[0]) for m in beta_moments(np.array([1.0]), np.array([1.0]))]  # uniform: 1/2, 1/3, 1/4
    [0.5, 0.3333333333333333, 0.25]
    """
    e1 = a / (a + b)
    e2 = e1 * (a + 1) / (a + b + 1)
    e3 = e2 * (a + 2) / (a + b + 2)
    return e1, e2, e3
