"""Exact quantities of the synthetic policies against brute force (loops over actions and reward
outcomes, autograd scores, finite differences, full enumeration of minibatches)."""

import itertools
import math

import pytest
import torch
from scipy.optimize import brentq

from ugrpo.envs import LinearSoftmax, SoftmaxBandit, random_env
from ugrpo.stats.advantages import compute_advantages
from ugrpo.stats.estimator import prompt_gradients

F64 = torch.float64


def _bandit():  # different K per prompt on purpose
    return SoftmaxBandit([[0.3, -0.2], [0.0, 0.5, -0.7], [1.0, 0.1, -0.4, 0.2]],
                         [[0.9, 0.2], [0.1, 0.6, 0.3], [0.5, 0.05, 0.8, 0.45]])


def _linear():
    return random_env("linear_softmax", n_prompts=4, n_actions=3, dim=3, logit_scale=1.0, seed=3)


def _linear_small_search():
    e = _linear()
    return LinearSoftmax(e.theta0, [e.features[i].tolist() for i in range(4)], e.reward_mean.tolist(),
                         j_star_starts=2)


ENVS = {"bandit": _bandit, "linear": _linear}


def _brute(env, theta):
    """Everything by explicit loops; W from autograd of log pi (independent of score_table)."""
    P, D = env.n_prompts, env.dim
    out = {"V": [], "e_w2": [], "g_x": [], "tr_or": [], "tr_vz": [], "sigma": []}
    for x in range(P):
        K = int(env.n_actions[x])
        th = theta.clone().requires_grad_(True)
        logits = env.features[x, :K] @ th
        logp = torch.log_softmax(logits, 0)
        W = torch.stack([torch.autograd.grad(logp[a], th, retain_graph=True)[0] for a in range(K)])
        pi = logp.detach().exp()
        r = env.reward_mean[x, :K]
        V = sum(pi[a] * r[a] for a in range(K))
        g = sum(pi[a] * r[a] * W[a] for a in range(K))
        e_w2 = sum(pi[a] * W[a] @ W[a] for a in range(K))
        e_wz2 = e_wzv2 = 0.0
        S = torch.zeros(D, D, dtype=F64)
        for a in range(K):
            for z in (0.0, 1.0):
                pz = pi[a] * (r[a] if z else 1 - r[a])
                e_wz2 += pz * z**2 * W[a] @ W[a]
                e_wzv2 += pz * (z - V) ** 2 * W[a] @ W[a]
                S += pz * (z - V) ** 2 * torch.outer(W[a], W[a])
        out["V"].append(V)
        out["e_w2"].append(e_w2)
        out["g_x"].append(g)
        out["tr_or"].append(e_wzv2 - g @ g)
        out["tr_vz"].append(e_wz2 - g @ g)
        out["sigma"].append(S - torch.outer(g, g))
    return {k: torch.stack([torch.as_tensor(v) for v in vs]) for k, vs in out.items()}


@pytest.mark.parametrize("kind", ENVS)
def test_exact_matches_brute_force(kind):
    env = ENVS[kind]()
    theta = env.theta0 + 0.3 * torch.randn(env.dim, generator=torch.Generator().manual_seed(1), dtype=F64)
    ex, bf = env.exact(theta), _brute(env, theta)
    tol = dict(rtol=1e-12, atol=1e-13)
    torch.testing.assert_close(ex.V, bf["V"], **tol)
    torch.testing.assert_close(ex.e_w2, bf["e_w2"], **tol)
    torch.testing.assert_close(ex.g_x, bf["g_x"], **tol)
    torch.testing.assert_close(ex.sigma_oracle_x, bf["sigma"], **tol)
    pm = ex.prompt_moments
    torch.testing.assert_close(torch.tensor([m.tr_sigma_oracle for m in pm], dtype=F64), bf["tr_or"], **tol)
    torch.testing.assert_close(torch.tensor([m.tr_cov_wz for m in pm], dtype=F64), bf["tr_vz"], **tol)
    torch.testing.assert_close(torch.tensor([m.var_z for m in pm], dtype=F64), bf["V"] * (1 - bf["V"]), **tol)
    # trace of the materialised covariance equals the scalar moment
    torch.testing.assert_close(torch.diagonal(ex.sigma_oracle_x, dim1=1, dim2=2).sum(1), bf["tr_or"], **tol)
    # policy-level constants of Theorem 7 by explicit averages
    g = bf["g_x"].mean(0)
    pol = ex.policy_moments
    assert pol.c1 == pytest.approx(float(((bf["g_x"] - g) ** 2).sum(1).mean()), rel=1e-12)
    assert pol.c2 == pytest.approx(float(bf["tr_or"].mean()), rel=1e-12)
    c3 = (bf["e_w2"] * bf["V"] * (1 - bf["V"]) + (bf["g_x"] ** 2).sum(1)).mean()
    assert pol.c3 == pytest.approx(float(c3), rel=1e-12)
    assert pol.c2_vanilla == pytest.approx(float(bf["tr_vz"].mean()), rel=1e-12)
    assert pol.g_norm2 == pytest.approx(float(g @ g), rel=1e-12)
    assert ex.J == pytest.approx(float(bf["V"].mean()), rel=1e-14)
    torch.testing.assert_close(ex.g, g, **tol)


