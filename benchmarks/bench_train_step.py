"""One GRPO training step: ugrpo vs TRL's ``GRPOTrainer`` vs the bare floor (issue 3).

What is timed, on the same tiny model (same initial weights, one copy each), the same
compact arithmetic prompts (``ugrpo.tasks`` arithmetic, ``prompt_style="compact"``), the
same verifier, B prompts x G completions of at most ``max_new_tokens`` tokens, and
TRL-equivalent settings on both sides (docs/trl-equivalence.md: group-mean advantage /
group std (ddof 1) + 1e-4, token-mean loss = TRL's default ``dapo``, no KL, one update
per batch, AdamW with the same learning rate):

* **ugrpo**: the body of one step of ``ugrpo.train.loop.train`` (``choose_prompts`` ->
  ``sample_groups`` -> ``score`` -> ``compute_advantages`` -> ``update_on_rows``), called
  here directly because the loop has no single-step entry point; each stage is also timed.
* **TRL**: ``GRPOTrainer.train()`` for ``warmup + repeats`` steps; one step is the wall time
  between two ``on_step_end`` callbacks, minus what the callback itself spends (the
  callback runs the ugrpo step and the floor, so the three alternate step by step).
  TRL runs with ``gradient_checkpointing=False`` (its default ``True`` only slows a tiny model)
  and ``bf16=False`` (needed on CPU).
* **floor**: one bare ``model.generate(do_sample=True)`` of the same B*G completions plus
  one bare forward and backward over the same tokens (no verifier, no optimizer).

ugrpo shares each prompt across its group (``sample_groups`` prefills each prompt once and
``completion_logprobs`` runs it once, with gradient, under the G completions), so it does
*less* work than the floor, which runs every prompt G times: ``overhead_vs_floor < 1`` is
expected (the JSON says so in ``note``).

Written to ``benchmarks/results/local/train_step.json`` (reference: ``benchmarks/results/train_step.json``):
``speedup_vs_trl`` (ugrpo samples/s over
TRL samples/s, i.e. median TRL step time / median ugrpo step time), ``overhead_vs_floor``
(median ugrpo step time / median floor time), the raw per-repeat times, medians, the ugrpo
stage breakdown, sizes and versions.

Run: ``HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_train_step.py`` (about 30 s, up to 1.5 minutes
on the shared 2-core machine; ``--help`` for the sizes). Timings there are noisy: other work
shares the cores (``load_average`` in the JSON), which is why the three kinds of step alternate
and medians are reported.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
from tqdm.auto import tqdm  # noqa: E402

from ugrpo.lm.sampling import sample_groups  # noqa: E402
from ugrpo.lm.tiny import build_tiny_model  # noqa: E402
from ugrpo.lm.tokenizer import build_char_tokenizer  # noqa: E402
from ugrpo.stats.advantages import compute_advantages  # noqa: E402
from ugrpo.tasks.base import score  # noqa: E402
from ugrpo.tasks.registry import get_task  # noqa: E402
from ugrpo.train.config import BudgetConfig, LossConfig, ModelConfig, OptimConfig, SamplingConfig, TrainConfig  # noqa: E402
from ugrpo.train.distributed import DistContext  # noqa: E402
from ugrpo.train.loop import choose_prompts, prompt_seed  # noqa: E402
from ugrpo.train.setup import make_optimizer, make_scheduler  # noqa: E402
from ugrpo.train.update import global_denominator, update_on_rows  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "local" / "train_step.json"  # untracked (benchmarks/common.py)


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--prompts", "-B", type=int, default=8, help="B, prompts per step")
    p.add_argument("--group-size", "-G", type=int, default=8, help="G, completions per prompt")
    p.add_argument("--max-new-tokens", type=int, default=8, help="completion token limit (TRL max_completion_length)")
    p.add_argument("--repeats", type=int, default=10, help="timed steps of each kind")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps of each kind first")
    p.add_argument("--size", choices=["1m", "4m"], default="1m", help="tiny model size")
    p.add_argument("--lr", type=float, default=1e-5, help="AdamW learning rate (both trainers)")
    p.add_argument("--threads", type=int, default=1,
                   help="torch.set_num_threads (default 1: on a shared 2-core machine more threads oversubscribe; 0 = "
                   "torch's default)")
    p.add_argument("--budget-s", type=float, default=150.0,
                   help="stop after the step that crosses this many seconds of stepping (the repeats done are "
                   "reported)")
    p.add_argument("--out", type=Path, default=RESULTS, help="where to write the JSON")
    a = p.parse_args(argv)
    for name in ("prompts", "group_size", "max_new_tokens", "repeats"):
        if getattr(a, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(a, name)}")
    if a.group_size < 2:
        p.error(f"--group-size must be >= 2 for a group baseline, got {a.group_size}")
    if a.warmup < 0:
        p.error(f"--warmup must be >= 0, got {a.warmup}")
    return a


class UgrpoStep:
    """The per-step body of ``ugrpo.train.loop.train`` on one model (Algorithm 1, one update)."""

    def __init__(self, cfg: TrainConfig, model, tok, task, problems):
        self.cfg, self.model, self.tok, self.task, self.problems = cfg, model, tok, task, problems
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = make_optimizer(cfg.optim, self.params)
        self.scheduler = make_scheduler(cfg.optim, self.optimizer, cfg.steps)
        self.ctx = DistContext()
        self.stages: dict[str, list[float]] = {"sample": [], "score": [], "advantages": [], "update": []}
        self.last_rollout = None

    def __call__(self, step: int) -> None:
        cfg, G, B = self.cfg, self.cfg.budget.group_size, self.cfg.prompts_per_step
        t0 = time.perf_counter()
        idx = choose_prompts(len(self.problems), B, cfg.seed, step)  # (B,)
        problems = [self.problems[i] for i in idx]
        rollout = sample_groups(
            self.model, self.tok, [p.prompt for p in problems], G, seeds=[prompt_seed(cfg.seed, step,
                                                                                      b) for b in range(B)],
            temperature=cfg.sampling.temperature, top_p=cfg.sampling.top_p, max_new_tokens=cfg.sampling.max_new_tokens,
        )
        t1 = time.perf_counter()
        sc = score(self.task, rollout.texts, [p for p in problems for _ in range(G)])
        rewards = torch.tensor(sc.rewards, dtype=torch.float64).view(-1, G)  # (B, G)
        t2 = time.perf_counter()
        adv = compute_advantages(
            rewards, baseline=cfg.baseline, scale=cfg.scale, ddof=cfg.ddof, eps=cfg.eps, zero_std=cfg.zero_std
        )
        advantages = adv.advantages.reshape(-1).float()  # (B*G,)
        t3 = time.perf_counter()
        rows = torch.arange(B * G)
        denom = global_denominator(cfg, rollout, rows, B * G, self.ctx)
        update_on_rows(
            self.model, self.params, self.optimizer, rollout, rows, advantages, logp_old=None, logp_ref=None,
            denominator=denom, cfg=cfg, ctx=self.ctx,
        )
        self.scheduler.step()
        t4 = time.perf_counter()
        for k, v in zip(self.stages, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
            self.stages[k].append(v)
        self.last_rollout = rollout


def floor_step(model, tok, rollout, max_new_tokens: int) -> tuple[float, float]:
    """Bare ``generate`` of the same N rows, then one forward/backward over the same tokens.

    Returns the two times in seconds: (generate, forward + backward).
    """
    t0 = time.perf_counter()
    with torch.no_grad():
        model.eval()
        model.generate(
            input_ids=rollout.prompt_ids, attention_mask=rollout.prompt_mask, do_sample=True, top_k=0, top_p=1.0,
            max_new_tokens=max_new_tokens, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
        )
    model.train()
    t1 = time.perf_counter()
    ids = torch.cat([rollout.prompt_ids, rollout.completion_ids], dim=1)  # (N, P+T)
    attn = torch.cat([rollout.prompt_mask, rollout.completion_mask], dim=1)
    T = rollout.completion_ids.shape[1]
    logits = model(input_ids=ids, attention_mask=attn, logits_to_keep=T + 1).logits[:, :-1]  # (N, T, V)
    logp = torch.log_softmax(logits.float(), -1).gather(-1, rollout.completion_ids.unsqueeze(-1)).squeeze(-1)
    (logp * rollout.completion_mask).sum().backward()
    model.zero_grad(set_to_none=True)
    return t1 - t0, time.perf_counter() - t1


def build_trl(model, tok, task, problems, args, n_steps: int, out_dir: Path, *, gradient_checkpointing: bool):
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    def arithmetic_reward(prompts, completions, pid, **kwargs):
        return score(task, completions, [problems[i] for i in pid]).rewards

    N = args.prompts * args.group_size
    config = GRPOConfig(
        output_dir=str(out_dir),
        per_device_train_batch_size=N,
        num_generations=args.group_size,
        max_completion_length=args.max_new_tokens,
        max_steps=n_steps,
        learning_rate=args.lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        adam_beta1=0.9,
        adam_beta2=0.999,
        max_grad_norm=1e9,
        loss_type="dapo",
        scale_rewards="group",
        beta=0.0,
        num_iterations=1,
        temperature=1.0,
        bf16=False,
        use_cpu=True,
        gradient_checkpointing=gradient_checkpointing,
        report_to="none",
        save_strategy="no",
        logging_steps=10,
        disable_tqdm=True,
        dataloader_num_workers=0,
        seed=0,
    )
    data = Dataset.from_dict({"prompt": [p.prompt for p in problems], "pid": list(range(len(problems)))})
    return GRPOTrainer(model=model, reward_funcs=arithmetic_reward, args=config, train_dataset=data,
                       processing_class=tok)


def _median(xs: list[float]) -> float:
    return float(statistics.median(xs))


def main(argv: list[str] | None = None) -> dict:
    args = _args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    from transformers import TrainerCallback, set_seed

    B, G, T = args.prompts, args.group_size, args.max_new_tokens
    N = B * G
    n_steps = args.warmup + args.repeats
    task = get_task("arithmetic", prompt_style="compact")
    problems = task.train_problems()
    tok = build_char_tokenizer()
    base = build_tiny_model(tok, size=args.size, seed=0)
    n_params = sum(p.numel() for p in base.parameters())
    cfg = TrainConfig(
        model=ModelConfig(name="built-in-code", device="cpu", chat=False),
        budget=BudgetConfig(samples_per_step=N, group_size=G),
        sampling=SamplingConfig(temperature=1.0, top_p=1.0, max_new_tokens=T),
        loss=LossConfig(aggregation="token_mean"),
        optim=OptimConfig(name="adamw", lr=args.lr, weight_decay=0.0),
        steps=n_steps + 1,
        baseline="grpo_mean", scale="std", ddof=1, eps=1e-4, zero_std="eps",
    )
    ugrpo_step = UgrpoStep(cfg, copy.deepcopy(base), tok, task, problems)
    floor_model = copy.deepcopy(base)
    t_all = time.perf_counter()
    load_start = os.getloadavg()[0]

    def run_pass(name: str, gradient_checkpointing: bool, budget_s: float) -> dict[str, list[float]]:
        """``trainer.train()`` of TRL; after each of its steps one ugrpo step and one floor step."""
        times: dict[str, list[float]] = {"ugrpo": [], "trl": [], "floor": [], "floor_generate": [], "floor_fwd_bwd": []}
        set_seed(0)
        tmp = tempfile.TemporaryDirectory(prefix="ugrpo-bench-trl-")
        trainer = build_trl(
            copy.deepcopy(base), tok, task, problems, args, n_steps, Path(tmp.name),
            gradient_checkpointing=gradient_checkpointing
        )
        bar = tqdm(total=n_steps, desc=f"train-step bench ({name})", unit="step")
        t_pass = time.perf_counter()

        class Alternate(TrainerCallback):
            """After each TRL step: one ugrpo step and one floor step; TRL's time excludes them."""

            def on_train_begin(self, a, state, control, **kw):
                self.t = time.perf_counter()
                self.k = 0

            def on_step_end(self, a, state, control, **kw):
                times["trl"].append(time.perf_counter() - self.t)
                self.k += 1
                t0 = time.perf_counter()
                ugrpo_step(len(ugrpo_step.stages["update"]) + 1)
                times["ugrpo"].append(time.perf_counter() - t0)
                gen, fwd_bwd = floor_step(floor_model, tok, ugrpo_step.last_rollout, T)
                times["floor_generate"].append(gen)
                times["floor_fwd_bwd"].append(fwd_bwd)
                times["floor"].append(gen + fwd_bwd)
                bar.update(1)
                bar.set_postfix(trl=f"{times['trl'][-1]:.3f}s", ugrpo=f"{times['ugrpo'][-1]:.3f}s",
                                floor=f"{times['floor'][-1]:.3f}s")
                if time.perf_counter() - t_pass > budget_s and self.k >= args.warmup + 1:
                    control.should_training_stop = True  # out of time: keep what was measured, say so in the JSON
                self.t = time.perf_counter()

        trainer.add_callback(Alternate())
        trainer.train()
        bar.close()
        tmp.cleanup()
        W = args.warmup
        if len(times["ugrpo"]) - W < args.repeats:
            print(f"warning ({name}): time budget reached after {len(times['ugrpo']) - W} of {args.repeats} timed "
                  "repeats")
        return times

    # main pass: TRL configured like ugrpo (no gradient checkpointing); second pass: TRL's default checkpointing on
    main_times = run_pass("trl like-for-like", False, args.budget_s * 2 / 3)
    gc_times = run_pass("trl gradient_checkpointing=True", True, args.budget_s / 3) if args.budget_s > 0 else None
    wall = time.perf_counter() - t_all

    W = args.warmup
    timed = {k: v[W:] for k, v in main_times.items()}
    med = {k: _median(v) for k, v in timed.items()}
    stages = {k: _median(v[W:]) for k, v in ugrpo_step.stages.items()}
    gc_timed = {k: v[W:] for k, v in gc_times.items()} if gc_times else None
    import transformers
    import trl

    result = {
        "speedup_vs_trl": med["trl"] / med["ugrpo"],
        "overhead_vs_floor": med["ugrpo"] / med["floor"],
        "goal": {"speedup_vs_trl": ">= 1.5", "overhead_vs_floor": "<= 1.2"},
        "note": (
            "ugrpo shares each prompt across its G completions (one prefill per prompt in sample_groups, one "
            "prompt forward/backward per prompt in completion_logprobs); the floor (bare generate + one bare "
            "forward/backward) runs every prompt G times, so ugrpo now does less work than the floor and "
            "overhead_vs_floor < 1 is expected"
        ),
        "trl_overhead_vs_floor": med["trl"] / med["floor"],
        "median_step_s": med,
        "samples_per_s": {k: N / med[k] for k in ("ugrpo", "trl", "floor")},
        "ugrpo_stage_median_s": stages,
        "raw_step_s": timed,
        "warmup_step_s": {k: v[:W] for k, v in main_times.items()},
        "trl_gradient_checkpointing": None if gc_timed is None else {
            "note": "TRL's own default gradient_checkpointing=True, alternated with ugrpo steps in a second pass",
            "speedup_vs_trl": _median(gc_timed["trl"]) / _median(gc_timed["ugrpo"]),
            "median_step_s": {k: _median(gc_timed[k]) for k in ("ugrpo", "trl", "floor")},
            "raw_step_s": {k: gc_timed[k] for k in ("ugrpo", "trl")},
        },
        "sizes": {
            "B": B, "G": G, "N": N, "max_new_tokens": T, "repeats": len(timed["ugrpo"]), "repeats_asked": args.repeats,
            "warmup": W,
            "model": f"tiny Qwen2 {args.size}, random init (seed 0)", "n_params": n_params,
            "task": "arithmetic, prompt_style=compact",
        },
        "settings": {
            "ugrpo": "baseline=grpo_mean scale=std ddof=1 eps=1e-4 zero_std=eps aggregation=token_mean adamw",
            "trl": "loss_type=dapo scale_rewards=group beta=0 num_iterations=1 gradient_checkpointing=False bf16=False",
        },
        "versions": {
            "python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__,
            "trl": trl.__version__, "torch_threads": torch.get_num_threads(), "cpu_count": os.cpu_count(),
            "machine": platform.machine(),
        },
        "wall_s": wall,
        "load_average_1m": {"start": load_start, "end": os.getloadavg()[0]},
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    keys = ("speedup_vs_trl", "overhead_vs_floor", "trl_overhead_vs_floor", "median_step_s", "ugrpo_stage_median_s")
    print(json.dumps({k: result[k] for k in keys}, indent=2))
    if result["trl_gradient_checkpointing"]:
        print("vs TRL with gradient_checkpointing=True: "
              "speedup", round(result["trl_gradient_checkpointing"]["speedup_vs_trl"], 3))
    print(f"wrote {args.out}")
    return result


if __name__ == "__main__":
    main()
