"""The output projection's per-sample scores read off a forward pass (ugrpo/lm/output_scores.py, docs/math.md M70-M72)
against brute force: per-sample autograd gradients of an untied copy of the output projection.

A float64 Qwen2 with hidden size 32 and tied embeddings, built in code; ragged groups, left-padded prompts of
different lengths, completions of lengths 1..6, temperature != 1, and chunks that split groups. The log-probabilities
are float32 in both (``completion_logprobs`` casts the logits), hence the relative tolerance 1e-6.
"""

import copy

import pytest
import torch
from torch import nn
from transformers import Qwen2Config, Qwen2ForCausalLM

from ugrpo.lm.logprobs import completion_logprobs
from ugrpo.lm.output_scores import OutputScores, output_score_norms, row_norms, row_scores, weighted_sum_norm
from ugrpo.lm.scores import ScoreSpec, per_sample_scores

SIZES = (3, 5, 2, 6)  # ragged groups
TAU = 0.7


def _model(tokenizer, *, bias: bool = False):
    cfg = Qwen2Config(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      tie_word_embeddings=True, pad_token_id=tokenizer.pad_token_id,
                      bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1)
        m = Qwen2ForCausalLM(cfg).double()
        if bias:
            head = nn.Linear(32, len(tokenizer), bias=True).double()
            head.weight = m.model.embed_tokens.weight
            nn.init.normal_(head.bias, std=0.5)
            m.lm_head = head
    return m.eval()


@pytest.fixture(scope="module")
def small(tokenizer):
    return _model(tokenizer)


@pytest.fixture(scope="module")
def batch(tokenizer):
    """Ragged groups of SIZES: one prompt per group (lengths 2..5), completions of lengths 1..6 ending in EOS."""
    gen = torch.Generator().manual_seed(0)
    N, P, T, V = sum(SIZES), 5, 6, len(tokenizer)
    p_ids, p_mask = torch.zeros(N, P, dtype=torch.long), torch.zeros(N, P, dtype=torch.long)
    c_ids, c_mask = torch.randint(3, V, (N, T), generator=gen), torch.zeros(N, T, dtype=torch.long)
    n = 0
    for b, g in enumerate(SIZES):
        plen = 2 + b % 4
        prompt = torch.cat([torch.tensor([tokenizer.bos_token_id]), torch.randint(3, V, (plen - 1,), generator=gen)])
        for _ in range(g):
            p_ids[n, P - plen:], p_mask[n, P - plen:] = prompt, 1
            clen = 1 + (n * 5) % T
            c_mask[n, :clen] = 1
            c_ids[n, clen - 1] = tokenizer.eos_token_id
            c_ids[n, clen:] = tokenizer.pad_token_id
            n += 1
    group = torch.arange(len(SIZES)).repeat_interleave(torch.tensor(SIZES))
    rewards = torch.rand(N, generator=gen, dtype=torch.float64)
    rewards[:3] = 0.0  # group 0 all Z = 0: sum Z W = 0
    return (p_ids, p_mask, c_ids, c_mask), group, rewards


def _brute(model, tensors, group, rewards, temperature):
    """Exact per-sample scores of the output projection: autograd on an untied copy, row by row (M70)."""
    untied = copy.deepcopy(model)
    untied.lm_head.weight = nn.Parameter(model.lm_head.weight.detach().clone())
    patterns = ("lm_head.weight", "lm_head.bias") if untied.lm_head.bias is not None else ("lm_head.weight",)
    W = per_sample_scores(untied, tensors, params=ScoreSpec(select="modules", patterns=patterns),
                          temperature=temperature)  # (N, V d [+ V])
    zw = torch.zeros(int(group.max()) + 1, W.shape[1], dtype=W.dtype).index_add_(0, group, rewards[:, None] * W)
    return (W * W).sum(1), (zw * zw).sum(1), W


@pytest.mark.parametrize("chunk", [None, 4], ids=["whole-groups", "groups-split-over-chunks"])
def test_norms_equal_brute_force_per_sample_gradients(small, batch, chunk):
    tensors, group, rewards = batch
    w2, zw2 = output_score_norms(small, tensors, rewards, group, temperature=TAU, chunk_size=chunk)
    bw2, bzw2, W = _brute(small, tensors, group, rewards, TAU)
    torch.testing.assert_close(w2, bw2, rtol=1e-6, atol=1e-12)
    torch.testing.assert_close(zw2, bzw2, rtol=1e-6, atol=1e-12)
    assert (w2 > 0).all() and zw2[0] == 0 and (zw2[1:] > 0).all()


