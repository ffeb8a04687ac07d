"""``ugrpo plan``: estimate c1, c2, c3 from a pilot and recommend G for a budget N (paper Thm 7).

From an env: ``ugrpo plan --env builtin:demo --pilot-batch 64 --pilot-group 8 --budget 512 --out DIR
[--save-pilot pilot.npz]``. From a saved pilot: ``ugrpo plan --pilot pilot.npz --budget 512 --out DIR``
(format: docs/pilot-format.md). From a language model: ``ugrpo plan --model tiny:instruct --task arithmetic
--pilot-batch 64 --pilot-group 20 --budget 256 --sketch-dim 256 --out DIR`` (writes DIR/pilot.npz).
Parsing only; the logic is :mod:`ugrpo.experiments.plan` and :mod:`ugrpo.experiments.lm_plan`.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass, replace

import torch

from ugrpo.experiments.common import command_line, guarded, parse_theta, resolve_env
from ugrpo.experiments.pilot_io import MIN_PILOT_GROUP
from ugrpo.runs import RunDir


@dataclass(frozen=True)
class PlanConfig:
    """Resolved settings of ``ugrpo plan``."""

    budget: int
    seed: int
    n_boot: int
    env: str | None = None
    pilot: str | None = None
    pilot_batch: int | None = None
    pilot_group: int | None = None
    save_pilot: str | None = None
    theta: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        if (self.env is None) == (self.pilot is None):
            raise ValueError("give exactly one of --env (sample a pilot), --pilot FILE (a saved pilot) or --model PATH "
                             "(sample a pilot from a language model)")
        if self.env is not None and (self.pilot_batch is None or self.pilot_group is None):
            raise ValueError("--env needs --pilot-batch B0 and --pilot-group G0 (e.g. 64 and 8)")
        if self.pilot is not None and self.save_pilot is not None:
            raise ValueError("--save-pilot only applies to --env (the pilot is already a file)")
        if self.budget < 2:
            raise ValueError(f"--budget N = {self.budget} must be >= 2 (GRPO needs G >= 2 samples per prompt)")
        if self.env is not None and (self.pilot_group < MIN_PILOT_GROUP or self.pilot_batch < 2):
            raise ValueError(f"--pilot-group G0 = {self.pilot_group} and --pilot-batch B0 = {self.pilot_batch}: "
                             f"need G0 >= {MIN_PILOT_GROUP} (the unbiased c3 estimate) and B0 >= 2 (c1)")
        if self.n_boot < 0:
            raise ValueError(f"--n-boot must be >= 0, got {self.n_boot}")


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--env", default=None, help="env JSON or builtin:demo: sample a pilot at theta0")
    p.add_argument("--pilot", default=None, help="a saved pilot .npz instead of an env (docs/pilot-format.md)")
    p.add_argument("--model", default=None, help="sample the pilot from a language model: tiny:STRENGTH, a local "
                   "folder or a cached hub id (writes OUT/pilot.npz)")
    p.add_argument("--task", default=None, help="with --model: the task (arithmetic, gsm8k, math, custom)")
    p.add_argument("--task-option", action="append", default=[], metavar="NAME=VALUE",
                   help="with --model: a task option, repeatable (e.g. prompt_style=compact)")
    p.add_argument("--sketch-dim", type=int, default=256, help="with --model: sketch dimension k of the scores")
    p.add_argument("--group", type=int, default=None, help="the group size in use (must divide N): says how much "
                   "more gradient error it costs than the best G (every source)")
    p.add_argument("--ci-method", choices=("studentized-log", "studentized", "studentized-equal-tailed", "percentile"),
                   default="studentized-log", help="bootstrap intervals of c1, c2, c3 (docs/math.md M39)")
    p.add_argument("--temperature", type=float, default=1.0, help="with --model: sampling temperature")
    p.add_argument("--max-new-tokens", type=int, default=8, help="with --model: completion length cap")
    p.add_argument("--chat", action="store_true", help="with --model: wrap prompts in the chat template")
    p.add_argument("--pilot-batch", type=int, default=None, help="pilot prompts B0 (with --env)")
    p.add_argument("--pilot-group", type=int, default=None, help="pilot samples per prompt G0 >= 4 (with --env)")
    p.add_argument("--budget", type=int, default=None, help="samples per step N = B*G (with --trl-config: default "
                   "per_device_train_batch_size * gradient_accumulation_steps * num_processes)")
    p.add_argument("--trl-config", default=None, help="a TRL GRPO config (YAML/JSON): plan num_generations for it "
                   "(docs/trl.md)")
    p.add_argument("--seed", type=int, default=0, help="seeds the pilot sampling and the bootstrap")
    p.add_argument("--n-boot", type=int, default=1000, help="bootstrap replicates for the intervals")
    p.add_argument("--theta", default=None, help="comma-separated parameters for the pilot (default theta0)")
    p.add_argument("--save-pilot", default=None, help="write the sampled pilot to this .npz")
    p.add_argument("--out", required=True, help="run folder to write")


def run(args: argparse.Namespace, argv: list[str] | None = None) -> dict:
    """Run ``ugrpo plan`` from parsed args; returns results (also used by ``ugrpo demo``)."""
    from ugrpo.experiments.pilot_io import load_pilot, save_pilot
    from ugrpo.experiments.plan import run_plan, sample_pilot, write_plan_outputs

    if args.budget is None:
        raise ValueError("--budget N is required (samples per step N = B*G)")
    sources = [f"--{n}" for n in ("env", "pilot", "model") if getattr(args, n, None) is not None]
    if len(sources) > 1:
        raise ValueError(f"give exactly one of --env, --pilot or --model; got {' and '.join(sources)}")
    if args.model is not None:
        return _run_model(args, argv)
    if args.task is not None or args.task_option:
        raise ValueError("--task and --task-option need --model (a language-model pilot)")
    if args.group is not None:
        from ugrpo.experiments.common import check_divides

        check_divides(args.budget, args.group)
    if args.pilot is not None and args.theta is not None:
        raise ValueError("--theta only applies to --env (a pilot file was sampled at its own theta)")
    cfg = PlanConfig(budget=args.budget, seed=args.seed, n_boot=args.n_boot, env=args.env, pilot=args.pilot,
                     pilot_batch=args.pilot_batch, pilot_group=args.pilot_group, save_pilot=args.save_pilot)
    exact_pm = curve = None
    if cfg.env is not None:
        env = resolve_env(cfg.env)
        theta = parse_theta(args.theta, env)
        if args.theta is not None:
            cfg = replace(cfg, theta=tuple(theta.tolist()))
        gen = torch.Generator().manual_seed(cfg.seed)
        pilot = sample_pilot(env, theta, cfg.pilot_batch, cfg.pilot_group, gen,
                             meta={"env": cfg.env, "theta": theta.tolist(), "seed": cfg.seed})
        if cfg.save_pilot:
            save_pilot(cfg.save_pilot, pilot)
        ex = env.exact(theta, sigma=False)
        exact_pm = ex.policy_moments
        curve = [{"G": G, "mse": ex.mse("grpo", cfg.budget // G, G)}
                 for G in range(2, cfg.budget + 1) if cfg.budget % G == 0]
    else:
        pilot = load_pilot(cfg.pilot)
    rd = RunDir(args.out)
    rd.file("metrics.jsonl").unlink(missing_ok=True)
    rd.write_config({**asdict(cfg), "command": "plan", "argv": argv})
    results = run_plan(pilot, cfg.budget, n_boot=cfg.n_boot, seed=cfg.seed, run=rd, exact_pm=exact_pm,
                       exact_curve=curve, method=getattr(args, "ci_method", "studentized-log"),
                       group=getattr(args, "group", None))
    write_plan_outputs(rd, results, argv)
    return results


def _run_model(args: argparse.Namespace, argv: list[str] | None) -> dict:
    from ugrpo.experiments.lm_plan import LMPlanConfig, parse_task_options, run_lm_plan, write_lm_plan_outputs

    if args.task is None:
        raise ValueError("--model needs --task NAME (e.g. --task arithmetic)")
    if args.pilot_batch is None or args.pilot_group is None:
        raise ValueError("--model needs --pilot-batch B0 and --pilot-group G0 (e.g. 64 and 20)")
    if args.theta is not None or args.save_pilot is not None:
        raise ValueError("--theta and --save-pilot are env-only; --model always writes OUT/pilot.npz")
    cfg = LMPlanConfig(model=args.model, task=args.task, task_options=parse_task_options(args.task_option),
                       pilot_batch=args.pilot_batch, pilot_group=args.pilot_group, budget=args.budget,
                       sketch_dim=args.sketch_dim, seed=args.seed, n_boot=args.n_boot, group=args.group,
                       temperature=args.temperature, max_new_tokens=args.max_new_tokens, chat=args.chat)
    rd = RunDir(args.out)
    rd.file("metrics.jsonl").unlink(missing_ok=True)
    rd.write_config({**asdict(cfg), "command": "plan", "argv": argv})
    results = run_lm_plan(cfg, rd)
    write_lm_plan_outputs(rd, results, argv)
    return results


def _main(args: argparse.Namespace) -> int:
    from ugrpo.report.markdown import fmt_ci, text_table

    if args.trl_config is not None:
        others = [f"--{n}" for n in ("env", "pilot", "model") if getattr(args, n, None) is not None]
        if others:
            raise ValueError(f"--trl-config takes the model and data from the TRL config; drop {' and '.join(others)}")
        from ugrpo.experiments.trl_plan import cli_main

        return cli_main(args, command_line("plan", args))
    r = run(args, command_line("plan", args))
    ex = r.get("exact") or {}
    rows = [[k, r[k]["estimate"], fmt_ci(r[k]["ci_low"], r[k]["ci_high"]), ex.get(k)] for k in ("c1", "c2", "c3")]
    rows.append(["G*", r["g_star"], fmt_ci(*r["g_star_ci"]), ex.get("g_star")])
    print(text_table(["", "pilot", "95% CI", "exact"], rows))
    print(r["message"])
    if "current_group" in r:
        print(r["current_group"]["message"])
    if args.save_pilot:
        print(f"wrote pilot {args.save_pilot}")
    if "pilot_cost" in r:
        pc, sc = r["pilot_cost"], r["step_cost"]
        print(f"pilot: {pc['samples']} samples in {pc['seconds']:.1f} s; one step at N = {r['budget']}: ~{sc['seconds']:.2f} s "
              f"(estimated); pilot saved to {r['pilot_file']}")
    print(f"wrote {args.out}/results.json, plan.png, report.md")
    return 0


def main(args: argparse.Namespace) -> int:
    return guarded(_main, args)
