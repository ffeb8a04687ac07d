"""``ugrpo sweep --config``: a fixed-budget group-size sweep on a language model (paper Fig. 5, Table 2).

For each budget N, each G dividing N (B = N/G) and each seed, the existing trainer
(:func:`ugrpo.train.loop.train`) runs the same YAML config with ``budget.samples_per_step = N``,
``budget.group_size = G``, ``seed = s`` and the same number of steps into
``DIR/runs/N{N}-G{G}-s{seed}/``. Every run evaluates at the same steps (0, every ``eval.every``,
the last), so held-out ``eval_accuracy`` / ``eval_pass1`` are aggregated per (N, G, checkpoint):
mean over seeds with a 95% Student-t interval (none with one seed), the empirical best G per
(N, checkpoint), and optionally the planner's G* (Theorem 7, eq. (12)) from a sketched pilot at the
initial model (:func:`ugrpo.experiments.plan.lm.run_lm_plan`).

Runs go to a local ``ProcessPoolExecutor`` (spawn context, ``torch.set_num_threads(1)`` per
worker; each run's console output goes to its ``train.log``), or with ``--ray`` one Ray task per run
(:mod:`ugrpo.experiments.sweep.executors`). Resumable: a run with ``results.json`` is skipped, a run with
a checkpoint resumes from it, a run without one restarts; a changed training config in the same
``--out`` is an error naming the first differing field.

Deviations from the paper: the paper sweeps Qwen/Llama models on GSM8K/MATH with several seeds
on GPUs; here any config ``ugrpo train`` accepts, at the scale the machine allows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from tqdm.auto import tqdm

from ugrpo.experiments.sweep import DEFAULT_GROUPS, DEFAULT_SEEDS, SWEEP_KEYS
from ugrpo.experiments.sweep.executors import RayOptions
from ugrpo.experiments.sweep.lm_aggregate import (
    BINARY_TASKS,
    aggregate_lm,
    best_lm_groups,
    scoring_fault_counts,
    scoring_fault_summary,
)
from ugrpo.report.sweep import METRICS, uniform_rows
from ugrpo.runs import RunDir, read_jsonl, to_jsonable
from ugrpo.stats.budget import check_divides
from ugrpo.tasks.custom_check import check_named_task

__all__ = ["LMSweepConfig", "RunSpec", "build_runs", "check_lm_resume", "run_lm_sweep", "collect_evals",
           "lm_planner", "sweep_lm", "SWEEP_KEYS"]

@dataclass(frozen=True)
class LMSweepConfig:
    """Resolved settings of ``ugrpo sweep --config``; the defaults are the command's."""

    config: str
    """YAML training config (``ugrpo train --config``)"""
    budgets: tuple[int, ...]
    """samples per step N = B*G, one sweep per budget"""
    groups: tuple[int, ...] = DEFAULT_GROUPS
    """group sizes G; each must divide every budget"""
    seeds: int = DEFAULT_SEEDS
    """independent runs per (N, G); run seeds are seed, seed+1, ..., seed+seeds-1"""
    seed: int = 0
    steps: int | None = None
    """optimisation steps of every run (None = the config's)"""
    overrides: tuple[tuple[str, Any], ...] = ()
    """(dotted key, value) pairs applied to the config (``--set key=value``)"""
    workers: int | None = None
    """parallel training runs; None = :func:`ugrpo.experiments.common.default_workers` (the CPU cores available;
    1 when a GPU is visible)"""
    plan_pilot: tuple[int, int] | None = None
    """(B0, G0) of the planner's pilot at the initial model; None = no planner"""
    ray: RayOptions | None = None
    """run on Ray (a local Ray of ``workers`` CPUs, or the cluster at ``ray.address``); None = local processes"""
    rules: tuple[str, ...] = ()
    """allocation rules (``allocation.rule``), one run per (N, G, rule, seed); () = no allocation axis"""

    def __post_init__(self) -> None:
        if self.workers is None:
            from ugrpo.experiments.common import default_workers

            object.__setattr__(self, "workers", default_workers())
        if self.seeds < 1:
            raise ValueError(f"--seeds must be >= 1, got {self.seeds}")
        if self.seed < 0:
            raise ValueError(f"--seed must be >= 0, got {self.seed}")
        if self.workers < 1:
            raise ValueError(f"--workers must be >= 1, got {self.workers}")
        if self.steps is not None and self.steps < 1:
            raise ValueError(f"--steps must be >= 1, got {self.steps}")
        for key, _ in self.overrides:
            if key in SWEEP_KEYS:
                raise ValueError(f"override {key}: the sweep sets {key} itself; use --budget / --groups / --seed / "
                                 "--steps / --allocation instead")
        if self.rules:
            from ugrpo.experiments.sweep.lm_alloc import check_rules

            check_rules(self.rules)
        for N in self.budgets:  # every (N, G) before any work starts
            for G in self.groups:
                check_divides(N, G)
        if self.plan_pilot is not None and (self.plan_pilot[0] < 2 or self.plan_pilot[1] < 4):
            raise ValueError(f"--plan-pilot {self.plan_pilot[0]},{self.plan_pilot[1]}: need B0 >= 2 and G0 >= 4")


