"""``ugrpo make-env``: write a random synthetic policy (JSON) with difficulty controls.

Example: ``ugrpo make-env --kind softmax_bandit --prompts 8 --actions 6 --seed 1 --out env.json``.
Parsing only; the generator is :func:`ugrpo.envs.generate.random_env`.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kind", required=True, choices=["softmax_bandit", "linear_softmax"],
                   help="a softmax bandit (one logit per prompt and action) or a linear softmax policy")
    p.add_argument("--prompts", type=int, required=True, help="number of prompts P")
    p.add_argument("--actions", type=int, required=True, help="actions K per prompt (>= 2)")
    p.add_argument("--dim", type=int, default=None, help="feature dimension d (linear_softmax only)")
    p.add_argument("--logit-scale", type=float, default=0.5, help="spread of the initial logits (0 = uniform policy)")
    p.add_argument("--reward-spread", type=float, default=1.0, help="spread of the reward logits between arms")
    p.add_argument("--difficulty", type=float, default=0.0, help="reward logits centred at -difficulty")
    p.add_argument("--heterogeneity", type=float, default=1.0,
                   help="prompt heterogeneity in [0, 1]: 0 = identical prompts, 1 = independent")
    p.add_argument("--extreme-fraction", type=float, default=0.0,
                   help="share of prompts pushed near p = 0 or 1 (heterogeneous prompts for `ugrpo allocate`)")
    p.add_argument("--extreme-shift", type=float, default=5.0, help="size of that push on the reward logits")
    p.add_argument("--score-reward-corr", type=float, default=0.0,
                   help="in [-1, 1]: couples initial logits to reward logits; < 0 gives right answers larger scores")
    p.add_argument("--score-scale-spread", type=float, default=1.0,
                   help=">= 1: per-prompt score multipliers spread this many-fold (||W||^2 its square; log-uniform)")
    p.add_argument("--hard-score-scale", type=float, default=1.0,
                   help="> 0: score multiplier of the prompts whose mean reward is below the median (hard prompts)")
    p.add_argument("--rare-fraction", type=float, default=0.0,
                   help="in [0, 1]: share of rare hard prompts (reward logits pushed down by --rare-shift)")
    p.add_argument("--rare-shift", type=float, default=5.0, help="the downward push of the rare prompts' reward logits")
    p.add_argument("--rare-score-scale", type=float, default=1.0,
                   help="> 0: score multiplier of the rare prompts (31.6 gives ~1000x larger ||W||^2)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random policy")
    p.add_argument("--name", default="", help="free-text name stored in the file")
    p.add_argument("--out", required=True, help="JSON file to write")


def _score_knobs(args: argparse.Namespace) -> str:
    """The knobs that differ from their defaults, as flags (for the file's description, which then rebuilds the
    policy: every flag that changes it is there)."""
    knobs = (("dim", args.dim, None), ("logit-scale", args.logit_scale, 0.5),
             ("reward-spread", args.reward_spread, 1.0), ("difficulty", args.difficulty, 0.0),
             ("heterogeneity", args.heterogeneity, 1.0),
             ("score-scale-spread", args.score_scale_spread, 1.0), ("hard-score-scale", args.hard_score_scale, 1.0),
             ("rare-fraction", args.rare_fraction, 0.0), ("rare-score-scale", args.rare_score_scale, 1.0))
    out = "".join(f" --{k} {v}" for k, v, d in knobs if v != d)
    return out + (f" --rare-shift {args.rare_shift}" if args.rare_fraction else "")


def main(args: argparse.Namespace) -> int:
    from ugrpo.envs.generate import random_env
    from ugrpo.envs.io import load_env, save_env
    from ugrpo.report.markdown import text_table

    out = Path(args.out)
    if out.suffix != ".json":
        raise ValueError(f"--out {out}: the env file must end in .json")
    try:
        env = random_env(args.kind, n_prompts=args.prompts, n_actions=args.actions, dim=args.dim,
                         logit_scale=args.logit_scale, reward_spread=args.reward_spread, difficulty=args.difficulty,
                         prompt_heterogeneity=args.heterogeneity, seed=args.seed, name=args.name,
                         extreme_fraction=args.extreme_fraction, extreme_shift=args.extreme_shift,
                         score_reward_corr=args.score_reward_corr, score_scale_spread=args.score_scale_spread,
                         hard_score_scale=args.hard_score_scale, rare_fraction=args.rare_fraction,
                         rare_shift=args.rare_shift, rare_score_scale=args.rare_score_scale,
                         description=f"ugrpo make-env --kind {args.kind} --prompts {args.prompts} "
                                     f"--actions {args.actions} --seed {args.seed}"
                                     + (f" --extreme-fraction {args.extreme_fraction} "
                                        f"--extreme-shift {args.extreme_shift}" if args.extreme_fraction else "")
                                     + (f" --score-reward-corr {args.score_reward_corr}"
                                        if args.score_reward_corr else "")
                                     + _score_knobs(args))
    except ValueError as e:  # random_env's argument names -> this command's flags
        raise ValueError(_flag_names(str(e))) from None
    save_env(env, out)
    env = load_env(out)  # what later commands will see
    ex = env.exact(env.theta0, sigma=False)
    pm = ex.policy_moments
    # J* of a linear_softmax needs a numerical optimisation (slow); the bound mean_x max_a r is instant
    print(text_table(["kind", "P", "K", "D", "J(theta0)", "J* <=", "c1", "c2", "c3"],
                     [[env.kind, env.n_prompts, env.max_actions, env.dim, ex.J, env.j_star_upper_bound(),
                       pm.c1, pm.c2, pm.c3]]))
    print(f"wrote {out}")
    return 0


_FLAGS = {"n_prompts": "--prompts", "n_actions": "--actions", "prompt_heterogeneity": "--heterogeneity"}
"""random_env's arguments whose flag is not the name with dashes"""


def _flag_names(message: str) -> str:
    """``n_prompts = 0 must be ...`` -> ``--prompts 0 must be ...`` (a message of random_env's checks).

    >>> _flag_names("extreme_fraction = 1.5 must be a finite number in [0.0, 1.0]")
    '--extreme-fraction 1.5 must be a finite number in [0.0, 1.0]'
    """
    message = message.replace("kind='linear_softmax' needs dim = an integer >= 1, got None",
                              "--kind linear_softmax needs --dim (an integer >= 1)")
    return re.sub(r"^(\w+) = ", lambda m: _FLAGS.get(m.group(1), "--" + m.group(1).replace("_", "-")) + " ", message)
