"""The prompt-IS guard (docs/math.md M75-M78): the per-visit U-statistics against brute force, the unbiased per-visit
second moment and the held-out sums by exact enumeration, the history's folds, the own estimates in closed form, and
the guard's choices."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
import torch

from ugrpo.envs import random_env
from ugrpo.stats.allocation import PromptStats
from ugrpo.stats.components import prompt_terms, reduce_scores
from ugrpo.stats.history import FIELDS, HELD_OUT, PromptHistory
from ugrpo.stats.is_guard import (
    coefficients,
    guarded_law,
    held_out_ratio,
    held_out_sums,
    own_estimates,
)
from ugrpo.stats.predict import posterior, posterior_means
from ugrpo.stats.prompt_is import PromptLaw, is_law, second_moment, second_moments
from ugrpo.stats.ragged import ragged_terms_from_norms

from ._enumerate import enumerate_group, prompt_moments_exact, softmax_bandit

DT = torch.float64


def _norms(rewards: torch.Tensor, scores: torch.Tensor, sizes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(||W_i||^2 (n,), ||sum_{i in b} Z_i W_i||^2 (B,)) of ragged groups."""
    zw = torch.stack([(rewards[a:b, None] * scores[a:b]).sum(0) for a, b in _bounds(sizes)])
    return (scores**2).sum(1), (zw**2).sum(1)


def _bounds(sizes: torch.Tensor) -> list[tuple[int, int]]:
    ends = sizes.cumsum(0).tolist()
    return list(zip([0] + ends[:-1], ends))


def test_terms_from_norms_are_the_triple_sums_of_m14_m16():
    """Ragged T0, T1, T2 equal the literal sums over distinct pairs and triples, and prompt_terms for equal groups."""
    gen = torch.Generator().manual_seed(3)
    sizes = torch.tensor([3, 5, 4])
    z = torch.rand(12, generator=gen, dtype=DT)  # fractional rewards too
    w = torch.randn(12, 4, generator=gen, dtype=DT)
    got = ragged_terms_from_norms(z, *_norms(z, w, sizes), sizes)
    for b, (lo, hi) in enumerate(_bounds(sizes)):
        Z, W = z[lo:hi].tolist(), w[lo:hi]
        G = hi - lo
        K = (W @ W.T).tolist()
        t0 = sum(Z[i] * Z[j] * K[i][j] for i, j in itertools.permutations(range(G), 2)) / (G * (G - 1))
        trip = list(itertools.permutations(range(G), 3))
        t1 = sum(K[i][i] * (Z[i] - Z[j]) * (Z[i] - Z[k]) for i, j, k in trip) / len(trip)
        t2 = sum(K[i][i] * (Z[j] - Z[k]) ** 2 / 2 for i, j, k in trip) / len(trip)
        for t, want in zip(got, (t0, t1, t2)):
            assert float(t[b]) == pytest.approx(want, rel=1e-12, abs=1e-12)
    eq = torch.full((3,), 4)
    zz, diag, M = reduce_scores(z.view(3, 4), w.view(3, 4, 4), None)
    for a, b in zip(ragged_terms_from_norms(z, *_norms(z, w, eq), eq), prompt_terms(zz, diag, M)):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def _visit_outcomes(b, x: int, n: int) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
    """(probabilities (N,), (T0, T1, T2) (N,) each) of every outcome of one visit of n samples at prompt x."""
    probs, W, Z = enumerate_group(b, x, n)
    N = len(probs)
    sizes = torch.full((N,), n)
    return probs, ragged_terms_from_norms(Z.reshape(-1), *_norms(Z.reshape(-1), W.reshape(N * n, -1), sizes), sizes)


@pytest.mark.parametrize("n", [3, 4])
def test_one_visit_estimates_every_second_moment_without_bias(n):
    """M75: E[c(G) . T] over every outcome of n samples = a_x(G) = ||g(x)||^2 + c2/G + c3/(G(G-1)), for any G."""
    b = softmax_bandit(2, 2, seed=11)
    for x in range(2):
        probs, T = _visit_outcomes(b, x, n)
        exact = PromptStats.from_moments([prompt_moments_exact(b, x)])
        for G in (2, 3, 5, 8):
            est = sum(c * t for c, t in zip(coefficients(G), T))
            assert float((probs * est).sum()) == pytest.approx(float(second_moments(exact, G)[0]), rel=1e-10)


