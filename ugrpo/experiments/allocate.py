"""``ugrpo allocate``: exact MSE of per-prompt allocation rules at equal budget on a synthetic policy.

For every drawn batch of B prompts (uniform with replacement, as in training) each rule chooses G_b from what
it knows (the true per-prompt moments, or moments predicted from a simulated history), and the batch's exact
MSE is c1/B + (1/B^2) sum_b f_b(G_b) with the TRUE f_b (docs/math.md M33). The mean over batches gets a 95%
interval; c1/B is exact, so only the within-batch part carries Monte Carlo error (over batches, not samples).
``uniform`` is the best single G dividing N, whose MSE is the closed form M11 (no interval needed).

Predicted moments: a simulated history of earlier uniform-G steps at the same theta through the one predictor
(:mod:`ugrpo.stats.predict`, docs/math.md M46-M49: a population model fitted to the whole history, each prompt's
posterior from its own visits). ``vip`` and ``knapsack`` use the posterior means of p; ``ustat`` uses the trainer's
safe rule (:func:`ugrpo.stats.safe.choose_sizes`, M50: the plug-in sizes unless the posterior says they may lose to
uniform G) when the budget is B G samples, its plug-in sizes otherwise (tokens as the unit, ``--prompts`` not
dividing N, ``ustat+screen``).

The prompt-IS rules (``uniform-is``, ``ustat-is``; docs/math.md M52-M57) draw no batches here: their law (q, G_x)
over the pool is chosen from the true or the predicted moments of every prompt, and its MSE with the TRUE moments is
the closed form M53, (1/B)(sum_x a_x(G_x)/(P^2 q(x)) - ||g||^2), at an EXPECTED cost of B sum_x q(x) G_x = N samples
(``uniform-is`` spends exactly N). Samples as the unit only.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import torch

from ugrpo.stats.allocation import IS_RULES, RULES, PromptStats, allocate, best_uniform, prediction_quality
from ugrpo.stats.exact_mse import prompt_error, uniform_mse
from ugrpo.stats.history import PromptHistory, bernoulli_stats
from ugrpo.stats.intervals import RATIO_KEYS, Interval, mean_interval, normal_interval, ratio_interval
from ugrpo.stats.is_guard import GUARD_G_MIN, guarded_law
from ugrpo.stats.predict import Posterior, posterior, posterior_means
from ugrpo.stats.prompt_is import IS_LAMBDA, check_lambda, entropy, is_law, is_mse
from ugrpo.stats.safe import SAFE_LEVEL, SAFE_TOL, check_safety, choose_sizes

__all__ = ["AllocateConfig", "Lab", "build_lab", "bernoulli_stats", "history_sums", "predicted_stats", "run_allocate",
           "ratio_ci", "allocate_experiment"]


@dataclass(frozen=True)
class AllocateConfig:
    """Settings of one ``ugrpo allocate`` run.

    Attributes
    ----------
    budget : N samples per step
    rules : the rules to compare (``uniform`` is always the best single G)
    seed : seeds batches, history and lengths
    batches : drawn batches for the samples table
    token_batches : drawn batches for the tokens table (each needs an exact DP per rule)
    prompts : B for the non-uniform rules; None = the best uniform G's B = N/G (equal N and equal B)
    g_min, g_max : bounds on G_b
    history_steps, history_group : the simulated history: steps of N/history_group prompts x history_group samples
    safe_tol, safe_level : the safe rule's tolerance and posterior quantile (M50)
    screen : also run ``ustat+screen`` (G_b = 0 allowed; biased, M32), measured with the exact vector formula
    is_lambda : the prompt-IS rules' defensive floor q >= lambda / P (M55)
    is_guard : predicted moments: the prompt-IS rules' law goes through the held-out guard (M78; level and tolerance
        ``safe_level``, ``safe_tol``; sizes >= 3); False: the posterior's law unchecked
    """

    budget: int
    rules: tuple[str, ...] = RULES
    seed: int = 0
    batches: int = 2000
    token_batches: int = 100
    prompts: int | None = None
    g_min: int = 2
    g_max: int = 64
    history_steps: int = 10
    history_group: int = 4
    safe_tol: float = SAFE_TOL
    safe_level: float = SAFE_LEVEL
    screen: bool = False
    is_lambda: float = IS_LAMBDA
    is_guard: bool = True

    def __post_init__(self) -> None:
        for name in ("budget", "batches", "token_batches", "g_min", "g_max", "history_steps", "history_group"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        bad = [r for r in self.rules if r not in RULES]
        if bad or not self.rules:
            raise ValueError(f"--rules: unknown rule(s) {bad}; choose among {list(RULES)}")
        if self.g_min < 2 or self.g_max < self.g_min:
            raise ValueError(f"need 2 <= g_min <= g_max, got g_min = {self.g_min}, g_max = {self.g_max}")
        if self.history_group < 3:
            raise ValueError("history_group must be >= 3 (the per-prompt ||g(x)||^2 estimate needs pairs, M14)")
        if self.prompts is not None and self.prompts * self.g_min > self.budget:
            raise ValueError(f"--prompts {self.prompts} x g_min {self.g_min} exceeds the budget {self.budget}")
        check_safety(self.safe_tol, self.safe_level, "allocate")
        check_lambda(self.is_lambda, "--is-lambda")


@dataclass(frozen=True)
class Lab:
    """The exact per-prompt quantities of an env at theta0 (P prompts)."""

    true: PromptStats
    c1: float
    c2: float
    c3: float
    lengths: np.ndarray  # (P,) integer tokens per sample (multiples of 8)
    g_x: np.ndarray  # (P, D) the prompts' true gradients


def build_lab(env, seed: int) -> Lab:
    """Exact moments at theta0 and seeded per-prompt sample lengths L_x = 8 k, k log-uniform in [2, 32]."""
    ex = env.exact(env.theta0, sigma=False)
    pm = ex.policy_moments
    rng = np.random.default_rng([seed, 1])
    k = np.exp(rng.uniform(math.log(2), math.log(32), env.n_prompts)).round().astype(np.int64)
    return Lab(true=PromptStats.from_moments(ex.prompt_moments), c1=pm.c1, c2=pm.c2, c3=pm.c3, lengths=8 * k,
               g_x=ex.g_x.numpy())


def _sample_prompts(env, prompts: torch.Tensor, G: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Rewards (n, G) and squared score norms (n, G) plus scores for G samples at each given prompt."""
    p = env.probs()
    W = env.score_table(probs=p)
    act = torch.multinomial(p[prompts], G, replacement=True, generator=gen)     # (n, G)
    rewards = torch.bernoulli(env.reward_mean[prompts.unsqueeze(1), act], generator=gen)
    return rewards, W[prompts.unsqueeze(1), act]                               # (n, G), (n, G, D)