@pytest.mark.parametrize("kind", ENVS)
def test_grad_J_is_finite_difference_gradient(kind):
    env = ENVS[kind]()
    theta = env.theta0 + 0.2
    h = 1e-6
    fd = torch.tensor([(env.J(theta + h * e) - env.J(theta - h * e)) / (2 * h) for e in torch.eye(env.dim, dtype=F64)],
                      dtype=F64)
    torch.testing.assert_close(env.grad_J(theta), fd, rtol=1e-7, atol=1e-9)
    torch.testing.assert_close(env.exact(theta).g, env.grad_J(theta), rtol=1e-13, atol=1e-15)


def test_score_table_padding_and_probs():
    env = _bandit()
    p = env.probs()
    assert p.shape == (3, 4)
    assert p[0, 2:].eq(0).all() and p[1, 3].eq(0)
    torch.testing.assert_close(p.sum(1), torch.ones(3, dtype=F64))
    torch.testing.assert_close(p[2], torch.softmax(torch.tensor([1.0, 0.1, -0.4, 0.2], dtype=F64), 0))
    W = env.score_table()
    assert W.shape == (3, 4, env.dim) and W[0, 2:].eq(0).all()
    # block structure: W(x, a) = e_a - pi_x inside block x, zero elsewhere
    torch.testing.assert_close(W[1, 1, 2:5], torch.eye(3, dtype=F64)[1] - p[1, :3])
    assert W[1, 1, :2].eq(0).all() and W[1, 1, 5:].eq(0).all()


def test_j_star_and_gap_bandit():
    env = _bandit()
    assert env.j_star_exact
    assert env.J_star() == pytest.approx((0.9 + 0.6 + 0.8) / 3, rel=1e-15)
    assert env.gap() == pytest.approx(env.J_star() - env.J(), rel=1e-15)
    assert env.gap() > 0
    far = env.theta0.clone()
    far[[0, 3, 7]] = 60.0  # best arms' logits -> +inf: the supremum is approached
    assert 0 <= env.gap(far) < 1e-12


def test_j_star_linear_interior_optimum_matches_root_finding():
    # J(t) = 0.5 sigma(t) + 0.5 (1 - sigma(2t)): interior maximum where J'(t) = 0
    env = LinearSoftmax([0.0], [[[0.0], [1.0]], [[0.0], [2.0]]], [[0.0, 1.0], [1.0, 0.0]])
    sig = lambda t: 1 / (1 + math.exp(-t))  # noqa: E731
    dJ = lambda t: 0.5 * sig(t) * (1 - sig(t)) - sig(2 * t) * (1 - sig(2 * t))  # noqa: E731
    t_star = brentq(dJ, -10.0, -0.01, xtol=1e-14)  # the maximum (t > 0 holds a minimum)
    j_star = 0.5 * sig(t_star) + 0.5 * (1 - sig(2 * t_star))
    assert not env.j_star_exact
    assert env.J_star() == pytest.approx(j_star, abs=1e-12)
    assert float(env.theta_star()[0]) == pytest.approx(t_star, abs=1e-6)
    lo, hi = env.J_star_bracket()
    assert lo < hi == pytest.approx(1.0)  # mean_x max_a r: an upper bound, not attained here


def test_j_star_linear_bounds():
    env = _linear_small_search()
    lo, hi = env.J_star_bracket()
    assert env.J() <= lo <= hi
    assert env.gap() >= 0
    assert env.grad_J(env.theta_star()).norm() < 1e-5 or lo > hi - 1e-6


