"""Run folders, workers and inputs under faults (issue 14 items 1, 5, 6, 10, 11, 12, 13).

Each test names the numbered item of the issue it shows.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from tests.experiments.conftest import metrics, run_cli

MSE = ["mse", "--env", "builtin:demo", "--groups", "2,4", "--batch", "4", "--reps", "20", "--no-progress"]
SWEEP = ["sweep", "--env", "builtin:demo", "--budget", "32", "--groups", "4,8", "--steps", "10", "--lr", "0.5",
         "--seeds", "2", "--checkpoints", "5,10", "--no-progress"]


@pytest.fixture
def train_folder(tmp_path):
    """A folder that a training run owns: its manifest, config and metrics (the lock released)."""
    from ugrpo.runlock import claim, release

    folder = tmp_path / "train-run"
    claim(folder, "train", {"optim": {"lr": 1e-3}})
    release(folder)
    (folder / "config.json").write_text('{"optim": {"lr": 0.001}}\n')
    (folder / "metrics.jsonl").write_text('{"step": 0}\n{"step": 1}\n')
    return folder


# ---------------------------------------------------------------------- item 1: no command overwrites another's folder


def test_item1_measurements_refuse_a_training_run_folder_and_leave_it_intact(train_folder, tmp_path, capsys,
                                                                            tiny_model_dir):
    before = {p.name: p.read_bytes() for p in train_folder.iterdir()}
    for argv in (MSE + ["--out", train_folder],
                 ["plan", "--env", "builtin:demo", "--pilot-batch", "8", "--pilot-group", "4", "--budget", "32",
                  "--n-boot", "10", "--out", train_folder],
                 ["gap", "--groups", "4", "--runs", "8", "--steps", "5", "--no-progress", "--out", train_folder],
                 ["demo", "--quick", "--no-progress", "--out", train_folder],
                 ["pretrain-tiny", "--steps", "1", "--out", train_folder]):
        rc, out, err = run_cli(argv, capsys)
        assert rc == 2, (argv[0], err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and "error:" in lines[0] and str(train_folder) in lines[0], (argv[0], err)
        assert "belongs to a 'ugrpo train' run" in lines[0] and "new --out" in lines[0]
    assert {p.name: p.read_bytes() for p in train_folder.iterdir()} == before
    # a folder of files without a manifest (another tool, an older ugrpo) is refused too
    legacy = tmp_path / "legacy"
    legacy.mkdir()
    (legacy / "metrics.jsonl").write_text('{"step": 0}\n')
    rc, _, err = run_cli(MSE + ["--out", legacy], capsys)
    assert rc == 2 and "without a run manifest" in err and (legacy / "metrics.jsonl").read_text() == '{"step": 0}\n'


def test_item1_same_command_other_config_is_refused_same_config_reruns(tmp_path, capsys):
    out = tmp_path / "mse"
    assert run_cli(MSE + ["--out", out], capsys)[0] == 0
    assert json.loads((out / "run.json").read_text())["command"] == "mse"
    rc, _, err = run_cli([a if a != "20" else "30" for a in MSE] + ["--out", out], capsys)
    assert rc == 2 and "another config" in err and "choose a new --out" in err
    assert run_cli(MSE + ["--out", out], capsys)[0] == 0  # the same measurement again: fine


# ---------------------------------------------------------------------- item 5: sweeps never append to a torn line


def test_item5_sweep_rerun_after_a_torn_last_line_keeps_metrics_valid(tmp_path, capsys):
    out = tmp_path / "sweep"
    assert run_cli(SWEEP + ["--out", out], capsys)[0] == 0
    m = out / "metrics.jsonl"
    lines = m.read_text().splitlines(keepends=True)
    m.write_text("".join(lines[:-1]) + lines[-1][:40])  # the last row cut off mid-write (a full disk)
    (out / "results.json").unlink()
    assert run_cli(SWEEP + ["--out", out], capsys)[0] == 0  # reruns the lost run, appends after a clean line end
    rows = metrics(out)  # every line parses (raises on a bad line)
    assert len(rows) == len(lines)
    assert run_cli(SWEEP + ["--out", out], capsys)[0] == 0  # and later reruns read it fine
    rc, _, err = run_cli([a if a != "0.5" else "0.7" for a in SWEEP] + ["--out", out], capsys)
    assert rc == 2 and "lr" in err  # another lr would mix rows of two settings under one (N, G, seed)


# ---------------------------------------------------------------------- item 6: pool workers die with their driver


DRIVER = """
import os, sys, time
from ugrpo.experiments.sweep.executors import make_pool
ex = make_pool(1)
print(ex.submit(os.getpid).result(), flush=True)
ex.submit(time.sleep, 120)
time.sleep(120)
"""


def test_item6_pool_workers_die_when_their_driver_is_killed():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    driver = subprocess.Popen([sys.executable, "-c", DRIVER], stdout=subprocess.PIPE, text=True, env=env)
    worker = int(driver.stdout.readline())
    os.kill(worker, 0)  # alive while the driver lives
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    for _ in range(100):  # at most 10 s
        try:
            os.kill(worker, 0)
        except ProcessLookupError:
            break
        if open(f"/proc/{worker}/stat").read().split()[2] == "Z":  # a zombie waiting for its reaper is dead
            break
        time.sleep(0.1)
    else:
        os.kill(worker, signal.SIGKILL)
        pytest.fail(f"pool worker {worker} outlived its killed driver")


# ---------------------------------------------------------------------- item 10: nothing waits forever


def test_item10_a_hanging_reward_function_times_out_and_is_counted(tmp_path):
    from ugrpo.tasks.base import score
    from ugrpo.tasks.registry import get_task

    data = tmp_path / "t.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"{i}+1=", "answer": "1"}) + "\n" for i in range(3)))
    task = get_task("custom", data_path=str(data), reward_fn="tests.experiments.test_run_safety:hangs", timeout=0.5)
    sc = score(task, ["a", "b", "c"], task.train_problems())
    assert sc.unscorable == [True, True, True] and sc.n_timeouts == 3 and "timed out after 0.5 s" in sc.first_error
    with pytest.raises(ValueError, match="timeout must be a positive number"):
        get_task("custom", data_path=str(data), reward_fn="tests.experiments.test_run_safety:hangs", timeout=0)


def hangs(completions, answers):
    time.sleep(30)
    return [1.0] * len(completions)


def test_item10_ray_address_with_nothing_listening_is_one_quick_error():
    from ugrpo.errors import UserError
    from ugrpo.experiments.sweep.executors import RayOptions, run_jobs

    pytest.importorskip("ray")
    import socket

    with socket.socket() as s:  # a port with nothing behind it
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(UserError, match=f"--ray-address 127.0.0.1:{port}: nothing answers there"):
        run_jobs([], workers=1, ray=RayOptions(address=f"127.0.0.1:{port}"), bar=None)


# ---------------------------------------------------------------------- item 11: one error line, exit 2


def test_item11_user_errors_are_one_error_line_with_exit_2(tmp_path, capsys, tiny_model_dir):
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("steps: [1, 2\noptim: {lr: 1e-3\n")
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    cases = [
        ["train", "--config", bad_yaml, "--out", tmp_path / "t1"],
        MSE + ["--out", a_file],
        ["train", "--out", a_file, "--model.name", tiny_model_dir],
        ["plan", "--env", "builtin:demo", "--pilot-batch", "100000000000", "--pilot-group", "4", "--budget", "64",
         "--out", tmp_path / "huge"],
        # an error raised inside training (not in the config): the prompt does not fit the model's context
        ["train", "--out", tmp_path / "t2", "--model.name", tiny_model_dir, "--sampling.max_new_tokens", "100000"],
    ]
    if os.geteuid() != 0:  # root writes anywhere
        cases.append(MSE + ["--out", ro / "sub"])
    for argv in cases:
        rc, _, err = run_cli(argv, capsys)
        lines = [x for x in err.strip().splitlines() if "error:" in x]  # (Hugging Face's loading bar aside)
        assert rc == 2 and len(lines) == 1 and "Traceback" not in err, (argv, rc, err)
    assert "more than this machine's" in run_cli(cases[3], capsys)[2]


# ---------------------------------------------------------------------- item 12: leftovers


def test_item12_interrupted_writes_leave_no_temporary_files(tmp_path, monkeypatch):
    from ugrpo.experiments.plan.pilot_io import Pilot, save_pilot
    from ugrpo.train.checkpoint import save_checkpoint
    from ugrpo.train.distributed import DistContext

    stale = tmp_path / "ck" / ".step-3.x1y2.tmp"  # left by a run killed while writing step 3
    stale.mkdir(parents=True)
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda k: 1.0)
    save_checkpoint(tmp_path / "ck", 4, model, opt, sched, DistContext())
    assert sorted(p.name for p in (tmp_path / "ck").iterdir()) == ["step-4"]

    pilot = Pilot(rewards=torch.rand(3, 4, dtype=torch.float64), scores=torch.rand(3, 4, 2, dtype=torch.float64))

    def full_disk(path, **arrays):
        open(path, "wb").write(b"PK\x03\x04 half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(np, "savez", full_disk)
    with pytest.raises(OSError):
        save_pilot(tmp_path / "pilot.npz", pilot)
    assert list(tmp_path.glob("*pilot*")) == [] and list(tmp_path.glob(".*pilot*")) == []


def test_item12_empty_groups_zero_dimension_scores_and_too_long_samples_are_errors(tmp_path, capsys, tiny_model_dir,
                                                                                  task_args):
    from ugrpo.experiments.plan.pilot_io import load_pilot

    rc, _, err = run_cli(["mse", "--env", "builtin:demo", "--groups", "", "--out", tmp_path / "g"], capsys)
    assert rc == 2 and "--groups is empty" in err
    np.savez(tmp_path / "p.npz", rewards=np.random.rand(3, 4), scores=np.zeros((3, 4, 0)))
    with pytest.raises(ValueError, match="0 score dimensions"):
        load_pilot(tmp_path / "p.npz")
    for cmd in (["plan", "--pilot-batch", "4", "--pilot-group", "4", "--budget", "16"],
                ["mse", "--reps", "2", "--prompts", "8"]):
        rc, _, err = run_cli([*cmd, "--model", tiny_model_dir, *task_args, "--max-new-tokens", "100000",
                              "--out", tmp_path / cmd[0]], capsys)
        assert rc == 2 and "> model context" in err and "--max-new-tokens" in err, (cmd, err)


# ---------------------------------------------------------------------- item 13: exposure


def test_item13_no_credentials_forwarded_to_ray_tasks_and_reward_file_announced(tmp_path, monkeypatch, capsys):
    from ugrpo.experiments.plan.trl import load_reward_function
    from ugrpo.experiments.sweep.executors import driver_context

    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    env = driver_context()["env"]
    assert "HF_TOKEN" not in env and env["HF_HOME"] == str(tmp_path)
    assert not [k for k in env if k.endswith(("_TOKEN", "_KEY", "_SECRET"))]
    f = tmp_path / "my_reward.py"
    f.write_text("def acc(completions, **kw):\n    return [1.0] * len(completions)\n")
    assert load_reward_function(f"{f}:acc")(["a"]) == [1.0]
    assert f"running the reward file {f}" in capsys.readouterr().err


# ---------------------------------------------------------------------- issue 24: the faults left after the last trial

PLAN = ["plan", "--env", "builtin:demo", "--pilot-batch", "8", "--pilot-group", "4", "--budget", "32", "--n-boot", "50"]
ALLOCATE = ["allocate", "--env", "builtin:demo", "--budget", "16", "--batches", "50", "--token-batches", "10",
            "--no-progress"]
FULL_DISK = [  # (command, the file at which the disk fills up)
    pytest.param(PLAN, "report.md", id="plan-report"),
    pytest.param(MSE, "results.json", id="mse-results"),
    pytest.param(ALLOCATE, "allocation.png", id="allocate-plot"),
]


def _one_error_line(err: str) -> str:
    lines = [x for x in err.strip().splitlines() if x.strip()]
    assert len(lines) == 1 and "error:" in lines[0] and "Traceback" not in err, err
    return lines[0]


def _assert_unfinished(out):
    from ugrpo.runs import finished_results

    assert (out / "UNFINISHED").is_file() and "has not finished" in (out / "UNFINISHED").read_text()
    assert finished_results(out) is None


@pytest.mark.parametrize(("argv", "trigger"), FULL_DISK)
def test_issue24_item2_a_full_disk_is_one_error_and_the_folder_says_it_is_unfinished(tmp_path, capsys, monkeypatch,
                                                                                     argv, trigger):
    import errno

    from ugrpo import fileio

    real = fileio.write_chunk
    full = []

    def write_chunk(f, data, path):  # from the first write into ``trigger`` on, the disk is full
        if full or path.name == trigger:
            full.append(path)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(f, data, path)

    out = tmp_path / "run"
    monkeypatch.setattr(fileio, "write_chunk", write_chunk)
    rc, _, err = run_cli(argv + ["--out", out], capsys)
    line = _one_error_line(err)
    assert rc == 2 and f"No space left on device while writing {out / trigger}" in line and "--out" in line, line
    _assert_unfinished(out)
    assert not (out / trigger).exists() and not list(out.glob(".*.tmp"))
    monkeypatch.undo()  # space freed: the same command finishes the folder
    rc, _, err = run_cli(argv + ["--out", out], capsys)
    assert rc == 0, err
    assert not (out / "UNFINISHED").exists() and (out / "report.md").is_file() and (out / "results.json").is_file()


@pytest.mark.parametrize("argv", [PLAN, MSE, ALLOCATE], ids=["plan", "mse", "allocate"])
def test_issue24_item2_on_a_real_full_tmpfs(small_disk, capsys, argv):
    disk = small_disk(40 * 1024)  # room for the config and the results, not for the plot
    out = disk / "run"
    rc, _, err = run_cli(argv + ["--out", out], capsys)
    line = _one_error_line(err)
    assert rc == 2 and f"No space left on device while writing {out}" in line, line
    _assert_unfinished(out)
    small_disk(4 << 20)  # space freed
    rc, _, err = run_cli(argv + ["--out", out], capsys)
    assert rc == 0, err
    assert not (out / "UNFINISHED").exists() and (out / "report.md").is_file()


def _stopped_part_way(folder):
    """A folder whose command wrote results.json and then stopped (the report never written)."""
    from ugrpo.runs import RunDir

    rd = RunDir(folder)
    rd.write_config({"command": "mse", "x": 1})
    rd.write_results({"steps": 4, "rows": []})
    return folder


READERS = [  # every "is this run done?" check sees no result in a folder marked UNFINISHED
    pytest.param(lambda f: __import__("ugrpo.runs", fromlist=["x"]).finished_results(f), None, id="runs"),
    pytest.param(lambda f: __import__("ugrpo.runs", fromlist=["x"]).RunDir(f).finished_results(), None,
                 id="RunDir"),
    pytest.param(lambda f: __import__("ugrpo.train.resume", fromlist=["x"]).finished_result(f, 4), None,
                 id="train-resume"),
    pytest.param(lambda f: __import__("ugrpo.experiments.sweep.executors", fromlist=["x"]).run_state(f), "restart",
                 id="sweep-executor"),
    pytest.param(lambda f: __import__("ugrpo.report.composite", fromlist=["x"]).read_part(f), None,
                 id="reproduce-part"),
]


@pytest.mark.parametrize("damaged", [False, True], ids=["unfinished", "damaged-results"])
@pytest.mark.parametrize(("read", "expected"), READERS)
def test_issue24_item2_a_folder_marked_unfinished_is_not_done_for_any_reader(tmp_path, read, expected, damaged):
    from ugrpo.runs import RunDir

    folder = _stopped_part_way(tmp_path / "run")
    assert (folder / "UNFINISHED").exists() and (folder / "results.json").exists()
    if damaged:  # finished, but results.json torn afterwards: not a finished run either (done again)
        RunDir(folder).write_report("# done\n")
        (folder / "results.json").write_text('{"steps": 4, "ro')
    assert read(folder) == expected
    if not damaged:
        RunDir(folder).write_report("# done\n")  # the report, the last file: finished
        assert not (folder / "UNFINISHED").exists() and read(folder) not in (None, "restart")


def _train_with_config(text: str):
    def setup(tmp_path, train_folder):
        (train_folder / "config.json").write_text(text)
        return ["train", "--out", train_folder, "--resume"], train_folder / "config.json"

    return setup


def _mse_with_manifest(data: bytes):
    def setup(tmp_path, train_folder):
        (train_folder / "run.json").write_bytes(data)
        return MSE + ["--out", train_folder], train_folder / "run.json"

    return setup


def _binary_env(tmp_path, train_folder):
    env = tmp_path / "env.json"
    env.write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff")
    return ["mse", "--env", env, "--groups", "2", "--out", tmp_path / "m"], env


def _object_pilot(tmp_path, train_folder):
    p = tmp_path / "pilot.npz"
    np.savez(p, rewards=np.array([[0.5, 1.0], [0.0, None]], dtype=object))
    return ["plan", "--pilot", p, "--budget", "16", "--out", tmp_path / "p"], f"--pilot {p}"


def _yaml_file(content: bytes):
    def setup(tmp_path, train_folder):
        cfg = tmp_path / "bad.yaml"
        cfg.write_bytes(content)
        return ["train", "--config", cfg, "--out", tmp_path / "t"], cfg

    return setup


def _yaml_flag(tmp_path, train_folder):
    return ["train", "--out", tmp_path / "t", "--optim.betas", "[0.9"], "--optim.betas [0.9"


def _n_boot(n):
    def setup(tmp_path, train_folder):
        return [a if a != "50" else str(n) for a in PLAN] + ["--out", tmp_path / "p"], f"--n-boot {n}"

    return setup


def _sweep_into_train_run(tmp_path, train_folder):
    (train_folder / "config.json").write_text('{"steps": 4, "optim": {"lr": 0.001}}\n')
    return SWEEP + ["--out", train_folder], train_folder


def _constant_rewards(tmp_path, train_folder):
    env = tmp_path / "constant.json"
    env.write_text(json.dumps({"kind": "softmax_bandit", "prompts": [
        {"logits": [0, 0], "reward_mean": [0, 0]}, {"logits": [0, 1], "reward_mean": [1, 1]}]}))
    return [a if a != "builtin:demo" else str(env) for a in ALLOCATE] + ["--out", tmp_path / "a"], f"--env {env}"


MESSAGES = [  # (setup -> (argv, what the line must name first), what it must say, what it must not)
    pytest.param(_train_with_config('{"optim": '), ["is not valid JSON (line 1, column 11", "restore it",
                                                    "new --out"], [], id="corrupt-config-json"),
    pytest.param(_mse_with_manifest(b"\xff\xfe{}"), ["is not a text file (byte 0xff at offset 0", "restore it",
                                                     "new --out"], ["codec"], id="non-utf8-run-json"),
    pytest.param(_mse_with_manifest(b"{}"), ["is not a ugrpo run manifest", "restore it", "new --out"],
                 ["ugrpo None"], id="empty-run-json"),
    pytest.param(_binary_env, ["is not a text file", "ugrpo make-env"], ["codec"], id="binary-env-file"),
    pytest.param(_object_pilot, ["array 'rewards' holds Python objects", "array of numbers"], ["allow_pickle"],
                 id="object-array-pilot"),
    pytest.param(_yaml_file(b"steps: [1, 2\noptim: {lr: 1e-3\n"), [": not valid YAML (line 2, column 6"],
                 ["<unicode string>"], id="yaml-file"),
    pytest.param(_yaml_file(b"steps: 4\n\xff\n"), ["is not a text file", "UTF-8 YAML"], ["codec"],
                 id="non-utf8-yaml-file"),
    pytest.param(_yaml_flag, [": not valid YAML (line 1, column 5"], ["<unicode string>"], id="yaml-flag"),
    pytest.param(_n_boot(0), [": the intervals on c1, c2, c3 and G*", "give --n-boot 200"], ["estimate_components"],
                 id="n-boot-0"),
    pytest.param(_n_boot(1), [": the intervals on c1, c2, c3 and G*", "give --n-boot 200"], ["estimate_components"],
                 id="n-boot-1"),
    pytest.param(_sweep_into_train_run, [" belongs to a 'ugrpo train' run", "new --out"], ["holds a sweep"],
                 id="sweep-into-a-train-run"),
    pytest.param(_constant_rewards, [": in every prompt the reward means are all 0 or all 1", "ugrpo make-env"],
                 ["RuntimeWarning"], id="allocate-constant-rewards"),
]


@pytest.mark.parametrize(("setup", "says", "never"), MESSAGES)
def test_issue24_items3_5_errors_name_the_file_what_is_wrong_and_the_fix(tmp_path, capsys, train_folder, setup, says,
                                                                         never):
    import warnings

    argv, first = setup(tmp_path, train_folder)
    with warnings.catch_warnings():
        warnings.simplefilter("always")  # a numpy RuntimeWarning would print on stderr
        rc, _, err = run_cli(argv, capsys)
    line = _one_error_line(err)
    assert rc == 2 and line.startswith(f"ugrpo {argv[0]}: error: ") and str(first) in line, line
    assert all(s in line for s in says) and not any(s in err for s in never), line


# ---------------------------------------------------------------------- LM measurements: input errors before the folder
LM_ARGS = {"mse": ["--groups", "4", "--reps", "2", "--ref-samples", "4", "--prompts", "4", "--sketch-dim", "8",
                   "--no-progress"],
           "plan": ["--pilot-batch", "4", "--pilot-group", "4", "--budget", "16", "--n-boot", "10"]}


@pytest.mark.parametrize("command", ["mse", "plan"])
def test_an_lm_input_error_is_one_line_and_leaves_no_run_folder(command, tmp_path, capsys, tiny_model_dir,
                                                               train_folder, monkeypatch):
    """``mse --model`` / ``plan --model``: a missing model, a bad task option or a prompt longer than the model's
    context (found only once the model is loaded) is one error line and leaves no folder, so the run is not left
    looking like a crashed one (as ``train``: tests/train/test_preflight.py); another command's folder is refused
    before the model loads, and left as it was."""
    from ugrpo.lm import loading

    base = [command, *LM_ARGS[command], "--task", "arithmetic"]
    cases = [(["--model", tmp_path / "no-such-model"], "local model folder"),
             (["--model", tiny_model_dir, "--task-option", "colour=red"], "unknown option(s) colour"),
             (["--model", tiny_model_dir, "--max-new-tokens", "60"], "> model context 64")]
    for i, (extra, says) in enumerate(cases):
        out = tmp_path / f"out-{i}"
        rc, _, err = run_cli([*base, *extra, "--out", out], capsys)
        assert rc == 2 and says in err and len(err.strip().splitlines()) == 1, (extra, err)
        assert not out.exists(), (extra, sorted(p.name for p in out.iterdir()))
    before = {p.name: p.read_bytes() for p in train_folder.iterdir()}
    monkeypatch.setattr(loading, "load_policy", lambda *a, **k: pytest.fail("the model loaded before the folder check"))
    rc, _, err = run_cli([*base, "--model", tiny_model_dir, "--out", train_folder], capsys)
    assert rc == 2 and "belongs to a 'ugrpo train' run" in err
    assert {p.name: p.read_bytes() for p in train_folder.iterdir()} == before
