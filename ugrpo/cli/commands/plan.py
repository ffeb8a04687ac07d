"""``ugrpo plan``: estimate c1, c2, c3 from a pilot and recommend G for a budget N (paper Thm 7).

From an env: ``ugrpo plan --env builtin:demo --pilot-batch 64 --pilot-group 8 --budget 512 --out DIR
[--save-pilot pilot.npz]``. From a saved pilot: ``ugrpo plan --pilot pilot.npz --budget 512 --out DIR``
(format: docs/pilot-format.md). From a language model: ``ugrpo plan --model tiny:instruct --task arithmetic
--pilot-batch 64 --pilot-group 20 --budget 256 --sketch-dim 256 --out DIR`` (writes DIR/pilot.npz).
Parsing only: the flags become a ``PlanConfig`` / ``LMPlanConfig`` and one call of
:func:`ugrpo.experiments.plan.env.plan_experiment` / :func:`ugrpo.experiments.plan.lm.lm_plan_experiment`
(or :func:`ugrpo.experiments.plan.trl.run_trl_plan`).
"""

from __future__ import annotations

import argparse

from ugrpo.experiments.common import check_env_spec, command_line, parse_float_list


def configure(p: argparse.ArgumentParser) -> None:
    from ugrpo.tasks.registry import TASK_NAMES

    p.epilog = ("Sources (exactly one): --env samples a B0 x G0 pilot from an exact synthetic policy (the exact G* is "
                "printed beside the estimate); --pilot reads a saved pilot; --model samples it from a language "
                "model on --task (writes OUT/pilot.npz); --trl-config reads the model, data and reward functions of "
                "a TRL GRPO config and answers with num_generations. Each source's own flags are in its group above.")
    src = p.add_argument_group("the pilot's source (give exactly one)")
    src.add_argument("--env", default=None, help="env JSON (from `ugrpo make-env`) or builtin:demo: sample a pilot at "
                     "theta0 (needs --pilot-batch and --pilot-group)")
    src.add_argument("--pilot", default=None, help="a saved pilot .npz (docs/pilot-format.md; e.g. from --save-pilot)")
    src.add_argument("--model", default=None, help="sample the pilot from a language model: tiny:STRENGTH, a local "
                     "folder or a cached hub id (needs --task, --pilot-batch, --pilot-group; writes OUT/pilot.npz)")
    src.add_argument("--trl-config", default=None, help="a TRL GRPO config (YAML/JSON): plan num_generations for it "
                     "(docs/trl.md; examples/grpo-trl.yaml)")
    common = p.add_argument_group("every source")
    common.add_argument("--budget", type=int, default=None, help="samples per step N = B*G (required; with "
                        "--trl-config the default is per_device_train_batch_size * gradient_accumulation_steps * "
                        "num_processes)")
    common.add_argument("--seed", type=int, default=None, help="seeds the pilot sampling and the bootstrap "
                        "(default 0; with --trl-config it replaces the file's)")
    common.add_argument("--n-boot", type=int, default=None, help="bootstrap replicates for the intervals (default "
                        "1000; with --trl-config it replaces the file's)")
    common.add_argument("--group", type=int, default=None, help="the group size in use (must divide N): says how "
                        "much more gradient error it costs than the best G")
    common.add_argument("--ci-method",
                        choices=("studentized-log", "studentized", "studentized-equal-tailed", "percentile"),
                        default="studentized-log", help="bootstrap intervals of c1, c2, c3 (docs/math.md M39)")
    common.add_argument("--out", required=True, help="run folder to write (results.json, plan.png, report.md)")
    pilot = p.add_argument_group("the sampled pilot (--env, --model; with --trl-config they replace the file's)")
    pilot.add_argument("--pilot-batch", type=int, default=None, help="pilot prompts B0 (>= 2)")
    pilot.add_argument("--pilot-group", type=int, default=None, help="pilot samples per prompt G0 (>= 4)")
    env = p.add_argument_group("with --env")
    env.add_argument("--theta", default=None, help="comma-separated parameters for the pilot (default: theta0)")
    env.add_argument("--save-pilot", default=None, help="write the sampled pilot to this .npz")
    lm = p.add_argument_group("with --model")
    lm.add_argument("--task", default=None, help=f"the task ({', '.join(TASK_NAMES)})")
    lm.add_argument("--task-option", action="append", default=[], metavar="NAME=VALUE",
                    help="a task option, repeatable (e.g. prompt_style=compact)")
    lm.add_argument("--sketch-dim", type=int, default=None, help="sketch dimension k of the scores (default 256; "
                    "with --trl-config it replaces the file's)")
    lm.add_argument("--temperature", type=float, default=1.0, help="sampling temperature")
    lm.add_argument("--max-new-tokens", type=int, default=8, help="completion length cap")
    lm.add_argument("--chat", action="store_true", help="wrap prompts in the chat template")
    lm.add_argument("--chunk-size", type=int, default=None, help="rows per generate call and per backward pass of "
                    "the sketch (default 512; with --trl-config 64); lower it if memory runs out: memory and speed "
                    "only: the same samples, scores equal to float rounding")
    lm.add_argument("--sampling-backend", choices=("hf", "vllm"), default="hf",
                    help="who draws the completions: hf (Hugging Face generate, the policy on the CPU) or vllm (one "
                    "vLLM engine on the GPU, given the policy's weights once; pip install 'ugrpo[vllm]'; docs/vllm.md)")


