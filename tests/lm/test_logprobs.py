"""completion_logprobs against a slow per-sequence computation without any padding."""

import pytest
import torch

from ugrpo.lm.logprobs import completion_logprobs
from ugrpo.lm.sampling import sample_groups

PROMPTS = ["1+2=", "12+37-5=", "25-(10+5)="]


@pytest.fixture(scope="module")
def rollout(model, tokenizer):
    return sample_groups(model, tokenizer, PROMPTS, 3, seeds=[1, 2, 3], max_new_tokens=7)


def _slow_reference(model, rollout, temperature=1.0):
    """Each row alone: real prompt tokens + real completion tokens, no mask, positions 0..L-1."""
    N, T = rollout.completion_ids.shape
    out = torch.zeros(N, T, dtype=torch.float64)
    with torch.no_grad():
        for i in range(N):
            p = rollout.prompt_ids[i][rollout.prompt_mask[i].bool()]
            k = int(rollout.completion_mask[i].sum())
            c = rollout.completion_ids[i, :k]
            logits = model(torch.cat([p, c])[None]).logits[0].double() / temperature  # (P+k, V)
            logp = torch.log_softmax(logits[len(p) - 1: len(p) - 1 + k], dim=-1)
            out[i, :k] = logp.gather(-1, c[:, None])[:, 0]
    return out


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_equals_unpadded_per_sequence_reference(model, rollout, temperature):
    r = rollout
    fast = completion_logprobs(model, r.prompt_ids, r.prompt_mask, r.completion_ids, r.completion_mask, temperature=temperature)
    ref = _slow_reference(model, r, temperature)
    assert fast.shape == r.completion_ids.shape
    assert (fast[r.completion_mask == 0] == 0).all()
    torch.testing.assert_close(fast.double(), ref, atol=1e-5, rtol=0)
    assert r.prompt_mask.sum(1).unique().numel() > 1  # the batch really is left-padded


def test_extra_padding_and_chunking_change_nothing(model, rollout, tokenizer):
    r, pad = rollout, tokenizer.pad_token_id
    base = completion_logprobs(model, r.prompt_ids, r.prompt_mask, r.completion_ids, r.completion_mask)
    N = r.prompt_ids.shape[0]
    p_ids = torch.cat([torch.full((N, 5), pad), r.prompt_ids], 1)
    p_mask = torch.cat([torch.zeros(N, 5, dtype=torch.long), r.prompt_mask], 1)
    c_ids = torch.cat([r.completion_ids, torch.full((N, 4), pad)], 1)
    c_mask = torch.cat([r.completion_mask, torch.zeros(N, 4, dtype=torch.long)], 1)
    padded = completion_logprobs(model, p_ids, p_mask, c_ids, c_mask, chunk_size=2)
    torch.testing.assert_close(padded[:, : base.shape[1]], base, atol=1e-5, rtol=0)
    assert (padded[:, base.shape[1]:] == 0).all()
    chunked = completion_logprobs(model, r.prompt_ids, r.prompt_mask, r.completion_ids, r.completion_mask, chunk_size=4)
    torch.testing.assert_close(chunked, base, atol=1e-6, rtol=0)


def test_is_differentiable(tokenizer, rollout):
    from ugrpo.lm.tiny import build_tiny_model

    m = build_tiny_model(tokenizer, seed=3)
    r = rollout
    logp = completion_logprobs(m, r.prompt_ids, r.prompt_mask, r.completion_ids, r.completion_mask, chunk_size=4)
    logp.sum().backward()
    grads = [p.grad for p in m.parameters() if p.grad is not None]
    assert grads and any(g.abs().sum() > 0 for g in grads)


def test_shape_errors(model, rollout):
    r = rollout
    with pytest.raises(ValueError, match="completion_mask"):
        completion_logprobs(model, r.prompt_ids, r.prompt_mask, r.completion_ids, r.completion_mask[:, :-1])
    with pytest.raises(ValueError, match="prompt rows"):
        completion_logprobs(model, r.prompt_ids[:-1], r.prompt_mask[:-1], r.completion_ids, r.completion_mask)
    with pytest.raises(ValueError, match="no real token"):
        completion_logprobs(model, r.prompt_ids, torch.zeros_like(r.prompt_mask), r.completion_ids, r.completion_mask)
    with pytest.raises(ValueError, match="temperature"):
        completion_logprobs(model, r.prompt_ids, r.prompt_mask, r.completion_ids, r.completion_mask, temperature=0.0)
