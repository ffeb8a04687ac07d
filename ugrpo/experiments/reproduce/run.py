"""``ugrpo reproduce``: the paper's experiments (Fig. 4, Fig. 5, Table 2, Theorem 8) at one scale, one report.

Built only from the commands that exist: :func:`ugrpo.experiments.mse.lm.run_lm_mse` (Fig. 4, one
sub-folder per model strength), :func:`ugrpo.experiments.sweep.lm.sweep_lm` (Fig. 5 with the
planner's G*, Theorem 7 / eq. (12); Table 2 over several budgets N) and
:func:`ugrpo.experiments.gap.run_gap` (Theorem 8). Each part writes its own run folder under
``OUT/<part>/``; this module then reads their ``results.json`` files only and writes
``OUT/results.json`` and ``OUT/report.html`` (figures inline as base64 PNG, the paper's numbers
beside ours where the paper prints any, and a Claims section: :mod:`ugrpo.experiments.reproduce.claims`
judges each claim, :mod:`ugrpo.report.composite` writes the page).

Resumable: a Fig. 4 strength or Theorem 8 folder with ``results.json`` is skipped; the sweeps use
the sweep's own resume (finished training runs are skipped, the planner's pilot is cached).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ugrpo.experiments.reproduce.claims import STRENGTHS
from ugrpo.runs import RunDir, to_jsonable
from ugrpo.tasks.custom_check import check_named_task

__all__ = ["PARTS", "SCALES", "PAPER_TABLE2", "ReproduceConfig", "ScalePlan", "scale_plan", "check_paper_ready",
           "run_reproduce"]

PARTS = ("fig4", "fig5", "table2", "thm8")
SCALES = ("smoke", "tiny", "paper")
PAPER_MODELS = {"fig4": ("Qwen/Qwen2.5-0.5B", "Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct"),
                "fig5": "Qwen/Qwen2.5-1.5B-Instruct", "table2": "Qwen/Qwen2.5-Math-7B"}
PAPER_TABLE2 = {1024: {4: 0.7677, 8: 0.7491, 16: 0.7753, 32: 0.7627, 64: 0.7817, 128: 0.7743},
                2048: {4: 0.7703, 8: 0.7679, 16: 0.7697, 32: 0.7793, 64: 0.7819, 128: 0.7665},
                4096: {4: 0.7691, 8: 0.7713, 16: 0.7701, 32: 0.7673, 64: 0.7703, 128: 0.7757}}
PAPER_DATA = {"gsm8k": {"train_path": "data/gsm8k/train.jsonl", "eval_path": "data/gsm8k/test.jsonl"},
              "math": {"train_path": "data/math/train.jsonl", "eval_path": "data/math/test.jsonl"}}
"""local data files of the paper-scale sweeps (as in examples/*.yaml), relative to the working directory"""
"""Table 2 of the paper (Qwen2.5-Math-7B on MATH, single run, test accuracy at the final step; docs/paper.md 8.3)"""


@dataclass(frozen=True)
class ReproduceConfig:
    """Resolved settings of ``ugrpo reproduce``."""

    scale: str
    out: str
    skip: tuple[str, ...] = ()
    model_override: str | None = None
    """one model folder for every strength and sweep (tests); None = the scale's models"""
    task: str | None = None
    """task of every part (with ``task_options``); None = the scale's task"""
    task_options: dict = field(default_factory=dict)
    workers: int = 1
    seed: int = 0
    ray: Any = None
    """:class:`ugrpo.experiments.sweep.executors.RayOptions` to train the sweeps' runs on Ray; None = local processes"""
    overrides: tuple[tuple[str, Any], ...] = ()
    """training-config overrides ``(dotted key, value)`` applied to every run of the fig5 and table2 sweeps"""

    def __post_init__(self) -> None:
        if self.scale not in SCALES:
            raise ValueError(f"--scale {self.scale!r}: choose one of {', '.join(SCALES)}")
        bad = [p for p in self.skip if p not in PARTS]
        if bad:
            raise ValueError(f"--skip: unknown part(s) {', '.join(bad)}; choose from {', '.join(PARTS)} "
                             "(comma-separated)")
        if self.workers < 1:
            raise ValueError(f"--workers must be >= 1, got {self.workers}")
        if self.task_options and self.task is None:
            raise ValueError("--task-option needs --task")


@dataclass(frozen=True)
class ScalePlan:
    """What each part runs at one scale."""

    fig4_models: tuple[tuple[str, str], ...]
    """(strength label, model) pairs"""
    fig4: dict
    """LMMSEConfig fields other than model/task"""
    train: dict
    """the Fig. 5 training config (YAML dict); the sweep sets budget, group size and seed"""
    train_table2: dict
    """the Table 2 training config"""
    fig5: dict
    """LMSweepConfig fields for Fig. 5 (one budget, the planner's pilot)"""
    table2: dict
    """LMSweepConfig fields for Table 2 (several budgets)"""
    thm8: dict
    """GapConfig fields (Theorem 8)"""
    task: str
    task_options: dict


def _train_config(model: str, task: str, options: dict, *, steps: int, every: int, n_eval: int, pass1: int,
                  max_new: int, lr: float) -> dict:
    return {"model": {"name": model}, "task": {"name": task, "options": dict(options)},
            "budget": {"samples_per_step": 8, "group_size": 4},
            "sampling": {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": max_new},
            "algorithm": 1, "baseline": "grpo", "scale": "none", "steps": steps,
            "optim": {"name": "adamw", "lr": lr, "scheduler": "constant"}, "loss": {"aggregation": "seq_sum"},
            "eval": {"every": every, "n_problems": n_eval, "greedy": True, "pass1_samples": pass1},
            "seed": 0, "checkpoint_every": every, "log_every": every}


def scale_plan(cfg: ReproduceConfig) -> ScalePlan:
    """The settings of every part at ``cfg.scale`` (tiny: the arithmetic task the tiny models were warmed on)."""
    if cfg.scale == "paper":
        return _paper_plan(cfg)
    tiny = cfg.scale == "tiny"
    task = cfg.task or "arithmetic"
    opts = dict(cfg.task_options)
    if cfg.model_override:
        models = tuple((s, str(cfg.model_override)) for s in STRENGTHS)
    elif tiny:
        models = tuple((s, f"tiny:{s}") for s in STRENGTHS)
    else:  # smoke: the random-weight tiny model, built in seconds (ugrpo.lm.tiny_cache)
        models = tuple((s, "tiny:random") for s in STRENGTHS)
    sweep_model = str(cfg.model_override or ("tiny:instruct" if tiny else "tiny:random"))
    if task == "arithmetic" and not opts:  # the tiny models' own task
        from ugrpo.lm.pretrain import TINY_TASK_OPTIONS

        opts = dict(TINY_TASK_OPTIONS)
    if tiny:
        fig4 = dict(groups=(4, 8, 16, 32, 64), batch=8, reps=30, ref_samples=256, prompts=32, sketch_dim=256,
                    max_new_tokens=6)  # docs/lm-mse.md's command
        train = _train_config(sweep_model, task, opts, steps=100, every=25, n_eval=100, pass1=4, max_new=6, lr=5e-5)
        fig5 = dict(budgets=(64,), groups=(2, 4, 8, 16, 32), seeds=3, plan_pilot=(16, 8))
        table2 = dict(budgets=(64, 128, 256), groups=(4, 8, 16, 32, 64), seeds=3, plan_pilot=(16, 8))
        thm8 = {}  # `ugrpo gap` defaults
    else:  # smoke: seconds, on tiny:random (checks the plumbing; every claim is 'too small to decide')
        fig4 = dict(groups=(4, 8), batch=2, reps=3, ref_samples=8, prompts=4, sketch_dim=16, max_new_tokens=4)
        train = _train_config(sweep_model, task, opts, steps=2, every=1, n_eval=4, pass1=2, max_new=4, lr=1e-3)
        fig5 = dict(budgets=(8,), groups=(2, 4), seeds=1, plan_pilot=(2, 4))
        table2 = dict(budgets=(4, 8), groups=(2, 4), seeds=1, plan_pilot=(2, 4))
        thm8 = dict(groups=(4,), estimators=("grpo",), runs=16, steps=32, batch=4)
    return ScalePlan(models, fig4, train, train, fig5, table2, thm8, task, opts)


def _paper_plan(cfg: ReproduceConfig) -> ScalePlan:
    check_paper_ready(cfg)
    models = tuple(zip(STRENGTHS, PAPER_MODELS["fig4"]))
    fig4 = dict(groups=(4, 8, 16, 32, 64), batch=8, reps=30, ref_samples=256, prompts=32, sketch_dim=256,
                max_new_tokens=16)
    train = _train_config(PAPER_MODELS["fig5"], "gsm8k", dict(PAPER_DATA["gsm8k"]), steps=800, every=100,
                          n_eval=1319, pass1=0, max_new=512, lr=1e-6)  # examples/gsm8k-qwen1.5b.yaml
    train["model"].update(dtype="bfloat16", chat=True)
    train["optim"]["grad_clip"] = 1.0
    t2 = _train_config(PAPER_MODELS["table2"], "math", dict(PAPER_DATA["math"]), steps=500, every=100,
                       n_eval=5000, pass1=0, max_new=1024, lr=1e-6)  # examples/math-qwen7b.yaml
    t2["model"].update(dtype="bfloat16", chat=False)
    t2["optim"]["grad_clip"] = 1.0
    fig5 = dict(budgets=(1024,), groups=(4, 8, 16, 32, 64, 128), seeds=5, plan_pilot=(64, 16))
    table2 = dict(budgets=(1024, 2048, 4096), groups=(4, 8, 16, 32, 64, 128), seeds=1, plan_pilot=(64, 16))
    return ScalePlan(models, fig4, train, t2, fig5, table2, {}, "arithmetic", {})


def _cached(model: str) -> bool:
    if Path(model).expanduser().is_dir():
        return True
    try:
        from huggingface_hub import try_to_load_from_cache

        return isinstance(try_to_load_from_cache(model, "config.json"), str)
    except Exception:  # noqa: BLE001 - no hub library or a malformed id: not available
        return False


def check_paper_ready(cfg: ReproduceConfig) -> None:
    """Fail fast (before any work) when the paper's weights are not local or there is no GPU; never downloads."""
    import torch

    needed = sorted({m for m in (*PAPER_MODELS["fig4"], PAPER_MODELS["fig5"], PAPER_MODELS["table2"])})
    missing = [m for m in needed if not _cached(m)]
    problems = []
    if missing:
        problems.append(f"the weights of {', '.join(missing)} are not in the local Hugging Face cache (nothing is "
                        "downloaded at run time): on a machine with network run `hf download <id>` for each and copy "
                        "the cache (HF_HOME) here")
    data = [p for d in PAPER_DATA.values() for p in d.values() if not Path(p).is_file()]
    if data:
        problems.append(f"the data files {', '.join(data)} are missing: write GSM8K / MATH as JSONL there")
    if not torch.cuda.is_available():
        problems.append("there is no GPU (torch.cuda.is_available() is False): the paper's 0.5B-7B models need one")
    if problems:
        raise ValueError("--scale paper cannot run: " + "; and ".join(problems) + ". Use --scale tiny on this machine.")


# ----------------------------------------------------------------------------------------------- running


def _write_yaml(path: Path, obj: dict) -> str:
    import yaml

    from ugrpo.runs import atomic_write_text

    atomic_write_text(path, yaml.safe_dump(obj, sort_keys=False))
    return str(path)


def _fig4(cfg: ReproduceConfig, plan: ScalePlan, out: Path, progress: bool, log: Callable[[str], None]) -> dict:
    from ugrpo.experiments.mse.lm import LMMSEConfig, run_lm_mse
    from ugrpo.report.mse import write_report

    done = {}
    for label, model in plan.fig4_models:
        rd = RunDir(out / "fig4" / label)
        if rd.finished_results() is not None:
            log(f"fig4/{label}: finished earlier, skipped")
            done[label] = "skipped"
            continue
        mc = LMMSEConfig(model=model, task=plan.task, task_options=dict(plan.task_options), seed=cfg.seed,
                         **plan.fig4)
        rd.write_config({**asdict(mc), "command": "mse", "part": "reproduce fig4"})
        if rd.file("metrics.jsonl").exists():
            rd.file("metrics.jsonl").unlink()  # an unfinished measurement restarts
        write_report(rd, run_lm_mse(mc, rd, progress=progress))
        done[label] = "ran"
    return done


def _sweep(part: str, cfg: ReproduceConfig, plan: ScalePlan, out: Path, progress: bool) -> str:
    from ugrpo.experiments.sweep.lm import LMSweepConfig, sweep_lm

    folder = out / part
    folder.mkdir(parents=True, exist_ok=True)
    yml = _write_yaml(folder / "train.yaml", plan.train if part == "fig5" else plan.train_table2)
    workers = 1 if cfg.scale == "smoke" else cfg.workers  # 2-step runs: a worker pool's start-up would cost more
    sc = LMSweepConfig(config=yml, seed=cfg.seed, workers=workers, ray=cfg.ray, overrides=tuple(cfg.overrides),
                       **getattr(plan, part))
    res = sweep_lm(sc, str(folder), argv=None, progress=progress)
    return sweep_action(res["runs"])


def sweep_action(runs: list[dict]) -> str:
    """What a sweep really did, from its runs' actions: e.g. 'trained 4 runs, reused 2 finished runs'."""
    n = {a: sum(1 for r in runs if r["action"] == a) for a in ("started", "resumed", "skipped")}
    words = [f"trained {n['started']} run{'s' * (n['started'] != 1)}" if n["started"] else "",
             f"resumed {n['resumed']} from a checkpoint" if n["resumed"] else "",
             f"reused {n['skipped']} finished run{'s' * (n['skipped'] != 1)}" if n["skipped"] else ""]
    return ", ".join(w for w in words if w) or "no runs"


def _thm8(cfg: ReproduceConfig, plan: ScalePlan, out: Path, progress: bool) -> str:
    from ugrpo.experiments.gap import GapConfig, run_gap
    from ugrpo.report.gap import write_report

    rd = RunDir(out / "thm8")
    if rd.finished_results() is not None:
        return "skipped"
    gc = GapConfig(seed=cfg.seed, **plan.thm8)
    rd.write_config({**asdict(gc), "checkpoints": gc.checkpoints, "command": "gap", "part": "reproduce thm8"})
    rd.file("metrics.jsonl").unlink(missing_ok=True)
    t0 = time.perf_counter()
    res = run_gap(gc, rd, progress=progress)
    res["seconds"] = time.perf_counter() - t0
    write_report(rd, res)
    return "ran"


def run_reproduce(cfg: ReproduceConfig, *, progress: bool = True, log: Callable[[str], None] = print) -> dict:
    """Run every part not skipped (resumably), then write ``results.json`` and ``report.html``; returns results."""
    plan = scale_plan(cfg)  # --scale paper fails here, before any work
    check_named_task(plan.task, plan.task_options)  # --task custom: its reward function, before any part
    out = Path(cfg.out)
    root = RunDir(out)
    root.write_config({**to_jsonable(asdict(cfg)), "plan": to_jsonable(asdict(plan)), "command": "reproduce"})
    actions, seconds = {}, {}
    for part in PARTS:
        if part in cfg.skip:
            actions[part] = "skipped (--skip)"
            continue
        t0 = time.perf_counter()
        log(f"== {part}")
        if part == "fig4":
            actions[part] = _fig4(cfg, plan, out, progress, log)
        elif part in ("fig5", "table2"):
            actions[part] = _sweep(part, cfg, plan, out, progress)
        else:
            actions[part] = _thm8(cfg, plan, out, progress)
            if actions[part] == "skipped":
                log("thm8: finished earlier, skipped")
        seconds[part] = time.perf_counter() - t0
        what = actions[part]
        if isinstance(what, dict):  # fig4: one action per strength, as words
            what = ", ".join(f"{lab} {act}" for lab, act in what.items())
            models = {m for _, m in plan.fig4_models}
            if len(models) == 1 < len(plan.fig4_models):  # smoke or --model-override: the strengths are names only
                what += f" (one model for all three: {models.pop()})"
        log(f"   {part}: {what} ({seconds[part]:.1f} s)")
    from ugrpo.experiments.reproduce.claims import claims, summary
    from ugrpo.report.composite import read_parts, write_reproduce_report

    parts = read_parts(out, [lab for lab, _ in plan.fig4_models])  # no folder is created

    results = {"scale": cfg.scale, "actions": actions, "seconds": seconds, "claims": claims(parts),
               "paper": {"table2": PAPER_TABLE2, "fig4": "no numbers in the text (docs/paper.md 8.1)",
                         "fig5": "no numbers in the text (docs/paper.md 8.2)"},
               "summary": summary(parts), "models": {"fig4": dict(plan.fig4_models), "fig5": plan.train["model"],
                                                        "table2": plan.train_table2["model"]}}
    root.write_results(results)
    write_reproduce_report(root, results)
    return results
