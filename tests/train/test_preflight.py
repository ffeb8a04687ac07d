"""Every check of the input runs before the run folder is claimed (issue 23 item 4): an error found late -- before the
model loads (:func:`ugrpo.train.preflight.preflight`) or after it (prompt lengths, LoRA targets, in
:func:`ugrpo.train.setup.build_run`) -- leaves no ``.lock``, ``run.json``, ``config.json`` or folder behind, and the
next try with the input fixed runs."""

from __future__ import annotations

import json

import pytest
from train_helpers import small_config, write_jsonl

from ugrpo.errors import RunFolderError
from ugrpo.runlock import check_claim, claim, release
from ugrpo.train.config import config_from_dict
from ugrpo.train.loop import train
from ugrpo.train.preflight import preflight


def _late_errors(tiny_model_dir, task_files, tmp_path):
    """(what is wrong, config overrides, the error's type, a piece of its message, whether the model was needed)."""
    long_prompt = write_jsonl(tmp_path / "long.jsonl", ["1+" * 40 + "1="])
    return [
        ("missing model folder", {"model__name": str(tmp_path / "no-such-model")}, FileNotFoundError,
         "model.name: local model folder", False),
        ("a folder that is not a model", {"model__name": str(tmp_path)}, FileNotFoundError, "has no config.json",
         False),
        ("missing data file", {"task__options__data_path": str(tmp_path / "nope.jsonl")}, FileNotFoundError,
         "does not exist", False),
        ("prompt longer than the context", {"task__options__data_path": long_prompt}, ValueError,
         "> model context 64", True),
        ("LoRA targets the model lacks", {"model__lora_r": 2, "model__lora_targets": ["no_such_proj"]}, ValueError,
         "do not match the model", True),
    ]


def test_a_late_error_leaves_nothing_behind_and_the_next_try_runs(tiny_model_dir, task_files, tmp_path):
    cases = _late_errors(tiny_model_dir, task_files, tmp_path)
    for i, (what, overrides, error, message, needs_model) in enumerate(cases):
        cfg = config_from_dict(small_config(tiny_model_dir, task_files, **overrides))
        new, made = tmp_path / f"new-{i}", tmp_path / f"made-{i}"
        made.mkdir()  # a folder the user made beforehand stays, empty
        for out in (new, made):
            with pytest.raises(error, match=message):
                train(cfg, out)
        assert not new.exists(), what
        assert list(made.iterdir()) == [], (what, sorted(p.name for p in made.iterdir()))
        if not needs_model:  # found by preflight alone: no model loaded, no task built twice
            with pytest.raises(error, match=message):
                preflight(cfg, new)
    # the next try, input fixed, into a folder an error left: not refused ("rerun with --resume"), it trains
    fixed = config_from_dict(small_config(tiny_model_dir, task_files, steps=1, checkpoint_every=0))
    out = tmp_path / f"made-{[c[4] for c in cases].index(True)}"  # left by an error found after the model loaded
    result = train(fixed, out)
    assert result.steps == 1 and (out / "results.json").is_file() and (out / "run.json").is_file()


def test_the_folder_is_checked_read_only_before_the_model_loads(tiny_model_dir, task_files, tmp_path):
    """preflight refuses what claim would refuse (another command's folder, an existing run without --resume, a
    file in the way), and writes nothing while it looks."""
    cfg = config_from_dict(small_config(tiny_model_dir, task_files))
    other = tmp_path / "other"
    claim(other, "mse", {"x": 1})
    release(other)
    before = sorted(p.name for p in other.iterdir())
    with pytest.raises(RunFolderError, match="belongs to a 'ugrpo mse' run"):
        preflight(cfg, other)
    assert sorted(p.name for p in other.iterdir()) == before
    existing = tmp_path / "existing"
    claim(existing, "train", {"a": 1})
    release(existing)
    (existing / "config.json").write_text(json.dumps({"a": 1}))
    with pytest.raises(RunFolderError, match="rerun with --resume"):
        preflight(cfg, existing)
    (tmp_path / "file").write_text("x")
    with pytest.raises(RunFolderError, match="is a file, not a folder"):
        check_claim(tmp_path / "file", "train", {})
    with pytest.raises(RunFolderError, match="is a file"):
        check_claim(tmp_path / "file" / "run", "train", {})
    check_claim(tmp_path / "a" / "b", "train", {})  # a new folder: fine, and not created
    assert not (tmp_path / "a").exists()


def test_preflight_returns_the_problems_the_run_trains_on(tiny_model_dir, task_files, tmp_path):
    cfg = config_from_dict(small_config(tiny_model_dir, task_files))
    checked = preflight(cfg, tmp_path / "run")
    assert [p.prompt for p in checked.train_problems] == [p.prompt for p in checked.task.train_problems()]
    assert len(checked.eval_problems) == cfg.eval.n_problems
    no_eval = config_from_dict(small_config(tiny_model_dir, task_files, eval__n_problems=0))
    assert preflight(no_eval, tmp_path / "run").eval_problems == []
    assert not (tmp_path / "run").exists()
