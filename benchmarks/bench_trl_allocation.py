"""TRL uniform, trl-cgrpo and ugrpo's allocation rules side by side on the tiny model, at equal samples (issue 21).

Two parts, both on the shipped ``tiny:instruct`` with the arithmetic task it was warmed up on (0/1 reward):

``mse`` -- gradient MSE at a frozen policy, in sketch space (the machinery of ``ugrpo mse --model --allocation``,
docs/lm-mse.md R1-R10): P prompts, M reference samples each (g_ref, V_ref), R repetitions of B prompts with a block
of Gmax samples each (common random numbers: every rule reads the first G_b samples of the same block), a simulated
history of V visits x h samples per prompt for the rules' predictions. trl-cgrpo's rule (conformal stopping on
answer agreement: ``trl_cgrpo.conformal``, thresholds calibrated on C held-out prompts x max(grid) samples, as
``CGRPOTrainer.calibrate`` does) chooses k_rb in its grid from the block's own answers; the other rules then get the
same samples in the same repetition, S_r = sum_b k_rb (``uniform`` = S_r spread as evenly as possible). Every rule's
estimate is the leave-one-out U-statistic on its G_b samples (docs/math.md M32), so the rows differ only in where
the samples went. Output per rule: the corrected MSE (total and within the drawn prompts) and its ratio to uniform
with a paired 95% interval (``ugrpo.stats.intervals.ratio_interval``). cgrpo's sizes depend on the block's own
rewards, so its estimate is biased (docs/allocation.md A5); the MSE includes that bias.

``train`` -- a short training study with the real trainers: TRL's ``GRPOTrainer`` (its default advantages, the
``uniform`` TRL run), ``trl_cgrpo.CGRPOTrainer`` (its defaults: TRL's advantages, padded rows masked), and
``ugrpo.integrations.trl.UGRPOTrainer`` with the leave-one-out advantage and allocation rules uniform, vip,
knapsack, ustat; every run ``loss_type="dapo"`` (trl-cgrpo's default; it refuses the others), constant AdamW lr,
the same seeds (TRL's sampler and generation seeds; paired by seed). Equal samples: the fixed-N runs take
``--steps`` steps of N = B G samples; the cgrpo run stops once its samples (kept rollouts + calibration rollouts)
reach the same total. Output per method: wall seconds per sample (train() wall / samples), samples, held-out greedy
accuracy and sampled pass@1 (``ugrpo.train.evaluate``) and their paired differences to TRL uniform with t intervals
over seeds.

trl-cgrpo is not a ugrpo dependency: ``pip install --no-deps trl-cgrpo==0.2.0`` (its metadata pins trl<1.15; 0.2.0
runs with TRL 1.16, checked here). Without it the cgrpo rows are skipped and say so.
``cost`` (issue 19) -- what ustat's score statistics cost inside TRL: ``UGRPOTrainer`` with rules uniform, ustat
(the output projection's exact scores from one no-gradient forward per generation batch) and ustat@sketch
(``scores="sketch"``), ``--cost-steps`` steps each, alternating for ``--cost-rounds`` rounds, no evaluation; per
method the median TRL ``step_time`` and the mean ``ugrpo/alloc_score_seconds`` as a share of uniform's median step.

Written to ``benchmarks/results/local/trl_allocation.json`` (``--name``).
Run: ``.venv/bin/python benchmarks/bench_trl_allocation.py --part all`` (``--part cost --name trl_score_cost``).
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import tempfile
import time
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
warnings.filterwarnings("ignore")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from common import environment, write_result  # noqa: E402

MODEL, TASK = "tiny:instruct", "arithmetic"
RULES = ("uniform", "vip", "knapsack", "ustat")


def _cgrpo():
    try:
        import trl_cgrpo  # noqa: F401
        from trl_cgrpo import conformal
        return conformal
    except ImportError:
        return None


def _answer(text: str) -> str:
    from ugrpo.tasks.arith_verify import extract_integer

    v = extract_integer(text)
    return "" if v is None else str(v)


def correct(prompts, completions, answer, **kwargs) -> list[float]:
    """The TRL reward: 1 when the last integer of the completion is the answer (examples/arith_reward.py)."""
    from ugrpo.tasks.arith_verify import integer_reward

    return [integer_reward(c, a) or 0.0 for c, a in zip(completions, answer)]


# ---------------------------------------------------------------------------------------------- mse


def calibrate(conformal, policy, problems, grid, seed: int, max_new_tokens: int) -> tuple[dict, float, int]:
    """CGRPOTrainer.calibrate on ``problems``: (qhat per budget, delta, rollouts), with trl_cgrpo's own functions."""
    from ugrpo.lm.sampling import sample_groups

    k_max = grid[-1]
    ro = sample_groups(policy.model, policy.tokenizer, [p.prompt for p in problems], k_max,
                       seeds=[seed + 101 * i for i in range(len(problems))], max_new_tokens=max_new_tokens)
    rng = random.Random(seed)
    scores = []
    for i, p in enumerate(problems):
        answers = [_answer(t) for t in ro.texts[i * k_max:(i + 1) * k_max]]
        scores.append({k: conformal.aps_score(str(p.answer).strip(), answers, k, rng) for k in grid})
    delta, _ = conformal.select_delta_auto([s[k_max] for s in scores], margin=0.05)
    return {k: conformal.conformal_quantile([s[k] for s in scores], delta) for k in grid}, delta, len(ro.texts)


