"""Per-sample scores and their sketches: exact against autograd, sketches against the explicit projection,
unbiasedness and the 1/sqrt(k) rate over sketch seeds, and c1, c2, c3 from sketches vs exact scores.

A float64 Qwen2 with hidden size 32 and 2 layers (D ~ 30 k), built in code: exact and fast.
"""

import copy
import math

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from ugrpo.lm.logprobs import completion_logprobs
from ugrpo.lm.scores import ScoreSpec, per_sample_scores, select_parameters
from ugrpo.lm.sketch import linear_trick_supported, projection_matrix, sketch_scores
from ugrpo.stats.components import point_estimates

B, G = 4, 4
N = B * G


def _small_model(tokenizer, seed=0):
    cfg = Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        m = Qwen2ForCausalLM(cfg).double()
        with torch.no_grad():  # non-trivial norm weights, so their scores are not all alike
            for name, p in m.named_parameters():
                if "norm" in name:
                    p.add_(0.3 * torch.randn_like(p))
    return m


@pytest.fixture(scope="module")
def small(tokenizer):
    return _small_model(tokenizer)


@pytest.fixture(scope="module")
def batch(tokenizer):
    return _make_batch(tokenizer)


def _make_batch(tokenizer):
    """B prompts x G completions: left-padded prompts of lengths 2..5, right-padded completions of lengths 1..6."""
    gen = torch.Generator().manual_seed(0)
    P, T, V = 5, 6, len(tokenizer)
    p_ids = torch.zeros(N, P, dtype=torch.long)
    p_mask = torch.zeros(N, P, dtype=torch.long)
    c_ids = torch.randint(3, V, (N, T), generator=gen)
    c_mask = torch.zeros(N, T, dtype=torch.long)
    for b in range(B):
        plen = 2 + b % 4
        prompt = torch.cat([torch.tensor([tokenizer.bos_token_id]), torch.randint(3, V, (plen - 1,), generator=gen)])
        for g in range(G):
            n = b * G + g
            p_ids[n, P - plen:], p_mask[n, P - plen:] = prompt, 1
            clen = 1 + (n * 5) % T
            c_mask[n, :clen] = 1
            c_ids[n, clen - 1] = tokenizer.eos_token_id
            c_ids[n, clen:] = tokenizer.pad_token_id
    c_ids[1,
          0] = tokenizer.pad_token_id  # a real (unmasked) pad token: its embedding row gets no gradient (padding_idx)
    assert c_mask[1, 0] == 1 and c_ids[1, -1] == tokenizer.eos_token_id
    return p_ids, p_mask, c_ids, c_mask


@pytest.fixture(scope="module")
def exact(small, batch):
    return per_sample_scores(small, batch)  # (N, D)


def test_exact_scores_are_per_row_autograd_and_sum_to_batched_gradient(small, batch, exact):
    params = [p for p in small.parameters()]
    logp = completion_logprobs(small, *batch, temperature=1.0).sum(dim=1)  # (N,) one batched pass
    for n in range(N):
        g = torch.cat([x.reshape(-1) for x in torch.autograd.grad(logp[n], params, retain_graph=True)])
        torch.testing.assert_close(exact[n], g, rtol=1e-9, atol=1e-12)
    full = torch.cat([x.reshape(-1) for x in torch.autograd.grad(logp.sum(), params)])
    torch.testing.assert_close(exact.sum(0), full, rtol=1e-9, atol=1e-12)
    assert exact.shape == (N, sum(p.numel() for p in params)) and exact.abs().sum(1).min() > 0


