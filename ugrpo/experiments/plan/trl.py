"""``ugrpo plan --trl-config FILE``: the group size for a TRL GRPO run, answered in TRL's terms (paper Thm 7).

The file (YAML or JSON) is what a TRL user already has: ``GRPOConfig`` fields plus the script
arguments of ``trl grpo``::

    model_name_or_path: ./my-model          # a local folder (nothing is downloaded)
    dataset_name: ./prompts.jsonl           # local .json/.jsonl/.csv/.parquet or a save_to_disk folder
    reward_funcs: [my_rewards:accuracy]     # module:function (or a file path.py:function), TRL signature
    num_generations: 8
    per_device_train_batch_size: 16          # completions per device, as in TRL
    gradient_accumulation_steps: 4
    num_processes: 8                         # accelerate processes (GPUs)
    max_completion_length: 256
    ugrpo: {pilot_batch: 64, pilot_group: 8, sketch_dim: 256}   # optional pilot settings

The budget is N = per_device_train_batch_size * gradient_accumulation_steps * num_processes, the
completions per optimizer step (TRL requires it divisible by ``num_generations``). A pilot of
``pilot_batch`` prompts x ``pilot_group`` completions is sampled from the model
(:func:`ugrpo.lm.sampling.sample_groups`, the run's temperature / top_p / max_completion_length),
scored with the reward functions (weighted by ``reward_weights``; a completion no function scores
gets 0 and is counted), its per-sample scores are sketched (:func:`ugrpo.lm.sketch.sketch_scores`),
and :func:`ugrpo.experiments.plan.env.run_plan` estimates c1, c2, c3 and plans G at N. The answer is
``num_generations = G*`` with the batch settings unchanged (N fixed, so B = N / G* prompts per step).

Deviations: chat templates are applied to conversational prompts with TRL's
``maybe_apply_chat_template``; reward functions get ``trainer_state=None`` and no-op ``log_extra`` /
``log_metric``; reward *models* (``nn.Module``) and tools are not supported.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import importlib.util
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ugrpo.runs import RunDir
from ugrpo.stats.band import check_n_boot

__all__ = ["TrlPlanConfig", "load_trl_config", "load_reward_function", "run_trl_plan"]

SCRIPT_KEYS = {"model_name_or_path", "dataset_name", "dataset_train_split", "dataset_config", "reward_funcs",
               "num_processes", "prompt_column", "ugrpo"}
PILOT_KEYS = {"pilot_batch", "pilot_group", "sketch_dim", "n_boot", "seed", "budget"}


@dataclass(frozen=True)
class TrlPlanConfig:
    """A TRL GRPO run as ``ugrpo plan --trl-config`` reads it (see the module docstring)."""

    model_name_or_path: str
    dataset_name: str
    reward_funcs: tuple[str, ...]
    num_generations: int = 8
    per_device_train_batch_size: int = 8
    gradient_accumulation_steps: int = 1
    num_processes: int = 1
    dataset_train_split: str = "train"
    prompt_column: str = "prompt"
    temperature: float = 1.0
    top_p: float = 1.0
    max_completion_length: int = 512
    reward_weights: tuple[float, ...] | None = None
    pilot_batch: int = 32
    """pilot prompts B0 (ugrpo block)."""
    pilot_group: int = 8
    """pilot completions per prompt G0 >= 4 (ugrpo block)."""
    sketch_dim: int = 256
    n_boot: int = 1000
    seed: int = 0
    budget: int | None = None
    """N; default per_device_train_batch_size * gradient_accumulation_steps * num_processes."""
    grpo_config: dict[str, Any] = field(default_factory=dict)
    """the other GRPOConfig fields of the file, kept for the record."""

    def __post_init__(self) -> None:
        for name in ("num_generations", "per_device_train_batch_size", "gradient_accumulation_steps", "num_processes",
                     "max_completion_length", "pilot_batch", "pilot_group", "sketch_dim"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name}: {v!r} must be an integer >= 1")
        check_n_boot(self.n_boot)
        if self.num_generations < 2:
            raise ValueError(f"num_generations: {self.num_generations}; GRPO needs at least 2 completions per prompt")
        if self.step_budget % self.num_generations:
            raise ValueError(
                f"per_device_train_batch_size * gradient_accumulation_steps * num_processes = "
                f"{self.per_device_train_batch_size} * {self.gradient_accumulation_steps} * {self.num_processes} = "
                f"{self.step_budget} completions per step is not divisible by num_generations = {self.num_generations} "
                f"(TRL rejects this config too); make per_device_train_batch_size a multiple of {self.num_generations}"
            )
        if self.budget is not None and (self.budget < 2 or self.budget % (self.gradient_accumulation_steps
                                                                          * self.num_processes)):
            raise ValueError(
                f"budget N = {self.budget} must be >= 2 and a multiple of gradient_accumulation_steps * num_processes "
                "= "
                f"{self.gradient_accumulation_steps * self.num_processes} (per_device_train_batch_size = N / that)"
            )
        if self.pilot_group < 4 or self.pilot_batch < 2:
            raise ValueError(f"ugrpo.pilot_group = {self.pilot_group} must be >= 4 and ugrpo.pilot_batch = "
                             f"{self.pilot_batch} >= 2 (c2, c3 average over triples; c1 compares prompts)")
        if not self.reward_funcs:
            raise ValueError("reward_funcs is empty; list at least one 'module:function'")
        if self.reward_weights is not None and len(self.reward_weights) != len(self.reward_funcs):
            raise ValueError(f"reward_weights has {len(self.reward_weights)} entries for {len(self.reward_funcs)} "
                             "reward_funcs")

    @property
    def step_budget(self) -> int:
        return self.per_device_train_batch_size * self.gradient_accumulation_steps * self.num_processes

    @property
    def N(self) -> int:
        return self.budget if self.budget is not None else self.step_budget


def _read(path: Path) -> dict:
    if not path.is_file():
        raise FileNotFoundError(f"--trl-config {path}: file not found")
    from ugrpo.fileio import read_json, read_text
    from ugrpo.train.config.load import read_yaml

    data = (read_json(path) if path.suffix == ".json"  # errors name the file, line and column
            else read_yaml(read_text(path), f"--trl-config {path}"))
    if not isinstance(data, dict):
        raise ValueError(f"--trl-config {path}: the top level must be a mapping of GRPOConfig fields")
    return data


def load_trl_config(path: str | Path, **overrides) -> TrlPlanConfig:
    """Read and validate a TRL GRPO config; unknown keys are errors (with the closest field named).

    ``overrides`` (non-None values) replace pilot settings: pilot_batch, pilot_group, sketch_dim, n_boot, seed, budget.
    """
    from trl import GRPOConfig

    path = Path(path)
    data = dict(_read(path))
    pilot = data.pop("ugrpo", None) or {}
    if not isinstance(pilot, dict):
        raise ValueError(f"{path}: 'ugrpo' must be a mapping of pilot settings ({sorted(PILOT_KEYS)})")
    from ugrpo.train.config.trl_options import option_names

    grpo_fields = {f.name for f in dataclasses.fields(GRPOConfig)} | option_names()  # UGRPOConfig's fields too
    for key in data:
        if key not in grpo_fields and key not in SCRIPT_KEYS:
            near = difflib.get_close_matches(key, sorted(grpo_fields | SCRIPT_KEYS), n=1)
            raise ValueError(f"{path}: unknown key {key!r}" + (f"; did you mean {near[0]!r}?" if near else "")
                             + " (keys are GRPOConfig and UGRPOConfig fields, model_name_or_path, dataset_name, "
                             "reward_funcs, num_processes)")
    for key in pilot:
        if key not in PILOT_KEYS:
            raise ValueError(f"{path}: unknown key ugrpo.{key}; choose from {sorted(PILOT_KEYS)}")
    for key in ("model_name_or_path", "dataset_name", "reward_funcs"):
        if key not in data:
            raise ValueError(f"{path}: missing {key!r} (the model folder, the prompt dataset and the reward functions)")
    funcs = data.pop("reward_funcs")
    funcs = (funcs,) if isinstance(funcs, str) else tuple(str(f) for f in funcs)
    weights = data.pop("reward_weights", None)
    known = {f.name for f in dataclasses.fields(TrlPlanConfig)}
    direct = {k: data.pop(k) for k in list(data) if k in known}
    pilot.update({k: v for k, v in overrides.items() if v is not None})
    return TrlPlanConfig(reward_funcs=funcs,
                         reward_weights=None if weights is None else tuple(float(w) for w in weights),
                         grpo_config=data, **direct, **pilot)


def load_reward_function(spec: str) -> Callable:
    """``module:function``, ``module.function`` or ``path/to/file.py:function`` -> the callable."""
    if ":" in spec:
        mod_name, _, fn_name = spec.rpartition(":")
    elif "." in spec:
        mod_name, _, fn_name = spec.rpartition(".")
    else:
        raise ValueError(f"reward function {spec!r}: write it as 'module:function' (or 'path/to/file.py:function')")
    try:
        if mod_name.endswith(".py"):
            file = Path(mod_name)
            if not file.is_file():
                raise FileNotFoundError(file)
            print(f"note: running the reward file {file.resolve()} named in the TRL config (its code runs in this "
                  "process with your permissions)", file=sys.stderr, flush=True)
            sp = importlib.util.spec_from_file_location(file.stem, file)
            module = importlib.util.module_from_spec(sp)
            sp.loader.exec_module(module)
        else:
            module = importlib.import_module(mod_name)
    except (ImportError, FileNotFoundError) as e:
        where = (f"a relative path is read from the current directory {Path.cwd()}, as TRL reads it: run from the "
                 "folder the config's paths start at, or give an absolute path" if mod_name.endswith(".py")
                 and not Path(mod_name).is_absolute() else "check the module is on PYTHONPATH or give a file path")
        raise ValueError(f"reward function {spec!r}: cannot import {mod_name!r} ({e}); {where}") from e
    fn = getattr(module, fn_name, None)
    if not callable(fn):
        raise ValueError(f"reward function {spec!r}: module {mod_name!r} has no function {fn_name!r}")
    return fn


def _dataset(cfg: TrlPlanConfig):
    import datasets

    src = Path(cfg.dataset_name)
    if not src.exists():
        raise ValueError(f"dataset_name {cfg.dataset_name!r}: no such local file or folder (nothing is downloaded)")
    if src.is_dir():
        ds = datasets.load_from_disk(str(src))
        ds = ds[cfg.dataset_train_split] if isinstance(ds, datasets.DatasetDict) else ds
    else:
        kind = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet"}.get(src.suffix)
        if kind is None:
            raise ValueError(f"dataset_name {src}: unsupported file type {src.suffix!r}; use "
                             ".json/.jsonl/.csv/.parquet")
        ds = datasets.load_dataset(kind, data_files=str(src), split="train")
    if cfg.prompt_column not in ds.column_names:
        raise ValueError(f"dataset {src} has no column {cfg.prompt_column!r} (columns: {ds.column_names})")
    if len(ds) < cfg.pilot_batch:
        raise ValueError(f"dataset {src} has {len(ds)} rows < ugrpo.pilot_batch = {cfg.pilot_batch}")
    return ds


def _pilot_rewards(fns, weights, rows: list[dict], prompts: list, texts: list[str], ids: list[list[int]],
                   G0: int, column: str, conversational: bool) -> tuple[torch.Tensor, int]:
    """(B0, G0) weighted rewards, TRL's reward-function calling convention; None -> skipped, all None -> 0."""
    rep = [r for r in rows for _ in range(G0)]
    completions = [[{"role": "assistant", "content": t}] for t in texts] if conversational else texts
    kwargs = {k: [r[k] for r in rep] for k in rows[0] if k != column}
    per = torch.full((len(rep), len(fns)), float("nan"), dtype=torch.float64)
    for j, fn in enumerate(fns):
        out = fn(prompts=[p for p in prompts for _ in range(G0)], completions=completions, completion_ids=ids,
                 trainer_state=None, log_extra=lambda *a, **k: None, log_metric=lambda *a, **k: None, **kwargs)
        out = list(out)
        if len(out) != len(rep):
            raise ValueError(f"reward function {getattr(fn, '__name__', fn)} returned {len(out)} rewards for "
                             f"{len(rep)} completions; return one per completion")
        per[:, j] = torch.tensor([math.nan if r is None else float(r) for r in out], dtype=torch.float64)
    unscorable = torch.isnan(per).all(dim=1)
    total = (per * torch.tensor(weights, dtype=torch.float64)).nansum(dim=1)
    return total.view(-1, G0), int(unscorable.sum())


