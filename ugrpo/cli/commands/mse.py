"""``ugrpo mse``: Monte-Carlo gradient MSE of vanilla/grpo/grpo_mean/oracle per G (paper Fig. 4).

Example: ``ugrpo mse --env builtin:demo --groups 2,4,8,16,32,64 --batch 8 --reps 2000 --out runs/mse``.
On a language model: ``ugrpo mse --model tiny:instruct --task arithmetic --groups 4,8,16,32,64 --batch 8
--reps 30 --ref-samples 256 --prompts 32 --sketch-dim 256 --out runs/lm-mse`` (docs/lm-mse.md); add
``--groups 8,32 --allocation uniform,vip,knapsack,ustat`` for per-prompt group sizes at equal samples.
Parsing only: the flags become an ``MSEConfig`` or ``LMMSEConfig`` and one call of
:func:`ugrpo.experiments.mse.env.mse_experiment` or :func:`ugrpo.experiments.mse.lm.lm_mse_experiment`.
"""

from __future__ import annotations

import argparse

from ugrpo.cli.options import parse_bool
from ugrpo.experiments.common import check_env_spec, command_line, parse_float_list, parse_int_list


def configure(p: argparse.ArgumentParser) -> None:
    from ugrpo.tasks.registry import TASK_NAMES

    p.add_argument("--env", default=None, help="env JSON (from `ugrpo make-env`) or builtin:demo (the default)")
    p.add_argument("--model", default=None, help="a language model instead of an env: tiny:STRENGTH, a local folder "
                   "or a cached hub id (docs/lm-mse.md)")
    p.add_argument("--task", default=None, help=f"with --model: the task ({', '.join(TASK_NAMES)})")
    p.add_argument("--task-option", action="append", default=[], metavar="NAME=VALUE",
                   help="with --model: a task option, repeatable (e.g. prompt_style=compact)")
    p.add_argument("--groups", default=None, help="comma-separated group sizes G (each >= 2); default 2,4,8,16,32,64 "
                   "(env) or 4,8,16,32,64 (model)")
    p.add_argument("--batch", type=int, default=8, help="prompts per minibatch B")
    p.add_argument("--reps", type=int, default=None, help="independent minibatches R per G (default 1000 env, 30 "
                   "model)")
    p.add_argument("--ref-samples", type=int, default=256, help="with --model: reference samples M per prompt")
    p.add_argument("--prompts", type=int, default=32, help="with --model: the fixed prompt set size P (uniform over "
                   "it)")
    p.add_argument("--sketch-dim", type=int, default=256, help="with --model: sketch dimension k of the scores")
    p.add_argument("--temperature", type=float, default=1.0, help="with --model: sampling temperature")
    p.add_argument("--max-new-tokens", type=int, default=8, help="with --model: completion length cap")
    p.add_argument("--chat", action="store_true", help="with --model: wrap prompts in the chat template")
    p.add_argument("--chunk-size", type=int, default=None, help="with --model: rows per generate call and per "
                   "backward pass of the sketch (default 512); lower it if memory runs out: memory and speed only, "
                   "the same samples, scores equal to float rounding")
    p.add_argument("--sampling-backend", choices=("hf", "vllm"), default="hf", help="with --model: who draws the "
                   "completions: hf (Hugging Face generate, the policy on the CPU) or vllm (one vLLM engine on the "
                   "GPU for the whole run, given the policy's weights once; pip install 'ugrpo[vllm]'; docs/vllm.md)")
    from ugrpo.stats.allocation import RULES

    p.add_argument("--allocation", default=None, metavar="RULES", help="with --model: compare per-prompt allocation "
                   f"rules at equal samples N = B x G, comma-separated among {','.join(RULES)} (one study per "
                   "G of --groups below --g-max; docs/lm-mse.md R8-R10)")
    p.add_argument("--g-min", type=int, default=2, help="with --allocation: smallest G_b")
    p.add_argument("--g-max", type=int, default=None, help="with --allocation: largest G_b (default and at most: "
                   "the block size max(--groups))")
    p.add_argument("--history-visits", type=int, default=2, help="with --allocation: simulated earlier visits per "
                   "prompt for the predicted moments")
    p.add_argument("--history-group", type=int, default=4, help="with --allocation: samples per history visit")
    p.add_argument("--is-lambda", type=float, default=0.1, help="with --allocation uniform-is/ustat-is: the defensive "
                   "floor q(x) >= lambda/P, in (0, 1] (docs/math.md M55)")
    p.add_argument("--is-guard", default="true", help="with --allocation uniform-is/ustat-is, predicted moments: "
                   "true = the held-out guard picks the law (docs/math.md M78; sizes >= 3), false = the posterior's "
                   "law unchecked")
    p.add_argument("--seed", type=int, default=0, help="seed of the Monte-Carlo samples (one stream per G)")
    p.add_argument("--theta", default=None, help="comma-separated parameters (length D); default: the env's theta0")
    p.add_argument("--out", required=True, help="run folder to write")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def _config(args: argparse.Namespace):
    """The flags -> an ``MSEConfig`` (env) or an ``LMMSEConfig`` (model)."""
    if args.model is not None:
        from ugrpo.experiments.mse.lm import LMMSEConfig
        from ugrpo.experiments.plan.lm import parse_task_options

        if args.env is not None or args.theta is not None:
            raise ValueError("give either --env (a synthetic policy) or --model (a language model), not both; "
                             "--theta is env-only")
        if args.task is None:
            raise ValueError("--model needs --task NAME (e.g. --task arithmetic)")
        return LMMSEConfig(model=args.model, task=args.task, task_options=parse_task_options(args.task_option),
                           groups=tuple(parse_int_list("4,8,16,32,64" if args.groups is None else args.groups,
                                                       name="--groups", minimum=2)),
                           batch=args.batch, reps=30 if args.reps is None else args.reps,
                           ref_samples=args.ref_samples, prompts=args.prompts, sketch_dim=args.sketch_dim,
                           seed=args.seed, temperature=args.temperature, max_new_tokens=args.max_new_tokens,
                           chat=args.chat, allocation=_rules(args.allocation), g_min=args.g_min, g_max=args.g_max,
                           history_visits=args.history_visits, history_group=args.history_group,
                           is_lambda=args.is_lambda, is_guard=parse_bool(args.is_guard, "--is-guard"),
                           sampling_backend=args.sampling_backend,
                           chunk_size=512 if args.chunk_size is None else args.chunk_size)
    from ugrpo.experiments.mse.env import MSEConfig

    if args.task is not None or args.task_option or args.sampling_backend != "hf" or args.chunk_size is not None:
        raise ValueError("--task, --task-option, --sampling-backend and --chunk-size need --model (an env has no "
                         "task)")
    if args.allocation is not None:
        raise ValueError("--allocation needs --model (on an exact env use `ugrpo allocate --env FILE`)")
    theta = None if args.theta is None else tuple(parse_float_list(args.theta, name="--theta"))
    return MSEConfig(env=args.env or "builtin:demo",
                     groups=tuple(parse_int_list("2,4,8,16,32,64" if args.groups is None else args.groups,
                                                 name="--groups", minimum=2)),  # '' is an error, not the default
                     batch=args.batch, reps=1000 if args.reps is None else args.reps, seed=args.seed, theta=theta)


