"""The vLLM backend's adapter against a fake engine with vLLM's shapes (tests/fakes/vllm): the Rollout contract, one
request per prompt with n = G_b, the seeds it passes, weight pushes (LoRA merged), and the errors where vLLM cannot
run. The real engine needs CUDA; benchmarks/gpu_check.sh runs it on a GPU."""

import copy
import importlib.util
import os

import pytest
import torch

from ugrpo.errors import UserError
from ugrpo.lm import vllm_engine
from ugrpo.lm.sampling import eos_token_ids, sample_groups
from ugrpo.lm.vllm_engine import build_engine, named_weights, request_seed, vllm_problem

PROMPTS = ["1+2=", "12+37-5=", "3*4=", "25-(10+5)="]
SEEDS = [11, 12, 13, 14]
SIZES = [1, 3, 2, 4]  # ragged G_b


@pytest.fixture
def engine(fake_vllm, model, tokenizer):
    eng = build_engine(model, tokenizer, gpu_memory=0.3)
    eng.sync_weights(model)
    yield eng
    eng.close()


def _state(m):
    return {n: p.detach().clone() for n, p in m.named_parameters()}


def test_rollout_has_the_hf_layout_and_one_request_per_prompt_with_n_g_b(engine, model, tokenizer, fake_vllm):
    kw = dict(seeds=SEEDS, temperature=0.9, top_p=0.95, max_new_tokens=8)
    ro = engine.sample_groups(tokenizer, PROMPTS, SIZES, **kw)
    hf = sample_groups(model, tokenizer, PROMPTS, SIZES, **kw)
    for name in ("prompt_ids", "prompt_mask", "prompt_index", "group_sizes"):  # the same prompt side as HF's
        assert torch.equal(getattr(ro, name), getattr(hf, name)), name
    assert ro.group_size == hf.group_size and ro.ragged and len(ro.texts) == sum(SIZES)
    llm = fake_vllm.LLM.instances[-1]
    (requests, params), = llm.calls
    assert [r["prompt_token_ids"] for r in requests] == [tokenizer(p)["input_ids"] for p in PROMPTS]
    assert [p.n for p in params] == SIZES
    assert [p.seed for p in params] == [request_seed(s) for s in SEEDS]
    eos = eos_token_ids(tokenizer, model)
    for p in params:
        assert (p.temperature, p.top_p, p.max_tokens, p.stop_token_ids, p.detokenize) == (0.9, 0.95, 8, eos, False)
    # completions: the mask covers the tokens up to and including the first EOS, the rest is padding
    for ids, m, trunc, text in zip(ro.completion_ids.tolist(), ro.completion_mask.tolist(), ro.truncated, ro.texts):
        n = sum(m)
        assert m == [1] * n + [0] * (len(m) - n) and all(t == tokenizer.pad_token_id for t in ids[n:])
        assert bool(trunc) == (ids[n - 1] not in eos) and (n == 8 if trunc else True)
        assert text == tokenizer.decode(ids[:n], skip_special_tokens=True)
    assert not ro.truncated.all() and ro.truncated.any()  # both kinds occur (so both branches were checked)


def test_rows_follow_child_index_and_seeds(engine, tokenizer, fake_vllm):
    """Row j of a prompt is vLLM's child j (the fake answers in reverse order); a prompt's rows depend on its seed,
    and in the fake (batch-invariant, unlike vLLM) on nothing else: the first rows of n = 4 are those of n = 2."""
    kw = dict(seeds=SEEDS, max_new_tokens=8)
    a = engine.sample_groups(tokenizer, PROMPTS, SIZES, **kw)
    again = engine.sample_groups(tokenizer, PROMPTS, SIZES, **kw)
    assert torch.equal(a.completion_ids, again.completion_ids) and a.texts == again.texts
    two = engine.sample_groups(tokenizer, PROMPTS[3:], 2, seeds=SEEDS[3:], max_new_tokens=8)
    last = a.first_rows(1)[-1]  # first row of prompt 3 (G_b = 4)
    assert a.texts[last:last + 2] == two.texts
    assert len(set(a.texts[last:last + 4])) > 1  # the 4 children differ: seeds seed + j, not one seed
    other = engine.sample_groups(tokenizer, PROMPTS, SIZES, seeds=[s + 1 for s in SEEDS], max_new_tokens=8)
    assert other.texts != a.texts


def test_rollout_is_the_same_whether_vllm_returns_the_stop_token_or_not(engine, tokenizer, fake_vllm, monkeypatch):
    kw = dict(seeds=SEEDS, max_new_tokens=8)
    with_stop = engine.sample_groups(tokenizer, PROMPTS, SIZES, **kw)
    monkeypatch.setattr(fake_vllm.LLM, "include_stop_token", False)
    without = engine.sample_groups(tokenizer, PROMPTS, SIZES, **kw)
    assert torch.equal(with_stop.completion_ids, without.completion_ids)
    assert torch.equal(with_stop.completion_mask, without.completion_mask) and with_stop.texts == without.texts


def test_greedy_completions_match_hf_greedy(engine, model, tokenizer):
    from ugrpo.train.evaluate import greedy_completions

    hf = greedy_completions(model, tokenizer, PROMPTS, max_new_tokens=8, batch_size=4)
    assert engine.greedy_completions(tokenizer, PROMPTS, max_new_tokens=8) == hf


