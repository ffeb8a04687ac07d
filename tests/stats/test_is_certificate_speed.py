"""The fast posteriors and posterior draws behind the certificates (docs/math.md M49, M59, M60, M89) against the
implementation they replaced: the same random stream gives bit-identical posteriors, draws and certificates, so the
measured calibration holds."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

import ugrpo.stats.predict_posterior as predict_posterior
from ugrpo.envs.generate import random_env
from ugrpo.stats.history import PromptHistory
from ugrpo.stats.is_certificate import is_certificate
from ugrpo.stats.population import population_posteriors
from ugrpo.stats.predict import _covariate, draw, draw_mixture, posterior_means
from ugrpo.stats.predict_hyper import _log_means
from ugrpo.stats.predict_posterior import _divisor, _moment, _normal_update, _score_loglik
from ugrpo.stats.prior_p import posterior_nodes
from ugrpo.stats.prompt_is import is_law


def _reference_draw_p(rng, pv, pw, D):
    """The draws of p as first built (a Python searchsorted per prompt): the reference, not the package's code."""
    cdf = np.cumsum(pw, -1)
    u = rng.uniform(size=(D, len(pw))) * cdf[:, -1]
    k = np.stack([np.searchsorted(cdf[b], u[:, b], side="right") for b in range(len(pw))], 1)
    return pv[np.arange(len(pv))[None], np.minimum(k, pv.shape[1] - 1)]


def _reference_draw_rows(rng, p, logm, slope, logm_cov, eta, eta_sd, scores, c_range):
    """The score draws as first built (every parameter broadcast to (D, B), the Cholesky factor per entry)."""
    from scipy.special import ndtr, ndtri

    a = eta
    q = p * (1 - p)
    if not scores:
        return p, q, q, np.zeros_like(q)
    l00 = np.sqrt(np.maximum(logm_cov[..., 0, 0], 0.0))
    l10 = np.where(l00 > 0, logm_cov[..., 1, 0] / np.where(l00 > 0, l00, 1.0), 0.0)
    l11 = np.sqrt(np.maximum(logm_cov[..., 1, 1] - l10**2, 0.0))
    u0, u1 = rng.standard_normal(a.shape), rng.standard_normal(a.shape)
    at = logm + slope * _covariate(p, c_range)[..., None]
    m1 = np.exp(at[..., 0] + l00 * u0)
    m0 = np.exp(at[..., 1] + l10 * u0 + l11 * u1)
    e = q * ((1 - p) * m1 + p * m0)
    hi = 1.0 / np.maximum(q, 1e-300)
    safe = np.where(eta_sd > 0, eta_sd, 1.0)
    lo, up = ndtr(-eta / safe), ndtr((hi - eta) / safe)
    u = lo + (up - lo) * rng.uniform(size=a.shape)
    x = np.where(eta_sd > 0, eta + safe * ndtri(np.clip(u, 1e-300, 1 - 1e-16)), eta)
    g2 = np.clip(x, 0.0, hi) * q * e
    return p, np.clip(e - g2, 0.0, None), q * (p * m1 + (1 - p) * m0) + g2, g2


def _reference_draw(post, rng, draws, *, with_g2=False):
    """:func:`ugrpo.stats.predict.draw` as first built (a (D, n_unseen, K) cumulative sum per call, the unseen
    prompts' parameters copied into (D, B) arrays)."""
    D = int(draws)
    keys = ("logm", "slope", "logm_cov", "eta", "eta_sd")
    args = [np.broadcast_to(getattr(post, k), (D,) + getattr(post, k).shape) for k in keys]
    p = _reference_draw_p(rng, post.pv, post.pw, D)
    un = np.flatnonzero(~post.seen)
    if len(un):
        pool = post.pool
        donor = rng.integers(len(pool), size=(D, len(un)))
        args = [x.copy() for x in args]
        for x, k in zip(args, keys):
            x[:, un] = getattr(pool, k)[donor]
        cdf = np.cumsum(pool.pw[donor], -1)
        k = (rng.uniform(size=donor.shape)[..., None] * cdf[..., -1:] > cdf).sum(-1)
        p[:, un] = pool.pv[donor, np.minimum(k, pool.pv.shape[1] - 1)]
    out = _reference_draw_rows(rng, p, *args, scores=post.hyper.scores, c_range=post.hyper.c_range)
    return out if with_g2 else out[:3]