def test_temperature_scores(small, batch):
    spec = ScoreSpec(select="last_layers", n_layers=1)
    W = per_sample_scores(small, batch, params=spec, temperature=0.7)
    sel = select_parameters(small, spec)
    logp = completion_logprobs(small, *batch, temperature=0.7).sum(dim=1)
    g = torch.cat([x.reshape(-1) for x in torch.autograd.grad(logp[3], sel.params)])
    torch.testing.assert_close(W[3], g, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize(
    "spec",
    [
        ScoreSpec(),
        ScoreSpec(select="last_layers", n_layers=1),
        ScoreSpec(select="modules", patterns=("lm_head.weight", "*.layers.0.mlp.*", "*input_layernorm*")),
        ScoreSpec(select="modules", patterns=("*q_proj.bias", "model.norm.weight")),
    ],
    ids=["all", "last_layer", "tied_head_mlp_norm", "bias_finalnorm"],
)
@pytest.mark.parametrize("method", ["linear_trick", "per_sample_backward"])
def test_sketch_equals_explicit_projection_of_exact_scores(small, batch, spec, method):
    W = per_sample_scores(small, batch, params=spec, temperature=0.8)
    S = projection_matrix(small, 24, seed=5, params=spec)  # (k, D)
    got = sketch_scores(small, batch, 24, seed=5, params=spec, method=method, temperature=0.8, chunk_size=7)
    torch.testing.assert_close(got, W @ S.T, rtol=1e-8, atol=1e-10 * float((W @ S.T).abs().max()))


def test_tied_weight_selected_by_either_name_includes_both_uses(small, batch):
    sel = select_parameters(small, ScoreSpec(select="modules", patterns=("lm_head.weight",)))
    assert sel.names == ("model.embed_tokens.weight",) and sel.params[0] is small.lm_head.weight
    W = per_sample_scores(small, batch, params=ScoreSpec(select="modules", patterns=("lm_head.weight",)))
    untied = copy.deepcopy(small)  # same function, but the two uses get separate tensors
    untied.lm_head.weight = torch.nn.Parameter(small.lm_head.weight.detach().clone())
    emb = per_sample_scores(untied, batch, params=ScoreSpec(select="modules", patterns=("model.embed_tokens.weight",)))
    head = per_sample_scores(untied, batch, params=ScoreSpec(select="modules", patterns=("lm_head.weight",)))
    torch.testing.assert_close(W, emb + head, rtol=1e-9, atol=1e-12)
    assert emb.abs().max() > 1e-3 * W.abs().max() and head.abs().max() > 1e-3 * W.abs().max()
    got = sketch_scores(small, batch, 8, seed=4, params=ScoreSpec(select="modules", patterns=("lm_head.weight",)))
    S = projection_matrix(small, 8, seed=4, params=ScoreSpec(select="modules", patterns=("lm_head.weight",)))
    torch.testing.assert_close(got, W @ S.T, rtol=1e-8, atol=1e-10 * float((W @ S.T).abs().max()))


def test_same_seed_same_projection_across_calls_and_batches(small, batch):
    full = sketch_scores(small, batch, 8, seed=11)
    halves = torch.cat([sketch_scores(small, tuple(t[:7] for t in batch), 8, seed=11),
                        sketch_scores(small, tuple(t[7:] for t in batch), 8, seed=11)])
    torch.testing.assert_close(full, halves, rtol=1e-10, atol=1e-12)
    other = sketch_scores(small, batch, 8, seed=12)
    assert (full - other).abs().max() > 0.1 * full.abs().max()
    # adding parameters to the selection leaves the other blocks of S unchanged
    s1 = projection_matrix(small, 4, seed=3, params=ScoreSpec(select="modules", patterns=("*.layers.1.*",)))
    s2 = projection_matrix(small, 4, seed=3, params=ScoreSpec(select="last_layers", n_layers=2))
    torch.testing.assert_close(s1, s2[:, -s1.shape[1]:])


def _gram_errors(W, k, seeds, small):
    K = W @ W.T  # (N, N) exact Gram
    iu = torch.triu_indices(N, N)
    errs = []
    for s in seeds:
        SW = W @ projection_matrix(small, k, seed=s).T  # (N, k)  == sketch_scores (tested above)
        errs.append((SW @ SW.T - K)[iu[0], iu[1]])
    return torch.stack(errs), K[iu[0], iu[1]]  # (R, N(N+1)/2)


def test_sketched_gram_unbiased_and_error_shrinks_like_inverse_sqrt_k(small, exact):
    R = 300
    e4, K = _gram_errors(exact, 4, range(R), small)
    e16, _ = _gram_errors(exact, 16, range(1000, 1000 + R), small)
    for e in (e4, e16):  # unbiased: every Gram entry's mean error within 4 SE of 0
        z = e.mean(0) / (e.std(0, correction=1) / math.sqrt(R))
        assert z.abs().max() < 4, f"max |z| = {float(z.abs().max()):.2f}"
    # rate: E err^2 = var_1 / k exactly (k i.i.d. rows), so RMS(k=4) / RMS(k=16) = 2; MC SE by the delta method
    m4, m16 = (e4**2).mean(0), (e16**2).mean(0)  # per entry mean squared error
    a, b = m4.sum(), m16.sum()
    va = (e4**2).sum(1).var(correction=1) / R
    vb = (e16**2).sum(1).var(correction=1) / R
    ratio = math.sqrt(a / b)
    se = 0.5 * ratio * math.sqrt(va / a**2 + vb / b**2)
    assert se < 0.15, f"MC too noisy to test the rate (se {se:.3f})"
    assert abs(ratio - 2) < 4 * se, f"RMS(k=4)/RMS(k=16) = {ratio:.3f} +- {se:.3f}, expected 2"
    assert float(K.abs().max()) > 0


def test_components_from_sketches_agree_with_exact(small, batch, exact):
    gen = torch.Generator().manual_seed(7)
    rewards = (torch.rand(B, G, generator=gen) < 0.5).double()  # a fixed Bernoulli draw
    rewards[0] = torch.tensor([1.0, 0.0, 1.0, 0.0])  # at least one mixed group
    ref = point_estimates(rewards, scores=exact.view(B, G, -1))  # (3,)
    R, k = 300, 16
    est = torch.stack([point_estimates(rewards, scores=(exact @ projection_matrix(small, k, seed=s).T).view(B, G, k))
                       for s in range(R)])  # (R, 3)
    se = est.std(0, correction=1) / math.sqrt(R)
    z = (est.mean(0) - ref) / se
    assert z.abs().max() < 4, f"c1, c2, c3 sketched mean vs exact: z = {z.tolist()}"
    # the sketch path of the real function agrees with its explicit projection
    one = point_estimates(rewards, scores=sketch_scores(small, batch, k, seed=0).view(B, G, k))
    torch.testing.assert_close(one, est[0], rtol=1e-8, atol=1e-10 * float(ref.abs().max()))


def test_lora_selection_and_linear_trick(tokenizer, batch):
    peft = pytest.importorskip("peft")
    base = _small_model(tokenizer, seed=1)
    model = peft.get_peft_model(base, peft.LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"],
                                                      lora_dropout=0.0))
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.1, generator=torch.Generator().manual_seed(len(n)))
    spec = ScoreSpec(select="lora")
    sel = select_parameters(model, spec)
    assert all("lora_" in n for n in sel.names) and len(sel.names) == 8
    assert select_parameters(model).names == sel.names  # trainable == adapters in a peft model
    assert linear_trick_supported(model, spec) == []
    W = per_sample_scores(model, batch, params=spec)
    S = projection_matrix(model, 8, seed=1, params=spec)
    got = sketch_scores(model, batch, 8, seed=1, params=spec, method="linear_trick")
    torch.testing.assert_close(got, W @ S.T, rtol=1e-8, atol=1e-10 * float((W @ S.T).abs().max()))