def cgrpo_sizes(conformal, answers: list[list[list[str]]], qhats: dict, grid, seed: int) -> np.ndarray:
    """(R, B) budgets k_rb: the first k of the grid whose APS set over the block's first k answers is a singleton."""
    rng = random.Random(seed)
    out = np.full((len(answers), len(answers[0])), grid[-1], dtype=np.int64)
    for r, row in enumerate(answers):
        for b, ans in enumerate(row):
            for k in grid:
                if conformal.resolves_singleton(ans, k, qhats[k], rng):
                    out[r, b] = k
                    break
    return out


def even_sizes(B: int, S: int) -> np.ndarray:
    """S samples over B prompts as evenly as possible (the uniform rule at a budget B does not divide)."""
    return np.array([S // B + (b < S % B) for b in range(B)], dtype=np.int64)


def mse_part(args, conformal) -> dict:
    from ugrpo.experiments.plan.lm import load_lm_task, sample_sketched
    from ugrpo.lm.loading import load_policy
    from ugrpo.stats.allocation import allocate
    from ugrpo.stats.intervals import RATIO_KEYS, ratio_interval
    from ugrpo.stats.mc_mse import corrected_row, history_prompt_posterior, ragged_block_errors, reference_moments
    from ugrpo.stats.predict import posterior_means
    from ugrpo.stats.safe import choose_sizes

    t0 = time.perf_counter()
    task, _ = load_lm_task(MODEL, TASK, {})
    train = task.train_problems()
    P, M, R, B, Gmax, k, V, h = args.prompts, args.ref, args.reps, args.batch, 16, args.sketch, 2, 4
    problems, cal = train[:P], train[P:P + args.cal]
    policy = load_policy(MODEL, seed=0)
    idx = torch.randint(0, P, (R, B), generator=torch.Generator().manual_seed(0))
    uses = [int((idx == p).sum()) for p in range(P)]
    ref_s, ref_z = torch.empty(P, M, k, dtype=torch.float64), torch.empty(P, M, dtype=torch.float64)
    hist_s, hist_z = torch.empty(P, V, h, k, dtype=torch.float64), torch.empty(P, V, h, dtype=torch.float64)
    blocks = {}
    for p in range(P):
        n = M + V * h + uses[p] * Gmax
        ss = sample_sketched(policy, task, [problems[p]], n, [7_919 * p + 17], k=k, sketch_seed=0, temperature=1.0,
                             max_new_tokens=6, chat=False, chunk_size=512, keep_rollout=True)
        ref_s[p], ref_z[p] = ss.scores[0, :M], ss.rewards[0, :M]
        hist_s[p], hist_z[p] = ss.scores[0, M:M + V * h].view(V, h, k), ss.rewards[0, M:M + V * h].view(V, h)
        texts = ss.rollout.texts[M + V * h:]
        blocks[p] = (ss.scores[0, M + V * h:].view(uses[p], Gmax, k), ss.rewards[0, M + V * h:].view(uses[p], Gmax),
                     [[_answer(t) for t in texts[j * Gmax:(j + 1) * Gmax]] for j in range(uses[p])])
    est_s, est_z = torch.empty(R, B, Gmax, k, dtype=torch.float64), torch.empty(R, B, Gmax, dtype=torch.float64)
    answers, seen = [[None] * B for _ in range(R)], [0] * P
    for r in range(R):
        for b in range(B):
            p = int(idx[r, b])
            est_s[r, b], est_z[r, b], answers[r][b] = (x[seen[p]] for x in blocks[p])
            seen[p] += 1
    sample_s = time.perf_counter() - t0
    ref = reference_moments(ref_s, ref_z)
    pred = history_prompt_posterior(hist_s, hist_z)  # the one predictor (docs/math.md M46-M49)
    targets = {"total": (ref.g_ref, ref.ref_err, ref.spread()),
               "within": (ref.g_x[idx].mean(1), float(ref.within_ref_err(idx).mean()), ref.spread(idx))}
    grid = [2, 4, 8, 16]
    sizes = {}
    cal_info = None
    if conformal is not None:
        qhats, delta, cal_rollouts = calibrate(conformal, policy, cal, grid, seed=1, max_new_tokens=6)
        sizes["cgrpo"] = cgrpo_sizes(conformal, answers, qhats, grid, seed=0)
        cal_info = {"prompts": len(cal), "rollouts": cal_rollouts, "delta": delta,
                    "qhat": {str(g): q for g, q in qhats.items()}, "grid": grid}
        budgets = sizes["cgrpo"].sum(1)  # (R,): every rule spends cgrpo's samples in that repetition
    else:
        budgets = np.full(R, B * 8)
    sizes["uniform"] = np.stack([even_sizes(B, int(S)) for S in budgets])
    def rule_sizes(rule: str, r: int) -> np.ndarray:
        """As the trainer chooses (the safe rule for ustat, M50) when B divides the budget; else the plug-in."""
        S, known = int(budgets[r]), pred.take(idx[r].numpy())
        if S % B == 0:
            return choose_sizes(rule, known, S, S // B, g_min=2, g_max=Gmax, rng=np.random.default_rng([0, r]))[0]
        return allocate(rule, posterior_means(known), S, g_min=2, g_max=Gmax).sizes

    for rule in RULES[1:]:
        sizes[rule] = np.stack([rule_sizes(rule, r) for r in range(R)])
    rows = {}
    for name, sz in sizes.items():
        row = {"mean_samples_per_step": float(sz.sum(1).mean()), "mean_G": float(sz.mean()),
               "frac_at_2": float((sz == 2).mean()), "max_G": int(sz.max())}
        for key, (target, sub, sd) in targets.items():
            e = ragged_block_errors(est_s, est_z, torch.as_tensor(sz), target)
            u = ragged_block_errors(est_s, est_z, torch.as_tensor(sizes["uniform"]), target)
            c = corrected_row(e, sub, sd)
            ratio = ratio_interval(e, u, sub, sub, common_sd=sd).to_dict(*RATIO_KEYS) if name != "uniform" else None
            row[key] = {"mse": c["mse"], "ci_low": c["ci_low"], "ci_high": c["ci_high"], "ratio_to_uniform": ratio}
        rows[name] = row
    return {"settings": {"prompts": P, "ref_samples": M, "reps": R, "batch": B, "block": Gmax, "sketch_dim": k,
                         "history": {"visits": V, "group": h}, "estimator": "leave-one-out (grpo), scale none"},
            "policy_accuracy": float(ref_z.mean()), "frac_prompts_p_0_or_1": float(
                ((ref_z.mean(1) == 0) | (ref_z.mean(1) == 1)).double().mean()),
            "rows": rows, "cgrpo_calibration": cal_info,
            "cgrpo": None if conformal is not None else "trl_cgrpo not importable: rows skipped",
            "seconds": {"sampling_and_sketch": sample_s, "total": time.perf_counter() - t0}}


# ---------------------------------------------------------------------------------------------- train


class _SpendStop:
    """Stop a CGRPOTrainer once its kept rollouts plus calibration rollouts reach ``budget`` samples."""

    def __new__(cls, budget: int, prompts_per_step: int):
        from transformers import TrainerCallback

        class Stop(TrainerCallback):
            spent = 0.0

            def on_log(self, args, state, control, logs=None, **kw):
                logs = logs or {}
                if "cgrpo/mean_k" in logs:
                    self.spent += logs["cgrpo/mean_k"] * prompts_per_step
                self.spent += logs.get("cgrpo/calibration_rollouts", 0.0)
                if self.spent >= budget:
                    control.should_training_stop = True
                return control

        return Stop()


def train_run(method: str, seed: int, args, conformal) -> dict:
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from ugrpo.experiments.plan.lm import load_lm_task
    from ugrpo.integrations.trl import AdvantageSpec, AllocationSpec, UGRPOTrainer
    from ugrpo.lm.loading import load_policy
    from ugrpo.train.distributed import DistContext
    from ugrpo.train.evaluate import evaluate

    task, _ = load_lm_task(MODEL, TASK, {})
    train = task.train_problems()
    rows = [{"prompt": p.prompt, "answer": str(p.answer)} for p in train[:args.train_prompts]]
    cal = [{"prompt": p.prompt, "answer": str(p.answer)} for p in train[args.train_prompts:args.train_prompts + 32]]
    B, G = args.train_batch, 8
    N = B * G
    budget = N * args.steps
    pol = load_policy(MODEL, seed=seed)
    common = dict(output_dir=tempfile.mkdtemp(prefix="bench_trl_"), learning_rate=args.lr, lr_scheduler_type="constant",
                  per_device_train_batch_size=N, num_generations=G, max_completion_length=6, loss_type="dapo",
                  use_cpu=True, bf16=False, report_to="none", save_strategy="no", logging_steps=1, seed=seed,
                  disable_tqdm=True)
    kw = dict(model=pol.model, reward_funcs=correct, train_dataset=Dataset.from_list(rows),
              processing_class=pol.tokenizer)
    if method == "cgrpo":
        from trl_cgrpo import CGRPOConfig, CGRPOTrainer

        cfg = CGRPOConfig(**{**common, "num_generations": None}, max_steps=10 * args.steps, budget_grid=[2, 4, 8],
                          recalibrate_every=10, num_calibration_samples=len(cal))
        stop = _SpendStop(budget, B)
        trainer = CGRPOTrainer(args=cfg, calibration_dataset=Dataset.from_list(cal), answer_extractor=_answer,
                               callbacks=[stop], **kw)
    elif method == "trl":
        trainer = GRPOTrainer(args=GRPOConfig(**common, max_steps=args.steps), **kw)
    else:
        trainer = UGRPOTrainer(args=GRPOConfig(**common, max_steps=args.steps), advantages=AdvantageSpec(),
                               allocation=AllocationSpec(rule=method), **kw)
    t0 = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - t0
    logs = trainer.state.log_history
    if method == "cgrpo":
        samples = sum(r.get("cgrpo/mean_k", 0) * B + r.get("cgrpo/calibration_rollouts", 0) for r in logs)
        cal_samples = sum(r.get("cgrpo/calibration_rollouts", 0) for r in logs)
    else:
        samples, cal_samples = N * trainer.state.global_step, 0
    evp = task.eval_problems()[:100]
    res = evaluate(trainer.model, pol.tokenizer, task, evp, [p.prompt for p in evp], greedy=True, pass1_samples=8,
                   temperature=1.0, top_p=1.0, max_new_tokens=6, batch_size=256, seed=1234, ctx=DistContext())
    zero = [r["ugrpo/samples_zero_std"] for r in logs if "ugrpo/samples_zero_std" in r]
    return {"method": method, "seed": seed, "steps": trainer.state.global_step, "samples": samples,
            "calibration_samples": cal_samples, "train_wall_s": wall, "s_per_sample": wall / samples,
            "greedy_accuracy": res.accuracy, "pass1": res.pass1,
            "frac_samples_zero_std": (sum(zero) / samples) if zero else None}


def cost_run(method: str, seed: int, args) -> dict:
    """``UGRPOTrainer`` for ``args.cost_steps`` steps, no evaluation: TRL's per-step ``step_time`` and the seconds of
    ustat's score statistics (``ugrpo/alloc_score_seconds``). ``ustat@sketch``: ``scores="sketch"``."""
    from datasets import Dataset
    from trl import GRPOConfig

    from ugrpo.experiments.plan.lm import load_lm_task
    from ugrpo.integrations.trl import AdvantageSpec, AllocationSpec, UGRPOTrainer
    from ugrpo.lm.loading import load_policy

    task, _ = load_lm_task(MODEL, TASK, {})
    rows = [{"prompt": p.prompt, "answer": str(p.answer)} for p in task.train_problems()[:args.train_prompts]]
    B, G = args.train_batch, 8
    pol = load_policy(MODEL, seed=seed)
    rule, _, scores = method.partition("@")
    cfg = GRPOConfig(output_dir=tempfile.mkdtemp(prefix="bench_trl_"), learning_rate=args.lr,
                     lr_scheduler_type="constant", per_device_train_batch_size=B * G, num_generations=G,
                     max_completion_length=6, loss_type="dapo", use_cpu=True, bf16=False, report_to="none",
                     save_strategy="no", logging_steps=1, seed=seed, disable_tqdm=True, max_steps=args.cost_steps)
    trainer = UGRPOTrainer(model=pol.model, reward_funcs=correct, train_dataset=Dataset.from_list(rows),
                           processing_class=pol.tokenizer, args=cfg, advantages=AdvantageSpec(),
                           allocation=AllocationSpec(rule=rule, scores=scores or "output"))
    trainer.train()
    logs = [r for r in trainer.state.log_history if "step_time" in r][1:]  # the first step warms up
    score_s = [r["ugrpo/alloc_score_seconds"] for r in logs if "ugrpo/alloc_score_seconds" in r]
    return {"method": method, "seed": seed, "step_times": [r["step_time"] for r in logs],
            "score_seconds": score_s}


def cost_part(args) -> dict:
    """ustat's score statistics inside TRL against a uniform ``UGRPOTrainer`` step, methods alternating."""
    methods = ["uniform", "ustat", "ustat@sketch"]
    runs = [cost_run(m, seed, args) for seed in range(args.cost_rounds) for m in methods]
    step = {m: statistics.median(t for r in runs if r["method"] == m for t in r["step_times"]) for m in methods}
    out = {}
    for m in methods:
        sc = [t for r in runs if r["method"] == m for t in r["score_seconds"]]
        out[m] = {"median_step_s": step[m], "step_ratio_to_uniform": step[m] / step["uniform"],
                  "mean_score_s": statistics.mean(sc) if sc else None,
                  "score_share_of_uniform_step": statistics.mean(sc) / step["uniform"] if sc else None}
    return {"settings": {"steps": args.cost_steps, "rounds": args.cost_rounds, "prompts_per_step": args.train_batch,
                         "G": 8, "train_prompts": args.train_prompts, "loss_type": "dapo"}, "summary": out}


def initial_eval() -> dict:
    """The held-out evaluation of the untrained policy (the train part's starting point), same settings."""
    from ugrpo.experiments.plan.lm import load_lm_task
    from ugrpo.lm.loading import load_policy
    from ugrpo.train.distributed import DistContext
    from ugrpo.train.evaluate import evaluate

    task, _ = load_lm_task(MODEL, TASK, {})
    pol = load_policy(MODEL, seed=0)
    evp = task.eval_problems()[:100]
    res = evaluate(pol.model, pol.tokenizer, task, evp, [p.prompt for p in evp], greedy=True, pass1_samples=8,
                   temperature=1.0, top_p=1.0, max_new_tokens=6, batch_size=256, seed=1234, ctx=DistContext())
    return {"greedy_accuracy": res.accuracy, "pass1": res.pass1}


def _paired(a: list[float], b: list[float]) -> dict:
    from scipy.stats import t as student_t

    d = np.asarray(a) - np.asarray(b)
    n = len(d)
    m, se = float(d.mean()), float(d.std(ddof=1)) / math.sqrt(n) if n > 1 else float("nan")
    q = float(student_t.ppf(0.975, n - 1)) if n > 1 else float("nan")
    return {"mean": m, "ci_low": m - q * se, "ci_high": m + q * se, "n_seeds": n, "kind": "95% t, paired by seed"}


def train_part(args, conformal) -> dict:
    methods = ["trl", "uniform", "vip", "knapsack", "ustat"] + (["cgrpo"] if conformal is not None else [])
    runs = []
    for seed in range(args.seeds):  # methods interleaved within a seed: machine load hits them alike
        for m in methods:
            runs.append(train_run(m, seed, args, conformal))
            print({k: (round(v, 4) if isinstance(v, float) else v) for k, v in runs[-1].items()}, flush=True)
    out = {}
    for m in methods:
        mine = sorted((r for r in runs if r["method"] == m), key=lambda r: r["seed"])
        base = sorted((r for r in runs if r["method"] == "trl"), key=lambda r: r["seed"])
        out[m] = {"samples_mean": statistics.mean(r["samples"] for r in mine),
                  "s_per_sample_median": statistics.median(r["s_per_sample"] for r in mine),
                  "s_per_sample_ratio_to_trl": statistics.median(r["s_per_sample"] / q["s_per_sample"]
                                                                 for r, q in zip(mine, base)),
                  "greedy_accuracy_mean": statistics.mean(r["greedy_accuracy"] for r in mine),
                  "pass1_mean": statistics.mean(r["pass1"] for r in mine),
                  "greedy_minus_trl": _paired([r["greedy_accuracy"] for r in mine],
                                              [r["greedy_accuracy"] for r in base]),
                  "pass1_minus_trl": _paired([r["pass1"] for r in mine], [r["pass1"] for r in base])}
    return {"settings": {"train_prompts": args.train_prompts, "prompts_per_step": args.train_batch, "G": 8,
                         "steps": args.steps, "samples_budget": args.steps * 8 * args.train_batch, "lr": args.lr,
                         "seeds": args.seeds, "loss_type": "dapo", "eval": "100 held-out problems: greedy and "
                         "8 samples each (pass@1)", "cgrpo": "budget_grid [2, 4, 8], recalibrate_every 10 on 32 "
                         "held-out train prompts; stops at the samples budget" if conformal is not None else
                         "trl_cgrpo not importable: skipped"},
            "runs": runs, "summary": out}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", default="all", choices=["mse", "train", "all", "init", "cost"])
    ap.add_argument("--prompts", type=int, default=32, help="mse: P prompts")
    ap.add_argument("--ref", type=int, default=128, help="mse: M reference samples per prompt")
    ap.add_argument("--reps", type=int, default=48, help="mse: R repetitions")
    ap.add_argument("--batch", type=int, default=8, help="mse: B prompts per repetition")
    ap.add_argument("--sketch", type=int, default=128, help="mse: sketch dimension")
    ap.add_argument("--cal", type=int, default=32, help="mse: cgrpo calibration prompts")
    ap.add_argument("--train-prompts", type=int, default=64)
    ap.add_argument("--train-batch", type=int, default=16, help="train: prompts per step B (N = 8 B)")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--lr", type=float, default=5e-5)
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--cost-steps", type=int, default=8, help="cost: steps per run (the first is not timed)")
    ap.add_argument("--cost-rounds", type=int, default=2, help="cost: rounds of uniform, ustat, ustat@sketch")
    ap.add_argument("--name", default="trl_allocation")
    args = ap.parse_args()
    torch.set_num_threads(int(os.environ.get("UGRPO_THREADS", "1")))
    conformal = _cgrpo()
    payload = {"command": "benchmarks/bench_trl_allocation.py " + " ".join(
        f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items()), "environment": environment(),
        "trl_cgrpo": None if conformal is None else __import__("trl_cgrpo").__version__,
        "load_average": os.getloadavg()}
    if args.part in ("mse", "all"):
        payload["mse"] = mse_part(args, conformal)
        print({k: (v["within"]["mse"], (v["within"]["ratio_to_uniform"] or {}).get("estimate"))
               for k, v in payload["mse"]["rows"].items()}, flush=True)
    if args.part in ("train", "all", "init"):
        payload["initial_policy"] = initial_eval()
    if args.part in ("train", "all"):
        payload["train"] = train_part(args, conformal)
    if args.part == "cost":
        payload["cost"] = cost_part(args)
        print(payload["cost"]["summary"], flush=True)
    print(write_result(args.name, payload))


if __name__ == "__main__":
    main()
