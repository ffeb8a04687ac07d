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
    assert cfg.N == 64 and cfg.N % cfg.num_generations == 0 and cfg.grpo_config == {"learning_rate": 5e-5}
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
