"""``ugrpo plan --model``: a pilot from a language model -> c1, c2, c3 -> the group size G for a budget N.

The pilot is B0 prompts drawn iid uniformly (with replacement, seeded) from the task's training
problems, G0 completions each, sampled at the frozen policy; every completion is scored with the
task's verifier and its score W = grad log pi(Y|x) is sketched (``ugrpo.lm.sketch``, k rows, E[S^T S] = I,
one batched backward), which keeps the unbiased estimates of :mod:`ugrpo.stats.components` unbiased
(docs/math.md M19). The planner itself is the synthetic one (:func:`ugrpo.experiments.plan.env.run_plan`);
the pilot is saved as ``pilot.npz`` (docs/pilot-format.md, sketched scores) so that
``ugrpo plan --pilot DIR/pilot.npz --budget N2`` re-plans without sampling again.

Costs: the pilot's (samples; seconds of sampling, scoring and sketching) and one training step at
budget N, *estimated* from the pilot's per-sample rates: N x (generation seconds per pilot sample)
+ N x (seconds per row of one measured batched forward + backward over the pilot's rows).

Sampling backend (``--sampling-backend``, :func:`ugrpo.lm.vllm_engine.frozen_sampler`): ``hf`` draws with Hugging
Face ``generate`` from the policy on the CPU; ``vllm`` from one vLLM engine built with the policy's weights, which
then lives on the GPU (its scoring and sketching too); docs/vllm.md.

This module also holds the sample -> score -> sketch pass shared with ``ugrpo mse --model``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import Tensor
from tqdm.auto import tqdm

from ugrpo.console import logs_above_bar
from ugrpo.runlock import check_claim
from ugrpo.runs import RunDir, to_jsonable
from ugrpo.stats.band import check_n_boot
from ugrpo.stats.seeds import derive_seed
from ugrpo.tasks.custom_check import check_named_task

__all__ = ["LMPlanConfig", "SketchedSamples", "parse_task_options", "load_lm_task", "sample_sketched",
           "sample_lm_pilot", "run_lm_plan", "lm_plan_experiment", "SAMPLING_BACKENDS", "check_backend",
           "policy_device", "require_backend", "FrozenPolicy", "load_frozen", "check_lm_run"]

DT = torch.float64
SAMPLING_BACKENDS = ("hf", "vllm")
"""``--sampling-backend`` of ``plan --model`` / ``mse --model`` (``sampling.backend`` of ``train``)"""


def check_backend(backend: str) -> None:
    """A ValueError for an unknown ``--sampling-backend``."""
    if backend not in SAMPLING_BACKENDS:
        raise ValueError(f"--sampling-backend {backend!r}: choose one of {', '.join(SAMPLING_BACKENDS)}")


def policy_device(backend: str) -> str:
    """Where the frozen policy (its scoring and sketching) lives: the CPU for ``hf`` (as before the option
    existed), this process's GPU for ``vllm`` (vLLM needs the policy on CUDA)."""
    return "cuda" if backend == "vllm" and torch.cuda.is_available() else "cpu"


def require_backend(backend: str) -> None:
    """``vllm`` missing or no CUDA: the :class:`~ugrpo.errors.UserError` of ``train``'s vllm path, naming
    ``--sampling-backend``, before any run folder is written."""
    if backend == "vllm":
        from ugrpo.lm.vllm_engine import require_vllm

        require_vllm(None, option="--sampling-backend")


def parse_task_options(items: Sequence[str]) -> dict[str, Any]:
    """``["k=v", ...]`` -> dict; values are read as YAML scalars (``200`` -> int, ``compact`` -> str)."""
    import yaml

    out: dict[str, Any] = {}
    for it in items or ():
        if "=" not in it:
            raise ValueError(f"--task-option {it!r}: expected NAME=VALUE, e.g. --task-option prompt_style=compact")
        k, v = it.split("=", 1)
        try:
            out[k.strip()] = yaml.safe_load(v)
        except yaml.YAMLError:
            out[k.strip()] = v
    return out