def _rules(text: str | None) -> tuple[str, ...]:
    """``--allocation a,b`` -> ('a', 'b'); '' is an error (not 'no study')."""
    if text is None:
        return ()
    rules = tuple(r.strip() for r in text.split(","))
    if not all(rules):
        raise ValueError(f"--allocation {text!r}: give comma-separated rule names, e.g. uniform,vip,knapsack,ustat")
    return rules


_MODEL_ONLY = ("--ref-samples", "--prompts", "--sketch-dim", "--temperature", "--max-new-tokens", "--chat",
               "--chunk-size", "--sampling-backend", "--g-min", "--g-max", "--history-visits", "--history-group",
               "--is-lambda", "--is-guard")
"""flags that only a --model run reads (their defaults would otherwise appear in an env run's recorded command)"""


def _without(argv: list[str], flags) -> list[str]:
    """``argv`` without ``flags`` and their values (a flag's value is the next token unless it is a flag itself)."""
    out, skip = [], False
    for i, tok in enumerate(argv):
        if skip:
            skip = False
            continue
        if tok in flags:
            skip = i + 1 < len(argv) and not argv[i + 1].startswith("--")
            continue
        out.append(tok)
    return out


def main(args: argparse.Namespace) -> int:
    if getattr(args, "env", None) is not None:
        check_env_spec(args.env)  # a missing file: said before torch is imported
    from ugrpo.report.markdown import fmt_ci, text_table

    cfg, argv = _config(args), command_line("mse", args)
    if args.model is None:  # an env run's record leaves out the language-model flags it did not use
        argv = _without(argv, _MODEL_ONLY)
    if args.model is not None:
        from ugrpo.experiments.mse.lm import lm_mse_experiment

        results = lm_mse_experiment(cfg, args.out, argv=argv, progress=not args.no_progress)
        print(text_table(["G", "estimator", "MSE", "95% CI", "predicted"],
                         [[r["G"], r["estimator"], r["mse"], fmt_ci(r["ci_low"], r["ci_high"]), r["predicted"]]
                          for r in results["rows"]]))
        if results.get("allocation"):
            from ugrpo.report.mse import allocation_table, skipped_note

            print("allocation, total MSE:")
            print(text_table(*allocation_table(results["allocation"])))
            print("allocation, within the drawn prompts (no c1/B):")
            print(text_table(*allocation_table(results["allocation"], "within")))
            if results["allocation"].get("is_rows"):
                from ugrpo.report.mse import is_table

                print("prompt importance sampling, total MSE (docs/lm-mse.md R11):")
                print(text_table(*is_table(results["allocation"])))
            if skipped_note(results["allocation"]):
                print(skipped_note(results["allocation"]))
    else:
        from ugrpo.experiments.mse.env import mse_experiment
        from ugrpo.report.mse import table_rows

        results = mse_experiment(cfg, args.out, argv=argv, progress=not args.no_progress)
        print(text_table(["G", "estimator", "MC MSE", "95% CI", "exact"], table_rows(results)))
    print(f"wrote {args.out}/results.json, mse.png, report.md")
    return 0