@dataclass(frozen=True)
class RunSpec:
    """One training run of the sweep."""

    budget: int
    G: int
    seed: int
    name: str
    """sub-folder name under ``DIR/runs``: ``N{N}-G{G}-s{seed}``"""
    cfg: Any
    """the validated :class:`ugrpo.train.config.TrainConfig`"""
    rule: str | None = None
    """allocation rule of the run (``N{N}-G{G}-{rule}-s{seed}``); None = no allocation axis (``N{N}-G{G}-s{seed}``)"""


def parse_sets(items: Sequence[str] | None) -> tuple[tuple[str, Any], ...]:
    """``["optim.lr=1e-4", ...]`` -> ``(("optim.lr", 1e-4), ...)``; values are YAML scalars."""
    from ugrpo.train.config.load import read_yaml

    out = []
    for it in items or ():
        if "=" not in it or not it.split("=", 1)[0].strip():
            raise ValueError(f"--set {it!r}: expected KEY=VALUE with a dotted config key, e.g. --set optim.lr=1e-4")
        k, v = it.split("=", 1)
        out.append((k.strip().replace("-", "_"), read_yaml(v, f"--set {it}") if v != "" else ""))
    return tuple(out)


def _pairs(cfg: LMSweepConfig) -> list[tuple[str, Any]]:
    return list(cfg.overrides) + ([("steps", cfg.steps)] if cfg.steps is not None else [])


def base_config(cfg: LMSweepConfig):
    """The training config shared by every run: the YAML plus ``--set`` plus ``steps``."""
    from ugrpo.train.config import load_config

    return load_config(cfg.config, _pairs(cfg))


def trainer_has_allocation() -> bool:
    """Whether this trainer's config has the ``allocation`` section (per-prompt group sizes)."""
    import dataclasses

    from ugrpo.train.config import TrainConfig

    return any(f.name == "allocation" for f in dataclasses.fields(TrainConfig))


def _rule_pairs(rule: str | None) -> list[tuple[str, Any]]:
    """``allocation.rule`` for a run of the allocation axis; a trainer without the section runs only uniform."""
    if rule is None:
        return []
    if trainer_has_allocation():
        return [("allocation.rule", rule)]
    if rule == "uniform":  # the trainer's only behaviour: one G for every prompt
        return []
    raise ValueError(f"--allocation {rule}: this trainer has no allocation section (allocation.rule), so it can only "
                     "train uniform; drop the other rules or update ugrpo")


def build_runs(cfg: LMSweepConfig) -> list[RunSpec]:
    """Every (N, G, rule, seed) with its validated TrainConfig (all checked before any training)."""
    from ugrpo.train.config import load_config

    pairs = _pairs(cfg)
    out = []
    for N in cfg.budgets:
        for G in cfg.groups:
            for rule in cfg.rules or (None,):
                for s in range(cfg.seed, cfg.seed + cfg.seeds):
                    tc = load_config(cfg.config, pairs + [("budget.samples_per_step", N), ("budget.group_size", G),
                                                         ("seed", s)] + _rule_pairs(rule))
                    name = f"N{N}-G{G}-s{s}" if rule is None else f"N{N}-G{G}-{rule}-s{s}"
                    out.append(RunSpec(N, G, s, name, tc, rule))
    return out


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(d, dict):
        out: dict[str, Any] = {}
        for k, v in d.items():
            out.update(_flat(v, f"{prefix}{k}."))
        return out or {prefix.rstrip("."): {}}
    return {prefix.rstrip("."): d}