def run_trl_plan(config: str | Path | TrlPlanConfig, out: str | Path, *, argv: list[str] | None = None,
                 progress: bool = True, chunk_size: int = 64, **overrides) -> dict[str, Any]:
    """Pilot -> c1, c2, c3 -> G* for a TRL run; writes config.json, metrics.jsonl, results.json, plan.png, report.md.

    ``chunk_size`` rows go through each ``generate`` call and each backward pass of the sketch (memory and speed
    only: the same samples, the scores equal up to float rounding). Returns the results dict; ``results["trl"]``
    holds the answer in TRL's terms.
    """
    from trl.data_utils import is_conversational, maybe_apply_chat_template

    from ugrpo.experiments.plan.env import run_plan
    from ugrpo.experiments.plan.pilot_io import Pilot
    from ugrpo.lm.loading import load_policy
    from ugrpo.lm.sampling import sample_groups
    from ugrpo.lm.sketch import sketch_scores
    from ugrpo.report.plan import write_report

    cfg = config if isinstance(config, TrlPlanConfig) else load_trl_config(config, **overrides)
    fns = [load_reward_function(s) for s in cfg.reward_funcs]  # fail before loading the model
    ds = _dataset(cfg)
    rd = RunDir(out)
    rd.write_config({**dataclasses.asdict(cfg), "command": "plan --trl-config", "argv": argv})
    rd.file("metrics.jsonl").unlink(missing_ok=True)
    policy = load_policy(cfg.model_name_or_path, seed=cfg.seed)
    model, tok = policy.model, policy.tokenizer
    idx = torch.randperm(len(ds), generator=torch.Generator().manual_seed(cfg.seed))[: cfg.pilot_batch].tolist()
    rows = [ds[i] for i in idx]
    prompts = [r[cfg.prompt_column] for r in rows]
    conversational = is_conversational({"prompt": prompts[0]})
    texts_in = [maybe_apply_chat_template({"prompt": p}, tok)["prompt"] for p in prompts]
    G0 = cfg.pilot_group
    roll = sample_groups(model, tok, texts_in, G0, seeds=[cfg.seed * 100_003 + i for i in idx],
                         temperature=cfg.temperature, top_p=cfg.top_p, max_new_tokens=cfg.max_completion_length,
                         batch_size=chunk_size,
                         add_special_tokens=not conversational)  # a chat template already holds the special tokens
    ids = [c[m.bool()].tolist() for c, m in zip(roll.completion_ids, roll.completion_mask)]
    weights = cfg.reward_weights or (1.0,) * len(fns)
    rewards, n_unscorable = _pilot_rewards(fns, weights, rows, prompts, roll.texts, ids, G0, cfg.prompt_column,
                                           conversational)
    scores = sketch_scores(model, roll, cfg.sketch_dim, seed=cfg.seed, temperature=cfg.temperature,
                           chunk_size=chunk_size, progress=progress)  # (B0 G0, k)
    pilot = Pilot(rewards=rewards, scores=scores.double().view(cfg.pilot_batch, G0, -1),
                  meta={"model": cfg.model_name_or_path, "dataset": cfg.dataset_name, "rows": idx,
                        "sketch_dim": cfg.sketch_dim, "n_unscorable": n_unscorable})
    results = run_plan(pilot, cfg.N, n_boot=cfg.n_boot, seed=cfg.seed, run=rd)
    results["trl"] = _trl_answer(cfg, results, len(ds))
    write_report(rd, results, argv)
    return results


