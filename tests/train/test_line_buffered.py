"""``ugrpo train`` with stdout redirected to a file (SLURM, nohup): each step's line is in the file while the run
goes on (issue 23 item 3), not only when the process exits."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from train_helpers import TESTS_TRAIN

ROOT = Path(__file__).resolve().parents[2]


def test_a_step_line_reaches_the_file_while_the_run_is_still_going(tiny_model_dir, task_files, tmp_path):
    train_file, eval_file = task_files
    release, log = tmp_path / "release", tmp_path / "stdout.txt"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # Python's default: block-buffered
    env.update(PYTHONPATH=os.pathsep.join([str(ROOT), TESTS_TRAIN]), UGRPO_TEST_RELEASE=str(release))
    argv = [sys.executable, "-m", "ugrpo.cli", "train", "--out", str(tmp_path / "run"), "--model.name", tiny_model_dir,
            "--task.name", "custom", "--task.options.data_path", train_file, "--task.options.eval_path", eval_file,
            "--task.options.reward_fn", "dense_reward:pause_at_second_call", "--budget.samples_per_step", "8",
            "--budget.group_size", "4", "--sampling.max_new_tokens", "4", "--steps", "2", "--eval.n_problems", "0",
            "--log_every", "1"]
    with open(log, "w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.DEVNULL, env=env)
        try:
            t0, text = time.time(), ""
            while "step 1 " not in text and proc.poll() is None and time.time() - t0 < 240:
                time.sleep(0.1)
                text = log.read_text()
            running = proc.poll() is None  # paused in step 2's rewards: the process has not exited
            assert running and "step 1 reward_mean=" in text, (proc.poll(), text)
            assert "step 2 " not in text and "done:" not in text
        finally:
            release.write_text("go")
            rc = proc.wait(timeout=240)
    assert rc == 0 and "step 2 reward_mean=" in log.read_text() and "done: 2 steps" in log.read_text()