def test_held_out_sums_are_unbiased_for_s_and_s_u_by_enumeration():
    """M76: one visit drawn from a law q_t (weight 1/(P q_t(x))) and every outcome of its samples: E num = S(q', G')
    and E den = S_u of uniform prompts with G, whatever q_t; the squares are the visit's u^2, u v, v^2."""
    b = softmax_bandit(2, 2, seed=5)
    P, n, G = 2, 3, 4
    exact = PromptStats.from_moments([prompt_moments_exact(b, x) for x in range(P)])
    cand = PromptLaw("ustat-is", np.array([0.6, 0.4]), np.array([3, 5]), 1, 0.1, math.nan, math.nan)
    q_t = np.array([0.3, 0.7])
    e_num = e_den = 0.0
    for x in range(P):
        probs, W, Z = enumerate_group(b, x, n)
        for o in range(len(probs)):
            h = PromptHistory(P, held_out=True)
            h.update(np.array([x]), np.array([n]), Z[o].numpy(), W[o].numpy(), weights=np.array([1 / (P * q_t[x])]))
            num, den, quad = held_out_sums(cand, h.folds[0], G)
            e_num += q_t[x] * float(probs[o]) * num
            e_den += q_t[x] * float(probs[o]) * den
        if x == 1:  # the last outcome, literally
            T = [float(t[0]) for t in ragged_terms_from_norms(Z[o], *_norms(Z[o], W[o], torch.tensor([n])),
                                                               torch.tensor([n]))]
            w = 1 / (P * q_t[x])
            u = w * sum(c * t for c, t in zip(coefficients(5), T)) / (P * 0.4)
            v = w * sum(c * t for c, t in zip(coefficients(G), T))
            np.testing.assert_allclose(quad, [u * u, u * v, v * v], rtol=1e-12)
            assert (num, den) == pytest.approx((u, v), rel=1e-12)
    assert e_num == pytest.approx(second_moment(cand.q, cand.sizes, exact), rel=1e-10)
    assert e_den == pytest.approx(second_moment(np.full(P, 0.5), np.full(P, G), exact), rel=1e-10)


def _history(P: int, steps: int, seed: int, *, B: int = 6, G: int = 4, weights: bool = True):
    """A held-out history of random visits, and the visits (fold, prompt, weight, T) for literal checks."""
    rng = np.random.default_rng(seed)
    h = PromptHistory(P, held_out=True)
    visits = []
    for t in range(steps):
        idx = rng.integers(P, size=B)
        z = rng.integers(0, 2, (B, G)).astype(float).reshape(-1)
        w = rng.standard_normal((B * G, 3)) * (1 + idx.repeat(G)[:, None])
        wt = rng.uniform(0.5, 3.0, B) if weights else None
        h.update(idx, np.full(B, G), z, w, weights=wt)
        sizes = torch.full((B,), G)
        T = ragged_terms_from_norms(torch.as_tensor(z), *_norms(torch.as_tensor(z), torch.as_tensor(w), sizes), sizes)
        visits += [(t % 2, int(idx[i]), 1.0 if wt is None else float(wt[i]), [float(x[i]) for x in T])
                   for i in range(B)]
    return h, visits


def test_held_out_ratio_is_the_ratio_of_the_visits_terms():
    """The cross-fitted R and its delta-method se from the fold sums equal the literal per-visit sums (M76)."""
    P, G = 5, 4
    h, visits = _history(P, 6, seed=2)
    laws = (PromptLaw("uniform-is", np.array([0.1, 0.2, 0.3, 0.25, 0.15]), np.full(P, G), 2, 0.1, 0, 0),
            PromptLaw("ustat-is", np.array([0.3, 0.1, 0.2, 0.2, 0.2]), np.array([3, 4, 5, 4, 3]), 2, 0.1, 0, 0))
    u, v = [], []
    for fold, x, w, T in visits:
        law = laws[1 - fold]  # judged by the law of the other fold
        u.append(w * sum(c * t for c, t in zip(coefficients(law.sizes[x]), T)) / (P * law.q[x]))
        v.append(w * sum(c * t for c, t in zip(coefficients(G), T)))
    u, v = np.array(u), np.array(v)
    R = u.sum() / v.sum()
    got = held_out_ratio(laws, tuple(h.folds), G)
    assert got == pytest.approx((R, math.sqrt(((u - R * v) ** 2).sum()) / v.sum()), rel=1e-10)
    empty = PromptHistory(P, held_out=True)
    assert all(math.isnan(x) for x in held_out_ratio(laws, tuple(empty.folds), G))