def _trl_answer(cfg: TrlPlanConfig, results: dict, n_rows: int | None = None) -> dict[str, Any]:
    """The plan in GRPOConfig terms: num_generations (and per_device_train_batch_size) at the same N, worded as the
    plan is (the pilot decides, or cannot tell and gives its best guess, its worst cost and the pilot that would
    decide, or cannot tell anything). ``n_rows``: the train dataset's size, which bounds a pilot's prompts."""
    from ugrpo.experiments.plan.env import group_answer
    from ugrpo.report.plan import band_words

    N, G = cfg.N, cfg.num_generations
    per_device = N // (cfg.gradient_accumulation_steps * cfg.num_processes)
    table = {c["G"]: c["predicted_mse"] for c in results["candidates"]}
    band = results.get("band") or {}
    lo, hi = band.get("low"), band.get("high")
    g_rec = results.get("g_recommended")
    current = {"num_generations": G, "per_device_train_batch_size": cfg.per_device_train_batch_size,
               "gradient_accumulation_steps": cfg.gradient_accumulation_steps, "num_processes": cfg.num_processes,
               "prompts_per_step": cfg.step_budget // G, "predicted_mse": table.get(G) if cfg.budget is None else None}
    inside = lo is not None and hi is not None and lo <= G <= hi
    rec = None
    if g_rec is None:
        msg = f"the pilot cannot tell which num_generations to use: {band.get('cannot_tell') or results['message']}"
    else:
        rec = {"num_generations": g_rec, "per_device_train_batch_size": per_device,
               "gradient_accumulation_steps": cfg.gradient_accumulation_steps, "num_processes": cfg.num_processes,
               "prompts_per_step": N // g_rec, "predicted_mse": table.get(g_rec)}
        setting = (f"num_generations: {g_rec} with per_device_train_batch_size: {per_device} (N = {N} completions per "
                   f"step = {N // g_rec} prompts x {g_rec})")
        tol = f"{100 * band['tolerance']:g}%"
        if band.get("decided"):
            msg = f"set {setting}: within {tol} of the best predicted MSE for every c1 in its interval"
        else:
            a, b = band["g_range"]
            worst = band.get("recommended_worst_ratio")
            msg = (f"best guess {setting}, but the pilot cannot tell: the best num_generations is {a} at one end of "
                   f"c1's interval and {b} at the other"
                   + (f"; it costs at most {100 * (worst - 1):.0f}% more than the best over that interval"
                      if worst is not None else ""))
        msg += f"; near-optimal (within {tol} of the best for some c1): {band_words(band, 'num_generations')}"
        need, B0 = band.get("pilot_prompts_needed"), (results.get("pilot") or {}).get("B0", "?")
        if not band.get("decided"):
            if need is None:
                msg += (f"; if c1 is near the bottom of its interval even a pilot of {64 * B0} prompts would not "
                        "decide")
            else:
                msg += f"; a pilot of about {need} prompts (ugrpo.pilot_batch; this one: {B0}) would probably decide"
                if n_rows is not None and need > n_rows:
                    msg += (f", more than the {n_rows} rows of the train dataset: with this data more samples per "
                            "prompt (ugrpo.pilot_group) are the way to a less noisy pilot")
    if G in table:
        msg += "; " + group_answer(results, G)["message"].replace("your G", "your num_generations")
    return {"budget_N": N, "current": current, "recommended": rec, "num_generations_band": [lo, hi],
            "num_generations_interval": results.get("g_star_ci"), "current_inside_band": inside,
            "decided": bool(band.get("decided")) and g_rec is not None, "message": msg}