def _config(args: argparse.Namespace):
    """The flags -> a ``PlanConfig`` (env or pilot file) or an ``LMPlanConfig`` (model)."""
    if args.budget is None:
        raise ValueError("--budget N is required (samples per step N = B*G)")
    seed, n_boot = (0 if args.seed is None else args.seed), (1000 if args.n_boot is None else args.n_boot)
    if args.group is not None:  # before any sampling or bootstrap, one wording for every source
        check_group(args.group, args.budget)
    sources = [f"--{n}" for n in ("env", "pilot", "model") if getattr(args, n, None) is not None]
    if len(sources) > 1:
        raise ValueError(f"give exactly one of --env, --pilot or --model; got {' and '.join(sources)}")
    if args.model is not None:
        from ugrpo.experiments.plan.lm import LMPlanConfig, parse_task_options

        if args.task is None:
            raise ValueError("--model needs --task NAME (e.g. --task arithmetic)")
        if args.pilot_batch is None or args.pilot_group is None:
            raise ValueError("--model needs --pilot-batch B0 and --pilot-group G0 (e.g. 64 and 20)")
        if args.theta is not None or args.save_pilot is not None:
            raise ValueError("--theta and --save-pilot are env-only; --model always writes OUT/pilot.npz")
        return LMPlanConfig(model=args.model, task=args.task, task_options=parse_task_options(args.task_option),
                            pilot_batch=args.pilot_batch, pilot_group=args.pilot_group, budget=args.budget,
                            sketch_dim=256 if args.sketch_dim is None else args.sketch_dim, seed=seed, n_boot=n_boot,
                            group=args.group,
                            temperature=args.temperature, max_new_tokens=args.max_new_tokens, chat=args.chat,
                            sampling_backend=args.sampling_backend,
                            chunk_size=512 if args.chunk_size is None else args.chunk_size)
    if (args.task is not None or args.task_option or args.sampling_backend != "hf" or args.chunk_size is not None
            or args.sketch_dim is not None):
        raise ValueError("--task, --task-option, --sampling-backend, --sketch-dim and --chunk-size need --model (a "
                         "language-model pilot)")
    if args.pilot is not None and args.theta is not None:
        raise ValueError("--theta only applies to --env (a pilot file was sampled at its own theta)")
    if args.pilot is not None and (args.pilot_batch is not None or args.pilot_group is not None):
        raise ValueError("--pilot-batch and --pilot-group shape a pilot that is sampled (--env, --model, "
                         "--trl-config); a saved --pilot is used whole: drop them")
    if args.env is not None:
        check_env_spec(args.env)
    from ugrpo.experiments.plan.env import PlanConfig  # torch: only once the flags are checked

    theta = None if args.theta is None else tuple(parse_float_list(args.theta, name="--theta"))
    return PlanConfig(budget=args.budget, seed=seed, n_boot=n_boot, env=args.env, pilot=args.pilot,
                      pilot_batch=args.pilot_batch, pilot_group=args.pilot_group, save_pilot=args.save_pilot,
                      theta=theta, group=args.group, ci_method=args.ci_method)


def check_group(G: int, N: int) -> None:
    """``--group G`` must be a group size the budget can hold: >= 2 and dividing N."""
    if G < 2:
        raise ValueError(f"--group {G}: a group needs G >= 2 samples (GRPO's baseline leaves one out)")
    from ugrpo.stats.budget import check_divides

    check_divides(N, G, n_name="--budget N", g_name="--group G")