def check_lm_resume(old: dict | None, base: dict, out: str) -> None:
    """A rerun into an existing folder must train with the same config (else runs would mix). A field the old
    record lacks (written by a trainer before that field existed) counts as the same when it is at its default."""
    from ugrpo.train.config import config_from_dict

    if not old or "train_config" not in old:
        return
    a, b = _flat(to_jsonable(old["train_config"])), _flat(to_jsonable(base))
    default = _flat(to_jsonable(asdict(config_from_dict({}))))
    for k in sorted(set(a) | set(b)):
        if k in SWEEP_KEYS or (k not in a and k in default and b.get(k) == default[k]):
            continue
        if a.get(k, "<absent>") != b.get(k, "<absent>"):
            raise ValueError(f"--out {out} holds a sweep trained with {k} = {a.get(k, '<absent>')!r}, but this run "
                             f"has {k} = {b.get(k, '<absent>')!r}; use a new --out folder or the same config to resume")


# ---------------------------------------------------------------------------------------------- running


def run_lm_sweep(cfg: LMSweepConfig, specs: Sequence[RunSpec], root: RunDir, *,
                 progress: bool = True) -> dict[str, str]:
    """Run every unfinished spec (:mod:`ugrpo.experiments.sweep.executors`); returns {run name: 'skipped' |
    'resumed' | 'started'}."""
    from ugrpo.experiments.sweep.executors import Job, run_jobs, run_state

    actions: dict[str, str] = {}
    jobs = []
    for sp in specs:
        st = run_state(root.file("runs") / sp.name)
        actions[sp.name] = {"done": "skipped", "resume": "resumed", "restart": "started", "start": "started"}[st]
        if st != "done":
            jobs.append(Job(sp, str(root.file("runs") / sp.name)))
    n_skip = len(specs) - len(jobs)
    if n_skip:
        print(f"resuming: {n_skip} runs already finished in {root.file('runs')}; {len(jobs)} to go "
              f"({sum(1 for v in actions.values() if v == 'resumed')} from a checkpoint)", flush=True)
    bar = tqdm(total=len(jobs), desc="sweep runs" + (" (Ray)" if cfg.ray else ""), unit="run",
               disable=not progress, dynamic_ncols=True)
    try:
        run_jobs(jobs, workers=cfg.workers, ray=cfg.ray, bar=bar)
    finally:
        bar.close()
    return actions


# ---------------------------------------------------------------------------------------------- reading the runs
# (their aggregation: ugrpo.experiments.sweep.lm_aggregate)


def collect_evals(root: RunDir, specs: Sequence[RunSpec]) -> list[dict[str, Any]]:
    """One row per run: {budget, G, seed, name, rule, samples_source, evals: {step: {metric: value, samples}},
    scoring_errors: :func:`~ugrpo.experiments.sweep.lm_aggregate.scoring_fault_counts`} from its metrics.jsonl
    (samples spent: :func:`ugrpo.experiments.sweep.lm_alloc.eval_points`)."""
    from ugrpo.experiments.sweep.lm_alloc import eval_points

    out = []
    for sp in specs:
        rows = list(read_jsonl(root.file("runs") / sp.name / "metrics.jsonl"))
        evals, source = eval_points(rows, sp.budget, METRICS, rule=sp.rule)
        out.append({"budget": sp.budget, "G": sp.G, "seed": sp.seed, "name": sp.name, "rule": sp.rule,
                    "samples_source": source, "evals": evals,
                    "scoring_errors": scoring_fault_counts(rows)})
    return out