def test_history_folds_split_by_step_add_up_and_round_trip():
    P = 5
    h, visits = _history(P, 5, seed=4)
    assert h.steps == 5
    for k in FIELDS:
        np.testing.assert_allclose(h.folds[0][k] + h.folds[1][k], h.sums[k], rtol=1e-12, atol=1e-12)
    assert h.folds[0]["visits"].sum() == 3 * 6 and h.folds[1]["visits"].sum() == 2 * 6  # steps 0, 2, 4 | 1, 3
    ht1 = np.zeros(P)
    for fold, x, w, T in visits:
        ht1[x] += w * T[1] if fold == 1 else 0.0
    np.testing.assert_allclose(h.folds[1]["ht_t1"], ht1, rtol=1e-12)
    back = PromptHistory.from_json(json.loads(json.dumps(h.to_json())), P, "history.json", held_out=True)
    assert back.steps == 5 and all(np.array_equal(back.folds[i][k], h.folds[i][k]) for i in (0, 1)
                                   for k in FIELDS + HELD_OUT)
    plain = PromptHistory(P)
    plain.update(np.arange(2), np.full(2, 3), np.ones(6), np.ones((6, 2)))
    with pytest.raises(ValueError, match=r"history\.json.*no held-out folds.*is_guard false"):
        PromptHistory.from_json(plain.to_json(), P, "history.json", held_out=True)
    with pytest.raises(ValueError, match=r"at least 3 samples per visit.*allocation\.g_min"):
        h.update(np.arange(2), np.array([3, 2]), np.ones(5), np.ones((5, 2)))
    with pytest.raises(ValueError, match="importance weights"):
        h.update(np.arange(2), np.full(2, 3), np.ones(6), np.ones((6, 2)), weights=np.array([1.0, 0.0]))


def test_own_estimates_in_closed_form():
    """M77: per-prompt means of T over visits, moved halfway to the importance-weighted pool mean; unvisited prompts
    get the pool mean; g2 = T0, c2 = T1 - T0, c3 = T2 + T0, cut at 0."""
    z = np.zeros(3)
    f = {"visits": np.array([2.0, 1.0, 0.0]), "samples": np.array([8.0, 4.0, 0.0]),
         "successes": np.array([4.0, 1.0, 0.0]),
         "t0_sum": np.array([2.0, 5.0, 0.0]), "t1_sum": np.array([6.0, 2.0, 0.0]), "t2_sum": np.array([4.0, 1.0, 0.0]),
         "ht_t0": np.array([3.0, 3.0, 0.0]), "ht_t1": np.array([9.0, 0.0, 0.0]), "ht_t2": np.array([6.0, 0.0, 0.0]),
         **{k: z for k in ("w2_success", "w2_failure")}}
    st = own_estimates(f, shrink=0.5)
    pool = np.array([6.0, 9.0, 6.0]) / 3.0                           # sum w T over the 3 visits
    own = np.array([[1.0, 3.0, 2.0], [5.0, 2.0, 1.0]])                # per-prompt means of (T0, T1, T2)
    t = np.vstack([0.5 * own + 0.5 * pool, pool])
    np.testing.assert_allclose(st.g_norm2, t[:, 0])
    np.testing.assert_allclose(st.c2, np.maximum(t[:, 1] - t[:, 0], 0.0))
    np.testing.assert_allclose(st.c3, t[:, 2] + t[:, 0])
    np.testing.assert_allclose(st.value, [0.5, 0.25, 5 / 12])
    assert st.c2[1] == 0.0  # T1 - T0 < 0 is cut


