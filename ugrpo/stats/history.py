"""Per-prompt history: what an allocation rule knows before a step (docs/allocation.md, docs/math.md M38, M45).

One :class:`PromptHistory` serves the trainer (:mod:`ugrpo.train.alloc`, saved in checkpoints), the synthetic
Algorithm 1 runs (:mod:`ugrpo.envs.algorithm1`, one per seed) and the simulated history of ``ugrpo allocate``.
For each of the P prompts, sums over its earlier visits (numpy float64 arrays of shape (P,)):

* ``visits``      groups drawn for it
* ``samples``     samples drawn for it (n_x)
* ``successes``   rewards summed over those samples (s_x; rewards in [0, 1], fractional ones allowed: a reward z
  counts as z successes and 1 - z failures, the Beta posterior's usual extension to fractional counts)
* ``w2_success``, ``w2_failure``  sums of ||W||^2 weighted by z and by 1 - z (``ustat`` only: ||W||^2 from the
  step's score sketch; ``vip``/``knapsack`` measure no scores, so these stay 0)
* ``t0_sum``      sum over visits of the unbiased per-visit estimate of ||g(x)||^2 (M14, from the sketch)

:func:`history_stats` turns them into the Beta posterior on p and shrunk score moments (M38; the Bernoulli
polynomials :func:`bernoulli_stats`, the Beta moments :func:`beta_moments`), :meth:`PromptHistory.posterior` into
the certificate's empirical-Bayes posterior (M45). In the trainer every process updates the history with the GLOBAL
rewards of a step, so all compute the same allocation; it is saved in every checkpoint as JSON (``history.json``,
:meth:`PromptHistory.to_json`) and restored on ``--resume`` (:meth:`ugrpo.train.alloc.Allocator.restore`).
"""

from __future__ import annotations

import numpy as np
import torch

from ugrpo.stats.allocation import PromptStats
from ugrpo.stats.certificate import HistoryPosterior, fit_beta_prior, history_posterior
from ugrpo.stats.ragged import ragged_t0, segment_sum

__all__ = ["FIELDS", "PromptHistory", "check_unit_rewards", "history_stats", "bernoulli_stats", "beta_moments"]

FIELDS: tuple[str, ...] = ("visits", "samples", "successes", "w2_success", "w2_failure", "t0_sum")
"""the sums :func:`history_stats` reads, in its argument order"""
# second-moment sums for the certificate's posterior (stats/certificate.py, M45): sums of z ||W||^4,
# (1 - z) ||W||^4 and of the squared per-visit T0; absent from older history.json files (then they would cover
# only the steps after the resume, so the certificate holds m_z and ||g||^2 fixed for the rest of that run)
SECOND: tuple[str, ...] = ("w4_success", "w4_failure", "t0_sq")


def check_unit_rewards(rewards: np.ndarray, rule: str) -> None:
    """Rewards must lie in [0, 1] for the Beta posterior on p (M38); the error names the first bad value."""
    bad = np.flatnonzero((rewards < 0) | (rewards > 1) | ~np.isfinite(rewards))
    if bad.size:
        raise ValueError(f"allocation.rule={rule} needs rewards in [0, 1] (a Beta posterior on the success rate); "
                         f"sample {int(bad[0])} of this step has reward {float(rewards[bad[0]])!r}. Rescale the "
                         "task's rewards to [0, 1] or use --allocation.rule uniform")


