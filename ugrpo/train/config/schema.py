"""Training configuration: the frozen dataclasses (the schema); loading lives in :mod:`.load`.

``load_config(path, overrides)`` (:mod:`ugrpo.train.config.load`) reads a YAML file whose top-level keys are the fields
of
:class:`TrainConfig` (nested sections for ``model``, ``task``, ``budget``, ``sampling``,
``loss``, ``optim``, ``eval``), applies dotted command-line overrides such as
``["--optim.lr", "1e-4", "--budget.group_size", "8"]`` (values parsed with YAML scalar
rules, ``-`` and ``_`` interchangeable in names), and validates everything in
``__post_init__`` before any work starts. Unknown keys are errors naming the key, the
file and the closest valid names.

The budget follows the paper: the user sets N = ``budget.samples_per_step`` and
G = ``budget.group_size``; B = N / G prompts per step (Algorithm 1) is derived, and a G
that does not divide N is an error listing the valid divisors.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ugrpo.stats.allocation import IS_RULES, RULES
from ugrpo.stats.budget import check_divides
from ugrpo.stats.estimators import ESTIMATORS, GROUP_BASELINES, EstimatorName

__all__ = [
    "ModelConfig",
    "TaskConfig",
    "BudgetConfig",
    "SamplingConfig",
    "LossConfig",
    "OptimConfig",
    "EvalConfig",
    "AllocationConfig",
    "ALLOCATION_RULES",
    "TrainConfig",
]

ALLOCATION_RULES: tuple[str, ...] = RULES + ("dynamic",)
"""``allocation.rule`` choices (docs/allocation.md): the rules of :data:`ugrpo.stats.allocation.RULES` (``uniform`` is
the plain trainer, one G for every prompt) and DAPO's ``dynamic``"""
REPORT_TO: tuple[str, ...] = ("tensorboard", "trackio", "wandb", "mlflow")
"""``report_to`` backends (:data:`ugrpo.train.report_to.BACKENDS`; TRL's names)"""
UNBIASED_RAGGED_BASELINES: tuple[str, ...] = ("grpo", "vanilla", "oracle")
"""baselines whose per-prompt estimate stays unbiased for g(x) whatever G_b is (docs/allocation.md)"""


def _choice(section: str, name: str, value: Any, choices: Sequence[Any]) -> None:
    if value not in choices:
        raise ValueError(f"{section}{name}={value!r} is not valid; choose one of {list(choices)}")


def _positive(section: str, name: str, value: float, *, strict: bool = True) -> None:
    bad = value <= 0 if strict else value < 0
    if bad or (isinstance(value, float) and not math.isfinite(value)):
        raise ValueError(f"{section}{name}={value!r} must be {'> 0' if strict else '>= 0'}")


@dataclass(frozen=True)
class ModelConfig:
    """The policy: ``tiny:instruct`` (built-in warmed-up tiny model), a local folder, or a cached hub id."""

    name: str = "tiny:instruct"
    """model name or path passed to ``ugrpo.lm.load_policy``"""
    lora_r: int = 0
    """LoRA rank; 0 trains all parameters"""
    lora_alpha: float = 16.0
    """LoRA scaling alpha (used when lora_r > 0)"""
    lora_dropout: float = 0.0
    """LoRA dropout (used when lora_r > 0)"""
    lora_targets: tuple[str, ...] = ()
    """module names LoRA adapts; empty = the loader's default (attention and MLP projections)"""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """parameter dtype"""
    device: str = "auto"
    """'auto' = this process's GPU if there is one, else cpu; or an explicit torch device"""
    chat: bool = True
    """wrap each prompt in the tokenizer's chat template when it has one (the tiny model has none)"""

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("model.name is empty; give 'tiny:instruct', a local folder or a cached hub id")
        _positive("model.", "lora_r", self.lora_r, strict=False)
        _positive("model.", "lora_alpha", self.lora_alpha)
        if not 0.0 <= self.lora_dropout < 1.0:
            raise ValueError(f"model.lora_dropout={self.lora_dropout} must be in [0, 1)")
        _choice("model.", "dtype", self.dtype, ("float32", "bfloat16", "float16"))