def simulated_history(env, cfg: AllocateConfig, gen: torch.Generator) -> PromptHistory:
    """The :class:`ugrpo.stats.history.PromptHistory` of ``cfg.history_steps`` simulated uniform steps of N /
    history_group prompts x history_group samples (its M38 sums, the certificate's second-moment sums, docs/math.md
    M45, and the prompt-IS guard's held-out folds, M76, when ``cfg.is_guard`` and a prompt-IS rule is run)."""
    P, Gh = env.n_prompts, cfg.history_group
    per = max(1, cfg.budget // Gh)
    n_hist = per * cfg.history_steps
    prompts = torch.randint(P, (n_hist,), generator=gen)
    z, W = _sample_prompts(env, prompts, Gh, gen)
    h = PromptHistory(P, held_out=cfg.is_guard and any(r in IS_RULES for r in cfg.rules))
    for t in range(cfg.history_steps):  # one update per step: the held-out folds split by step
        part = slice(t * per, (t + 1) * per)
        h.update(prompts[part].numpy(), np.full(per, Gh), z[part].reshape(-1).numpy(),
                 W[part].reshape(per * Gh, -1).numpy())
    return h


def history_sums(env, cfg: AllocateConfig, gen: torch.Generator) -> dict:
    """The sums (P,) of :func:`simulated_history`."""
    return simulated_history(env, cfg, gen).sums


def predicted_stats(env, cfg: AllocateConfig, gen: torch.Generator) -> tuple[Posterior, dict, PromptHistory]:
    """The predictor's posterior of all P prompts from a simulated history (docs/math.md M46-M49), what the history
    holds, and the history itself (the prompt-IS rules' guard reads its folds)."""
    h = simulated_history(env, cfg, gen)
    visits = h.sums["visits"]
    hist = {"history_samples": int(visits.sum()) * cfg.history_group,
            "prompts_never_visited": int((visits == 0).sum()), "mean_visits": float(visits.mean())}
    return posterior(h.sums), hist, h


def _sizes(known: Posterior | PromptStats, rule: str, idx: np.ndarray, cfg: AllocateConfig, unit: str, G_u: int,
           B: int, lab: Lab, j: int) -> tuple[np.ndarray, int, bool]:
    """(sizes, cost, guarded) of one batch: the trainer's choice (M50) for samples at N = B G, else plug-in."""
    base, screen = rule.split("+")[0], rule.endswith("+screen")
    k = known.take(idx)
    budget = cfg.budget if rule != "uniform" else B * G_u
    if unit == "samples" and not screen and budget == B * G_u:
        sizes, choice = choose_sizes(base, k, budget, G_u, g_min=cfg.g_min, g_max=cfg.g_max, tol=cfg.safe_tol,
                                     level=cfg.safe_level, rng=np.random.default_rng([cfg.seed, 3, j]))
        return sizes, int(sizes.sum()), choice is not None and choice.blend != 0.0
    st = posterior_means(k) if isinstance(k, Posterior) else k
    if unit == "samples":
        al = allocate(base, st, budget, g_min=cfg.g_min, g_max=cfg.g_max, screen=screen)
    else:
        L = lab.lengths[idx]
        al = allocate(base, st, int(G_u * L.sum()), g_min=cfg.g_min, g_max=cfg.g_max, unit="tokens", lengths=L,
                      screen=screen)
    return al.sizes, al.cost, False


def _batch_errors(lab: Lab, known: Posterior | PromptStats, rule: str, batches: np.ndarray, cfg: AllocateConfig,
                  unit: str, G_u: int) -> tuple[np.ndarray, np.ndarray, float]:
    """Per batch: the exact MSE given the batch minus ||gbar_X - g||^2 (whose mean over batches is c1/B), with
    the TRUE moments (M33), and the cost spent; plus the share of batches where the guard moved the sizes away from
    the plug-in ones. Without dropped prompts this is (1/B^2) sum_b f_b(G_b); with dropped ones (``ustat+screen``)
    it adds ||(1/B) sum_kept g(x_b) - g||^2 - ||gbar_X - g||^2 (M32)."""
    B = batches.shape[1]
    g = lab.g_x.mean(0)
    out, cost, guarded = np.empty(len(batches)), np.empty(len(batches)), 0
    for j, idx in enumerate(batches):
        sizes, cost[j], moved = _sizes(known, rule, idx, cfg, unit, G_u, B, lab, j)
        guarded += moved
        kept = sizes > 0
        t = lab.true.take(idx[kept])
        out[j] = prompt_error(t.c2, t.c3, sizes[kept]).sum() / B**2
        if not kept.all():
            gx = lab.g_x[idx]
            out[j] += float(((gx[kept].sum(0) / B - g) ** 2).sum() - ((gx.mean(0) - g) ** 2).sum())
    return out, cost, guarded / len(batches)


def _is_row(lab: Lab, known: PromptHistory | PromptStats, rule: str, cfg: AllocateConfig, B: int) -> dict:
    """The row of a prompt-IS rule: its law from ``known`` (the true moments of all P prompts, or the simulated
    history through :func:`ugrpo.stats.is_guard.guarded_law`, the trainer's law), its exact MSE with the true moments
    (M53) and what the law looks like."""
    guard = {}
    if isinstance(known, PromptHistory):
        gl = guarded_law(rule, known, B, cfg.budget, lam=cfg.is_lambda, g_min=_is_g_min(cfg), g_max=cfg.g_max,
                         level=cfg.safe_level, tol=cfg.safe_tol, guard=cfg.is_guard)
        law = gl.law
        guard = {"guard": cfg.is_guard, "guard_choice": gl.choice,
                 "guard_checks": [asdict(c) for c in gl.checks]}
    else:
        law = is_law(rule, known, B, cfg.budget, lam=cfg.is_lambda, g_min=cfg.g_min, g_max=cfg.g_max)
    g2 = float((lab.g_x.mean(0) ** 2).sum())
    mse = is_mse(law.q, law.sizes, B, lab.true, g2)
    hist = np.bincount(law.sizes)
    return {"rule": rule, "budget": cfg.budget, "unit": "samples", "B": B, "mse": mse, "ci_low": mse, "ci_high": mse,
            "exact": True, "mean_cost": law.expected_samples, "lambda": cfg.is_lambda,
            "weight_max": float(1.0 / (law.P * law.q.min())), "q_entropy": entropy(law.q),
            "q_entropy_max": math.log(law.P), "solver_gap": law.second_moment / law.bound - 1 if law.bound > 0 else 0.0,
            "sizes_hist": {str(g): int(c) for g, c in enumerate(hist) if c}, **guard}


def _is_g_min(cfg: AllocateConfig) -> int:
    """The prompt-IS rules' smallest size with predicted moments: >= 3 under the guard (its U-statistics, M78)."""
    return max(cfg.g_min, GUARD_G_MIN) if cfg.is_guard else cfg.g_min


def _exact_over(a: float, b: np.ndarray | float) -> Interval:
    """a / mean(b) for an exact ``a``: exact when ``b`` is too, else a over the 95% normal interval of the mean of the
    per-batch values ``b`` (the only Monte Carlo error)."""
    if np.ndim(b) == 0:
        r = float(a) / float(b)
        return Interval(r, r, r, kind="exact (both closed forms)")
    mean = mean_interval(np.asarray(b, dtype=np.float64))
    m = mean.estimate
    lo, hi = (m, m) if mean.ci_low is None else (mean.ci_low, mean.ci_high)  # one batch: no Monte Carlo spread
    return Interval(a / m, a / hi, a / lo if lo > 0 else None, se=None,
                    kind="exact numerator over the 95% normal interval of the denominator's mean over batches",
                    n=len(b))


def ratio_ci(a: np.ndarray, b: np.ndarray | float) -> Interval:
    """mean(a)/mean(b) for paired per-batch values: :func:`ugrpo.stats.intervals.ratio_interval` (delta method),
    clipped at 0 (a ratio of MSEs); one batch gives the ratio with a zero-width interval. ``b`` a number: an exact
    denominator (uniform's exact MSE), so the interval is the normal interval of mean(a) divided by it, named so.

    >>> ratio_ci(np.array([1.0, 2.0, 3.0]), 2.0).kind
    "95% normal interval of the mean over batches, over the denominator's exact MSE"
    """
    if np.ndim(b) == 0:
        m, se = float(a.mean()) / float(b), float(np.std(a, ddof=1)) / math.sqrt(len(a)) / float(b) if len(a) > 1 else 0
        kind = "95% normal interval of the mean over batches, over the denominator's exact MSE"
        return Interval(m, *normal_interval(m, se), se, kind, len(a)).clip(hi=math.inf)
    if len(a) < 2:
        r = float(a.mean() / b.mean())
        return Interval(r, r, r, kind="one batch: no spread", n=len(a))
    return ratio_interval(torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64))