def lm_planner(cfg: LMSweepConfig, base, folder: RunDir, *, progress: bool = True) -> dict[str, Any]:
    """Planner G* (Theorem 7) from a sketched pilot at the initial model; cached in ``folder/results.json``."""
    from ugrpo.experiments.plan.lm import LMPlanConfig, run_lm_plan
    from ugrpo.report.plan import write_report
    from ugrpo.stats.planner import bound

    res = folder.finished_results()  # a plan that stopped part way is planned again
    if res is None:
        B0, G0 = cfg.plan_pilot
        pc = LMPlanConfig(model=base.model.name, task=base.task.name, task_options=dict(base.task.options),
                          pilot_batch=B0, pilot_group=G0, budget=cfg.budgets[0], seed=cfg.seed,
                          temperature=base.sampling.temperature, max_new_tokens=base.sampling.max_new_tokens,
                          chat=base.model.chat)
        res = run_lm_plan(pc, folder, progress=progress)
        write_report(folder, res)
    c = [max(res[k]["estimate"], 0.0) for k in ("c1", "c2", "c3")]
    cands = [g for g in cfg.groups if g >= 2]  # the bound needs G >= 2
    swept = min(cands, key=lambda g: bound(*c, cfg.budgets[0], g)) if cands else None
    return {"g_star": res["g_star"], "g_star_ci": res["g_star_ci"], "g_star_continuous": res["g_star_continuous"],
            "g_star_swept": swept if res["c1_distinguishable_from_zero"] else None,
            "c1_distinguishable_from_zero": res["c1_distinguishable_from_zero"], "message": res["message"],
            "constants": {k: res[k] for k in ("c1", "c2", "c3")}, "pilot": list(cfg.plan_pilot),
            "g_recommended": res.get("g_recommended"), "band": res.get("band"),
            "folder": str(folder.path)}


# ---------------------------------------------------------------------------------------------- running all


def sweep_config_record(cfg: LMSweepConfig, base) -> dict[str, Any]:
    """What ``DIR/config.json`` holds: the sweep settings and the shared training config."""
    return to_jsonable({**asdict(cfg), "command": "sweep", "train_config": asdict(base)})


def sweep_lm(cfg: LMSweepConfig, out: str, *, argv: Sequence[str] | None = None,
             progress: bool = True) -> dict[str, Any]:
    """The whole ``ugrpo sweep --config``: validate, run (resumably), plan, aggregate, write; returns results."""
    base = base_config(cfg)
    specs = build_runs(cfg)  # every config validated before any work
    check_named_task(base.task.name, base.task.options)  # a custom reward function: once, not in each run's log
    root = RunDir(out)
    check_lm_resume(root.read_config("sweep"), asdict(base), out)  # another command's folder is refused as such
    root.write_config({**sweep_config_record(cfg, base), "argv": list(argv) if argv else None})
    try:
        actions = run_lm_sweep(cfg, specs, root, progress=progress)
    except KeyboardInterrupt:
        raise KeyboardInterrupt(f"interrupted: finished runs are in {root.file('runs')}; rerun the same command "
                                "to resume (unfinished runs continue from their last checkpoint)") from None
    planner = lm_planner(cfg, base, RunDir(root.file("plan")), progress=progress) if cfg.plan_pilot else None
    runs = collect_evals(root, specs)
    bounds = (0.0, 1.0) if base.task.name in BINARY_TASKS else None
    cps, rows = aggregate_lm(runs, bounds=bounds)
    if not cps:
        raise ValueError(f"the runs in {root.file('runs')} share no evaluated step; check eval.every in {cfg.config}")
    results = {"rows": rows, "best_G": best_lm_groups(uniform_rows(rows)), "checkpoints": cps, "planner": planner,
               "interval": "95% t-interval over seeds" + (", cut to [0, 1] (an accuracy's range)" if bounds else ""),
               "config": to_jsonable(asdict(cfg)), "steps": base.steps, "model": base.model.name,
               "task": to_jsonable({"name": base.task.name, "options": dict(base.task.options)}),
               "scoring_errors": scoring_fault_summary(runs), "runs": [
                   {k: r[k] for k in ("budget", "G", "seed", "name", "rule", "samples_source", "scoring_errors")}
                   | {"action": actions[r["name"]]} for r in runs]}
    if cfg.rules:
        from ugrpo.experiments.sweep.lm_alloc import allocation_section

        results["allocation"] = allocation_section(runs, cps, METRICS, bounds=bounds, seed=cfg.seed)
    from ugrpo.report.sweep import write_report

    write_report(root, results, argv)
    return results