@pytest.mark.parametrize("kind", ENVS)
def test_sample_means_match_exact_within_4_se(kind):
    env = ENVS[kind]()
    ex = env.exact()
    gen = torch.Generator().manual_seed(123)
    b = env.sample(None, 20000, 8, gen)
    P = env.n_prompts
    # consistency with the tables
    torch.testing.assert_close(b.values, ex.V[b.prompts])
    torch.testing.assert_close(b.scores, env.score_table()[b.prompts.unsqueeze(1), b.actions])
    assert set(b.rewards.unique().tolist()) <= {0.0, 1.0}
    for x in range(P):  # per-prompt mean of W Z estimates g(x)
        wz = (b.scores * b.rewards.unsqueeze(-1))[b.prompts == x].reshape(-1, env.dim)  # (n, D)
        se = wz.std(0) / math.sqrt(wz.shape[0])
        z = (wz.mean(0) - ex.g_x[x]).abs() / se.clamp_min(1e-300)
        assert (z[se > 0] < 4).all(), (x, z)
        assert ex.g_x[x][se == 0].abs().max() < 1e-15 if (se == 0).any() else True  # bandit: other blocks
    # prompts uniform: counts within 4 SE of B/P
    counts = torch.bincount(b.prompts, minlength=P).double()
    assert ((counts - 20000 / P).abs() / math.sqrt(20000 * (1 / P) * (1 - 1 / P)) < 4).all()


def test_sample_many_row_equals_single_sample_with_same_generator():
    env = _bandit()
    thetas = torch.stack([env.theta0, env.theta0 + 1.0])
    many = env.sample_many(thetas, 5, 3, [torch.Generator().manual_seed(s) for s in (7, 8)])
    one = env.sample(thetas[1], 5, 3, torch.Generator().manual_seed(8))
    assert torch.equal(many.actions[1], one.actions) and torch.equal(many.prompts[1], one.prompts)
    torch.testing.assert_close(many.scores[1], one.scores)


def _enumerate_mse(env, estimator, B, G):
    """Exact minibatch MSE by enumerating every (prompts, actions, rewards) outcome at once."""
    ex = env.exact()
    p, r, P, K = env.probs(), env.reward_mean, env.n_prompts, env.max_actions
    W = env.score_table()
    xs = torch.tensor(list(itertools.product(range(P), repeat=B)))  # (nx, B)
    acts = torch.tensor(list(itertools.product(range(K), repeat=B * G))).reshape(-1, B, G)  # (na, B, G)
    zs = torch.tensor(list(itertools.product((0.0, 1.0), repeat=B * G)), dtype=F64).reshape(-1, B, G)
    nx, na, nz = len(xs), len(acts), len(zs)
    xi = xs[:, None, None, :, None].expand(nx, na, nz, B, G)
    ai = acts[None, :, None].expand(nx, na, nz, B, G)
    z = zs[None, None].expand(nx, na, nz, B, G)
    rr = r[xi, ai]
    prob = (p[xi, ai] * torch.where(z == 1, rr, 1 - rr)).prod(-1).prod(-1) / P**B  # (nx, na, nz)
    n = nx * na * nz
    vals = ex.V[xs][:, None, None].expand(nx, na, nz, B).reshape(n * B)
    adv = compute_advantages(z.reshape(n * B, G), baseline=estimator, values=vals).advantages
    gh = prompt_gradients(W[xi, ai].reshape(n * B, G, -1), adv).reshape(n, B, -1).mean(1)  # (n, D)
    assert float(prob.sum()) == pytest.approx(1.0, abs=1e-12)
    return float((prob.reshape(n) * ((gh - ex.g) ** 2).sum(-1)).sum())


@pytest.mark.parametrize("estimator", ["vanilla", "grpo", "grpo_mean", "oracle"])
@pytest.mark.parametrize("B,G", [(2, 2), (1, 3)])
def test_exact_mse_matches_enumeration(estimator, B, G):
    env = SoftmaxBandit([[0.4, -0.3], [0.2, 0.9]], [[0.8, 0.3], [0.25, 0.6]])
    assert env.exact().mse(estimator, B, G) == pytest.approx(_enumerate_mse(env, estimator, B, G), rel=1e-10)


def test_sigma_oracle_skipped_for_large_dim():
    env = random_env("softmax_bandit", n_prompts=30, n_actions=10, seed=0)  # D = 300 > SIGMA_MAX_DIM
    ex = env.exact()
    assert ex.sigma_oracle_x is None and len(ex.prompt_moments) == 30
    assert env.exact(sigma=True).sigma_oracle_x.shape == (30, 300, 300)