def _env_history(env, steps: int, B: int, G: int, seed: int, hist: PromptHistory | None = None) -> PromptHistory:
    """Uniform visits of an exact env into a held-out history."""
    gen = torch.Generator().manual_seed(seed)
    h = hist if hist is not None else PromptHistory(env.n_prompts, held_out=True)
    p, W = env.probs(), env.score_table(probs=env.probs())
    for _ in range(steps):
        idx = torch.randint(env.n_prompts, (B,), generator=gen)
        act = torch.multinomial(p[idx], G, replacement=True, generator=gen)
        z = torch.bernoulli(env.reward_mean[idx.unsqueeze(1), act], generator=gen)
        h.update(idx.numpy(), np.full(B, G), z.reshape(-1).numpy(), W[idx.unsqueeze(1), act].reshape(B * G, -1).numpy())
    return h


def test_guard_keeps_a_law_that_held_out_visits_support():
    """Score scales spread 100-fold: the posterior's law is confirmed on held-out visits (R well below 1) and used,
    fitted on the whole history; unguarded, the same law."""
    env = random_env("softmax_bandit", n_prompts=24, n_actions=4, logit_scale=1.0, reward_spread=1.5,
                     score_scale_spread=100.0, seed=5)
    h = _env_history(env, 20, B=12, G=4, seed=0)
    gl = guarded_law("uniform-is", h, 8, 32, lam=0.1, g_max=16)
    c = gl.checks[0]
    assert gl.choice == "uniform-is" and gl.fallback == 0 and c.kept and c.high < 1.0
    assert c.low == pytest.approx(c.ratio - 1.2815515655446004 * c.se)
    want = is_law("uniform-is", posterior_means(posterior(h.sums)), 8, 32, lam=0.1, g_min=3, g_max=16)
    np.testing.assert_allclose(gl.law.q, want.q)
    plain = guarded_law("uniform-is", h, 8, 32, lam=0.1, g_max=16, guard=False)
    assert plain.choice == "uniform-is" and plain.checks == () and np.allclose(plain.law.q, want.q)


def test_guard_falls_back_when_held_out_visits_refute_the_laws():
    """The even steps see prompts 0-7 with 100x the score scale of prompts 8-15, the odd steps the reverse (a history
    that contradicts itself, as a drifting policy's can): each fold's laws put the floor on the prompts the other fold
    shows to matter, the held-out checks refute all of them (the posterior laws near 1/lambda, the shrunk own estimates
    less) and the law is uniform; with one step of
    history there is nothing to check and it is uniform too."""
    rng = np.random.default_rng(0)
    P, B, G = 16, 8, 4
    h = PromptHistory(P, held_out=True)
    for step in range(16):
        idx = rng.integers(P, size=B)
        heavy = (idx < 8) == (step % 2 == 0)
        scale = np.where(heavy, 10.0, 0.1).repeat(G)[:, None]
        h.update(idx, np.full(B, G), rng.integers(0, 2, B * G).astype(float), rng.standard_normal((B * G, 4)) * scale)
    gl = guarded_law("ustat-is", h, B, B * G, lam=0.1, g_max=16)
    assert gl.choice == "uniform" and [c.name for c in gl.checks] == ["ustat-is", "uniform-is", "own"]
    assert all(not c.kept and c.low > 1.3 for c in gl.checks) and gl.checks[0].ratio > 9  # about 1/lambda
    np.testing.assert_allclose(gl.law.q, 1 / P)
    assert (gl.law.sizes == G).all() and gl.fallback == 3
    env = random_env("softmax_bandit", n_prompts=16, n_actions=4, seed=8)
    first = guarded_law("uniform-is", _env_history(env, 1, B=8, G=4, seed=0), 8, 32, lam=0.1)
    assert first.choice == "uniform" and math.isnan(first.checks[0].ratio)


def test_guard_errors_name_the_problem():
    h = PromptHistory(4)
    with pytest.raises(ValueError, match="held-out folds"):
        guarded_law("uniform-is", h, 2, 8, lam=0.1)
    h = PromptHistory(4, held_out=True)
    with pytest.raises(ValueError, match="g_min >= 3"):
        guarded_law("ustat-is", h, 2, 8, lam=0.1, g_min=2)
    with pytest.raises(ValueError, match="does not divide"):
        guarded_law("ustat-is", h, 3, 10, lam=0.1)
