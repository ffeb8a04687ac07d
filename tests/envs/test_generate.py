"""random_env: reproducibility, validation, and the documented effect of each knob."""

import pytest
import torch

from ugrpo.envs import random_env


def test_same_seed_same_instance_different_seed_different():
    a = random_env("linear_softmax", n_prompts=6, n_actions=4, dim=3, seed=5)
    b = random_env("linear_softmax", n_prompts=6, n_actions=4, dim=3, seed=5)
    c = random_env("linear_softmax", n_prompts=6, n_actions=4, dim=3, seed=6)
    assert torch.equal(a.features, b.features) and torch.equal(a.reward_mean, b.reward_mean)
    assert not torch.equal(a.reward_mean, c.reward_mean)
    bandit = random_env("softmax_bandit", n_prompts=6, n_actions=4, seed=5)
    assert bandit.dim == 24 and bandit.reward_mean.min() >= 0 and bandit.reward_mean.max() <= 1


def test_identical_prompts_have_zero_c1():
    # h = 0: every prompt has the same features and rewards, so g(x) = g and c1 = E||g(X) - g||^2 = 0
    env = random_env("linear_softmax", n_prompts=8, n_actions=4, dim=3, prompt_heterogeneity=0.0, seed=1)
    pm = env.exact().policy_moments
    assert pm.c1 < 1e-25 and pm.mean_g_norm2 > 1e-4


def test_bandit_c1_is_mean_prompt_gradient_norm():
    # orthogonal blocks: c1 = (1 - 1/P) E||g(X)||^2 exactly, whatever the heterogeneity
    env = random_env("softmax_bandit", n_prompts=7, n_actions=3, prompt_heterogeneity=0.3, seed=2)
    pm = env.exact().policy_moments
    assert pm.c1 == pytest.approx((1 - 1 / 7) * pm.mean_g_norm2, rel=1e-12)


def test_knob_directions():
    base = dict(n_prompts=30, n_actions=5, seed=3)
    lo = random_env("softmax_bandit", reward_spread=0.2, **base).exact().policy_moments
    hi = random_env("softmax_bandit", reward_spread=2.0, **base).exact().policy_moments
    assert hi.c1 > 10 * lo.c1 and hi.c3 / hi.c1 < lo.c3 / lo.c1  # spread raises c1 and lowers G*
    easy = random_env("softmax_bandit", difficulty=0.0, **base).exact().policy_moments
    hard = random_env("softmax_bandit", difficulty=4.0, **base).exact().policy_moments
    assert hard.c2 < 0.2 * easy.c2 and hard.c3 < 0.2 * easy.c3  # Var(Z) = V(1-V) small near 0
    flat = random_env("softmax_bandit", logit_scale=0.0, **base)
    assert torch.allclose(flat.probs()[0], torch.full((5,), 0.2, dtype=torch.float64))


@pytest.mark.parametrize("kwargs,match", [
    (dict(kind="mdp", n_prompts=3, n_actions=2), "kind"),
    (dict(kind="softmax_bandit", n_prompts=0, n_actions=2), "n_prompts"),
    (dict(kind="softmax_bandit", n_prompts=3, n_actions=1), "n_actions"),
    (dict(kind="softmax_bandit", n_prompts=3, n_actions=2, dim=2), "dim is only"),
    (dict(kind="linear_softmax", n_prompts=3, n_actions=2), "needs dim"),
    (dict(kind="softmax_bandit", n_prompts=3, n_actions=2, prompt_heterogeneity=1.5), "prompt_heterogeneity"),
    (dict(kind="softmax_bandit", n_prompts=3, n_actions=2, logit_scale=-1.0), "logit_scale"),
    (dict(kind="softmax_bandit", n_prompts=3, n_actions=2, reward_spread=float("nan")), "reward_spread"),
])
def test_bad_knobs_raise(kwargs, match):
    kind = kwargs.pop("kind")
    with pytest.raises(ValueError, match=match):
        random_env(kind, **kwargs)


def test_builtin_demo_is_the_documented_generator_call():
    from ugrpo.envs import builtin_env
    demo = builtin_env("demo")
    again = random_env("linear_softmax", n_prompts=40, n_actions=6, dim=6, logit_scale=0.5, reward_spread=0.5,
                       difficulty=0.0, prompt_heterogeneity=1.0, seed=0)
    assert "seed=0" in demo.description
    for attr in ("theta0", "features", "reward_mean"):
        torch.testing.assert_close(getattr(demo, attr), getattr(again, attr), rtol=0, atol=1e-15)