@dataclass(frozen=True)
class TaskConfig:
    """The task (prompts + verifier) from ``ugrpo.tasks.get_task(name, **options)``."""

    name: str = "arithmetic"
    """task name: arithmetic | gsm8k | math | custom | gsm_symbolic (ugrpo.tasks.registry.TASK_NAMES)"""
    options: dict = field(default_factory=dict)
    """keyword options of the task (e.g. style, n_train, path); unknown ones are rejected by the task"""
    long_prompts: Literal["error", "skip"] = "error"
    """a training prompt with prompt tokens + max_new_tokens > the model context: 'error' stops
    before training naming the problem id; 'skip' drops it and counts it in results.json"""

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("task.name is empty; choose arithmetic | gsm8k | math | custom")
        if not isinstance(self.options, dict):
            raise ValueError(f"task.options must be a mapping of option -> value, got {self.options!r}")
        _choice("task.", "long_prompts", self.long_prompts, ("error", "skip"))


@dataclass(frozen=True)
class BudgetConfig:
    """Samples per step N = B * G (paper section 4.3): the user sets N and G, B is derived."""

    samples_per_step: int = 64
    """N, completions sampled per optimisation step (all prompts together)"""
    group_size: int = 8
    """G, completions per prompt"""
    micro_batch: int = 0
    """completions per forward/backward pass (gradient accumulation); 0 = all at once"""

    def __post_init__(self) -> None:
        N, G = self.samples_per_step, self.group_size
        _positive("budget.", "samples_per_step", N)
        _positive("budget.", "group_size", G)
        _positive("budget.", "micro_batch", self.micro_batch, strict=False)
        check_divides(N, G, n_name="budget.samples_per_step N", g_name="budget.group_size G")

    @property
    def prompts_per_step(self) -> int:
        """B = N / G."""
        return self.samples_per_step // self.group_size


@dataclass(frozen=True)
class SamplingConfig:
    """How completions are sampled for training (and for the sampled pass@1 evaluation)."""

    temperature: float = 1.0
    """softmax temperature (> 0; greedy evaluation is separate)"""
    top_p: float = 1.0
    """nucleus sampling mass in (0, 1]"""
    max_new_tokens: int = 16
    """completion length limit; longer completions are truncated and counted"""
    backend: Literal["hf", "vllm"] = "hf"
    """who draws the completions: hf (transformers generate with ugrpo's seeded sampler: a sample depends only on
    (seed, step, prompt, row), whatever the batch) | vllm (a vLLM engine in the training process, weights pushed
    after every update; needs a CUDA GPU and pip install 'ugrpo[vllm]'; the same call gives the same samples, another
    batch shape may not: docs/vllm.md)"""
    vllm_gpu_memory: float = 0.3
    """vllm: fraction of the GPU's memory the engine takes for its weights and KV cache (training keeps the rest)"""
    vllm_max_model_len: int = 0
    """vllm: longest prompt + completion the engine accepts (sizes its KV cache); 0 = the model's context"""
    vllm_dtype: Literal["auto", "bfloat16", "float16", "float32"] = "auto"
    """vllm: the engine's weight dtype; auto = model.dtype. bfloat16 samples fast from float32 training weights"""

    def __post_init__(self) -> None:
        _positive("sampling.", "temperature", self.temperature)
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"sampling.top_p={self.top_p} must be in (0, 1]")
        _positive("sampling.", "max_new_tokens", self.max_new_tokens)
        _choice("sampling.", "backend", self.backend, ("hf", "vllm"))
        if not 0.0 < self.vllm_gpu_memory < 1.0:
            raise ValueError(f"sampling.vllm_gpu_memory={self.vllm_gpu_memory} must be in (0, 1): the share of GPU "
                             "memory vLLM may take, e.g. 0.3 (the rest holds the training model and optimizer)")
        _positive("sampling.", "vllm_max_model_len", self.vllm_max_model_len, strict=False)
        _choice("sampling.", "vllm_dtype", self.vllm_dtype, ("auto", "bfloat16", "float16", "float32"))