def load_lm_task(model: str, task: str, options: dict[str, Any]):
    """(Task, resolved options) for a model; a tiny warm model's own task options are the defaults.

    Only the task is built: callers check it before loading the model with ``load_policy``.
    """
    import json
    from pathlib import Path

    from ugrpo.tasks.registry import get_task

    if model.startswith("tiny:"):
        from ugrpo.lm.tiny_cache import tiny_model_path

        folder = tiny_model_path(model.split(":", 1)[1])
    else:
        folder = Path(model)
    meta = folder / "ugrpo_tiny.json"
    defaults = json.loads(meta.read_text()).get("task_options", {}) if task == "arithmetic" and meta.is_file() else {}
    opts = {**defaults, **options}
    try:
        t = get_task(task, **opts)
    except TypeError as e:  # unknown option: get_task lists the valid ones
        raise ValueError(f"--task-option: {e}") from None
    return t, opts


@dataclass(frozen=True, eq=False)
class SketchedSamples:
    """Samples of B prompts x G each with rewards (B, G), sketched scores (B, G, k) and costs."""

    rewards: Tensor
    scores: Tensor
    lengths: Tensor
    n_unscorable: int
    seconds: dict[str, float]
    rollout: Any = None


def check_context(policy, problems, max_new_tokens: int, chat: bool) -> int:
    """Every prompt + ``max_new_tokens`` must fit the model's context (as ``train`` checks): a ValueError names the
    first problem that does not, before any sampling. Returns the longest prompt + ``max_new_tokens`` in tokens (a
    vLLM engine's ``max_model_len``)."""
    from ugrpo.lm.loading import context_length, format_prompt

    context = context_length(policy.model)
    tok = policy.tokenizer
    lengths = [len(ids) for ids in tok([format_prompt(tok, p.prompt, chat=chat) for p in problems])["input_ids"]]
    if context is None:
        return max(lengths) + max_new_tokens
    too_long = [(p, n) for p, n in zip(problems, lengths) if n + max_new_tokens > context]
    if too_long:
        p, n = too_long[0]
        raise ValueError(f"problem {p.id!r}: prompt has {n} tokens + --max-new-tokens {max_new_tokens} > model "
                         f"context {context} ({len(too_long)} problem(s) too long); lower --max-new-tokens or use a "
                         "model with a longer context")
    return max(lengths) + max_new_tokens


@dataclass(frozen=True, eq=False)
class FrozenPolicy:
    """What ``plan --model`` and ``mse --model`` load and check before their run folder: the task, its resolved
    options, the problems the run samples from, the policy, and the longest prompt + completion in tokens."""

    task: Any
    options: dict
    problems: list
    policy: Any
    longest: int


def load_frozen(model: str, task: str, options: dict[str, Any], *, seed: int, backend: str, max_new_tokens: int,
                chat: bool, prompts: int | None = None) -> FrozenPolicy:
    """The task (its first ``prompts`` training problems, or all), the policy, and the prompt-length check: every
    input error that needs the model (a missing model, a prompt too long for its context) raised here, before the
    caller writes anything (as ``train`` loads its model before it claims its folder)."""
    from ugrpo.lm.loading import load_policy

    t, opts = load_lm_task(model, task, dict(options))
    problems = t.train_problems()
    if not problems:
        raise ValueError(f"task {task!r} has no training problems; check --task-option")
    if prompts is not None:
        if len(problems) < prompts:
            raise ValueError(f"--prompts P = {prompts} but task {task!r} has only {len(problems)} training problems; "
                             "lower --prompts or raise --task-option n_train")
        problems = problems[:prompts]
    policy = load_policy(model, seed=seed, device=policy_device(backend))
    return FrozenPolicy(t, opts, problems, policy, check_context(policy, problems, max_new_tokens, chat))


