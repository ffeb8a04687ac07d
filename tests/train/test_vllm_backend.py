"""``sampling.backend: vllm`` in the trainer, with the fake engine of tests/fakes/vllm (vLLM needs CUDA): the engine
gets the trainer's weights before step 1 and after every update, each step asks one request per prompt with n = G_b
and the prompt's seed, and without vLLM the run stops before anything is written, saying how to install it."""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch
from safetensors.torch import load_file
from train_helpers import small_config

from ugrpo.errors import UserError
from ugrpo.lm.vllm_engine import request_seed
from ugrpo.train.config import config_from_dict
from ugrpo.train.loop import train
from ugrpo.train.resume import check_resume_config
from ugrpo.train.rollout import prompt_seed


def _step_calls(llm, cfg, step: int) -> list:
    """The SamplingParams of the engine calls that drew ``step``'s batch (found by their seeds)."""
    seeds = {request_seed(prompt_seed(cfg.seed, step, b)) for b in range(cfg.budget.prompts_per_step)}
    return [params for _, params in llm.calls if {p.seed for p in params} == seeds]


def test_the_engine_has_the_trainers_weights_after_every_step(fake_vllm, tiny_model_dir, task_files, tmp_path):
    cfg = config_from_dict(small_config(tiny_model_dir, task_files, steps=2, checkpoint_every=1,
                                        sampling__backend="vllm"))
    pushes = []

    def compare(step, row):  # after the step's update, sync, eval and checkpoint
        llm = fake_vllm.LLM.instances[-1]
        saved = load_file(str(tmp_path / f"checkpoints/step-{step}/model.safetensors"))
        engine = {n: p.detach() for n, p in llm.model.hf.named_parameters()}
        assert saved.keys() == engine.keys()
        assert all(torch.equal(saved[k], engine[k]) for k in saved), step
        pushes.append(len(llm.model.loads))

    result = train(cfg, tmp_path, on_step=compare)
    assert pushes == [2, 3]  # once before step 1, once after each update
    a, b = (load_file(str(tmp_path / f"checkpoints/step-{k}/model.safetensors")) for k in (1, 2))
    assert any(not torch.equal(a[k], b[k]) for k in a)  # the pushes carried new weights, not the same ones
    llm = fake_vllm.LLM.instances[-1]
    for step in (1, 2):
        (params,) = _step_calls(llm, cfg, step)
        assert [p.n for p in params] == [cfg.budget.group_size] * cfg.budget.prompts_per_step
        assert {(p.temperature, p.top_p, p.max_tokens) for p in params} == {(1.0, 1.0, 5)}
    assert any(all(p.temperature == 0.0 for p in params) for _, params in llm.calls)  # greedy eval on the engine
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2] and result.samples == 16
    assert all(torch.isfinite(torch.tensor(r["loss"])) for r in rows[1:])


def test_allocated_group_sizes_are_the_requests_n(fake_vllm, tiny_model_dir, task_files, tmp_path):
    cfg = config_from_dict(small_config(tiny_model_dir, task_files, steps=4, sampling__backend="vllm",
                                        budget={"samples_per_step": 16, "group_size": 4},
                                        # the sketch's noise spreads the random model's predicted moments, so
                                        # the sizes vary (exact output norms leave them uniform, A3c)
                                        allocation={"rule": "ustat", "scores": "sketch", "sketch_dim": 8},
                                        task__options__reward_fn="dense_reward:varied",
                                        eval={"every": 0, "n_problems": 2, "pass1_samples": 0}))
    train(cfg, tmp_path)
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()][1:]
    llm = fake_vllm.LLM.instances[-1]
    ragged = 0
    for r in rows:
        (params,) = _step_calls(llm, cfg, r["step"])
        ns = [p.n for p in params]
        hist = {str(g): ns.count(g) for g in sorted(set(ns))}
        assert sum(ns) == 16 and hist == r["alloc_g_hist"], (r["step"], ns, r["alloc_g_hist"])
        ragged += len(set(ns)) > 1
    assert ragged  # at least one step really had unequal G_b (else this test would check nothing ragged)


def test_lora_runs_and_pushes_merged_weights(fake_vllm, tiny_model_dir, task_files, tmp_path):
    cfg = config_from_dict(small_config(tiny_model_dir, task_files, steps=1, sampling__backend="vllm",
                                        model__lora_r=4, task__options__reward_fn="dense_reward:varied",
                                        eval={"every": 0, "n_problems": 2, "pass1_samples": 0}))
    train(cfg, tmp_path)
    llm = fake_vllm.LLM.instances[-1]
    assert len(llm.model.loads) == 2
    base = load_file(f"{tiny_model_dir}/model.safetensors")
    engine = {n: p.detach() for n, p in llm.model.hf.named_parameters()}
    q = next(k for k in engine if k.endswith("self_attn.q_proj.weight"))
    assert not torch.equal(engine[q], base[q])  # the trained adapter is in the pushed (merged) weight
    untouched = next(k for k in engine if k.endswith("input_layernorm.weight"))
    assert torch.equal(engine[untouched], base[untouched])  # frozen base weights pushed as they are


def test_without_vllm_train_stops_before_writing_anything(tiny_model_dir, task_files, tmp_path, capsys):
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed here")
    cfg = config_from_dict(small_config(tiny_model_dir, task_files, sampling__backend="vllm"))
    with pytest.raises(UserError, match=r"pip install 'ugrpo\[vllm\]'"):
        train(cfg, tmp_path / "run")
    assert not (tmp_path / "run").exists()
    from ugrpo.cli import main

    rc = main(["train", "--out", str(tmp_path / "cli"), "--model.name", tiny_model_dir, "--sampling.backend", "vllm",
               "--steps", "1"])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith("ugrpo train: error: sampling.backend=vllm needs the vllm package") and "GPU" in err


def test_bad_backend_values_name_the_field():
    with pytest.raises(ValueError, match=r"sampling\.backend='trt'"):
        config_from_dict({"sampling": {"backend": "trt"}})
    with pytest.raises(ValueError, match=r"sampling\.vllm_gpu_memory=1\.5"):
        config_from_dict({"sampling": {"vllm_gpu_memory": 1.5}})


def test_a_run_saved_before_the_backend_field_resumes(tmp_path):
    """A config.json written before ``sampling.backend`` existed resumes at the default (hf), not at vllm."""
    from dataclasses import asdict

    cfg = config_from_dict({})
    saved = json.loads(json.dumps(asdict(cfg)))
    for key in ("backend", "vllm_gpu_memory", "vllm_max_model_len", "vllm_dtype"):
        del saved["sampling"][key]
    check_resume_config(saved, cfg, tmp_path)  # no error
    from ugrpo.errors import ResumeError

    with pytest.raises(ResumeError, match=r"sampling\.backend is 'vllm'"):
        check_resume_config(saved, config_from_dict({"sampling": {"backend": "vllm"}}), tmp_path)