class PromptHistory:
    """Sums over earlier visits of each of P prompts (module docstring); pure numpy."""

    def __init__(self, n_prompts: int) -> None:
        self.P = int(n_prompts)
        self.sums = {k: np.zeros(self.P) for k in FIELDS + SECOND}
        self.second = True  # the SECOND sums cover the whole history

    def update(self, prompts: np.ndarray, sizes: np.ndarray, rewards: np.ndarray,
               sketch: np.ndarray | None = None) -> None:
        """Add one step: prompt indices and G_b (B,), flat rewards (N,) and optional sketched scores (N, k)."""
        z = torch.as_tensor(np.asarray(rewards, dtype=np.float64))
        g = torch.as_tensor(np.asarray(sizes, dtype=np.int64))
        per_visit = {"visits": np.ones(len(g)), "samples": g.double().numpy(),
                     "successes": segment_sum(z, g).numpy()}
        if sketch is not None:
            w = torch.as_tensor(np.asarray(sketch, dtype=np.float64))
            w2 = (w * w).sum(-1)
            per_visit["w2_success"] = segment_sum(z * w2, g).numpy()
            per_visit["w2_failure"] = segment_sum((1 - z) * w2, g).numpy()
            t0 = ragged_t0(z, w, g).numpy()
            per_visit["t0_sum"], per_visit["t0_sq"] = t0, t0**2
            per_visit["w4_success"] = segment_sum(z * w2**2, g).numpy()
            per_visit["w4_failure"] = segment_sum((1 - z) * w2**2, g).numpy()
        for k, v in per_visit.items():
            np.add.at(self.sums[k], np.asarray(prompts, dtype=np.int64), v)  # a prompt drawn twice counts twice

    def stats(self, prompts: np.ndarray, *, prior_a: float, prior_b: float, shrink: float,
              scores: bool) -> PromptStats:
        """Predicted (p, c2, c3) of the drawn prompts (M38).

        ``scores=False`` (``vip``, ``knapsack``: no score sketch) assumes ||W||^2 = 1 for every sample and
        ||g(x)||^2 = 0, so c2 and c3 are the posterior E p(1-p): the moments the certificate then uses.
        """
        s = self.sums
        if scores:
            w1, w0, t0 = s["w2_success"], s["w2_failure"], s["t0_sum"]
        else:
            w1, w0, t0 = s["successes"], s["samples"] - s["successes"], np.zeros(self.P)
        st = history_stats(s["visits"], s["samples"], s["successes"], w1, w0, t0, prior_a=prior_a, prior_b=prior_b,
                           shrink=shrink)
        return st.take(np.asarray(prompts, dtype=np.int64))

    def posterior(self, prompts: np.ndarray, *, scores: bool) -> HistoryPosterior:
        """The certificate's empirical-Bayes posterior of the drawn prompts (M45; ``scores=False``: ||W||^2 = 1
        and ||g||^2 = 0, held fixed, as in :meth:`stats`)."""
        s = self.sums
        a, b = fit_beta_prior(s["successes"], s["samples"])
        if scores:
            more = {k: s[k] for k in ("w2_success", "w2_failure", "t0_sum") + (SECOND if self.second else ())}
        else:
            more = {"w2_success": s["successes"], "w2_failure": s["samples"] - s["successes"],
                    "t0_sum": np.zeros(self.P)}
        return history_posterior(np.asarray(prompts, dtype=np.int64), s["visits"], s["samples"], s["successes"],
                                 **more, prior_a=a, prior_b=b)

    def reward_variance(self, prompts: np.ndarray, *, prior_a: float, prior_b: float) -> np.ndarray:
        """(B,) posterior mean E[p(1-p)] of the drawn prompts under Beta(a + s, b + n - s) (M38)."""
        idx = np.asarray(prompts, dtype=np.int64)
        s, n = self.sums["successes"][idx], self.sums["samples"][idx]
        e1, e2, _ = beta_moments(prior_a + s, prior_b + n - s)
        return e1 - e2

    def to_json(self) -> dict:
        """A JSON-safe dict (lists of floats); float64 round-trips exactly through JSON's repr."""
        return {"n_prompts": self.P, "second_moments": self.second, **{k: v.tolist() for k, v in self.sums.items()}}

    @classmethod
    def from_json(cls, data: dict, n_prompts: int, where: str) -> PromptHistory:
        """The inverse of :meth:`to_json`; a ValueError naming ``where`` if it does not fit ``n_prompts`` (the file
        is read by the trainer, :meth:`ugrpo.train.alloc.Allocator.restore`)."""
        saved = data.get("n_prompts") if isinstance(data, dict) else None
        if saved != n_prompts:
            raise ValueError(f"{where}: the allocation history is for {saved} train prompts but this run has "
                             f"{n_prompts}; resume with the same task settings")
        h = cls(n_prompts)
        h.second = bool(data.get("second_moments", True)) and all(k in data for k in SECOND)
        for k in FIELDS + SECOND:
            if k in SECOND and k not in data:
                continue
            v = np.asarray(data.get(k, []), dtype=np.float64)
            if v.shape != (n_prompts,) or not np.isfinite(v).all():
                raise ValueError(f"{where}: field {k!r} of the allocation history is not {n_prompts} finite numbers")
            h.sums[k] = v
        return h


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


