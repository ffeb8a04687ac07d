"""The training loop end to end on a random tiny model: run folder, resume, Algorithm 2, bad inputs."""

from __future__ import annotations

import json
import math

import pytest
import torch
from safetensors.torch import load_file
from train_helpers import assert_same_parameters, killed_and_resumed, metrics_rows, small_config, write_jsonl

from ugrpo.errors import RunFolderError
from ugrpo.train.config import config_from_dict
from ugrpo.train.loop import train

REQUIRED = {
    "step", "reward_mean", "reward_std", "frac_reward_zero_std", "grad_norm", "kl", "clip_frac", "tokens_per_s",
    "s_per_step", "lr", "loss", "completion_len_mean", "truncated_frac", "n_unscorable", "n_empty", "n_errors",
}


@pytest.fixture(scope="module")
def full_run(tiny_model_dir, task_files, tmp_path_factory):
    """An uninterrupted 4-step Algorithm-1 run (checkpoints at steps 2 and 4)."""
    out = tmp_path_factory.mktemp("full")
    cfg = config_from_dict(small_config(tiny_model_dir, task_files))
    return cfg, out, train(cfg, out)


def test_run_folder_and_metrics(full_run):
    cfg, out, result = full_run
    for name in ("config.json", "metrics.jsonl", "results.json", "report.md", "reward.png", "eval.png",
                 "checkpoints/step-2/model.safetensors", "checkpoints/step-4/optimizer.pt",
                 "checkpoints/step-4/scheduler.pt", "checkpoints/step-4/rng-rank0.pt", "final_model/config.json"):
        assert (out / name).exists(), name
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2, 3, 4]
    assert {"eval_accuracy", "eval_pass1"} <= set(rows[0])  # evaluated before any update
    for r in rows[1:]:
        assert REQUIRED <= set(r), REQUIRED - set(r)
        assert math.isfinite(r["loss"]) and 0 <= r["reward_mean"] <= 1
    assert [r["step"] for r in rows if "eval_pass1" in r] == [0, 2, 4]
    assert any(r["grad_norm"] > 0 for r in rows[1:])  # the dense reward gives a learning signal
    assert sum(r["n_unscorable"] for r in rows[1:]) > 0  # completions with a '0' are counted, not hidden
    assert json.loads((out / "config.json").read_text())["budget"]["group_size"] == 4
    res = json.loads((out / "results.json").read_text())
    assert res["steps"] == 4 and res["samples"] == 32
    assert res["load_minutes"] >= 0 and rows[0]["eval_n_problems"] > 0  # load time apart; n for the Wilson bands
    assert result.initial_eval_pass1 == rows[0]["eval_pass1"]
    # parameters moved away from the initial (random) model
    start = load_file(f"{cfg.model.name}/model.safetensors")
    end = load_file(str(out / "checkpoints/step-4/model.safetensors"))
    assert any(not torch.equal(start[k], end[k]) for k in start if k in end)


def test_existing_run_folder_needs_resume(full_run):
    cfg, out, _ = full_run
    with pytest.raises(RunFolderError, match="--resume"):
        train(cfg, out)


def test_killed_and_resumed_run_reaches_the_same_parameters(full_run, tmp_path):
    """Killed after step 3 (last checkpoint: step 2), resumed: step-4 parameters equal the uninterrupted run."""
    cfg, full_out, _ = full_run
    killed_and_resumed(cfg, tmp_path)
    assert_same_parameters(full_out, tmp_path)
    rows_a, rows_b = metrics_rows(full_out), metrics_rows(tmp_path)
    assert [r["step"] for r in rows_b] == [0, 1, 2, 3, 4]  # the step-3 row of the killed run was replaced
    assert [r.get("reward_mean") for r in rows_b] == [r.get("reward_mean") for r in rows_a]


def test_algorithm_2_with_oracle_std_clipping_and_kl(tiny_model_dir, task_files, tmp_path):
    cfg = config_from_dict(small_config(
        tiny_model_dir, task_files, steps=2, algorithm=2, minibatches=2, baseline="oracle", oracle_samples=4,
        scale="std", loss__clip_low=0.2, loss__clip_high=0.2, loss__kl_coef=0.1, loss__aggregation="token_mean",
        eval__every=0, eval__greedy=False, checkpoint_every=0, budget__micro_batch=3,
        task__options__reward_fn="dense_reward:varied",  # every group has distinct rewards, so step 1 moves pi
    ))
    train(cfg, tmp_path)
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["eval_accuracy"] is None and rows[0]["eval_pass1"] is not None
    step2 = rows[2]
    assert step2["oracle_samples"] == 2 * 4  # B * M extra samples, reported as cost
    assert step2["kl"] > 0  # the policy moved away from the reference after step 1
    assert step2["ratio_mean"] != 1.0  # the second minibatch sees pi != pi_old
    assert 0 <= step2["clip_frac"] <= 1
    assert json.loads((tmp_path / "results.json").read_text())["oracle_samples"] == 2 * 2 * 4


def test_prompt_longer_than_context_is_an_error_naming_the_problem(tiny_model_dir, task_files, tmp_path):
    train_file = write_jsonl(tmp_path / "long.jsonl", ["1+1=", "1+" * 40 + "1="])
    cfg = config_from_dict(small_config(tiny_model_dir, (train_file, task_files[1]), steps=1))
    with pytest.raises(ValueError, match=r"train problem 'custom-train-1': prompt has 83 tokens \+ "
                       r"sampling.max_new_tokens=5 > model context 64"):
        train(cfg, tmp_path / "run")
    skip = config_from_dict(small_config(tiny_model_dir, (train_file, task_files[1]), steps=1,
                                         task__long_prompts="skip",
                                         eval__every=0, checkpoint_every=0))
    result = train(skip, tmp_path / "skip")
    assert result.skipped_prompts == 1