def _history(P: int, visited: int, seed: int) -> PromptHistory:
    """The first ``visited`` of P prompts of a linear-softmax instance visited 1-3 times with 4 samples (the rest
    never: the unseen-prompt path of the draws)."""
    env = random_env("linear_softmax", n_prompts=P, n_actions=5, dim=4, logit_scale=1.0, extreme_fraction=0.5,
                     seed=seed)
    gen = torch.Generator().manual_seed(seed)
    p, W = env.probs(), env.score_table()
    h = PromptHistory(P)
    if not visited:
        return h
    prompts = torch.cat([torch.arange(visited)] + [torch.arange(visited // (r + 2)) for r in range(2)])
    act = torch.multinomial(p[prompts], 4, replacement=True, generator=gen)
    z = torch.bernoulli(env.reward_mean[prompts.unsqueeze(1), act], generator=gen)
    h.update(prompts.numpy(), np.full(len(prompts), 4), z.reshape(-1).numpy(),
             W[prompts.unsqueeze(1), act].reshape(len(prompts) * 4, -1).numpy())
    return h


@pytest.fixture(scope="module")
def cases():
    """Posteriors: every prompt visited, most never visited, with and without scores, nothing visited at all."""
    out = {}
    for name, (P, visited, scores) in {"all": (40, 40, True), "few": (120, 25, True), "noscores": (120, 25, False),
                                       "none": (30, 0, True)}.items():
        h = _history(P, visited, seed=len(out))
        out[name] = (h, h.posterior(None, scores=scores))
    return out


@pytest.mark.parametrize("name", ["all", "few", "noscores", "none"])
def test_draws_are_bit_identical_to_the_reference(cases, name):
    post = cases[name][1]
    for seed, D in [(0, 1), (1, 7), (2, 300)]:
        got = draw(post, np.random.default_rng(seed), D, with_g2=True)
        ref = _reference_draw(post, np.random.default_rng(seed), D, with_g2=True)
        assert all(np.array_equal(a, b) for a, b in zip(got, ref, strict=True))


def test_the_binary_search_is_searchsorted_on_ties_and_ends():
    """Rows with zero weights (flat CDF stretches: ties) and uniforms at 0: both sides agree with searchsorted."""
    from ugrpo.stats.predict import _count_below

    rng = np.random.default_rng(0)
    for K in (1, 2, 7, 8, 81):
        w = rng.uniform(size=(50, K)) * (rng.uniform(size=(50, K)) < 0.5)
        cdf = np.cumsum(w, -1)
        rows = rng.integers(50, size=(9, 40))
        x = np.concatenate([np.zeros((1, 40)), cdf[rows[1:3], rng.integers(K, size=(2, 40))],
                            rng.uniform(size=(6, 40)) * cdf[rows[3:], -1]])
        for strict, side in ((True, "left"), (False, "right")):
            ref = np.vectorize(lambda r, v, s=side, c=cdf: np.searchsorted(c[r], v, side=s))(rows, x)
            assert np.array_equal(_count_below(cdf, rows, x, strict=strict), ref)


def test_the_certificate_over_population_draws_is_bit_identical_to_the_reference(cases, monkeypatch):
    """The certificate the trainer computes (M89: population posteriors, chunked draws) on the unseen-heavy case,
    once with the package's draws and once with the reference's: the same numbers exactly."""
    import ugrpo.stats.predict as predict

    h, post = cases["few"]
    law = is_law("ustat-is", posterior_means(post), 8, 64)
    for seed in (0, 1):
        pops = population_posteriors(h.sums, np.arange(len(post)), post.hyper, rng=np.random.default_rng(seed),
                                     replicates=5)
        mix = draw_mixture(pops, np.random.default_rng(seed), 37, with_g2=True)
        got = is_certificate(post, law, 8, population=pops, draws=300, seed=seed, widen=1.7)
        monkeypatch.setattr(predict, "draw", _reference_draw)
        ref_mix = draw_mixture(pops, np.random.default_rng(seed), 37, with_g2=True)
        ref = is_certificate(post, law, 8, population=pops, draws=300, seed=seed, widen=1.7)
        monkeypatch.undo()
        assert all(np.array_equal(a, b) for a, b in zip(mix, ref_mix, strict=True))
        assert got == ref


def _reference_parts(s, h):
    """:func:`ugrpo.stats.predict_posterior._parts` as first built (every row computed, none shared)."""
    y, v, _ = _log_means(s, h.scores, h.cv2)
    pv, pw = posterior_nodes(h.p_prior, s["successes"], s["samples"])
    if h.scores and h.beta != 0:
        lw = np.log(np.maximum(pw, 1e-300)) + _score_loglik(h, y, v, pv)
        pw = np.exp(lw - lw.max(1, keepdims=True))
        pw = pw / pw.sum(1, keepdims=True)
    logm, logm_cov, slope = _normal_update(h.mu, h.cov, y, v, h.beta)
    parts = {"pv": pv, "pw": pw, "logm": logm, "logm_cov": logm_cov, "slope": slope, "c_range": h.c_range}
    div, cv2 = _divisor(parts)
    parts.update(div=div, div_cv2=cv2, u_hat=_moment(parts, 1, 0, 1, 0))
    return parts


def _same(a, b) -> bool:
    """Every array of two posteriors (their pools and fitted population models included) equal exactly."""
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if dataclasses.is_dataclass(x):
            if not _same(x, y):
                return False
        elif isinstance(x, np.ndarray) and not np.array_equal(x, y):
            return False
    return True


@pytest.mark.parametrize("name", ["all", "few", "noscores", "none"])
def test_posteriors_sharing_equal_rows_are_bit_identical_to_the_reference(cases, name, monkeypatch):
    """posterior() (its fit included) and population_posteriors() (donors repeated among the prompts, most prompts
    never visited) with rows of equal counts computed once equal the row-by-row reference exactly."""
    h = cases[name][0]
    scores = name != "noscores"
    got = h.posterior(None, scores=scores)
    pops = population_posteriors(h.sums, np.arange(len(got)), got.hyper, rng=np.random.default_rng(4), replicates=3)
    monkeypatch.setattr(predict_posterior, "_parts", _reference_parts)
    ref = h.posterior(None, scores=scores)
    ref_pops = population_posteriors(h.sums, np.arange(len(got)), got.hyper, rng=np.random.default_rng(4),
                                     replicates=3)
    monkeypatch.undo()
    assert _same(got, ref)
    assert all(_same(a, b) for a, b in zip(pops, ref_pops, strict=True))