@dataclass(frozen=True)
class LossConfig:
    """Loss aggregation, importance-ratio clipping and KL penalty (Algorithm 2, paper eq. (13))."""

    aggregation: Literal["seq_sum", "token_mean", "seq_mean"] = "seq_sum"
    """seq_sum = the paper (sum of token terms per sequence, mean over the B*G sequences);
    token_mean = sum over all tokens / token count (DAPO, TRL 'dapo'/'bnpo');
    seq_mean = per-sequence token mean, then mean over sequences (original GRPO, TRL 'grpo')"""
    clip_low: float | None = None
    """PPO clip epsilon below 1 (ratio >= 1 - clip_low); None = no lower clip"""
    clip_high: float | None = None
    """PPO clip epsilon above 1 (ratio <= 1 + clip_high); None = no upper clip"""
    kl_coef: float = 0.0
    """kappa, weight of the K3 KL estimate to the reference policy (0 = no KL, no reference model)"""
    ref_model: str | None = None
    """reference policy for the KL; None = the initial policy (adapters disabled under LoRA)"""

    def __post_init__(self) -> None:
        _choice("loss.", "aggregation", self.aggregation, ("seq_sum", "token_mean", "seq_mean"))
        for name in ("clip_low", "clip_high"):
            v = getattr(self, name)
            if v is not None and not 0.0 < v:
                raise ValueError(f"loss.{name}={v} must be > 0 (or null for no clipping)")
        if self.clip_low is not None and self.clip_low >= 1.0:
            raise ValueError(f"loss.clip_low={self.clip_low} must be < 1 (the ratio lower bound is 1 - clip_low)")
        _positive("loss.", "kl_coef", self.kl_coef, strict=False)


@dataclass(frozen=True)
class OptimConfig:
    """Optimizer and learning-rate schedule (the paper's analysis uses plain SGD)."""

    name: Literal["sgd", "adamw"] = "adamw"
    """sgd (the paper's theta <- theta + eta ghat) or adamw"""
    lr: float = 1e-5
    """peak learning rate eta"""
    betas: tuple[float, float] = (0.9, 0.999)
    """AdamW betas"""
    weight_decay: float = 0.0
    """decoupled weight decay (AdamW) or L2 (SGD)"""
    grad_clip: float | None = None
    """max global gradient norm; None = no clipping (the grad norm is logged either way)"""
    scheduler: Literal["constant", "linear", "cosine"] = "constant"
    """lr schedule after warmup: constant (paper A5(a)), linear or cosine decay to 0 at the last step"""
    warmup_steps: int = 0
    """linear warmup from 0 over this many steps"""
    nonfinite: Literal["stop", "skip"] = "stop"
    """a step whose loss or gradient is NaN/inf: stop (an error naming the step; the last checkpoint stays
    intact) or skip (no update, counted as n_nonfinite_steps); a NaN model is never written either way"""

    def __post_init__(self) -> None:
        _choice("optim.", "name", self.name, ("sgd", "adamw"))
        _choice("optim.", "scheduler", self.scheduler, ("constant", "linear", "cosine"))
        _choice("optim.", "nonfinite", self.nonfinite, ("stop", "skip"))
        _positive("optim.", "lr", self.lr)
        _positive("optim.", "weight_decay", self.weight_decay, strict=False)
        _positive("optim.", "warmup_steps", self.warmup_steps, strict=False)
        if len(self.betas) != 2 or not all(0.0 <= b < 1.0 for b in self.betas):
            raise ValueError(f"optim.betas={list(self.betas)} must be two numbers in [0, 1)")
        if self.grad_clip is not None:
            _positive("optim.", "grad_clip", self.grad_clip)


@dataclass(frozen=True)
class EvalConfig:
    """Held-out evaluation at step 0 (before any update), every ``every`` steps and at the end."""

    every: int = 10
    """evaluate every K steps (0 = only at step 0 and at the end)"""
    n_problems: int = 200
    """held-out problems used (the first n of the task's eval set)"""
    greedy: bool = True
    """greedy accuracy (eval_accuracy)"""
    pass1_samples: int = 4
    """samples per problem for the sampled pass@1 (eval_pass1); 0 disables it"""
    batch_size: int = 256
    """completions generated per call during evaluation"""

    def __post_init__(self) -> None:
        _positive("eval.", "every", self.every, strict=False)
        _positive("eval.", "n_problems", self.n_problems, strict=False)
        _positive("eval.", "pass1_samples", self.pass1_samples, strict=False)
        _positive("eval.", "batch_size", self.batch_size)


