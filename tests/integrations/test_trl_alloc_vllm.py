"""UGRPOTrainer(allocation=...) with TRL's vLLM colocate generation, on the fake engine (tests/fakes/vllm).

vLLM needs CUDA, so TRL's real ``VLLMGeneration`` (its engine arguments, its weight push through
``llm_engine...model.load_weights``, its one-completion-per-row requests, its importance-sampling ratio from the
engine's log-probabilities) runs against the fake engine of tests/fakes/vllm, which samples with Hugging Face on the
CPU. Checked: the engine is asked for exactly the rows the allocation uses (G_b of prompt b, no padding), it has the
trainer's weights when it samples, and the run trains with the ragged advantages.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

pytest.importorskip("trl", reason="the TRL integration needs `trl` (pip install 'ugrpo[trl]')")

from datasets import Dataset  # noqa: E402

from tests.integrations.trl_helpers import VARIED, Recorder, any_digit_reward, grpo_config  # noqa: E402
from ugrpo.integrations.trl import AdvantageSpec, AllocationSpec, UGRPOTrainer  # noqa: E402
from ugrpo.lm.tiny import build_tiny_model  # noqa: E402
from ugrpo.lm.tokenizer import build_char_tokenizer  # noqa: E402


@pytest.fixture
def trl_fake_vllm(fake_vllm, monkeypatch):
    """The fake engine where TRL's vLLM module looks for it (TRL imported vLLM's names at its own import, when no
    vllm was importable)."""
    import trl.generation.vllm_generation as vg
    from vllm.sampling_params import StructuredOutputsParams

    for var in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):  # TRL's colocate init sets
        monkeypatch.setenv(var, "unset")  # them in os.environ; restored (removed) after the test...
        monkeypatch.delenv(var)  # ...and absent until TRL sets them
    for name, obj in (("LLM", fake_vllm.LLM), ("SamplingParams", fake_vllm.SamplingParams),
                      ("RequestOutput", fake_vllm.RequestOutput), ("StructuredOutputsParams", StructuredOutputsParams)):
        monkeypatch.setattr(vg, name, obj, raising=False)
    return fake_vllm


def test_colocate_generates_only_the_rows_used(trl_fake_vllm, tmp_path):
    tok = build_char_tokenizer()
    folder = tmp_path / "model"
    build_tiny_model(tok, size="1m", seed=0).save_pretrained(folder)
    tok.save_pretrained(folder)
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder)  # name_or_path: the folder TRL hands the engine
    model0 = AutoModelForCausalLM.from_pretrained(folder)
    rec = Recorder(any_digit_reward)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = UGRPOTrainer(
            model=model, reward_funcs=rec, processing_class=tok,
            args=grpo_config(tmp_path, max_steps=3, num_generations=4, per_device_train_batch_size=16,
                             use_vllm=True, vllm_mode="colocate", vllm_gpu_memory_utilization=0.3),
            train_dataset=Dataset.from_dict({"prompt": VARIED[:4]}), advantages=AdvantageSpec(),
            allocation=AllocationSpec(rule="vip"))
    rec.attach(trainer)
    (llm,) = trl_fake_vllm.LLM.instances
    assert llm.kwargs["model"] == str(folder) and llm.kwargs["logprobs_mode"] == "processed_logprobs"
    gaps, generate = [], llm.generate

    def generate_and_compare(*a, **kw):  # the engine samples with the trainer's current weights (TRL's push)
        engine = dict(llm.model.hf.named_parameters())
        gaps.append(max(float((engine[n] - p.detach()).abs().max()) for n, p in trainer.model.named_parameters()))
        return generate(*a, **kw)

    llm.generate = generate_and_compare
    h = trainer.ugrpo_allocation.allocator.history  # earlier visits that tell the 4 prompts apart
    for p, k in enumerate([20, 0, 40, 10]):
        h.update(np.array([p]), np.array([40]), np.r_[np.ones(k), np.zeros(40 - k)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.train()
    log = trainer.ugrpo_allocation.log
    assert len(log) == 3 == len(llm.calls)
    assert len(set(log[0].sizes.tolist())) > 1  # ragged from the first step (the seeded history)
    for a, (prompts, params), batch in zip(log, llm.calls, rec.batches):
        # one request per row, n = 1, exactly the sum_b G_b = 16 rows of the allocation: prompt b G_b times
        assert len(prompts) == 16 and all(sp.n == 1 and sp.logprobs == 0 for sp in params)
        asked = [tok.decode(p["prompt_token_ids"], skip_special_tokens=True) for p in prompts]
        assert asked == [VARIED[i] for i in np.repeat(a.prompts, a.sizes)]
        assert torch.isfinite(batch["importance_sampling_ratio"]).all()  # TRL's correction from the engine's logprobs
    assert gaps == [0.0, 0.0, 0.0] and len(llm.model.loads) >= 3 and llm.prefix_resets >= 3
    moved = max(float((p.detach() - q).abs().max()) for p, q in zip(trainer.model.parameters(), model0.parameters()))
    assert moved > 0  # so the pushes carried new weights
    rows = [r for r in trainer.state.log_history if "ugrpo/alloc_g_max" in r]
    assert len(rows) == 3 and rows[0]["ugrpo/alloc_g_max"] > 4