def history_stats(visits: np.ndarray, samples: np.ndarray, successes: np.ndarray, w2_success: np.ndarray,
                  w2_failure: np.ndarray, t0_sum: np.ndarray, *, prior_a: float = 1.0, prior_b: float = 1.0,
                  shrink: float = 4.0) -> PromptStats:
    """Per-prompt moments predicted from earlier visits (docs/math.md M38); every argument is (P,).

    Parameters
    ----------
    visits : visits of each prompt (groups drawn for it)
    samples : samples drawn for it over all visits (n_x)
    successes : rewards summed over those samples (s_x; Bernoulli rewards)
    w2_success, w2_failure : sums of ||W||^2 over its samples with Z = 1 and with Z = 0
    t0_sum : sum over its visits of the unbiased per-visit estimate of ||g(x)||^2 (M14)
    prior_a, prior_b : the Beta prior on p (posterior Beta(a + s_x, b + n_x - s_x))
    shrink : pseudo-count kappa pulling m_z and ||g(x)||^2 toward the pooled values of all prompts (with no
        samples of reward z anywhere, m_z is pooled over both rewards; with no history at all it is 1, so every
        prompt gets the same positive c2, c3 and the allocation is as even as the budget allows)

    Returns
    -------
    PromptStats with the posterior means of p, c2(x), c3(x) and the shrunk ||g(x)||^2.

    Examples
    --------
    >>> z = np.zeros(2)
    >>> st = history_stats(z, z, z, z, z, z)  # no history: the prior, E p(1-p) = 1/6 > 0
    >>> st.value.tolist(), bool(st.c2[0] == st.c2[1] > 0)
    ([0.5, 0.5], True)
    """
    if min(prior_a, prior_b) <= 0 or shrink < 0:
        raise ValueError(f"the Beta prior needs a, b > 0 and shrink >= 0; got {prior_a}, {prior_b}, {shrink}")
    k1 = np.asarray(successes, dtype=np.float64)
    k0 = np.asarray(samples, dtype=np.float64) - k1
    s1, s0, t0s = (np.asarray(v, dtype=np.float64) for v in (w2_success, w2_failure, t0_sum))
    visits = np.asarray(visits, dtype=np.float64)
    n_all = k1.sum() + k0.sum()
    pool = (s1.sum() + s0.sum()) / n_all if n_all > 0 else 1.0  # no history at all: any common scale
    pool1 = s1.sum() / k1.sum() if k1.sum() > 0 else pool
    pool0 = s0.sum() / k0.sum() if k0.sum() > 0 else pool
    pool_g = max(t0s.sum() / max(visits.sum(), 1.0), 0.0)
    kap = shrink
    if kap > 0:
        m1, m0 = (s1 + kap * pool1) / (k1 + kap), (s0 + kap * pool0) / (k0 + kap)
        g2 = (t0s + kap * pool_g) / (visits + kap)
    else:
        m1 = np.where(k1 > 0, s1 / np.maximum(k1, 1), pool1)
        m0 = np.where(k0 > 0, s0 / np.maximum(k0, 1), pool0)
        g2 = np.where(visits > 0, t0s / np.maximum(visits, 1), pool_g)
    return bernoulli_stats(beta_moments(prior_a + k1, prior_b + k0), m1, m0, np.clip(g2, 0.0, None))


def beta_moments(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(E p, E p^2, E p^3) of Beta(a, b); E p(1-p) = E p - E p^2 (M38).

    >>> [float(m[0]) for m in beta_moments(np.array([1.0]), np.array([1.0]))]  # uniform: 1/2, 1/3, 1/4
    [0.5, 0.3333333333333333, 0.25]
    """
    e1 = a / (a + b)
    e2 = e1 * (a + 1) / (a + b + 1)
    e3 = e2 * (a + 2) / (a + b + 2)
    return e1, e2, e3