def check_lm_run(cfg: Any, out: str, config: dict[str, Any], *, prompts: int | None = None) -> FrozenPolicy:
    """Every check of ``plan --model`` / ``mse --model`` (``cfg``: an ``LMPlanConfig`` or ``LMMSEConfig``) before
    the run folder ``out`` is created: the backend, a custom task's reward function, the folder read-only
    (:func:`ugrpo.runlock.check_claim` of ``config``, the config.json to be written), then the model and task
    (:func:`load_frozen`). An input error leaves no folder behind (docs/run-folders.md)."""
    require_backend(cfg.sampling_backend)
    check_named_task(cfg.task, cfg.task_options)  # a custom reward function that cannot score
    check_claim(out, config["command"], config)  # another command's folder, a file in the way: before the model loads
    return load_frozen(cfg.model, cfg.task, cfg.task_options, seed=cfg.seed, backend=cfg.sampling_backend,
                       max_new_tokens=cfg.max_new_tokens, chat=cfg.chat, prompts=prompts)


def sample_sketched(policy, task, problems, group_size: int, seeds: Sequence[int], *, k: int, sketch_seed: int,
                    temperature: float, max_new_tokens: int, chat: bool, chunk_size: int,
                    keep_rollout: bool = False, sampler=None) -> SketchedSamples:
    """Sample, score (task verifier) and sketch G completions for each problem (one pass each); ``sampler`` (default
    :func:`ugrpo.lm.sampling.sample_groups`) is :func:`ugrpo.lm.vllm_engine.frozen_sampler`'s callable."""
    from ugrpo.lm.loading import format_prompt
    from ugrpo.lm.sampling import sample_groups
    from ugrpo.lm.sketch import sketch_scores
    from ugrpo.tasks.base import score

    model, tok = policy.model, policy.tokenizer
    B, G = len(problems), group_size
    t0 = time.perf_counter()
    texts = [format_prompt(tok, p.prompt, chat=chat) for p in problems]
    ro = (sampler or sample_groups)(model, tok, texts, G, seeds=list(seeds), temperature=temperature,
                                    max_new_tokens=max_new_tokens, batch_size=chunk_size)
    t1 = time.perf_counter()
    sc = score(task, ro.texts, [p for p in problems for _ in range(G)])
    t2 = time.perf_counter()
    sk = sketch_scores(model, ro, k, seed=sketch_seed, temperature=temperature, chunk_size=chunk_size)  # (B*G, k)
    t3 = time.perf_counter()
    return SketchedSamples(rewards=torch.tensor(sc.rewards, dtype=DT).view(B, G), scores=sk.cpu().to(DT).view(B, G, k),
                           lengths=ro.completion_lengths.view(B, G), n_unscorable=sc.n_unscorable,
                           seconds={"sampling": t1 - t0, "scoring": t2 - t1, "sketch": t3 - t2},
                           rollout=ro if keep_rollout else None)


# ---------------------------------------------------------------------------------------------
# the LM pilot and plan


@dataclass(frozen=True)
class LMPlanConfig:
    """Resolved settings of ``ugrpo plan --model``."""

    model: str
    task: str
    pilot_batch: int
    """pilot prompts B0 (drawn iid uniformly from the task's training problems)"""
    pilot_group: int
    """completions per pilot prompt G0 (>= 4)"""
    budget: int
    """samples per training step N"""
    task_options: dict = field(default_factory=dict)
    sketch_dim: int = 256
    seed: int = 0
    n_boot: int = 1000
    group: int | None = None
    """the group size currently used (optional): compared with G* in the results"""
    temperature: float = 1.0
    max_new_tokens: int = 8
    chat: bool = False
    chunk_size: int = 512
    sampling_backend: str = "hf"
    """who draws the pilot: hf (Hugging Face generate) or vllm (one vLLM engine; docs/vllm.md)"""

    def __post_init__(self) -> None:
        from ugrpo.experiments.plan.pilot_io import MIN_PILOT_GROUP
        from ugrpo.stats.budget import check_divides

        if self.pilot_group < MIN_PILOT_GROUP or self.pilot_batch < 2:
            raise ValueError(f"--pilot-group G0 = {self.pilot_group} and --pilot-batch B0 = {self.pilot_batch}: "
                             f"need G0 >= {MIN_PILOT_GROUP} (the unbiased c3 estimate) and B0 >= 2 (c1)")
        if self.budget < 2:
            raise ValueError(f"--budget N = {self.budget} must be >= 2 (GRPO needs G >= 2 samples per prompt)")
        if self.sketch_dim < 1 or self.seed < 0:
            raise ValueError(f"--sketch-dim ({self.sketch_dim}) must be >= 1 and --seed ({self.seed}) >= 0")
        check_n_boot(self.n_boot)
        if self.group is not None:
            if self.group < 2:
                raise ValueError(f"--group G = {self.group} must be >= 2")
            check_divides(self.budget, self.group)
        if not self.temperature > 0 or self.max_new_tokens < 1 or self.chunk_size < 1:
            raise ValueError("--temperature must be > 0, --max-new-tokens and --chunk-size >= 1")
        check_backend(self.sampling_backend)


