"""The fast posteriors and posterior draws behind the certificates (docs/math.md M49, M59, M60, M89) against the
implementation they replaced: the same random stream gives bit-identical posteriors, draws and certificates, so the
measured calibration holds."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from tests.stats._draw_reference import reference_code, reference_draw
from ugrpo.envs.generate import random_env
from ugrpo.stats.history import PromptHistory
from ugrpo.stats.is_certificate import is_certificate
from ugrpo.stats.population import population_posteriors
from ugrpo.stats.predict import _count_below, draw, draw_mixture, posterior_means
from ugrpo.stats.prompt_is import is_law


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
        ref = reference_draw(post, np.random.default_rng(seed), D, with_g2=True)
        assert all(np.array_equal(a, b) for a, b in zip(got, ref, strict=True))


def test_the_binary_search_is_searchsorted_on_ties_and_ends():
    """Rows with zero weights (flat CDF stretches: ties) and uniforms at 0: both sides agree with searchsorted."""
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


def test_the_certificate_over_population_draws_is_bit_identical_to_the_reference(cases):
    """The certificate the trainer computes (M89: population posteriors, chunked draws) on the unseen-heavy case,
    once with the package's posteriors and draws and once with the reference's: the same numbers exactly."""
    h, post = cases["few"]
    law = is_law("ustat-is", posterior_means(post), 8, 64)
    for seed in (0, 1):
        pops = population_posteriors(h.sums, np.arange(len(post)), post.hyper, rng=np.random.default_rng(seed),
                                     replicates=5)
        mix = draw_mixture(pops, np.random.default_rng(seed), 37, with_g2=True)
        got = is_certificate(post, law, 8, population=pops, draws=300, seed=seed, widen=1.7)
        with reference_code():
            ref_pops = population_posteriors(h.sums, np.arange(len(post)), post.hyper,
                                             rng=np.random.default_rng(seed), replicates=5)
            ref_mix = draw_mixture(ref_pops, np.random.default_rng(seed), 37, with_g2=True)
            ref = is_certificate(post, law, 8, population=ref_pops, draws=300, seed=seed, widen=1.7)
        assert all(np.array_equal(a, b) for a, b in zip(mix, ref_mix, strict=True))
        assert got == ref


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
def test_posteriors_sharing_equal_rows_are_bit_identical_to_the_reference(cases, name):
    """posterior() (its fit included) and population_posteriors() (donors repeated among the prompts, most prompts
    never visited) with rows of equal counts computed once equal the row-by-row reference exactly."""
    h = cases[name][0]
    scores = name != "noscores"
    got = h.posterior(None, scores=scores)
    pops = population_posteriors(h.sums, np.arange(len(got)), got.hyper, rng=np.random.default_rng(4), replicates=3)
    with reference_code():
        ref = h.posterior(None, scores=scores)
        ref_pops = population_posteriors(h.sums, np.arange(len(got)), got.hyper, rng=np.random.default_rng(4),
                                         replicates=3)
    assert _same(got, ref)
    assert all(_same(a, b) for a, b in zip(pops, ref_pops, strict=True))
