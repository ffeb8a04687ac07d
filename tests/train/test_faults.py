"""Faults a run must survive or refuse cleanly (issue 14 items 2, 3, 4, 5, 7, 8, 9; issue 13 items 4 and 7).

Each test names the numbered item it shows. Runs use the random tiny model (seconds each).
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file
from train_helpers import small_config

from ugrpo.tasks.base import score
from ugrpo.tasks.registry import get_task
from ugrpo.train.checkpoint import load_checkpoint, save_checkpoint
from ugrpo.train.config import config_from_dict
from ugrpo.train.distributed import DistContext
from ugrpo.train.loop import train

CTX = DistContext()


def errors():
    """The error types (imported late so that each test, not the module, fails on a version without them)."""
    import ugrpo.errors

    return ugrpo.errors


def _sha256(path):
    import hashlib

    return hashlib.sha256(open(path, "rb").read()).hexdigest()


@pytest.fixture(scope="module")
def done_run(tiny_model_dir, task_files, tmp_path_factory):
    """A finished 4-step run (checkpoints at steps 2 and 4)."""
    out = tmp_path_factory.mktemp("done")
    cfg = config_from_dict(small_config(tiny_model_dir, task_files))
    return cfg, out, train(cfg, out)


def _kill_at(k):
    def on_step(step, row):
        if step == k:
            raise KeyboardInterrupt

    return on_step


def _interrupted(cfg, out, k):
    with pytest.raises(KeyboardInterrupt) as e:
        train(cfg, out, on_step=_kill_at(k))
    return str(e.value)


# ---------------------------------------------------------------------- item 2: one writer per folder


def test_item2_second_writer_is_refused_while_the_first_lives_and_a_dead_holder_does_not_block(done_run, tmp_path):
    cfg, _, _ = done_run
    folder = tmp_path / "run"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from ugrpo.runlock import claim; "
         f"claim({str(folder)!r}, 'train', {{}}); print('locked', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(errors().RunFolderError, match=f"in use by pid {holder.pid}"):
            train(cfg, folder)
    finally:
        holder.kill()  # SIGKILL: no clean-up runs in the holder
        holder.wait()
    assert "pid" in (folder / ".lock").read_text()  # the dead holder's note is still there ...
    from ugrpo.runlock import claim, release

    claim(folder, "train", {})  # ... but its lock died with it
    release(folder)


# ---------------------------------------------------------------------- item 3: resume refuses a changed config


def test_item3_resume_with_a_changed_config_names_the_field_and_both_values(done_run, tiny_model_dir, task_files,
                                                                           tmp_path):
    cfg, _, _ = done_run
    _interrupted(cfg, tmp_path, 3)
    before = (tmp_path / "config.json").read_text()
    for key, value, field in [("optim__lr", 5e-5, "optim.lr"), ("budget__group_size", 2, "budget.group_size"),
                              ("seed", 4, "seed")]:
        changed = config_from_dict(small_config(tiny_model_dir, task_files, **{key: value}))
        with pytest.raises(errors().ResumeError, match=rf"{field} is {value!r} but the run .* used "):
            train(changed, tmp_path, resume=True)
    assert (tmp_path / "config.json").read_text() == before  # config.json still describes the run
    cosine = config_from_dict(small_config(tiny_model_dir, task_files, optim__scheduler="cosine"))
    with pytest.raises(errors().ResumeError, match="optim.scheduler"):
        train(cosine, tmp_path, resume=True)
    fewer = config_from_dict(small_config(tiny_model_dir, task_files, steps=1))
    with pytest.raises(errors().ResumeError, match="steps=1 but the checkpoint .* is at step 2"):
        train(fewer, tmp_path, resume=True)
    # the cadence may change (RESUMABLE): the run completes
    cadence = config_from_dict(small_config(tiny_model_dir, task_files, eval__every=4, log_every=2))
    assert train(cadence, tmp_path, resume=True).steps == 4


# ---------------------------------------------------------------------- item 4: NaN / inf never pass silently


def test_item4_rewards_beyond_float32_are_unscorable_not_summed(task_files):
    task = get_task("custom", data_path=task_files[0], reward_fn="dense_reward:huge")
    probs = task.train_problems()[:3]
    sc = score(task, ["77", "1", "x7"], probs)
    assert sc.rewards == [0.0, 0.5, 0.0] and sc.unscorable == [True, False, True] and sc.n_errors == 2


def test_item4_nonfinite_update_stops_by_default_and_is_skipped_and_counted_on_request(tiny_model_dir, task_files,
                                                                                      tmp_path):
    base = dict(optim__name="sgd", optim__lr=1e30, steps=4, checkpoint_every=1)
    cfg = config_from_dict(small_config(tiny_model_dir, task_files, **base))
    with pytest.raises(errors().NonFiniteError, match="step 3: the loss .* not finite") as e:
        train(cfg, tmp_path / "stop")
    assert "optim.nonfinite=skip" in str(e.value)
    for ckpt in (tmp_path / "stop" / "checkpoints").glob("step-*"):  # every checkpoint written is finite
        assert all(torch.isfinite(t).all() for t in load_file(str(ckpt / "model.safetensors")).values())
    assert not (tmp_path / "stop" / "final_model").exists()
    skip = config_from_dict(small_config(tiny_model_dir, task_files, optim__nonfinite="skip", **base))
    train(skip, tmp_path / "skip")  # steps 3 and 4 have a NaN loss (the step-2 update made the weights huge)
    final = load_file(str(tmp_path / "skip" / "final_model" / "model.safetensors"))
    assert all(torch.isfinite(t).all() for t in final.values())
    rows = [json.loads(x) for x in (tmp_path / "skip" / "metrics.jsonl").read_text().splitlines()]
    assert [r.get("n_nonfinite_updates") for r in rows] == [None, 0, 0, 1, 1]


def _linear_checkpoint(root, step=2):
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    model(torch.ones(1, 3)).sum().backward()
    opt.step()
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda k: 1.0)
    save_checkpoint(root, step, model, opt, sched, CTX)
    return model, opt, sched


def test_item4_checkpoints_carry_checksums_verified_on_load(tmp_path):
    model, opt, sched = _linear_checkpoint(tmp_path)
    f = tmp_path / "step-2" / "model.safetensors"
    assert json.loads((tmp_path / "step-2" / "state.json").read_text())["sha256"]["model.safetensors"] == _sha256(f)
    assert load_checkpoint(tmp_path / "step-2", model, opt, sched, CTX) == 2
    data = bytearray(f.read_bytes())
    data[len(data) - 5] ^= 0xFF  # one flipped byte inside the tensor data: safetensors alone would not notice
    f.write_bytes(bytes(data))
    with pytest.raises(errors().CheckpointError, match=f"{f}.*checksum"):
        load_checkpoint(tmp_path / "step-2", model, opt, sched, CTX)


# ---------------------------------------------------------------------- item 7: loading never runs code


class _Payload:
    def __reduce__(self):
        return (os.system, (f"touch {os.environ.get('UGRPO_TEST_MARKER', '/nonexistent/x')}",))


def test_item7_a_planted_pickle_in_optimizer_pt_is_refused_not_run(tmp_path, monkeypatch):
    model, opt, sched = _linear_checkpoint(tmp_path / "ck")
    marker = tmp_path / "pwned"
    monkeypatch.setenv("UGRPO_TEST_MARKER", str(marker))
    ck = tmp_path / "ck" / "step-2"
    with open(ck / "optimizer.pt", "wb") as fh:
        pickle.dump({"state": {}, "param_groups": [], "x": _Payload()}, fh, protocol=2)
    state = json.loads((ck / "state.json").read_text())  # an attacker can fix the checksum too
    state["sha256"]["optimizer.pt"] = _sha256(ck / "optimizer.pt")
    (ck / "state.json").write_text(json.dumps(state))
    with pytest.raises(errors().CheckpointError, match="cannot be loaded safely"):
        load_checkpoint(ck, model, opt, sched, CTX)
    assert not marker.exists()


# ---------------------------------------------------------------------- item 8: a corrupt latest checkpoint


def test_item8_corrupt_latest_checkpoint_falls_back_to_the_previous_with_a_warning(done_run, tmp_path, capsys):
    cfg, out, _ = done_run
    shutil.copytree(out, tmp_path / "run", ignore=shutil.ignore_patterns(".lock"))
    run = tmp_path / "run"
    bad = run / "checkpoints" / "step-4" / "optimizer.pt"
    bad.write_bytes(bad.read_bytes()[:100])  # truncated
    model, opt, sched = _linear_checkpoint(tmp_path / "x")
    with pytest.raises(errors().CheckpointError):  # every checkpoint unusable for this model would be an error ...
        load_checkpoint(run / "checkpoints" / "step-4", model, opt, sched, CTX)
    # ... the resume falls back to step 2 and reaches the uninterrupted run's step-4 weights exactly
    (run / "results.json").unlink()
    train(cfg, run, resume=True)
    err = capsys.readouterr().err
    assert f"warning: {bad} is missing" in err or f"warning: {bad} fails its sha256" in err
    assert "falling back to the previous checkpoint" in err
    a = load_file(str(out / "checkpoints/step-4/model.safetensors"))
    b = load_file(str(run / "checkpoints/step-4/model.safetensors"))
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=0, atol=1e-6)


def test_item8_no_intact_checkpoint_is_one_error_naming_the_files(tmp_path):
    from ugrpo.train.checkpoint import load_latest

    model, opt, sched = _linear_checkpoint(tmp_path)
    (tmp_path / "step-2" / "scheduler.pt").write_bytes(b"garbage")
    with pytest.raises(errors().CheckpointError, match="no intact checkpoint.*scheduler.pt"):
        load_latest(tmp_path, model, opt, sched, CTX)


# ---------------------------------------------------------------------- item 9: died before the first checkpoint


def test_item9_resume_of_a_run_without_checkpoint_starts_over_and_says_so(done_run, tmp_path, capsys):
    cfg, out, _ = done_run
    msg = _interrupted(cfg, tmp_path, 1)  # checkpoints every 2 steps: none yet
    assert "metrics.jsonl has rows up to step 1" in msg and "no checkpoint yet" in msg
    with pytest.raises(errors().RunFolderError, match="--resume"):  # without --resume: refused, pointing at --resume
        train(cfg, tmp_path)
    train(cfg, tmp_path, resume=True)  # with --resume: starts over, no contradiction
    assert "starts over from step 0" in capsys.readouterr().out
    a = load_file(str(out / "checkpoints/step-4/model.safetensors"))
    b = load_file(str(tmp_path / "checkpoints/step-4/model.safetensors"))
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=0, atol=1e-6)
    rows = [json.loads(x)["step"] for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert rows == [0, 1, 2, 3, 4]


# ---------------------------------------------------------------------- item 5: metrics.jsonl repaired on resume


def test_item5_resume_repairs_a_torn_and_shortened_metrics_file_and_reports_the_gap(done_run, tmp_path, capsys):
    cfg, _, _ = done_run
    _interrupted(cfg, tmp_path, 3)  # rows 0..3, checkpoint step 2
    m = tmp_path / "metrics.jsonl"
    lines = m.read_text().splitlines(keepends=True)
    m.write_text(lines[0] + lines[1][: len(lines[1]) // 2])  # step 2 and 3 lost, step 1's row torn
    train(cfg, tmp_path, resume=True)
    err = capsys.readouterr().err
    assert "torn last line" in err and "no rows for 2 step(s) before the checkpoint at step 2 (1..2)" in err
    rows = [json.loads(x)["step"] for x in m.read_text().splitlines()]  # every line parses
    assert rows == [0, 3, 4]


# ---------------------------------------------------------------------- issue 13 item 4: resume tells the truth


def test_issue13_item4_resume_of_a_finished_run_leaves_it_alone(done_run, capsys):
    cfg, out, result = done_run
    report = (out / "report.md").read_bytes()
    mtimes = {p: p.stat().st_mtime_ns for p in (out / "report.md", out / "results.json", out / "metrics.jsonl")}
    again = train(cfg, out, resume=True)
    assert "the run is finished (4 steps); nothing to resume" in capsys.readouterr().out
    assert (out / "report.md").read_bytes() == report
    assert {p: p.stat().st_mtime_ns for p in mtimes} == mtimes
    assert again.steps == 4 and again.final_eval_pass1 == result.final_eval_pass1


def test_issue13_item4_resume_says_where_it_restarts_and_ctrl_c_prints_the_command(done_run, tmp_path, capsys,
                                                                                  monkeypatch):
    from ugrpo import cli
    from ugrpo.train import loop

    cfg, _, _ = done_run
    cfg_file = tmp_path / "cfg.json"  # JSON is YAML
    cfg_file.write_text(json.dumps(small_config(cfg.model.name, (cfg.task.options["data_path"],
                                                                 cfg.task.options["eval_path"]))))
    real = loop.train
    monkeypatch.setattr(loop, "train", lambda c, o, resume=False, **kw: real(c, o, resume=resume, on_step=_kill_at(3),
                                                                             **kw))
    out = tmp_path / "run"
    assert cli.main(["train", "--config", str(cfg_file), "--out", str(out), "--eval.every", "2"]) == 130
    err = capsys.readouterr().err
    assert "metrics.jsonl has rows up to step 3" in err
    assert f"the last checkpoint is {out / 'checkpoints' / 'step-2'}" in err
    assert f"resume with: ugrpo train --config {cfg_file} --out {out} --resume --eval.every 2" in err
    monkeypatch.setattr(loop, "train", real)
    assert cli.main(["train", "--config", str(cfg_file), "--out", str(out), "--resume", "--eval.every", "2"]) == 0
    said = capsys.readouterr().out
    assert "resuming from step 2" in said
    assert "done: steps 3..4 (of 4) in " in said  # the steps this call trained, not all 4
    assert json.loads((out / "results.json").read_text())["resumed_from"] == 2


def test_resume_of_a_folder_without_a_run_and_ctrl_c_before_the_folder_are_said_so(done_run, tmp_path, capsys,
                                                                                    monkeypatch):
    """``--resume`` with a mistyped --out (no folder, or a folder without a run) is an error naming it, before any
    model loads, and creates nothing (it used to start a new run); a Ctrl-C while the model loads, before the run
    folder exists, says that nothing was written instead of pointing to a folder that is not there."""
    from ugrpo.train import loop

    cfg, _, _ = done_run
    cfg_file = _cfg_file(tmp_path, small_config(cfg.model.name, (cfg.task.options["data_path"],
                                                                 cfg.task.options["eval_path"])))
    typo, empty = tmp_path / "no-such-run", tmp_path / "empty"
    empty.mkdir()
    for out, what in ((typo, "does not exist"), (empty, "holds no run (no run.json or config.json)")):
        rc, said, err = _cli(["train", "--config", cfg_file, "--out", out, "--resume"], capsys)
        assert rc == 2 and f"--resume: {out} {what}, so there is no run to resume; check --out" in err, err
        assert "drop --resume to start a new run there" in err
    assert not typo.exists() and list(empty.iterdir()) == []

    def stopped_while_loading(c, o, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(loop, "train", stopped_while_loading)
    rc, _, err = _cli(["train", "--config", cfg_file, "--out", typo], capsys)
    assert rc == 130 and f"interrupted before the run folder {typo} held a run: nothing was written" in err, err
    assert "--resume" not in err and not typo.exists()
    from ugrpo.cli.main import _interrupted  # any command's Ctrl-C that did not say what it left

    assert _interrupted(typo) == (f"interrupted before the run folder {typo} was created: nothing was written; run "
                                  "the command again")
    assert _interrupted(empty) == f"interrupted: rows finished so far are on disk in the run folder {empty}"


# ---------------------------------------------------------------------- issue 13 item 7: files follow the umask


def test_issue13_item7_reports_configs_and_checkpoints_follow_the_umask(tmp_path):
    from ugrpo.runs import RunDir

    old = os.umask(0o022)
    try:
        rd = RunDir(tmp_path / "run")
        rd.write_config({"a": 1})
        rd.write_report("# r\n")
        _linear_checkpoint(tmp_path / "run" / "checkpoints")
        os.umask(0o027)
        rd.write_results({"b": 2})
    finally:
        os.umask(old)
    mode = lambda p: p.stat().st_mode & 0o777  # noqa: E731
    assert mode(rd.file("config.json")) == 0o644 and mode(rd.file("report.md")) == 0o644
    assert mode(rd.file("results.json")) == 0o640
    ck = tmp_path / "run" / "checkpoints" / "step-2"
    assert mode(ck) == 0o755 and mode(ck / "model.safetensors") == 0o644 and mode(ck / "state.json") == 0o644
    assert not list(tmp_path.rglob("*.tmp"))  # still written through temporary files that are gone


# ---------------------------------------------------------------------- issue 24: the faults left after the last trial


def _cfg_file(tmp_path, cfg_dict, name="cfg.json"):
    """A --config file (JSON is YAML) holding ``cfg_dict``."""
    path = tmp_path / name
    path.write_text(json.dumps(cfg_dict))
    return path


def _cli(argv, capsys):
    from ugrpo import cli

    rc = cli.main([str(a) for a in argv])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


@pytest.fixture(scope="module")
def stopped_runs(tiny_model_dir, task_files, tmp_path_factory):
    """Runs stopped at step 3 (checkpoint at step 2): a constant lr, a cosine lr, and allocation.rule=vip."""
    runs = {}
    for name, extra in (("constant", {}), ("cosine", {"optim__scheduler": "cosine"}),
                        ("vip", {"allocation__rule": "vip", "task__options__reward_fn": "dense_reward:varied"})):
        d = small_config(tiny_model_dir, task_files, **extra)
        out = tmp_path_factory.mktemp(name) / "run"
        with pytest.raises(KeyboardInterrupt):
            train(config_from_dict(d), out, on_step=_kill_at(3))
        runs[name] = (d, out)
    return runs


def _copy(run, tmp_path):
    dst = tmp_path / "run"
    shutil.copytree(run, dst, ignore=shutil.ignore_patterns(".lock"))
    return dst


def _drop_config(run):
    (run / "config.json").unlink()


def _edit_config_lr(run):
    saved = json.loads((run / "config.json").read_text())
    saved["optim"]["lr"] = 0.05
    (run / "config.json").write_text(json.dumps(saved))


ITEM1 = [  # (base run, change to the folder, extra flags, exit code, fragments of the one line it prints)
    pytest.param("constant", _drop_config, ["--optim.lr", "5e-2", "--seed", "9"], 2,
                 ["config.json is missing", "this config is not the run's", "run.json", "new --out"],
                 id="lost-config-other-lr-and-seed"),
    pytest.param("constant", _edit_config_lr, ["--optim.lr", "5e-2"], 2,
                 ["config.json does not match the run's manifest", "run.json", "edited", "new --out"],
                 id="config-edited-to-the-new-lr"),
    pytest.param("cosine", _drop_config, [], 2,
                 ["config.json is missing", "optim.scheduler=cosine", "steps", "restore config.json"],
                 id="lost-config-decaying-lr"),
    pytest.param("constant", _drop_config, [], 0,
                 ["config.json is missing; the config given matches the run recorded in", "resuming from step 2"],
                 id="lost-config-same-config-resumes"),
]


@pytest.mark.parametrize(("base", "damage", "flags", "rc", "fragments"), ITEM1)
def test_issue24_item1_resume_compares_the_manifest_hash_and_refuses_a_lost_config_json(
        stopped_runs, tmp_path, capsys, base, damage, flags, rc, fragments):
    d, stopped = stopped_runs[base]
    run = _copy(stopped, tmp_path)
    damage(run)
    manifest = (run / "run.json").read_bytes()
    got, out, err = _cli(["train", "--config", _cfg_file(tmp_path, d), "--out", run, "--resume", *flags], capsys)
    assert got == rc, err
    assert (run / "run.json").read_bytes() == manifest
    if rc == 2:
        lines = [x for x in err.splitlines() if x.strip()]
        assert len(lines) == 1 and lines[0].startswith("ugrpo train: error: --resume:"), err
        assert all(f in lines[0] for f in fragments), lines[0]
        assert str(run / "config.json") in lines[0]
        assert damage is not _drop_config or not (run / "config.json").exists()  # nothing rewritten
    else:
        assert all(f in out for f in fragments), out
        assert json.loads((run / "config.json").read_text())["optim"]["lr"] == d["optim"]["lr"]
        assert not (run / "UNFINISHED").exists() and json.loads((run / "results.json").read_text())["steps"] == 4


def _disk_fills_at(monkeypatch, trigger):
    """From the first write into a file whose path contains ``trigger`` on, every write fails: No space left."""
    import errno

    from ugrpo import fileio

    real, full = fileio.write_chunk, []

    def write_chunk(f, data, path):
        if full or trigger in str(path):
            full.append(path)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(f, data, path)

    monkeypatch.setattr(fileio, "write_chunk", write_chunk)
    return full


def test_issue24_item2_a_full_disk_while_writing_a_checkpoint_is_one_error_and_the_run_resumes(
        done_run, tmp_path, capsys, monkeypatch):
    cfg, out_full, _ = done_run
    d = small_config(cfg.model.name, (cfg.task.options["data_path"], cfg.task.options["eval_path"]))
    run = tmp_path / "run"
    argv = ["train", "--config", _cfg_file(tmp_path, d), "--out", run]
    full = _disk_fills_at(monkeypatch, "step-4")
    rc, _, err = _cli(argv, capsys)
    lines = [x for x in err.splitlines() if "error:" in x]  # (the progress bar aside)
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"ugrpo train: error: cannot write checkpoint {run / 'checkpoints' / 'step-4'}: ")
    assert f"No space left on device while writing {full[0]}" in lines[0] and "model.safetensors" in lines[0]
    assert f"the last checkpoint ({run / 'checkpoints' / 'step-2'}) is intact" in lines[0] and "--resume" in lines[0]
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-2"]  # no half checkpoint, no .tmp
    assert (run / "UNFINISHED").exists() and not (run / "results.json").exists()
    monkeypatch.undo()  # space freed: the same command with --resume finishes the run, exactly
    rc, _, err = _cli(argv + ["--resume"], capsys)
    assert rc == 0, err
    assert not (run / "UNFINISHED").exists() and (run / "report.md").exists()
    a = load_file(str(out_full / "checkpoints/step-4/model.safetensors"))
    b = load_file(str(run / "checkpoints/step-4/model.safetensors"))
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=0, atol=1e-6)


def test_issue24_item2_on_a_real_full_tmpfs_the_checkpoint_error_is_one_line(done_run, small_disk, tmp_path, capsys):
    cfg, out_full, _ = done_run
    size = sum(p.stat().st_size for p in (out_full / "checkpoints" / "step-2").iterdir())
    run = small_disk(int(1.5 * size) + (256 << 10)) / "run"  # room for the step-2 checkpoint, not for step 4's
    d = small_config(cfg.model.name, (cfg.task.options["data_path"], cfg.task.options["eval_path"]))
    argv = ["train", "--config", _cfg_file(tmp_path, d), "--out", run]
    rc, _, err = _cli(argv, capsys)
    lines = [x for x in err.splitlines() if "error:" in x]
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err, err
    step4 = run / "checkpoints" / "step-4"
    assert f"cannot write checkpoint {step4}: No space left on device while writing" in lines[0], lines[0]
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-2"] and (run / "UNFINISHED").exists()
    small_disk(6 * size)  # space freed
    rc, _, err = _cli(argv + ["--resume"], capsys)
    assert rc == 0 and not (run / "UNFINISHED").exists(), err


def _set(key, value):
    def edit(h):
        h[key] = value
        return h

    return edit


ITEM4 = [  # (edit of history.json, fragments of the error)
    pytest.param(_set("n_prompts", 9), ["is the allocation history of 9 train prompts, but the task gives 10",
                                        "task's data files changed", "or history.json was edited"],
                 id="n_prompts"),
    pytest.param(_set("visits", "x"), ["'visits' is not a list of 10 finite numbers (got str x)"], id="a-string"),
    pytest.param(_set("samples", {"a": 1}), ["'samples' is not a list of 10 finite numbers (got dict"], id="a-dict"),
    pytest.param(lambda h: {**h, "visits": [-1.0] + h["visits"][1:]}, ["'visits' is -1.0 for prompt 0",
                                                                       "cannot be negative"], id="negative"),
    pytest.param(lambda h: {**h, "successes": [s + 100 for s in h["samples"]]},
                 ["prompt 0 has", "successes in", "rewards are in [0, 1]"], id="more-successes-than-samples"),
    pytest.param(lambda h: [h], ["holds a JSON list, not the allocation history object"], id="a-list"),
]


@pytest.mark.parametrize(("edit", "fragments"), ITEM4)
def test_issue24_item4_an_edited_history_json_with_a_recomputed_checksum_is_refused_naming_the_file(
        stopped_runs, tmp_path, edit, fragments):
    d, stopped = stopped_runs["vip"]
    run = _copy(stopped, tmp_path)
    ck = run / "checkpoints" / "step-2"
    f = ck / "history.json"
    f.write_text(json.dumps(edit(json.loads(f.read_text()))))
    state = json.loads((ck / "state.json").read_text())
    state["sha256"]["history.json"] = _sha256(f)  # the checksum recomputed: it passes
    (ck / "state.json").write_text(json.dumps(state))
    with pytest.raises(errors().ResumeError) as e:
        train(config_from_dict(d), run, resume=True)
    msg = str(e.value)
    assert msg.startswith(str(f)) and all(x in msg for x in fragments), msg
    assert "resume with the same task settings" not in msg
    assert "passed its checksum" in msg and "new --out" in msg


def test_issue24_item5_a_finished_run_copied_elsewhere_reports_where_it_is(done_run, tmp_path, capsys):
    cfg, out, _ = done_run
    copy = _copy(out, tmp_path)
    assert train(cfg, copy, resume=True).out_dir == str(copy)
    d = small_config(cfg.model.name, (cfg.task.options["data_path"], cfg.task.options["eval_path"]))
    rc, stdout, err = _cli(["train", "--config", _cfg_file(tmp_path, d), "--out", copy, "--resume"], capsys)
    assert rc == 0 and stdout.rstrip().endswith(f"run folder {copy}"), stdout