def _backward_seconds(model, rollout, temperature: float, chunk_size: int) -> float:
    """Seconds of one ordinary batched forward + backward of sum log pi(Y) over the rollout's rows."""
    from ugrpo.lm.logprobs import completion_logprobs

    was = model.training
    model.train()
    t0 = time.perf_counter()
    try:
        n = rollout.completion_ids.shape[0]
        for start in range(0, n, chunk_size):
            sl = slice(start, start + chunk_size)
            lp = completion_logprobs(model, rollout.prompt_ids[sl], rollout.prompt_mask[sl], rollout.completion_ids[sl],
                                     rollout.completion_mask[sl], temperature=temperature)
            lp.sum().backward()
        return time.perf_counter() - t0
    finally:
        model.zero_grad(set_to_none=True)
        model.train(was)


def sample_lm_pilot(cfg: LMPlanConfig, *, progress: bool = True, frozen: FrozenPolicy | None = None):
    """Sample, score and sketch the pilot in chunks of prompts; returns (Pilot, pilot cost, step cost).
    ``frozen``: the task and policy :func:`load_frozen` loaded and checked already (None: loaded here)."""
    from ugrpo.experiments.plan.pilot_io import Pilot
    from ugrpo.lm.vllm_engine import frozen_sampler

    frozen = frozen or load_frozen(cfg.model, cfg.task, cfg.task_options, seed=cfg.seed, backend=cfg.sampling_backend,
                                   max_new_tokens=cfg.max_new_tokens, chat=cfg.chat)
    task, opts, problems, policy, longest = frozen.task, frozen.options, frozen.problems, frozen.policy, frozen.longest
    gen = torch.Generator().manual_seed(cfg.seed)
    idx = torch.randint(0, len(problems), (cfg.pilot_batch,), generator=gen).tolist()
    drawn = [problems[i] for i in idx]
    seeds = [derive_seed(cfg.seed, b, stride=104_729, offset=1) for b in range(cfg.pilot_batch)]
    if progress:
        print(f"pilot: sampling {cfg.pilot_batch} x {cfg.pilot_group} = {cfg.pilot_batch * cfg.pilot_group} "
              "completions "
              f"from {cfg.model}, sketching to k = {cfg.sketch_dim} ...", flush=True)
    step_b = max(1, cfg.chunk_size // cfg.pilot_group)  # prompts per pass
    parts: list[SketchedSamples] = []
    t_engine = time.perf_counter()
    with frozen_sampler(policy.model, policy.tokenizer, cfg.sampling_backend, max_model_len=longest) as sampler, \
            logs_above_bar():  # a scoring warning goes above the pilot's bar, not onto its line
        t_engine = time.perf_counter() - t_engine  # vllm: the engine's start and weight push (hf: nothing)
        for start in tqdm(range(0, cfg.pilot_batch, step_b), desc="pilot (sample+score+sketch)", unit="chunk",
                          disable=not progress, dynamic_ncols=True):
            sl = slice(start, start + step_b)
            parts.append(sample_sketched(policy, task, drawn[sl], cfg.pilot_group, seeds[sl], k=cfg.sketch_dim,
                                         sketch_seed=cfg.seed, temperature=cfg.temperature,
                                         max_new_tokens=cfg.max_new_tokens, chat=cfg.chat, chunk_size=cfg.chunk_size,
                                         keep_rollout=start == 0, sampler=sampler))
    rewards, scores = torch.cat([q.rewards for q in parts]), torch.cat([q.scores for q in parts])
    seconds = {k: sum(q.seconds[k] for q in parts) for k in parts[0].seconds}
    n = cfg.pilot_batch * cfg.pilot_group
    ro = parts[0].rollout
    t_fb = _backward_seconds(policy.model, ro, cfg.temperature, cfg.chunk_size) / ro.completion_ids.shape[0] * n
    per_gen, per_fb = seconds["sampling"] / n, t_fb / n
    cost = {"samples": n, "seconds": sum(seconds.values()), **{f"seconds_{k}": v for k, v in seconds.items()},
            "tokens": int(sum(int(q.lengths.sum()) for q in parts)),
            "n_unscorable": sum(q.n_unscorable for q in parts), "seconds_forward_backward": t_fb,
            "sampling_backend": cfg.sampling_backend, "seconds_engine_start": t_engine}
    step = {"samples": cfg.budget, "seconds": cfg.budget * (per_gen + per_fb),
            "seconds_generation": cfg.budget * per_gen, "seconds_forward_backward": cfg.budget * per_fb,
            "how": "estimated from the pilot's per-sample rates: N x generation s/sample + N x (one measured batched "
                   "forward+backward over the first pilot chunk's rows) / rows; no optimizer step, no reward time"}
    meta = {"model": cfg.model, "task": cfg.task, "task_options": opts, "seed": cfg.seed, "sketch_dim": cfg.sketch_dim,
            "sketch_seed": cfg.seed, "sketch_params": "trainable", "temperature": cfg.temperature,
            "max_new_tokens": cfg.max_new_tokens, "sampling_backend": cfg.sampling_backend,
            "prompt_ids": [p.id for p in drawn], "pilot_cost": cost,
            "mean_reward": float(rewards.mean())}
    return Pilot(rewards=rewards, scores=scores, meta=to_jsonable(meta)), cost, step


def run_lm_plan(cfg: LMPlanConfig, run: RunDir, *, progress: bool = True,
                frozen: FrozenPolicy | None = None) -> dict[str, Any]:
    """Pilot -> pilot.npz -> c1, c2, c3 and G* for the budget (``run_plan``), plus costs; the results.json object."""
    from ugrpo.experiments.plan.env import run_plan
    from ugrpo.experiments.plan.pilot_io import save_pilot

    pilot, cost, step = sample_lm_pilot(cfg, progress=progress, frozen=frozen)
    save_pilot(run.file("pilot.npz"), pilot)
    results = run_plan(pilot, cfg.budget, n_boot=cfg.n_boot, seed=cfg.seed, run=run, group=cfg.group)
    results["pilot_cost"] = cost
    results["step_cost"] = step
    results["pilot_fraction_of_100_steps"] = cost["samples"] / (100 * cfg.budget)
    results["pilot_file"] = str(run.file("pilot.npz"))
    results["config"] = asdict(cfg)
    return to_jsonable(results)


def lm_plan_experiment(cfg: LMPlanConfig, out: str, *, argv: list[str] | None = None) -> dict[str, Any]:
    """``ugrpo plan --model``: an :class:`LMPlanConfig` -> the run folder ``out`` (pilot.npz, results.json,
    plan.png, report.md with the costs); returns the results."""
    from ugrpo.report.plan import write_report

    config = {**asdict(cfg), "command": "plan", "argv": argv}
    frozen = check_lm_run(cfg, out, config)  # every input error before the folder
    rd = RunDir(out)
    rd.write_config(config)
    rd.file("metrics.jsonl").unlink(missing_ok=True)
    results = run_lm_plan(cfg, rd, frozen=frozen)
    write_report(rd, results, argv)
    return results