def test_score_vectors_are_the_per_sample_gradients(small, batch):
    tensors, group, rewards = batch
    vec = []
    with torch.no_grad():
        completion_logprobs(small, *tensors, temperature=TAU, share_prompts=True,
                            on_logits=lambda sl, h, lp: vec.append(row_scores(h, lp, tensors[2][sl], tensors[3][sl],
                                                                              temperature=TAU)))
    torch.testing.assert_close(torch.cat(vec), _brute(small, tensors, group, rewards, TAU)[2], rtol=1e-6, atol=1e-6)


def test_bias_of_the_output_projection_is_part_of_the_score(tokenizer, batch):
    m = _model(tokenizer, bias=True)
    tensors, group, rewards = batch
    for chunk in (None, 4):
        w2, zw2 = output_score_norms(m, tensors, rewards, group, temperature=1.0, chunk_size=chunk)
        bw2, bzw2, _ = _brute(m, tensors, group, rewards, 1.0)
        torch.testing.assert_close(w2, bw2, rtol=1e-6, atol=1e-12)
        torch.testing.assert_close(zw2, bzw2, rtol=1e-6, atol=1e-12)


def test_shared_and_plain_forward_give_the_same_norms(small, batch):
    """The rows' h and log p from the shared-prompt forward (the trainer's) and from one row per sequence."""
    tensors, group, rewards = batch
    got = {}
    for share in (True, False):
        rec = OutputScores(small, tensors[2], tensors[3], group, rewards, temperature=TAU)
        with torch.no_grad():
            completion_logprobs(small, *tensors, temperature=TAU, share_prompts=share, chunk_size=5,
                                on_logits=lambda sl, h, lp, rec=rec: rec(torch.arange(sl.start, sl.stop), h, lp))
        got[share] = rec.result()
    for a, b in zip(got[True], got[False]):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12)


def test_on_logits_leaves_log_probs_and_gradients_bit_identical(small, batch):
    tensors, group, rewards = batch
    params = list(small.parameters())
    out = []
    for cb in (None, lambda sl, h, lp: None):
        lp = completion_logprobs(small, *tensors, temperature=TAU, share_prompts=True, chunk_size=7, on_logits=cb)
        out.append((lp.detach(), torch.autograd.grad(lp.sum(), params)))
    assert torch.equal(out[0][0], out[1][0])
    assert all(torch.equal(a, b) for a, b in zip(out[0][1], out[1][1]))


def test_ghost_and_formed_matrix_branches_agree_with_the_explicit_sum():
    gen = torch.Generator().manual_seed(3)
    V, d = 7, 5  # ghost below M = V d / (V + d) ~ 2.9 tokens, the V x d matrix above
    for M in (2, 9):
        h = torch.randn(M, d, generator=gen, dtype=torch.float64)
        lp = torch.log_softmax(torch.randn(M, V, generator=gen, dtype=torch.float64), -1)
        y = torch.randint(0, V, (M,), generator=gen)
        w = torch.rand(M, generator=gen, dtype=torch.float64)
        u = torch.nn.functional.one_hot(y, V).double() - lp.exp()
        for bias in (False, True):
            A = (w[:, None] * u).T @ h
            want = (A * A).sum() + ((w @ u) ** 2).sum() * bias
            torch.testing.assert_close(weighted_sum_norm(h, lp, y, w, temperature=1.0, bias=bias), want)
        # rows longer than d use the V x d matrix per row
        got = row_norms(h[None], lp[None], y[None], torch.ones(1, M), temperature=2.0)
        A = u.T @ h
        torch.testing.assert_close(got, (A * A).sum()[None] / 4)


def test_logits_that_are_not_the_projection_output_are_refused(small, batch):
    tensors, group, rewards = batch

    class Capped(nn.Module):  # soft-caps the logits after the output projection (as Gemma 2 does)
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def get_output_embeddings(self):
            return self.inner.get_output_embeddings()

        def forward(self, **kw):
            out = self.inner(**kw)
            out.logits = 3.0 * torch.tanh(out.logits / 3.0)
            return out

    with pytest.raises(ValueError, match="allocation.scores: sketch"):
        completion_logprobs(Capped(small), *tensors, on_logits=lambda *a: None)
