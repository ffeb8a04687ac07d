"""``examples/grpo-trl.yaml``: the template of ``ugrpo plan --trl-config`` loads, validates and runs (no download)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

pytest.importorskip("trl", reason="the TRL integration needs `trl` (pip install 'ugrpo[trl]')")

from ugrpo.experiments.plan.trl import load_reward_function, load_trl_config, run_trl_plan  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "grpo-trl.yaml"


def test_example_loads_and_validates(monkeypatch):
    monkeypatch.chdir(ROOT)  # its paths are relative to the repository root, as its comment says
    cfg = load_trl_config(EXAMPLE)
    assert cfg.model_name_or_path == "tiny:instruct" and cfg.num_generations == 8
    assert cfg.N == 64 and cfg.N % cfg.num_generations == 0
    assert cfg.grpo_config == {"learning_rate": 5e-5, "advantage_baseline": "grpo", "advantage_scale": "none",
                               "allocation_rule": "ustat", "allocation_g_min": 2, "allocation_g_max": 16}
    assert (cfg.pilot_batch, cfg.pilot_group, cfg.sketch_dim) == (32, 8, 256)
    rows = [json.loads(line) for line in Path(cfg.dataset_name).read_text().splitlines()]
    assert len(rows) >= cfg.pilot_batch and all(set(r) == {"prompt", "answer"} for r in rows)
    (correct,) = [load_reward_function(s) for s in cfg.reward_funcs]
    assert correct(prompts=["7*5="] * 4, completions=["35", "34", "", " 35"], answer=["35"] * 4) == [1.0, 0.0, 0.0, 1.0]


def test_example_runs_end_to_end_on_a_random_tiny_model(monkeypatch, tmp_path):
    """The example's dataset and reward file through the whole plan; the model swapped for a random tiny one
    (building tiny:instruct takes minutes) and the pilot made small."""
    from ugrpo.lm.tiny import build_tiny_model
    from ugrpo.lm.tokenizer import build_char_tokenizer

    tok = build_char_tokenizer()
    build_tiny_model(tok, seed=0).save_pretrained(tmp_path / "model")
    tok.save_pretrained(tmp_path / "model")
    monkeypatch.chdir(ROOT)
    cfg = dataclasses.replace(load_trl_config(EXAMPLE), model_name_or_path=str(tmp_path / "model"), pilot_batch=8,
                              pilot_group=4, sketch_dim=32, n_boot=50)
    res = run_trl_plan(cfg, tmp_path / "run", progress=False)
    assert res["trl"]["budget_N"] == 64 and res["trl"]["current"]["num_generations"] == 8
    assert (tmp_path / "run" / "report.md").is_file()


def test_example_is_a_trl_yaml_with_ugrpo_fields(tmp_path):
    """TrlParser((UGRPOConfig,)) reads the same file (the script keys and the `ugrpo:` pilot block are left over)."""
    from trl import TrlParser

    from ugrpo.integrations.trl import AllocationSpec, UGRPOConfig

    cfg, rest = TrlParser((UGRPOConfig,)).parse_args_and_config(
        ["--config", str(EXAMPLE), "--output_dir", str(tmp_path), "--use_cpu", "true"], return_remaining_strings=True)
    assert cfg.num_generations == 8 and cfg.per_device_train_batch_size == 64
    assert cfg.allocation_spec() == AllocationSpec(rule="ustat", g_min=2, g_max=16)
    assert "--model_name_or_path" in rest and "--reward_funcs" in rest


def test_example_script_runs_with_an_allocation_rule(tmp_path):
    """examples/trl_grpo_with_ugrpo.py --allocation knapsack on the shipped tiny:instruct (CPU, no download)."""
    import os
    import subprocess
    import sys

    cmd = [sys.executable, str(ROOT / "examples" / "trl_grpo_with_ugrpo.py"), "--allocation", "knapsack", "--steps",
           "6", "--prompts", "8", "--per-device-batch", "32", "--num-generations", "8"]
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", TMPDIR=str(tmp_path))
    for var in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",  # a launcher's, not this process's
                "OMP_NUM_THREADS", "UGRPO_THREADS"):  # the script chooses its threads as the commands do
        env.pop(var, None)
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "ugrpo: 1 torch thread" in proc.stderr  # not torch's one per core, many times slower on busy cores
    lines = [x for x in proc.stdout.splitlines() if x.lstrip().startswith("step ")]
    assert len(lines) == 6 and "knapsack: G_b per prompt at N = 32" in proc.stdout
    assert "sizes {8: 4}" in lines[0] and any("sizes {8: 4}" not in x for x in lines[2:])  # ragged once revisited