def test_sync_weights_pushes_every_parameter_and_resets_the_prefix_cache(fake_vllm, model, tokenizer):
    eng = build_engine(model, tokenizer, gpu_memory=0.3)
    llm = fake_vllm.LLM.instances[-1]
    assert llm.kwargs["load_format"] == "dummy" and llm.kwargs["skip_tokenizer_init"]
    assert os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"  # the engine core in this process
    mine, theirs = _state(model), _state(llm.model.hf)
    assert any(not torch.equal(mine[k], theirs[k]) for k in mine)  # placeholder weights before the first push
    n = eng.sync_weights(model)
    theirs = _state(llm.model.hf)
    assert n == len(mine) and mine.keys() == theirs.keys()
    assert all(torch.equal(mine[k], theirs[k]) for k in mine)
    assert (eng.syncs, llm.prefix_resets) == (1, 1)
    assert llm.kwargs["dtype"] == "float32"  # auto: the policy's dtype
    eng.close()


def test_a_bfloat16_engine_gets_the_float32_weights_rounded(fake_vllm, model, tokenizer):
    eng = build_engine(model, tokenizer, gpu_memory=0.3, dtype="bfloat16")
    eng.sync_weights(model)
    llm = fake_vllm.LLM.instances[-1]
    theirs = _state(llm.model.hf)
    assert llm.kwargs["dtype"] == "bfloat16" and all(t.dtype == torch.bfloat16 for t in theirs.values())
    assert all(torch.equal(theirs[k], p.to(torch.bfloat16)) for k, p in _state(model).items())
    assert eng.sample_groups(tokenizer, PROMPTS, 2, seeds=SEEDS, max_new_tokens=4).completion_ids.shape[0] == 8
    eng.close()


def test_lora_pushes_merged_weights_and_leaves_the_adapter_unmerged(fake_vllm, model, tokenizer):
    from ugrpo.lm.loading import LoraSettings, _wrap_lora

    peft_model = _wrap_lora(copy.deepcopy(model), LoraSettings(r=4, alpha=8.0), seed=0)
    with torch.no_grad():  # peft starts B at 0 (no change); make the adapter matter
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.1)
    before = _state(peft_model)
    eng = build_engine(peft_model, tokenizer, gpu_memory=0.3)
    eng.sync_weights(peft_model)
    merged = _state(copy.deepcopy(peft_model).merge_and_unload())
    theirs = _state(fake_vllm.LLM.instances[-1].model.hf)
    assert merged.keys() == theirs.keys()
    for k in merged:
        torch.testing.assert_close(theirs[k], merged[k], rtol=0, atol=1e-6)
    assert any(not torch.equal(merged[k], _state(model)[k]) for k in merged)  # the adapter did change weights
    after = _state(peft_model)
    assert all(torch.equal(before[k], after[k]) for k in before)  # the training model is untouched
    assert dict(named_weights(peft_model)).keys() == merged.keys()
    eng.close()


def test_missing_vllm_says_how_to_install_it():
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed here")
    msg = vllm_problem("cpu")
    assert "pip install 'ugrpo[vllm]'" in msg and "not installed" in msg
    with pytest.raises(UserError, match=r"ugrpo\[vllm\]"):
        vllm_engine.require_vllm(None)


def test_without_cuda_the_error_says_vllm_needs_it(monkeypatch):
    monkeypatch.setattr(vllm_engine.importlib.util, "find_spec", lambda name: object())  # as if vllm were there
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert "needs a CUDA GPU" in vllm_problem(None) and "sampling.backend=hf" in vllm_problem(None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert "model.device=cpu" in vllm_problem(torch.device("cpu"))
    assert vllm_problem(torch.device("cuda", 0)) is None


def test_bad_arguments_are_caught_before_the_engine(engine, tokenizer, fake_vllm):
    with pytest.raises(ValueError, match="seeds"):
        engine.sample_groups(tokenizer, PROMPTS, 2, seeds=SEEDS[:2])
    with pytest.raises(ValueError, match="group sizes|group_size"):
        engine.sample_groups(tokenizer, PROMPTS, [2, 2], seeds=SEEDS)
    assert fake_vllm.LLM.instances[-1].calls == []


def test_request_seed_leaves_room_for_the_children():
    seeds = [request_seed(s) for s in range(1000)]
    assert all(0 <= s < 2**62 for s in seeds) and len(set(seeds)) == 1000
    assert request_seed(5) == request_seed(5)


def test_lora_with_modules_to_save_is_refused_before_the_engine_is_touched(fake_vllm, model, tokenizer):
    from peft import LoraConfig, get_peft_model

    peft_model = get_peft_model(copy.deepcopy(model), LoraConfig(r=2, target_modules=["q_proj"],
                                                                 modules_to_save=["norm"]))
    eng = build_engine(peft_model, tokenizer, gpu_memory=0.3)
    with pytest.raises(UserError, match="modules_to_save"):
        eng.sync_weights(peft_model)
    assert fake_vllm.LLM.instances[-1].model.loads == [] and eng.syncs == 0
    eng.close()
