"""Algorithm 1 with per-prompt G_b (ugrpo.envs.algorithm1, docs/math.md M32, M44): equal G_b = the dense run,
the ragged step gradient = the dense one on the same samples, unbiasedness (exact enumeration and seeded Monte
Carlo), and bad settings (the history sums: tests/stats/test_history.py)."""

import itertools

import pytest
import torch

from ugrpo.envs import builtin_env, random_env, run_algorithm1_batch
from ugrpo.envs.algorithm1 import ragged_step_gradient, run_algorithm1_alloc, sample_ragged
from ugrpo.stats.advantages import compute_advantages
from ugrpo.stats.estimator import prompt_gradients


@pytest.mark.parametrize("schedule", ["constant", "inverse"])
def test_uniform_allocation_run_equals_the_dense_run(schedule):
    env = random_env("softmax_bandit", n_prompts=6, n_actions=3, logit_scale=0.8, seed=1)
    dense = run_algorithm1_batch(env, N=24, G=4, steps=9, lr=1.5, seeds=[3, 7], lr_schedule=schedule,
                                 checkpoints=[0, 4, 9])
    rag = run_algorithm1_alloc(env, rule="uniform", N=24, B=6, steps=9, lr=1.5, seeds=[3, 7],
                               lr_schedule=schedule, checkpoints=[0, 4, 9])
    torch.testing.assert_close(rag.theta, dense.theta, rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(rag.gaps, dense.gaps, rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(rag.frac_zero_std, dense.frac_zero_std)
    assert not torch.equal(rag.theta[0], rag.theta[1])


def test_ragged_step_gradient_equals_dense_on_the_same_samples():
    env = builtin_env("demo")
    theta = env.theta0.expand(2, env.dim).clone()
    b = env.sample_many(theta, 5, 4, [torch.Generator().manual_seed(s) for s in (0, 1)])
    gens = [torch.Generator().manual_seed(s) for s in (0, 1)]
    drawn = torch.cat([torch.randint(env.n_prompts, (1, 5), generator=g) for g in gens])  # as run_algorithm1_alloc
    assert torch.equal(drawn, b.prompts)
    adv = compute_advantages(b.rewards.reshape(10, 4), baseline="grpo").advantages
    dense = prompt_gradients(b.scores.reshape(10, 4, env.dim), adv).reshape(2, 5, env.dim).mean(1)
    sizes = torch.full((2, 5), 4)
    rewards, scores = sample_ragged(env, theta, b.prompts, sizes, gens)
    torch.testing.assert_close(rewards, b.rewards.reshape(-1))  # the same draws after the same prompt draw
    ghat, zero = ragged_step_gradient(rewards, scores, sizes)
    torch.testing.assert_close(ghat, dense, rtol=1e-12, atol=1e-12)
    assert zero.shape == (10,)


def _tiny_env():
    return random_env("softmax_bandit", n_prompts=2, n_actions=2, logit_scale=0.7, reward_spread=1.5, seed=2)


def test_ragged_step_is_unbiased_by_exact_enumeration():
    """E[ghat | X, G] = (1/B) sum_b g(x_b) for prompts (1, 0) with G = (2, 3): every outcome enumerated."""
    env = _tiny_env()
    p, r, W = env.probs(), env.reward_mean, env.score_table()
    prompts, sizes = [1, 0], torch.tensor([[2, 3]])
    outcomes = [[(a, z) for a in range(2) for z in (0, 1)]] * 5
    owner = [0, 0, 1, 1, 1]
    mean = torch.zeros(env.dim, dtype=torch.float64)
    total = 0.0
    for combo in itertools.product(*outcomes):
        w, zs, ws = 1.0, [], []
        for i, (a, z) in enumerate(combo):
            x = prompts[owner[i]]
            w *= float(p[x, a] * (r[x, a] if z else 1 - r[x, a]))
            zs.append(float(z))
            ws.append(W[x, a])
        ghat, _ = ragged_step_gradient(torch.tensor(zs, dtype=torch.float64), torch.stack(ws), sizes)
        mean += w * ghat[0]
        total += w
    target = env.exact().g_x[prompts].mean(0)
    assert total == pytest.approx(1.0, abs=1e-12)
    torch.testing.assert_close(mean, target, rtol=1e-10, atol=1e-12)


def test_sampler_is_unbiased_by_seeded_monte_carlo():
    """sample_ragged + the step gradient over 4000 seeds: mean within 4 standard errors of (1/B) sum_b g(x_b)."""
    env = _tiny_env()
    S = 4000
    prompts = torch.tensor([[0, 1, 1]]).expand(S, 3)
    sizes = torch.tensor([[2, 5, 3]]).expand(S, 3)
    gens = [torch.Generator().manual_seed(s) for s in range(S)]
    rewards, scores = sample_ragged(env, env.theta0.expand(S, env.dim), prompts, sizes, gens)
    ghat, _ = ragged_step_gradient(rewards, scores, sizes)
    target = env.exact().g_x[[0, 1, 1]].mean(0)
    se = ghat.std(0) / S**0.5
    ok = se > 0
    assert ok.sum() >= 2
    assert ((ghat.mean(0) - target).abs()[ok] <= 4 * se[ok]).all()
    assert torch.allclose(ghat.mean(0)[~ok], target[~ok], atol=1e-12)


@pytest.mark.parametrize("rule,moments", [("ustat", "exact"), ("knapsack", "exact"), ("uniform-is", "exact"),
                                          ("ustat-is", "exact")])
def test_one_full_step_is_unbiased_for_the_exact_gradient(rule, moments):
    """Prompts drawn (uniformly, or from the prompt-IS law with weights 1/(P q), M52), G_b chosen by the rule, samples
    drawn: (theta_1 - theta_0)/lr averages to grad J (4 SE)."""
    env = random_env("softmax_bandit", n_prompts=4, n_actions=3, logit_scale=1.0, extreme_fraction=0.5, seed=5)
    S = 3000
    N = 24 if rule == "ustat-is" else 12  # at N/B = 3 the joint law keeps G_x = 3 here (the exact optimum); at 6 not
    res = run_algorithm1_alloc(env, rule=rule, moments=moments, N=N, B=4, steps=1, lr=1.0, seeds=range(S),
                               g_max=8)
    ghat = res.theta - env.theta0
    g = env.grad_J()
    se = ghat.std(0) / S**0.5
    assert ((ghat.mean(0) - g).abs() <= 4 * se + 1e-12).all()
    if rule != "uniform-is":
        assert res.mean_max_G.max() > 3  # the rule did not hand out a uniform G = 3
    if rule == "ustat-is":  # N samples in expectation: the seeds' mean within 4 SE
        spent = res.samples[:, -1]
        assert abs(float(spent.mean()) - N) <= 4 * float(spent.std()) / S**0.5 and spent.std() > 0


@pytest.mark.parametrize("kwargs,match", [
    (dict(rule="dynamic"), r"unknown allocation rule 'dynamic'; choose one of \['uniform', 'vip', 'knapsack', "
                           r"'ustat', 'uniform-is', 'ustat-is'\]"),
    (dict(rule="uniform-is", N=14), "uniform-is: B = 4 prompts do not divide N = 14"),
    (dict(rule="ustat-is", is_lambda=0.0), r"is_lambda=0\.0 must be a number in \(0, 1\]"),
    (dict(N=5), r"budget N = 5 is below B \* g_min = 4 \* 2"),
    (dict(g_min=4, g_max=3), "need 2 <= g_min <= g_max"),
    (dict(N=40), r"exceeds B \* g_max = 4 \* 8"),
    (dict(moments="oracle"), "unknown moments"),
])
def test_bad_settings_raise(kwargs, match):
    env = _tiny_env()
    args = dict(rule="ustat", N=12, B=4, steps=2, lr=1.0, seeds=[0], g_max=8) | kwargs
    with pytest.raises(ValueError, match=match):
        run_algorithm1_alloc(env, **args)
