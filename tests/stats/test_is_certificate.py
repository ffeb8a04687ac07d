"""The prompt-IS certificate (docs/math.md M59, M89) and the predictor's draws of ||g(x)||^2 it reads."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ugrpo.envs.generate import random_env
from ugrpo.stats.allocation import PromptStats
from ugrpo.stats.history import PromptHistory
from ugrpo.stats.is_certificate import IS_WIDEN, is_certificate
from ugrpo.stats.is_guard import uniform_law
from ugrpo.stats.predict import draw, draw_mixture, posterior_means
from ugrpo.stats.prompt_is import is_law, second_moment


def _history(env, visits: int, G: int, seed: int) -> PromptHistory:
    """Every prompt visited ``visits`` times with G samples at theta0 (rewards and exact scores)."""
    gen = torch.Generator().manual_seed(seed)
    p, W = env.probs(), env.score_table()
    h = PromptHistory(env.n_prompts)
    prompts = torch.arange(env.n_prompts).repeat(visits)
    act = torch.multinomial(p[prompts], G, replacement=True, generator=gen)
    z = torch.bernoulli(env.reward_mean[prompts.unsqueeze(1), act], generator=gen)
    h.update(prompts.numpy(), np.full(len(prompts), G), z.reshape(-1).numpy(),
             W[prompts.unsqueeze(1), act].reshape(len(prompts) * G, -1).numpy())
    return h


@pytest.fixture(scope="module")
def env():
    return random_env("softmax_bandit", n_prompts=16, n_actions=4, logit_scale=1.0, extreme_fraction=0.5, seed=5)


def test_drawn_g2_has_the_posterior_mean(env):
    post = _history(env, 3, 4, 0).posterior(None, scores=True)
    g2 = draw(post, np.random.default_rng(0), 4000, with_g2=True)[3]                  # (D, P)
    mean = posterior_means(post).g_norm2
    se = g2.std(0) / np.sqrt(len(g2))
    # the means cut eta at 4, the draws at 1/(p(1-p)) >= 4: the draws' mean is at least the means' value
    assert (g2.mean(0) >= mean - 4 * se - 1e-12).all()


def test_certificate_covers_the_true_ratio_with_a_long_history(env):
    """With 60 visits of 8 samples per prompt the posterior is concentrated: the interval is narrow and holds the
    ratio at the exact moments; the plug-in is the ratio at the posterior means."""
    post = _history(env, 60, 8, 1).posterior(None, scores=True)
    st = posterior_means(post)
    law = is_law("ustat-is", st, 4, 32)
    cert = is_certificate(post, law, 8, draws=2000, seed=0)
    ex = env.exact()
    true = PromptStats.from_moments(ex.prompt_moments)
    P = env.n_prompts
    r_true = second_moment(law.q, law.sizes, true) / second_moment(np.full(P, 1 / P), np.full(P, 8), true)
    assert cert.ratio_low <= r_true <= cert.ratio_high
    assert cert.ratio_high - cert.ratio_low < 0.2
    plug = second_moment(law.q, law.sizes, st) / second_moment(np.full(P, 1 / P), np.full(P, 8), st)
    assert cert.plugin == pytest.approx(plug)
    with pytest.raises(ValueError, match="posterior holds"):
        is_certificate(post.take(np.arange(3)), law, 8)


def test_population_draws_and_widening_give_the_literal_quantiles_of_the_ratio(env):
    """With several posteriors (M60's population draws, M89) the interval is the quantiles of R computed per draw
    by the literal second moments of M53 (prompt_is.second_moment) over their equal mixture, widened on the log
    scale about the median: [med (lo/med)^k, med (hi/med)^k]; no population is the one posterior."""
    post = _history(env, 3, 4, 0).posterior(None, scores=True)
    other = _history(env, 6, 4, 1).posterior(None, scores=True)
    law = is_law("ustat-is", posterior_means(post), 4, 32)
    P = env.n_prompts
    cert = is_certificate(post, law, 8, population=[post, other], draws=400, seed=2, widen=1.5)
    c2, c3, g2 = draw_mixture([post, other], np.random.default_rng(2), 400, with_g2=True)
    r = []
    for d in range(400):
        st = PromptStats(value=np.zeros(P), c2=c2[d], c3=c3[d], g_norm2=g2[d])
        r.append(second_moment(law.q, law.sizes, st) / second_moment(np.full(P, 1 / P), np.full(P, 8), st))
    lo, med, hi = np.quantile(r, (0.025, 0.5, 0.975))
    assert (cert.ratio_low_posterior, cert.ratio, cert.ratio_high_posterior) == pytest.approx((lo, med, hi), rel=1e-9)
    assert np.log(med / cert.ratio_low) == pytest.approx(1.5 * np.log(med / lo), rel=1e-9)
    assert np.log(cert.ratio_high / med) == pytest.approx(1.5 * np.log(hi / med), rel=1e-9)
    assert cert.widen == 1.5
    one = is_certificate(post, law, 8, population=[post], draws=400, seed=2)
    assert one == is_certificate(post, law, 8, draws=400, seed=2)
    with pytest.raises(ValueError, match="posterior holds"):
        is_certificate(post, law, 8, population=[post.take(np.arange(3))])


def test_uniform_prompts_have_ratio_one_in_every_draw_whatever_the_widening(env):
    """Uniform q with G each: S(q, G) = S(1/P, G) in every draw (M53), so the interval is 1 exactly, widened or not."""
    post = _history(env, 3, 4, 0).posterior(None, scores=True)
    P = env.n_prompts
    cert = is_certificate(post, uniform_law(P, 4, 8), 8, population=[post, post], draws=200, widen=3.0)
    assert (cert.ratio_low, cert.ratio, cert.ratio_high) == pytest.approx((1.0, 1.0, 1.0), rel=1e-12)


def test_the_is_widening_factors_are_the_committed_development_fit():
    """IS_WIDEN (M89) equals the fit written by bench_is_certificate.py --fit-widening on development offsets only."""
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks/results/is_certificate_widening.json"
    fit = json.loads(path.read_text())
    assert fit["target"] == 0.95 and not {0, 7000} & set(fit["seed_offsets"])  # never the evaluation instances
    got = [(b["samples_per_prompt_below"], b["widen"]) for b in fit["buckets"]]
    assert got == [(None if np.isinf(hi) else hi, k) for hi, k in IS_WIDEN]
