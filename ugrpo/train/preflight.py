"""What ``ugrpo train`` checks before it creates its run folder, with no model loaded and no torch imported.

:func:`preflight` runs the checks that need neither, cheapest first:

1. the run folder, read only (:func:`ugrpo.runlock.check_claim`): another command's folder, a run that exists
   without ``--resume``, ``--resume`` of a folder that holds no run (a mistyped ``--out``), a path that cannot be
   created;
2. ``model.name`` (:func:`ugrpo.lm.source.check_model_name`): an unknown ``tiny:`` name, a missing folder, a hub
   id that is not in the local cache;
3. the task: its options, its train problems and, when the run evaluates, its eval problems (a GSM8K or MATH task
   without its files, a custom task's bad rows);
4. a custom task's reward function, called once as training calls it on the first train row's gold answer
   (:func:`ugrpo.tasks.custom_check.check_reward_fn`): an error if it raises (a TRL-style signature) or returns
   something else than one number or None, a warning if the gold answer scores None or <= 0;
5. the logging backends of ``report_to`` (:func:`ugrpo.train.report_to.check_backends`): each one installed.

The checks that need the model (the prompt lengths against its context, the LoRA targets) run in
:func:`ugrpo.train.setup.build_run`, which :func:`ugrpo.train.loop.train` also runs before it claims the folder
(:func:`ugrpo.runlock.claim`). Either way an error in the input leaves no folder, ``.lock``, ``run.json`` or
``config.json`` behind, and the next try is not refused. The command line calls :func:`preflight` before it imports
the loop (torch, transformers), so these errors come back in well under 2 s; it passes the result on, so the task's
problems are built once.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ugrpo.errors import ResumeError
from ugrpo.lm.source import check_model_name
from ugrpo.runlock import check_claim, holds_run
from ugrpo.tasks.base import OptionError, Problem, Task
from ugrpo.tasks.custom_check import check_task_reward
from ugrpo.tasks.registry import get_task
from ugrpo.train.config import TrainConfig
from ugrpo.train.report_to import check_backends
from ugrpo.train.resume import hashed_config

__all__ = ["Checked", "preflight"]


@dataclass(frozen=True)
class Checked:
    """What :func:`preflight` built while it checked: the task and its problems, for the run to use."""

    task: Task
    train_problems: list[Problem]
    eval_problems: list[Problem]
    """the first ``eval.n_problems`` eval problems; empty when the run does not evaluate"""


def preflight(cfg: TrainConfig, out: str | Path, *, resume: bool = False) -> Checked:
    """Check what can be checked before the run folder is created (the module docstring); the task and problems.

    Raises the same errors as the run would (``ValueError``, ``FileNotFoundError``, :class:`ugrpo.errors.UserError`),
    before anything is written.
    """
    rank0 = os.environ.get("RANK", "0") in ("", "0")  # torchrun / accelerate: rank 0 alone claims the folder
    if resume and not holds_run(out):
        what = "does not exist" if not Path(out).exists() else "holds no run (no run.json or config.json)"
        raise ResumeError(f"--resume: {out} {what}, so there is no run to resume; check --out (a typo starts nothing "
                          "here), or drop --resume to start a new run there")
    check_claim(out, "train", hashed_config(cfg), resume=resume, exclusive=True, probe_lock=rank0)
    check_model_name(cfg.model.name)
    try:
        task = get_task(cfg.task.name, **cfg.task.options)
    except OptionError as e:
        raise OptionError(f"task.options: {e}. The options come from the config file and --task.options.NAME "
                          "VALUE; a config's options for another task stay when --task.name changes the task: "
                          "drop them from the file (or start from a config for this task)") from None
    except ValueError as e:  # a valid option with a bad value: the task's own check
        raise ValueError(f"task.options: {e} (set it in the config file or with --task.options.NAME VALUE)") from None
    train_problems = task.train_problems()
    if not train_problems:
        raise ValueError("the task has no train problems; check task.options")
    eval_problems: list[Problem] = []
    if cfg.eval.n_problems and (cfg.eval.greedy or cfg.eval.pass1_samples):
        eval_problems = task.eval_problems()[: cfg.eval.n_problems]
        if not eval_problems:
            raise ValueError("the task has no eval problems; check task.options, or set eval.n_problems=0")
    check_task_reward(task, train_problems, warn=rank0)
    check_backends(cfg.report_to)
    return Checked(task, train_problems, eval_problems)
