"""``report_to`` (issue 23 item 6): one real training run logged to TensorBoard, Trackio (local), W&B (offline) and
MLflow (a local store), each read back from what the backend wrote and compared with ``metrics.jsonl``, under TRL's
metric names; a backend that is not installed is skipped here and is an error before the run folder in use."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from train_helpers import TESTS_TRAIN, small_config

from ugrpo.errors import UserError
from ugrpo.runs import read_jsonl
from ugrpo.train import report_to
from ugrpo.train.config import config_from_dict
from ugrpo.train.loop import train
from ugrpo.train.preflight import preflight
from ugrpo.train.report_to import BACKENDS, check_backends, resolve_backends, rewrite_logs, trl_metrics

INSTALLED = [b for b in BACKENDS if report_to._installed(b)]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def logged_run(tiny_model_dir, task_files, tmp_path_factory):
    """A 3-step ``ugrpo train`` with every installed backend, all offline and inside a temporary folder.

    It runs in a fresh interpreter, as a user's run does: trackio reads ``TRACKIO_DIR`` when it is first imported, and
    ``import trl`` (earlier tests) imports it, so an in-process run would log to the user's own trackio folder."""
    root = tmp_path_factory.mktemp("report-to")
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true", "TRACKIO_DIR": str(root / "trackio"),
           "MLFLOW_TRACKING_URI": f"file:{root / 'mlruns'}", "MLFLOW_ALLOW_FILE_STORE": "true",
           "TRACKIO_PROJECT": "ugrpo-test", "WANDB_PROJECT": "ugrpo-test", "MLFLOW_EXPERIMENT_NAME": "ugrpo-test",
           "PYTHONPATH": os.pathsep.join([str(ROOT), TESTS_TRAIN])}
    config = root / "config.yaml"
    config.write_text(json.dumps(small_config(tiny_model_dir, task_files, steps=3, report_to=INSTALLED)))  # YAML 1.2
    out = root / "run"
    done = subprocess.run([sys.executable, "-m", "ugrpo.cli", "train", "--config", str(config), "--out", str(out)],
                          env=env, cwd=root, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    yield out, [r for r in read_jsonl(out / "metrics.jsonl")], root


def _expected(rows, *, prefixed=True):
    """step -> {TRL-style name: value} from metrics.jsonl (what every backend must hold)."""
    return {r["step"]: (rewrite_logs(trl_metrics(r)) if prefixed else trl_metrics(r)) for r in rows}


def _check(expected, got, tol=1e-6):
    assert sorted(got) == sorted(expected)
    for step, metrics in expected.items():
        for name in ("train/reward", "train/frac_reward_zero_std", "train/grad_norm", "train/learning_rate",
                     "train/completions/mean_length", "eval/accuracy", "train/samples_cum"):
            if name in metrics:
                assert got[step][name] == pytest.approx(metrics[name], rel=tol, abs=tol), (step, name)


def test_metric_names_follow_trl_and_transformers_prefixes():
    row = {"step": 4, "reward_mean": 0.5, "reward_std": 0.1, "frac_reward_zero_std": 0.25, "kl": 0.0, "lr": 1e-5,
           "grad_norm": 2.0, "completion_len_mean": 3.0, "truncated_frac": 0.0, "clip_frac": 0.0, "samples_cum": 32,
           "eval_accuracy": 0.4, "first_error": None, "alloc_rule": "ustat"}
    assert rewrite_logs(trl_metrics(row)) == {
        "train/reward": 0.5, "train/reward_std": 0.1, "train/frac_reward_zero_std": 0.25, "train/kl": 0.0,
        "train/learning_rate": 1e-5, "train/grad_norm": 2.0, "train/completions/mean_length": 3.0,
        "train/completions/clipped_ratio": 0.0, "train/clip_ratio/region_mean": 0.0, "train/samples_cum": 32.0,
        "eval/accuracy": 0.4}
    assert resolve_backends(["all"], installed=["wandb"]) == ("wandb",)


def test_a_backend_not_installed_is_an_error_naming_the_extra_before_the_run_folder(monkeypatch, tiny_model_dir,
                                                                                   task_files, tmp_path):
    monkeypatch.setitem(report_to.EXTRAS, "wandb", ("ugrpo_no_such_module", "wandb"))
    with pytest.raises(ValueError, match=r"report_to: wandb is not installed; pip install 'ugrpo\[wandb\]'"):
        check_backends(["tensorboard", "wandb"])
    cfg = config_from_dict(small_config(tiny_model_dir, task_files, report_to=["wandb"]))
    with pytest.raises(ValueError, match="wandb is not installed"):
        preflight(cfg, tmp_path / "run")
    assert not (tmp_path / "run").exists()
    assert config_from_dict({"report_to": "tensorboard, wandb"}).report_to == ("tensorboard", "wandb")
    assert config_from_dict({"report_to": ["none"]}).report_to == ("none",)
    with pytest.raises(ValueError, match="report_to='tensorbord' is not valid"):
        config_from_dict({"report_to": ["tensorbord"]})


def test_by_default_nothing_but_metrics_jsonl(tiny_model_dir, task_files, tmp_path):
    cfg = config_from_dict(small_config(tiny_model_dir, task_files, steps=1, checkpoint_every=0))
    assert cfg.report_to == ()
    train(cfg, tmp_path / "run")
    assert not (tmp_path / "run" / "tensorboard").exists() and not (tmp_path / "run" / "wandb").exists()


@pytest.mark.skipif("tensorboard" not in INSTALLED, reason="pip install 'ugrpo[tensorboard]'")
def test_a_backend_that_does_not_start_is_one_error_and_leaves_no_claim(tiny_model_dir, task_files, tmp_path):
    """A backend refused by its own settings (here TensorBoard's folder is a file) fails after the folder is claimed:
    the error names the backend and the fix, and the claim is undone, so the retry is not 'an unfinished run'."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "tensorboard").write_text("in the way")
    cfg = config_from_dict(small_config(tiny_model_dir, task_files, steps=1, checkpoint_every=0,
                                        report_to=["tensorboard"]))
    with pytest.raises(UserError, match=r"report_to: tensorboard did not start \(.*\); fix its settings .* or leave "
                                        r"tensorboard out of report_to"):
        train(cfg, run)
    assert sorted(p.name for p in run.iterdir()) == ["tensorboard"]  # the user's file, nothing of the claim
    (run / "tensorboard").unlink()
    assert train(cfg, run).steps == 1  # the retry runs


@pytest.mark.skipif("wandb" not in INSTALLED, reason="pip install 'ugrpo[wandb]'")
def test_a_backend_that_does_not_start_in_a_new_folder_leaves_no_folder(tiny_model_dir, task_files, tmp_path,
                                                                        monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "nonsense")  # wandb refuses the mode when its run starts
    monkeypatch.setenv("WANDB_SILENT", "true")
    cfg = config_from_dict(small_config(tiny_model_dir, task_files, steps=1, checkpoint_every=0, report_to=["wandb"]))
    with pytest.raises(UserError, match=r"report_to: wandb did not start"):
        train(cfg, tmp_path / "run")
    assert not (tmp_path / "run").exists()


@pytest.mark.skipif("tensorboard" not in INSTALLED, reason="pip install 'ugrpo[tensorboard]'")
def test_tensorboard_event_file_holds_every_step(logged_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out, rows, _ = logged_run
    acc = EventAccumulator(str(out / "tensorboard"))
    acc.Reload()
    got: dict[int, dict] = {}
    for tag in acc.Tags()["scalars"]:
        for e in acc.Scalars(tag):
            got.setdefault(e.step, {})[tag] = e.value
    _check(_expected(rows), got, tol=1e-6)  # float32 in the event file


def _wandb_history(path: Path) -> list[dict]:
    """The history records of a W&B offline ``.wandb`` file (a LevelDB-style log of protobuf records: a 7-byte file
    header, 32 KiB blocks, each record a 7-byte header -- crc32, length, type FULL/FIRST/MIDDLE/LAST -- and data)."""
    from wandb.proto import wandb_internal_pb2

    data, pos, block, chunk, rows = path.read_bytes(), 7, 32768, b"", []
    assert data[:4] == b":W&B"
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # the block's tail is zero padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0:
            pos += left
            continue
        chunk += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # FULL or LAST: a whole record
            record = wandb_internal_pb2.Record()
            record.ParseFromString(chunk)
            chunk = b""
            if record.WhichOneof("record_type") == "history":
                rows.append({i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in record.history.item})
    return rows


@pytest.mark.skipif("wandb" not in INSTALLED, reason="pip install 'ugrpo[wandb]'")
def test_wandb_offline_run_holds_every_step(logged_run):
    out, rows, _ = logged_run
    files = sorted((out / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(files) == 1, files
    got = {int(r["train/global_step"]): r for r in _wandb_history(files[0])}
    _check(_expected(rows), got)


@pytest.mark.skipif("trackio" not in INSTALLED, reason="pip install 'ugrpo[trackio]'")
def test_trackio_local_run_holds_every_step(logged_run):
    from trackio import sqlite_storage

    out, rows, root = logged_run
    assert (root / "trackio").is_dir()  # TRACKIO_DIR, not the user's cache
    with pytest.MonkeyPatch.context() as mp:  # trackio was imported in this process with the default folder
        mp.setattr(sqlite_storage, "TRACKIO_DIR", root / "trackio")
        logs = sqlite_storage.SQLiteStorage.get_logs("ugrpo-test", out.name)
    _check(_expected(rows), {int(r["step"]): r for r in logs})


@pytest.mark.skipif("mlflow" not in INSTALLED, reason="pip install 'ugrpo[mlflow]'")
def test_mlflow_run_holds_every_step_and_the_config(logged_run):
    from mlflow.tracking import MlflowClient

    out, rows, root = logged_run
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
        client = MlflowClient(tracking_uri=f"file:{root / 'mlruns'}")
        experiment = client.get_experiment_by_name("ugrpo-test")
        (run,) = client.search_runs([experiment.experiment_id])
        assert run.info.run_name == out.name and run.data.params["optim.lr"] == "0.01"
        expected = _expected(rows, prefixed=False)
        for name in ("reward", "grad_norm", "learning_rate", "eval_accuracy"):
            history = {m.step: m.value for m in client.get_metric_history(run.info.run_id, name)}
            assert history == pytest.approx({s: m[name] for s, m in expected.items() if name in m}), name