def test_state_restored_and_no_grad_written(tokenizer, batch):
    m = _small_model(tokenizer, seed=2)
    m.train()
    m.model.layers[0].requires_grad_(False)
    flags = [p.requires_grad for p in m.parameters()]
    per_sample_scores(m, tuple(t[:2] for t in batch), params=ScoreSpec(select="all"))
    sketch_scores(m, tuple(t[:2] for t in batch), 4, params=ScoreSpec(select="all"))
    assert [p.requires_grad for p in m.parameters()] == flags and m.training
    assert all(p.grad is None for p in m.parameters())
    # a frozen block can still be selected explicitly
    W = per_sample_scores(m, tuple(t[:2] for t in batch), params=ScoreSpec(select="modules",
                                                                           patterns=("model.layers.0.*",)))
    assert W.abs().sum() > 0


def test_unsupported_parameter_linear_trick_error_and_auto_fallback(tokenizer, batch):
    m = _small_model(tokenizer, seed=3)
    m.model.layers[1].mlp.register_parameter("extra", torch.nn.Parameter(torch.zeros(3, dtype=torch.float64)))
    assert linear_trick_supported(m) == ["model.layers.1.mlp.extra"]
    rows = tuple(t[:3] for t in batch)
    with pytest.raises(ValueError, match=r"model\.layers\.1\.mlp\.extra.*per_sample_backward"):
        sketch_scores(m, rows, 4, method="linear_trick")
    auto = sketch_scores(m, rows, 4, seed=2)
    torch.testing.assert_close(auto, sketch_scores(m, rows, 4, seed=2, method="per_sample_backward"))


def test_bad_input_errors(small, batch):
    with pytest.raises(ValueError, match="select='bogus'"):
        ScoreSpec(select="bogus")
    with pytest.raises(ValueError, match="needs patterns"):
        ScoreSpec(select="modules")
    with pytest.raises(TypeError, match="not one string"):
        ScoreSpec(select="modules", patterns="*.q_proj.*")
    with pytest.raises(ValueError, match="n_layers=0"):
        ScoreSpec(select="last_layers", n_layers=0)
    with pytest.raises(ValueError, match="n_layers=5 but the model has 2"):
        select_parameters(small, ScoreSpec(select="last_layers", n_layers=5))
    with pytest.raises(ValueError, match=r"selects no parameter.*model\.embed_tokens\.weight"):
        select_parameters(small, ScoreSpec(select="modules", patterns=("*nothing*",)))
    with pytest.raises(ValueError, match="k must be an int >= 1, got 0"):
        sketch_scores(small, batch, 0)
    with pytest.raises(ValueError, match="method='fast'"):
        sketch_scores(small, batch, 4, method="fast")
    with pytest.raises(TypeError, match="Rollout"):
        per_sample_scores(small, {"prompt_ids": batch[0]})
    with pytest.raises(ValueError, match="completion_mask is all 0"):
        per_sample_scores(small, (batch[0], batch[1], batch[2], torch.zeros_like(batch[3])))


def test_sketch_under_bf16_autocast_is_the_float_sketch_to_bf16_precision(small, batch):
    """Under bf16 mixed precision (TRL's default: accelerate wraps forward in autocast, and the backward hooks run
    outside it) the hooks see bf16 gradients; the sketch is computed in the parameters' dtype and stays close to the
    float32 one."""
    import copy

    m = copy.deepcopy(small).float()  # autocast lowers float32 ops only
    want = sketch_scores(m, batch, 8, seed=3)
    m.forward = torch.autocast("cpu", dtype=torch.bfloat16)(m.forward)  # as accelerate's bf16 wraps it
    got = sketch_scores(m, batch, 8, seed=3)
    assert got.dtype == want.dtype == torch.float32
    rel = float((got - want).norm() / want.norm())
    assert 0 < rel < 0.05, rel  # bf16 rounding (8 bits of mantissa), not a different sketch