def run_allocate(env, cfg: AllocateConfig, progress: bool = False) -> dict:
    """Every rule x {true, predicted} moments x {samples, tokens}: exact MSE at equal budget (module docstring)."""
    lab = build_lab(env, cfg.seed)
    G_u, mse_u = best_uniform(lab.c1, lab.c2, lab.c3, cfg.budget, g_min=cfg.g_min, g_max=cfg.g_max)
    B = cfg.prompts if cfg.prompts is not None else cfg.budget // G_u
    if cfg.is_guard and "ustat-is" in cfg.rules and cfg.budget < GUARD_G_MIN * B:
        raise ValueError(f"ustat-is with --is-guard true gives every prompt >= {GUARD_G_MIN} samples (the guard's "
                         f"held-out U-statistics), but N / B = {cfg.budget}/{B} < {GUARD_G_MIN}; set --prompts to at "
                         f"most {cfg.budget // GUARD_G_MIN} or pass --is-guard false")
    gen = torch.Generator().manual_seed(cfg.seed)
    pred, hist, history = predicted_stats(env, cfg, gen)
    rng = np.random.default_rng([cfg.seed, 2])
    batches = rng.integers(env.n_prompts, size=(cfg.batches, B))
    curve = [{"G": G, "B": cfg.budget // G, "mse": uniform_mse(lab.c1, lab.c2, lab.c3, cfg.budget, G)}
             for G in range(cfg.g_min, min(cfg.g_max, cfg.budget) + 1) if cfg.budget % G == 0]
    rows, token_rows, per_batch = [], [], {}
    for unit, nb, table in (("samples", cfg.batches, rows), ("tokens", cfg.token_batches, token_rows)):
        if unit == "tokens" and cfg.budget % B:
            continue  # the token budget is priced at uniform G = N/B on the same B prompts
        Gt = G_u if unit == "samples" else cfg.budget // B
        for moments, known in (("true", lab.true), ("predicted", pred)):
            for rule in cfg.rules + (("ustat+screen",) if cfg.screen else ()):
                if rule in IS_RULES:
                    if unit == "samples":
                        row = _is_row(lab, history if moments == "predicted" else known, rule, cfg, B)
                        table.append({"moments": moments, **row})
                        per_batch[(unit, moments, rule)] = row["mse"]
                        if progress:
                            print(f"  {unit:7s} {moments:9s} {rule:10s} mse {row['mse']:.4g}", flush=True)
                    continue
                if rule == "uniform" and unit == "samples":
                    table.append({"rule": "uniform", "moments": moments, "budget": cfg.budget, "unit": unit,
                                  "G": G_u, "B": cfg.budget // G_u, "mse": mse_u, "ci_low": mse_u, "ci_high": mse_u,
                                  "exact": True})
                    per_batch[(unit, moments, rule)] = float(mse_u)  # exact: no per-batch values
                    continue
                within, cost, guarded = _batch_errors(lab, known, rule, batches[:nb], cfg, unit, Gt)
                tot = lab.c1 / B + within
                se = float(np.std(within, ddof=1) / math.sqrt(nb)) if nb > 1 else 0.0
                m = float(tot.mean())
                lo, hi = normal_interval(m, se)
                row = {"rule": rule, "moments": moments, "budget": cfg.budget, "unit": unit, "B": B, "mse": m,
                       "ci_low": max(lab.c1 / B if "+" not in rule else 0.0, lo), "ci_high": hi, "exact": False,
                       "batches": nb, "mean_cost": float(cost.mean())}
                if rule == "ustat" and unit == "samples":
                    row["guard_moved_share"] = guarded  # batches whose sizes the safe rule changed (M50)
                if rule == "uniform":
                    row["G"] = Gt
                table.append(row)
                per_batch[(unit, moments, rule)] = tot
                if progress:
                    print(f"  {unit:7s} {moments:9s} {rule:8s} mse {m:.4g}", flush=True)
    ratios = _ratios(per_batch, cfg.rules)
    return {"config": asdict(cfg), "instance": {"name": env.name, "P": env.n_prompts, "c1": lab.c1, "c2": lab.c2,
                                                "c3": lab.c3, "best_uniform_G": G_u, "B": B},
            "rows": rows, "token_rows": token_rows, "ratios": ratios, "uniform_curve": curve,
            "history": hist, "prediction_quality": prediction_quality(posterior_means(pred), lab.true)}


def _ratios(per_batch: dict, rules: tuple[str, ...]) -> list[dict]:
    out = []
    others = {"ustat": tuple(r for r in RULES if r not in ("ustat",) + IS_RULES), "ustat+screen": ("ustat",),
              "uniform-is": ("uniform", "ustat"), "ustat-is": ("uniform", "ustat", "uniform-is")}
    for (unit, moments, rule), v in per_batch.items():
        for other in others.get(rule, ()):
            w = per_batch.get((unit, moments, other))
            if w is not None:
                if np.ndim(v) == 0:  # a prompt-IS rule: exact
                    iv = _exact_over(v, w)
                else:
                    iv = ratio_ci(v, w if np.ndim(w) == 0 else w[: len(v)])
                out.append({"unit": unit, "moments": moments, "numerator": rule, "denominator": other,
                            **iv.to_dict(*RATIO_KEYS), "interval": iv.kind})
    return out


def allocate_experiment(cfg: AllocateConfig, env_spec: str, out: str, *, argv: list[str] | None = None,
                        progress: bool = False) -> dict:
    """``ugrpo allocate``: every rule on the env ``env_spec`` (JSON or builtin:NAME) into the run folder ``out``
    (config.json, results.json, allocation.png, report.md); returns the results."""
    import time

    from ugrpo.envs.io import check_varied_rewards
    from ugrpo.experiments.common import resolve_env
    from ugrpo.report.allocate import write_report
    from ugrpo.runs import RunDir

    env = resolve_env(env_spec)
    check_varied_rewards(env, f"--env {env_spec}")
    rd = RunDir(out)
    rd.write_config({**cfg.__dict__, "env": env_spec, "command": "allocate", "argv": argv})
    t0 = time.perf_counter()
    results = run_allocate(env, cfg, progress=progress)
    results["seconds"] = time.perf_counter() - t0
    write_report(rd, results, argv)
    return results