@dataclass(frozen=True)
class AllocationConfig:
    """Per-prompt group sizes G_b (docs/allocation.md): B = N / budget.group_size prompts per step as always,
    sum_b G_b = N, g_min <= G_b <= g_max, each G_b fixed before that prompt's samples are drawn."""

    rule: str = "uniform"
    """uniform (every prompt gets budget.group_size: the plain trainer) | vip (reward variance p(1-p) only) |
    knapsack (Knapsack-RL value of p) | ustat (the full per-prompt c2/c3 of the U-statistic MSE, M33) |
    uniform-is (prompts drawn from a law q, weighted 1/(P q), one G; M52-M55) | ustat-is (q and per-prompt G_x at N
    samples in expectation; M56) | dynamic (DAPO: G each, all-equal groups replaced by new prompts; BIASED,
    docs/allocation.md A5)"""
    g_min: int = 2
    """smallest G_b (>= 2: the leave-one-out baseline needs two samples)"""
    g_max: int = 0
    """largest G_b; 0 = 4 x budget.group_size, capped at N - (B - 1) g_min"""
    safe_tol: float = 0.0
    """ustat's safe rule (M50): the chosen sizes' posterior safe_level quantile of their MSE over uniform G's may
    not exceed 1 + safe_tol (in [0, 1)); otherwise the sizes are blended toward uniform, down to uniform G. The
    prompt-IS guard (is_guard, M78): a law whose held-out lower bound exceeds 1 + safe_tol is not used"""
    safe_level: float = 0.9
    """ustat's safe rule: the posterior quantile it bounds (in [0.5, 1)); the prompt-IS guard: the normal quantile of
    its held-out interval"""
    scores: str = "output"
    """ustat: which per-sample scores W the history measures (docs/allocation.md A3c): output (the output
    projection's score, exact, read off the step's own forward: a few % of a step) | sketch (the score over all
    trainable parameters, sketched to sketch_dim in one extra per-sample backward: 1-5x a step)"""
    sketch_dim: int = 64
    """ustat (and the prompt-IS rules) with scores=sketch: dimension of the per-sample score sketch"""
    is_lambda: float = 0.1
    """uniform-is/ustat-is: the defensive floor q(x) >= is_lambda / P, in (0, 1] (every weight 1/(P q) <= 1/is_lambda;
    1 = uniform prompts; docs/math.md M55)"""
    is_guard: bool = True
    """uniform-is/ustat-is: the law is judged on held-out history before use and replaced, down to uniform prompts, when
    that history refutes it or cannot bound its loss (docs/math.md M78; every G_x >= 3); false: the posterior's law"""
    is_spend: str = "expected"
    """ustat-is: expected (M56's joint law: each drawn prompt gets its G_x, N samples per step on average) | exact (M88:
    the same law q, then the drawn batch's sizes split exactly N to minimise its weighted within-batch variance; the
    TRL adapter's only choice)"""
    is_law_every: int = 1
    """uniform-is/ustat-is: compute the law (q, G_x) with its guard on the first step and every this many steps after,
    from the history at that step; the steps between draw from it unchanged (still fixed before each step from past
    history only, so the estimate stays unbiased, M52; a resume rebuilds it from the history it was computed from,
    which the checkpoint keeps). 1: every step. At GSM8K's size the law costs 1-3 s per step (docs/allocation.md,
    Cost)"""
    is_certificate_every: int = 1
    """uniform-is/ustat-is: compute the law's calibrated certificate (``is_predicted_ratio`` and its interval, M89)
    on the first step and every this many steps after (1: every step; the other steps log none). It only reports:
    the law, the draws and the training are the same for any value. At GSM8K's size it costs about as much as the
    law itself (1-3 s per step; docs/allocation.md, Cost)"""
    dynamic_max_rounds: int = 4
    """dynamic: most sampling rounds per step (round 0 = the step's B prompts; later rounds replace all-equal
    groups); after the last round the batch is filled with all-equal groups"""

    def __post_init__(self) -> None:
        _choice("allocation.", "rule", self.rule, ALLOCATION_RULES)
        if self.g_min < 2:
            raise ValueError(f"allocation.g_min={self.g_min} must be >= 2 (the leave-one-out baseline needs two "
                             "samples per prompt)")
        _positive("allocation.", "g_max", self.g_max, strict=False)
        if self.g_max and self.g_max < self.g_min:
            raise ValueError(f"allocation.g_max={self.g_max} is below allocation.g_min={self.g_min}; raise g_max "
                             "(or 0 for the default) or lower g_min")
        from ugrpo.stats.safe import check_safety

        check_safety(self.safe_tol, self.safe_level)
        from ugrpo.stats.prompt_is import IS_SPEND, check_lambda

        check_lambda(self.is_lambda, "allocation.is_lambda")
        _choice("allocation.", "scores", self.scores, ("output", "sketch"))
        _choice("allocation.", "is_spend", self.is_spend, IS_SPEND)
        _positive("allocation.", "sketch_dim", self.sketch_dim)
        _positive("allocation.", "dynamic_max_rounds", self.dynamic_max_rounds)
        _positive("allocation.", "is_certificate_every", self.is_certificate_every)
        _positive("allocation.", "is_law_every", self.is_law_every)

    def bounds(self, N: int, G: int) -> tuple[int, int]:
        """(g_min, g_max) in effect at N samples over B = N / G prompts (g_max 0 -> 4 G, capped)."""
        B = N // G
        cap = N - (B - 1) * self.g_min
        return self.g_min, min(self.g_max or 4 * G, cap)


