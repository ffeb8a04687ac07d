"""The prompt-IS certificate (docs/math.md M59) and the predictor's draws of ||g(x)||^2 it reads."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ugrpo.envs.generate import random_env
from ugrpo.stats.allocation import PromptStats
from ugrpo.stats.history import PromptHistory
from ugrpo.stats.is_certificate import is_certificate
from ugrpo.stats.predict import draw, posterior_means
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