def console_lines(r: dict) -> str:
    """The console answer: the constants (estimates below 0 shown at 0 like their intervals, and said), the G to use
    with its band in one row, then the planner's sentences."""
    from ugrpo.report.markdown import fmt_ci, text_table
    from ugrpo.report.plan import band_words

    ex = r.get("exact") or {}
    rows = [[k, max(r[k]["estimate"], 0.0),
             "-" if r[k]["ci_low"] is None else fmt_ci(r[k]["ci_low"], r[k]["ci_high"]), ex.get(k)]
            for k in ("c1", "c2", "c3")]  # no interval ("-") from a pilot that cannot tell
    band = r.get("band") or {}
    use = "-" if band.get("low") is None else band_words(band)
    rows.append(["G to use", r.get("g_recommended") or "-", use, ex.get("g_star")])
    lines = [text_table(["", "pilot", "95% CI / band", "exact"], rows)]
    lines += [f"({k}'s unbiased estimate is {r[k]['estimate']:.4g}, below 0: shown at 0, the constant's range, like "
              f"its interval)" for k in ("c1", "c2", "c3") if r[k]["estimate"] < 0]
    lines.append(r["message"])
    if r.get("n_boot", 1000) < 200:
        lines.append(f"(only {r['n_boot']} bootstrap replicates: the ends of the 95% intervals rest on a few of them; "
                     "give --n-boot 200 or more for intervals to rely on)")
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    if args.trl_config is not None:
        others = [f"--{n}" for n in ("env", "pilot", "model") if getattr(args, n, None) is not None]
        others += ["--sampling-backend"] if args.sampling_backend != "hf" else []
        if others:
            raise ValueError(f"--trl-config takes the model and data from the TRL config; drop {' and '.join(others)}")
        given = [f"--{k.replace('_', '-')}" for k, default in _NOT_WITH_TRL.items() if getattr(args, k) != default]
        if given:
            raise ValueError(f"--trl-config cannot take {' and '.join(given)}: the TRL config sets what they would "
                             "(num_generations for --group, temperature, max_completion_length, its chat template) or "
                             "they are for another source; drop them (--budget, --pilot-batch, --pilot-group, "
                             "--sketch-dim, --seed, --n-boot and --chunk-size replace the file's values)")
        return _trl(args)
    cfg, argv = _config(args), command_line("plan", args)
    from ugrpo.experiments.plan.env import PlanConfig, plan_experiment
    from ugrpo.experiments.plan.lm import lm_plan_experiment

    if isinstance(cfg, PlanConfig):
        r = plan_experiment(cfg, args.out, argv=argv)
    else:
        r = lm_plan_experiment(cfg, args.out, argv=argv)
    print(console_lines(r))
    if "current_group" in r:
        print(r["current_group"]["message"])
    if args.save_pilot:
        print(f"wrote pilot {args.save_pilot}")
    if "pilot_cost" in r:
        pc, sc = r["pilot_cost"], r["step_cost"]
        print(f"pilot: {pc['samples']} samples in {pc['seconds']:.1f} s; one step at N = {r['budget']}: "
              f"~{sc['seconds']:.2f} s "
              f"(estimated); pilot saved to {r['pilot_file']}")
    print(f"wrote {args.out}/results.json, plan.png, report.md")
    return 0


_NOT_WITH_TRL = {"group": None, "ci_method": "studentized-log", "theta": None, "save_pilot": None, "task": None,
                 "task_option": [], "temperature": 1.0, "max_new_tokens": 8, "chat": False}
"""the flags (and their defaults) whose values --trl-config takes from the TRL config: given, they are an error"""


def _trl(args: argparse.Namespace) -> int:
    """``ugrpo plan --trl-config FILE --out DIR [--budget N] [--pilot-batch B0] [--pilot-group G0] [--sketch-dim K]
    [--seed S] [--n-boot R] [--chunk-size R]``: the flags given (their defaults are None) replace the file's values
    (its ``ugrpo:`` block, or TRL's default budget); report.md's command lists just those."""
    from pathlib import Path

    if not Path(args.trl_config).is_file():  # before the TRL plan's imports (torch, transformers: seconds)
        raise FileNotFoundError(f"--trl-config {args.trl_config}: file not found")
    from ugrpo.experiments.plan.trl import run_trl_plan

    if args.chunk_size is not None and args.chunk_size < 1:
        raise ValueError(f"--chunk-size {args.chunk_size}: rows per pass must be >= 1")
    argv = ["ugrpo", "plan", "--trl-config", str(args.trl_config), "--out", str(args.out)]  # what this run read
    given = ("budget", "pilot_batch", "pilot_group", "sketch_dim", "seed", "n_boot", "chunk_size")
    argv += [t for k in given if getattr(args, k) is not None
             for t in (f"--{k.replace('_', '-')}", str(getattr(args, k)))]
    r = run_trl_plan(args.trl_config, args.out, argv=argv, budget=args.budget,
                     pilot_batch=args.pilot_batch, pilot_group=args.pilot_group, sketch_dim=args.sketch_dim,
                     seed=args.seed, n_boot=args.n_boot,
                     chunk_size=64 if args.chunk_size is None else args.chunk_size)
    for k in ("c1", "c2", "c3"):
        e = r[k]
        note = f" (unbiased estimate {e['estimate']:.4g}, below 0: shown at 0 like its interval)" if e["estimate"] < 0 \
            else ""
        ci = "no interval (the pilot cannot tell)" if e["ci_low"] is None else \
            f"95% CI [{e['ci_low']:.4g}, {e['ci_high']:.4g}]"
        print(f"{k} = {max(e['estimate'], 0.0):.4g}  {ci}{note}")
    print(r["trl"]["message"])
    print(f"wrote {args.out}/results.json (key 'trl'), plan.png, report.md")
    return 0
