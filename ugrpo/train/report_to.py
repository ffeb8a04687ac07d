"""``report_to``: the per-step metrics, also sent to TensorBoard, Trackio, Weights & Biases or MLflow.

``metrics.jsonl`` always gets every row; ``report_to: [tensorboard, trackio, wandb, mlflow]`` (TRL's names; ``all``:
every one installed; default: none, as in transformers >= 5) sends the numbers of each row to those backends too,
under TRL's metric names where TRL has the metric (:data:`TRL_NAMES`: ``reward``, ``reward_std``,
``frac_reward_zero_std``, ``kl``, ``grad_norm``, ``learning_rate``, ``completions/mean_length``, ...) and ugrpo's own
name otherwise, with the prefixes transformers' callbacks write (``train/``, ``eval/``; MLflow: none), so that a
ugrpo run and a TRL run sit side by side in one dashboard. Each backend is an optional extra
(``pip install 'ugrpo[wandb]'``, ...); a backend asked for but not installed is an error before the run folder is
created (:func:`check_backends`).

Where each writes: TensorBoard ``<run folder>/tensorboard``; W&B the run folder's ``wandb/`` (project
``$WANDB_PROJECT``, default ``ugrpo``; ``WANDB_MODE=offline`` runs with no network); Trackio its local database
(``$TRACKIO_DIR``, project ``$TRACKIO_PROJECT``, default ``ugrpo``; ``trackio show`` opens it); MLflow where its
own settings say (``$MLFLOW_TRACKING_URI``, experiment ``$MLFLOW_EXPERIMENT_NAME``, default ``ugrpo``). The run's
name is its folder's name; its config is logged once.

Differences from TRL's values under the same names: ``reward_std`` is the standard deviation of the step's rewards
with divisor n (TRL: n - 1); ``kl`` is the K3 estimator aggregated like the loss (``loss.aggregation``; TRL: the
token mean); ``clip_ratio/region_mean`` is the fraction of tokens whose clipped term is active (Algorithm 2).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ugrpo.errors import UserError
from ugrpo.train.config.schema import REPORT_TO

__all__ = ["BACKENDS", "EXTRAS", "TRL_NAMES", "resolve_backends", "check_backends", "trl_metrics", "rewrite_logs",
           "open_backends", "Backend"]

BACKENDS: tuple[str, ...] = REPORT_TO
"""The ``report_to`` names (TRL's / transformers' ``report_to`` values; the config also takes ``all`` and ``none``)."""

EXTRAS: dict[str, tuple[str, str]] = {
    "tensorboard": ("tensorboard", "tensorboard"), "trackio": ("trackio", "trackio"), "wandb": ("wandb", "wandb"),
    "mlflow": ("mlflow", "mlflow"),
}
"""backend -> (the module it imports, the ugrpo extra that installs it)"""

TRL_NAMES: dict[str, str] = {
    "reward_mean": "reward",
    "reward_std": "reward_std",
    "frac_reward_zero_std": "frac_reward_zero_std",
    "loss": "loss",
    "grad_norm": "grad_norm",
    "kl": "kl",
    "lr": "learning_rate",
    "completion_len_mean": "completions/mean_length",
    "truncated_frac": "completions/clipped_ratio",
    "clip_frac": "clip_ratio/region_mean",
}
"""metrics.jsonl key -> the name TRL's GRPOTrainer logs the same quantity under (see the module docstring for the
differences); every other numeric key keeps its metrics.jsonl name"""


def resolve_backends(names: Iterable[str], *, installed: Iterable[str] | None = None) -> tuple[str, ...]:
    """The backends of ``report_to``: ``all`` -> every installed one, ``none`` -> none; duplicates dropped.

    >>> resolve_backends(["wandb", "tensorboard", "wandb"]), resolve_backends(["none"])
    (('wandb', 'tensorboard'), ())
    >>> resolve_backends(["all"], installed=["mlflow"])
    ('mlflow',)
    """
    out: list[str] = []
    for name in names:
        if name == "none":
            continue
        if name == "all":
            have = [b for b in BACKENDS if _installed(b)] if installed is None else list(installed)
            out += [b for b in have if b not in out]
        elif name not in out:
            out.append(name)
    return tuple(out)


def _installed(backend: str) -> bool:
    return importlib.util.find_spec(EXTRAS[backend][0]) is not None


def check_backends(names: Iterable[str]) -> tuple[str, ...]:
    """The resolved backends; a ValueError naming the extra to install for one that is missing (no import)."""
    backends = resolve_backends(names)
    for b in backends:
        if not _installed(b):
            raise ValueError(f"report_to: {b} is not installed; pip install 'ugrpo[{EXTRAS[b][1]}]' (or drop {b} "
                             "from report_to)")
    return backends


def trl_metrics(row: Mapping[str, Any]) -> dict[str, float]:
    """The numbers of one metrics row under TRL's names where TRL has them (``step`` and non-numbers left out).

    >>> trl_metrics({"step": 3, "reward_mean": 0.5, "lr": 1e-5, "eval_accuracy": 0.4, "first_error": None})
    {'reward': 0.5, 'learning_rate': 1e-05, 'eval_accuracy': 0.4}
    """
    return {TRL_NAMES.get(k, k): float(v) for k, v in row.items()
            if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool)}


def rewrite_logs(metrics: Mapping[str, float]) -> dict[str, float]:
    """transformers' ``rewrite_logs``: ``eval_x`` -> ``eval/x``, anything else ``x`` -> ``train/x``.

    >>> rewrite_logs({"reward": 0.5, "eval_accuracy": 0.4})
    {'train/reward': 0.5, 'eval/accuracy': 0.4}
    """
    return {(f"eval/{k[5:]}" if k.startswith("eval_") else f"train/{k}"): v for k, v in metrics.items()}


class Backend:
    """One logging backend: ``log(row)`` sends a metrics row, ``close()`` ends the run."""

    name = ""
    prefixed = True
    """whether the names get transformers' ``train/`` / ``eval/`` prefixes (all but MLflow, as in transformers)"""

    def log(self, row: Mapping[str, Any]) -> None:
        metrics = trl_metrics(row)
        if metrics:
            self._log(rewrite_logs(metrics) if self.prefixed else metrics, int(row["step"]))

    def _log(self, metrics: dict[str, float], step: int) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass


class _TensorBoard(Backend):
    name = "tensorboard"

    def __init__(self, out: Path, run_name: str, config: dict) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(out / "tensorboard"))

    def _log(self, metrics, step):
        for k, v in metrics.items():
            self.writer.add_scalar(k, v, step)
        self.writer.flush()  # a dashboard open during the run sees each step

    def close(self):
        self.writer.close()


class _Trackio(Backend):
    name = "trackio"

    def __init__(self, out: Path, run_name: str, config: dict) -> None:
        import trackio

        self.trackio = trackio
        self.run = trackio.init(project=os.environ.get("TRACKIO_PROJECT", "ugrpo"), name=run_name, config=config)

    def _log(self, metrics, step):
        self.trackio.log({**metrics, "train/global_step": step}, step=step)

    def close(self):
        self.trackio.finish()


class _Wandb(Backend):
    name = "wandb"

    def __init__(self, out: Path, run_name: str, config: dict) -> None:
        import wandb

        self.run = wandb.init(project=os.environ.get("WANDB_PROJECT", "ugrpo"), name=run_name, config=config,
                              dir=str(out), reinit="create_new")

    def _log(self, metrics, step):
        self.run.log({**metrics, "train/global_step": step}, step=step)

    def close(self):
        self.run.finish()


class _MLflow(Backend):
    name = "mlflow"
    prefixed = False

    def __init__(self, out: Path, run_name: str, config: dict) -> None:
        import mlflow

        self.mlflow = mlflow
        mlflow.set_experiment(os.environ.get("MLFLOW_EXPERIMENT_NAME", "ugrpo"))
        self.run = mlflow.start_run(run_name=run_name)
        params = _flat(config)
        keys = list(params)
        for i in range(0, len(keys), 100):  # MLflow takes at most 100 params per call, 6000 characters each
            mlflow.log_params({k: str(params[k])[:6000] for k in keys[i:i + 100]})

    def _log(self, metrics, step):
        self.mlflow.log_metrics(metrics, step=step)

    def close(self):
        self.mlflow.end_run()


_CLASSES: dict[str, type[Backend]] = {"tensorboard": _TensorBoard, "trackio": _Trackio, "wandb": _Wandb,
                                      "mlflow": _MLflow}


def _flat(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"optim": {"lr": 1e-5}}`` -> ``{"optim.lr": 1e-5}``."""
    out: dict[str, Any] = {}
    for k, v in config.items():
        if isinstance(v, Mapping):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def open_backends(names: Sequence[str], out: Path, config: dict) -> list[Backend]:
    """Start one run per backend of ``report_to`` (named after the run folder, with its config); closed by the
    caller. A backend that fails to start closes those already started."""
    started: list[Backend] = []
    try:
        for b in check_backends(names):
            try:
                started.append(_CLASSES[b](Path(out), Path(out).resolve().name, config))
            except Exception as e:  # the backend's own settings (a tracking URI, a login, a folder) refused it
                raise UserError(f"report_to: {b} did not start ({type(e).__name__}: {e}); fix its settings "
                                f"(environment variables, docs/run-folders.md), or leave {b} out of report_to "
                                "(--report-to)") from e
    except BaseException:
        for s in started:
            s.close()
        raise
    return started