@dataclass(frozen=True)
class TrainConfig:
    """Everything a training run needs (Algorithm 1 / Algorithm 2 of the paper)."""

    model: ModelConfig = field(default_factory=ModelConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    budget: BudgetConfig = field(default_factory=BudgetConfig)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    allocation: AllocationConfig = field(default_factory=AllocationConfig)
    steps: int = 100
    """number of optimisation steps n (each samples N = B*G completions)"""
    algorithm: Literal[1, 2] = 1
    """1 = Algorithm 1 (one on-policy update per batch); 2 = Algorithm 2 (m minibatch updates, ratio)"""
    baseline: EstimatorName = "grpo"
    """baseline C of paper eq. (5): vanilla (0), grpo (LOO mean, eq. 4), grpo_mean (full mean), oracle (V(x))"""
    oracle_samples: int = 0
    """M, extra samples per prompt to estimate V(x) for baseline=oracle (their cost is logged)"""
    scale: Literal["none", "std"] = "none"
    """advantage scaling: none (Algorithm 1) or std (Algorithm 2's se(Z))"""
    ddof: int = 1
    """std divisor G - ddof (paper: 1)"""
    eps: float = 1e-6
    """added to the std before dividing"""
    zero_std: Literal["zero", "eps", "unscaled"] = "zero"
    """what an all-equal group gets under scale=std (always counted and logged)"""
    minibatches: int = 1
    """m, disjoint prompt minibatches per batch (Algorithm 2); must divide B"""
    seed: int = 0
    """seeds the prompt choice (seed, step) and every sample (seed, step, prompt index)"""
    checkpoint_every: int = 0
    """write checkpoints/step-K every K steps (0 = only the final step)"""
    log_every: int = 1
    """print a metrics line every K steps (metrics.jsonl always gets every step)"""
    report_to: tuple[str, ...] = ()
    """also log every step to: tensorboard, trackio, wandb, mlflow (TRL's names and metric names; all = every one
    installed; each an extra, pip install 'ugrpo[wandb]'); empty = none, metrics.jsonl only"""
    monitor_every: int = 0
    """online G* monitor (ugrpo.train.monitor): every K steps estimate c1, c2, c3 and G* (Thm 7) from the
    step's own batch (no extra samples) and log them; 0 = off. Needs group_size >= 4"""
    monitor_sketch_dim: int = 128
    """k, dimension of the monitor's score sketch (inner-product error ~ 1/sqrt(k))"""
    monitor_n_boot: int = 200
    """bootstrap replicates of the monitor's 95% intervals"""
    monitor_pool: int = 1
    """pool the last P monitored batches into one estimate (P*B prompts: c1 is bounded away from 0
    sooner); P > 1 biases c1 up (so G* down) by the drift of the mean gradient over the window"""

    def __post_init__(self) -> None:
        _positive("", "steps", self.steps)
        _choice("", "algorithm", self.algorithm, (1, 2))
        _choice("", "baseline", self.baseline, ESTIMATORS)
        _choice("", "scale", self.scale, ("none", "std"))
        _choice("", "zero_std", self.zero_std, ("zero", "eps", "unscaled"))
        _positive("", "eps", self.eps, strict=False)
        _positive("", "oracle_samples", self.oracle_samples, strict=False)
        _positive("", "minibatches", self.minibatches)
        _positive("", "checkpoint_every", self.checkpoint_every, strict=False)
        _positive("", "log_every", self.log_every)
        report_to = tuple(n.strip() for item in self.report_to for n in str(item).split(",") if n.strip())
        for name in report_to:  # "tensorboard,wandb" from the command line is two names
            _choice("", "report_to", name, (*REPORT_TO, "all", "none"))
        object.__setattr__(self, "report_to", report_to)
        _positive("", "seed", self.seed, strict=False)
        G, B = self.budget.group_size, self.budget.prompts_per_step
        self._check_monitor(G, B)
        self._check_allocation(G, B)
        if self.baseline in GROUP_BASELINES and G < 2:
            raise ValueError(
                f"baseline={self.baseline} needs budget.group_size >= 2 (a group mean over the other samples), "
                f"got G={G}; raise G or use baseline=vanilla"
            )
        if self.baseline == "oracle" and self.oracle_samples < 1:
            raise ValueError(
                "baseline=oracle needs oracle_samples M >= 1 extra samples per prompt to estimate V(x); "
                "set e.g. --oracle_samples 64"
            )
        if self.scale == "std" and G - self.ddof < 1:
            raise ValueError(f"scale=std with ddof={self.ddof} needs budget.group_size > {self.ddof}, got G={G}")
        if self.scale == "std" and self.zero_std == "eps" and self.eps == 0:
            raise ValueError("zero_std=eps with eps=0 divides by zero on all-equal groups; set eps > 0")
        if B % self.minibatches:
            divisors = [d for d in range(1, B + 1) if B % d == 0]
            raise ValueError(
                f"minibatches m={self.minibatches} does not divide B = N/G = {B} prompts per step; "
                f"choose m among {divisors}"
            )
        if self.algorithm == 1:
            if self.minibatches != 1:
                raise ValueError(f"minibatches={self.minibatches} needs algorithm=2 (Algorithm 1 makes one update per "
                                 "batch)")
            if self.loss.clip_low is not None or self.loss.clip_high is not None:
                raise ValueError("loss.clip_low/clip_high need algorithm=2 (Algorithm 1 has no importance ratio)")

    def _check_allocation(self, G: int, B: int) -> None:
        al, N = self.allocation, self.budget.samples_per_step
        where = f"allocation.rule={al.rule}"
        if al.rule == "dynamic" and self.baseline == "oracle":
            raise ValueError(f"{where} does not support baseline=oracle (its extra samples per replacement prompt "
                             "are not implemented); use baseline grpo or vanilla")
        if self.monitor_every and al.rule == "dynamic":
            raise ValueError(f"{where} cannot run with the G* monitor (monitor_every={self.monitor_every}): dynamic "
                             "sampling keeps only prompts whose rewards differ, so its batch is not a sample of the "
                             "prompt distribution; set monitor_every=0 or choose another rule")
        if al.rule in IS_RULES:
            if self.monitor_every:
                raise ValueError(f"{where} cannot run with the G* monitor (monitor_every={self.monitor_every}): its "
                                 "pilot would be the step's prompts, drawn from the law q rather than uniformly, and "
                                 "the monitor does not reweight them; set monitor_every=0 or choose another rule")
            if self.loss.kl_coef > 0:
                raise ValueError(f"{where} with loss.kl_coef={self.loss.kl_coef}: the KL term is averaged over the "
                                 "drawn prompts without the weights 1/(P q), so it would regularise toward the law q's "
                                 "prompts; set loss.kl_coef=0 or choose another rule")
            from ugrpo.stats.is_guard import GUARD_G_MIN  # scipy: only when a prompt-IS rule is asked for

            if al.is_guard and G < GUARD_G_MIN:
                raise ValueError(f"{where} with allocation.is_guard=true needs budget.group_size >= {GUARD_G_MIN} "
                                 f"(the guard's held-out U-statistics need three samples per visit), got {G}; raise "
                                 "group_size or set allocation.is_guard=false")
        if al.rule in ("uniform", "dynamic"):  # every group has G samples
            return
        if N < B * al.g_min:
            raise ValueError(f"{where}: budget.samples_per_step N={N} is below B * allocation.g_min = {B} * "
                             f"{al.g_min} (B = N / group_size = {B} prompts); raise N or lower allocation.g_min")
        g_min, g_max = al.bounds(N, G)
        if g_max < g_min:
            raise ValueError(f"{where}: allocation.g_max={al.g_max} is below allocation.g_min={g_min}")
        if g_max < G:  # B prompts of at most g_max samples each cannot spend N = B G samples
            raise ValueError(f"{where}: allocation.g_max={al.g_max} is below budget.group_size G={G}, so B * g_max = "
                             f"{B} * {g_max} = {B * g_max} < N = {N} samples per step cannot be spent; raise "
                             f"allocation.g_max to G={G} or more (0: the default 4 G)")
        if self.baseline not in UNBIASED_RAGGED_BASELINES:
            raise ValueError(f"{where} needs a baseline whose per-prompt estimate is unbiased for any G_b: one of "
                             f"{list(UNBIASED_RAGGED_BASELINES)}; got baseline={self.baseline} (the full group mean "
                             "scales prompt b's gradient by (G_b - 1)/G_b, which then differs between prompts)")
        if self.scale == "std" and g_min - self.ddof < 1:
            raise ValueError(f"{where} with scale=std and ddof={self.ddof} needs allocation.g_min > {self.ddof} "
                             f"(each prompt's std divides by G_b - ddof); got g_min={g_min}: raise "
                             "--allocation.g-min or lower --ddof")
        if self.monitor_every and g_min < 4:
            raise ValueError(f"{where} with the G* monitor (monitor_every={self.monitor_every}) needs allocation.g_min "
                             f">= 4 (the monitor reads the first g_min samples of every prompt, and the c2/c3 "
                             f"estimators need 4); got g_min={g_min}: set --allocation.g-min 4 or monitor_every=0")

    def _check_monitor(self, G: int, B: int) -> None:
        _positive("", "monitor_every", self.monitor_every, strict=False)
        _positive("", "monitor_sketch_dim", self.monitor_sketch_dim)
        _positive("", "monitor_pool", self.monitor_pool)
        if self.monitor_n_boot < 2:
            raise ValueError(f"monitor_n_boot={self.monitor_n_boot} must be >= 2 (the intervals are bootstrap "
                             "percentiles; 200 is typical)")
        if self.monitor_every and G < 4:
            raise ValueError(
                f"monitor_every={self.monitor_every} needs budget.group_size >= 4 (the c2/c3 estimators need G >= 4: "
                f"they average over triples of samples of one prompt); got G={G}: raise G or set monitor_every=0"
            )
        if self.monitor_every and B < 2:
            raise ValueError(
                f"monitor_every={self.monitor_every} needs B = N/G >= 2 prompts per step (c1 compares prompts); "
                f"got N={self.budget.samples_per_step}, G={G}: raise budget.samples_per_step or set monitor_every=0"
            )

    @property
    def prompts_per_step(self) -> int:
        """B = N / G."""
        return self.budget.prompts_per_step
