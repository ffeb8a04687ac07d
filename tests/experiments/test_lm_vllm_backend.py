"""``--sampling-backend vllm`` of ``ugrpo plan --model`` and ``ugrpo mse --model`` (incl. ``--allocation``), on the
fake engine of tests/fakes/vllm (vLLM needs CUDA): one engine per command, given the policy's weights once, one
request per prompt with n = its sample count, the backend in results.json and report.md; without vLLM (or CUDA) the
command stops before it writes anything, saying how to install it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from ugrpo.experiments.plan.pilot_io import load_pilot
from ugrpo.lm import vllm_engine
from ugrpo.lm.vllm_engine import request_seed
from ugrpo.stats.seeds import derive_seed

from .conftest import results, run_cli

PILOT = ["--pilot-batch", 6, "--pilot-group", 8, "--sketch-dim", 16, "--max-new-tokens", 4, "--n-boot", 100]
MSE = ["--groups", "3,8", "--batch", 3, "--reps", 3, "--ref-samples", 8, "--prompts", 4, "--sketch-dim", 16,
       "--max-new-tokens", 4, "--seed", 2, "--no-progress"]


def _engine_is_the_policy(llm, model_dir: str) -> None:
    """The engine got the policy's weights (not its placeholder ones), in one push, and its config folder is gone."""
    saved = load_file(f"{model_dir}/model.safetensors")
    engine = {n: p.detach() for n, p in llm.model.hf.named_parameters()}
    assert all(torch.equal(engine[k], saved[k]) for k in saved) and set(saved) <= set(engine)
    assert len(llm.model.loads) == 1 and llm.prefix_resets == 1  # frozen policy: one push, no per-G sync
    assert not Path(llm.kwargs["model"]).exists()  # closed at the end of the command


def test_plan_model_with_vllm_one_request_per_prompt_with_n_g0(fake_vllm, tmp_path, capsys, tiny_model_dir,
                                                                task_args):
    out = tmp_path / "p"
    rc, _, err = run_cli(["plan", "--model", tiny_model_dir, *task_args, *PILOT, "--budget", 48, "--seed", 4,
                          "--sampling-backend", "vllm", "--out", out], capsys)
    assert rc == 0, err
    (llm,) = fake_vllm.LLM.instances  # one engine for the command
    _engine_is_the_policy(llm, tiny_model_dir)
    assert llm.kwargs["load_format"] == "dummy" and 4 < llm.kwargs["max_model_len"] <= 64  # prompt + 4, in context
    params = [p for _, ps in llm.calls for p in ps]
    assert sum(len(prompts) for prompts, _ in llm.calls) == 6 and [p.n for p in params] == [8] * 6
    # the pilot's seed of prompt b, as vLLM request seed (the train backend's contract, docs/vllm.md)
    assert [p.seed for p in params] == [request_seed(derive_seed(4, b, stride=104_729, offset=1)) for b in range(6)]
    assert {(p.temperature, p.top_p, p.max_tokens) for p in params} == {(1.0, 1.0, 4)}
    res = results(out)
    assert res["config"]["sampling_backend"] == "vllm" and res["pilot_cost"]["sampling_backend"] == "vllm"
    assert res["pilot_cost"]["samples"] == 48 and res["pilot_cost"]["seconds_engine_start"] > 0
    assert {"c1", "c2", "c3", "g_star", "step_cost"} <= set(res)
    pilot = load_pilot(out / "pilot.npz")
    assert tuple(pilot.scores.shape) == (6, 8, 16) and pilot.meta["sampling_backend"] == "vllm"
    assert "with vLLM, after" in (out / "report.md").read_text()


def test_mse_model_allocation_with_vllm_one_request_per_prompt(fake_vllm, tmp_path, capsys, tiny_model_dir,
                                                               task_args):
    out = tmp_path / "m"
    rc, stdout, err = run_cli(["mse", "--model", tiny_model_dir, *task_args, *MSE, "--allocation", "uniform,ustat",
                               "--history-visits", 2, "--history-group", 3, "--sampling-backend", "vllm",
                               "--out", out], capsys)
    assert rc == 0, err
    (llm,) = fake_vllm.LLM.instances  # one engine across every G, the pool and the history
    _engine_is_the_policy(llm, tiny_model_dir)
    res = results(out)
    cost = res["cost"]
    pool, history = llm.calls[:4], llm.calls[4:]
    # the pool: prompt p in one request of M reference samples + one block of Gmax per use of p
    assert all(len(prompts) == 1 and (ps[0].n - 8) % 8 == 0 and ps[0].n >= 8 for prompts, ps in pool)
    assert sum(ps[0].n for _, ps in pool) == cost["samples_reference"] + cost["samples_estimation"] == 4 * 8 + 9 * 8
    # the allocation's history: one request per prompt with n = visits x samples per visit
    assert len(history) == 1 and [p.n for p in history[0][1]] == [2 * 3] * 4 == [6] * len(history[0][0])
    assert cost["samples"] == 4 * 8 + 9 * 8 + 24 and cost["sampling_backend"] == "vllm"
    assert res["config"]["sampling_backend"] == "vllm"
    assert {r["rule"] for r in res["allocation"]["rows"]} == {"uniform", "ustat"} and len(res["rows"]) == 8
    assert "(vLLM)" in (out / "report.md").read_text() and "G  estimator" in stdout


@pytest.mark.parametrize("command", ["plan", "mse"])
def test_without_vllm_the_command_says_how_to_install_it_and_writes_nothing(command, tmp_path, capsys,
                                                                           tiny_model_dir, task_args):
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed here")
    out = tmp_path / "o"
    extra = [*PILOT, "--budget", 48] if command == "plan" else MSE
    rc, _, err = run_cli([command, "--model", tiny_model_dir, *task_args, *extra, "--sampling-backend", "vllm",
                          "--out", out], capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"ugrpo {command}: error: --sampling-backend=vllm needs the vllm package, which is not "
                          "installed: install it with `pip install 'ugrpo[vllm]'`"), err
    assert not out.exists()


def test_without_cuda_the_error_names_the_flag(monkeypatch, tmp_path, capsys, tiny_model_dir, task_args):
    real = importlib.util.find_spec
    monkeypatch.setattr(vllm_engine.importlib.util, "find_spec",  # as if vllm were there, the rest as it is
                        lambda name, *a: object() if name == "vllm" else real(name, *a))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out = tmp_path / "o"
    rc, _, err = run_cli(["plan", "--model", tiny_model_dir, *task_args, *PILOT, "--budget", 48,
                          "--sampling-backend", "vllm", "--out", out], capsys)
    assert rc == 2 and "needs a CUDA GPU" in err and "use --sampling-backend=hf" in err, err
    assert not out.exists()


@pytest.mark.parametrize("command", ["plan", "mse"])
def test_help_lists_the_option_and_other_sources_refuse_it(command, tmp_path, capsys):
    with pytest.raises(SystemExit):
        run_cli([command, "--help"], capsys)
    assert "--sampling-backend {hf,vllm}" in capsys.readouterr().out
    rest = ["--pilot-batch", 8, "--pilot-group", 4, "--budget", 32] if command == "plan" else ["--reps", 10]
    rc, _, err = run_cli([command, "--env", "builtin:demo", *rest, "--sampling-backend", "vllm",
                          "--out", tmp_path / "o"], capsys)
    assert rc == 2 and ("--sampling-backend, --sketch-dim and --chunk-size need --model" if command == "plan" else
                        "--sampling-backend and --chunk-size need --model") in err, err
