"""Per-prompt history of a training run: what an allocation rule knows before a step (docs/allocation.md, M38).

For each of the P train prompts, sums over its earlier visits (numpy float64 arrays of shape (P,)):

* ``visits``      groups drawn for it
* ``samples``     samples drawn for it (n_x)
* ``successes``   rewards summed over those samples (s_x; rewards in [0, 1], fractional ones allowed: a reward z
  counts as z successes and 1 - z failures, the Beta posterior's usual extension to fractional counts)
* ``w2_success``, ``w2_failure``  sums of ||W||^2 weighted by z and by 1 - z (``ustat`` only: ||W||^2 from the
  step's score sketch; ``vip``/``knapsack`` measure no scores, so these stay 0)
* ``t0_sum``      sum over visits of the unbiased per-visit estimate of ||g(x)||^2 (M14, from the sketch)

:func:`ugrpo.stats.allocation.history_stats` turns them into the Beta posterior on p and shrunk score moments.
Every process updates the history with the GLOBAL rewards of a step, so all compute the same allocation. The
history is saved in every checkpoint as JSON (``history.json``) and restored on ``--resume``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from ugrpo.stats.allocation import PromptStats, beta_moments, history_stats
from ugrpo.stats.certificate import HistoryPosterior, fit_beta_prior, history_posterior
from ugrpo.stats.ragged import ragged_t0, segment_sum

__all__ = ["PromptHistory", "check_unit_rewards"]

FIELDS: tuple[str, ...] = ("visits", "samples", "successes", "w2_success", "w2_failure", "t0_sum")
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
    def from_checkpoint(cls, ckpt, n_prompts: int) -> PromptHistory:
        """The history saved in checkpoint folder ``ckpt`` as ``history.json`` (checksummed; ResumeError if absent)."""
        from ugrpo.errors import ResumeError
        from ugrpo.train.checkpoint import read_extra
        from ugrpo.train.resume import check_history_json

        data = read_extra(ckpt, "history.json")
        if data is None:
            raise ResumeError(f"--resume: checkpoint {ckpt} has no history.json, but allocation.rule needs the "
                              "per-prompt history; start a new run with a new --out")
        check_history_json(data, n_prompts, Path(ckpt) / "history.json", FIELDS, SECOND)  # names file, field, fix
        return cls.from_json(data, n_prompts, f"{ckpt}/history.json")

    @classmethod
    def from_json(cls, data: dict, n_prompts: int, where: str) -> PromptHistory:
        """The inverse of :meth:`to_json`; a ValueError naming ``where`` if it does not fit ``n_prompts``."""
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
