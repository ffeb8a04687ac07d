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
    fast = completion_logprobs(model, r.prompt_ids, r.prompt_mask, r.completion_ids, r.completion_mask,
                               temperature=temperature)
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


def _logp_and_grads(m, args, **kw):
    m.zero_grad(set_to_none=True)
    logp = completion_logprobs(m, *args, **kw)
    weights = torch.linspace(-1.0, 2.0, logp.numel()).view_as(logp)  # distinct per-token weights, like advantages
    (logp * weights).sum().backward()
    grads = {n: p.grad.clone() for n, p in m.named_parameters() if p.grad is not None}
    m.zero_grad(set_to_none=True)
    return logp.detach(), grads


@pytest.mark.parametrize("temperature,chunk_size", [(1.0, None), (0.7, None), (1.0, 5)])
def test_shared_prompt_path_equals_plain_path_values_and_gradients(tokenizer, temperature, chunk_size):
    """Groups of G identical left-padded prompts of different lengths: sharing changes nothing.

    chunk_size=5 with G=4 cuts groups across chunks (runs of 1..4 rows per prompt in a chunk).
    """
    from ugrpo.lm.tiny import build_tiny_model

    m = build_tiny_model(tokenizer, seed=5)
    m.train()
    r = sample_groups(m, tokenizer, PROMPTS, 4, seeds=[4, 5, 6], max_new_tokens=7)
    args = (r.prompt_ids, r.prompt_mask, r.completion_ids, r.completion_mask)
    assert r.prompt_mask.sum(1).unique().numel() == len(PROMPTS)  # three prompt lengths: real left padding
    assert r.completion_mask.sum(1).unique().numel() > 1  # completions of different lengths: right padding
    batches: list[int] = []  # the default is the plain path: one activation row per sequence (what sketch hooks need)
    hook = m.model.register_forward_pre_hook(lambda mod, a, kw: batches.append(kw["input_ids"].shape[0]),
                                             with_kwargs=True)
    plain, g_plain = _logp_and_grads(m, args, temperature=temperature, chunk_size=chunk_size)
    hook.remove()
    assert batches == ([12] if chunk_size is None else [5, 5, 2])
    batches = []  # rows of each forward: the shared path runs 3 distinct prompts, then 12 completions
    hook = m.model.register_forward_pre_hook(lambda mod, a, kw: batches.append(kw["input_ids"].shape[0]),
                                             with_kwargs=True)
    shared, g_shared = _logp_and_grads(m, args, temperature=temperature, chunk_size=chunk_size, share_prompts=True)
    hook.remove()
    assert batches == ([3, 12] if chunk_size is None else [2, 5, 2, 5, 1, 2])
    torch.testing.assert_close(shared, plain, atol=2e-6, rtol=0)
    assert (shared[r.completion_mask == 0] == 0).all()
    assert g_plain.keys() == g_shared.keys() and len(g_plain) > 0
    scale = max(float(g.abs().max()) for g in g_plain.values())
    for name in g_plain:
        torch.testing.assert_close(g_shared[name], g_plain[name], atol=2e-6 * scale, rtol=0, msg=name)
    ref = _slow_reference(m, r, temperature)  # and both equal the unpadded one-row-at-a-time computation
    torch.testing.assert_close(shared.double(), ref, atol=1e-5, rtol=0)


def test_shared_path_with_uneven_runs_and_one_token_completions(model, tokenizer):
    """Runs of 1, 3 and 2 identical prompts (not a fixed G) and T = 1 completions."""
    enc = tokenizer(["1+2=", "12+37-5=", "9/3="], padding=True, return_tensors="pt")
    rows = torch.tensor([0, 1, 1, 1, 2, 2])
    p_ids, p_mask = enc["input_ids"][rows], enc["attention_mask"][rows]
    g = torch.Generator().manual_seed(0)
    c_ids = torch.randint(4, len(tokenizer), (6, 5), generator=g)  # ordinary (non-special) tokens
    c_mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0], [1, 0, 0, 0, 0], [1, 1, 1, 1, 0], [1, 1,
                                                                                                                 1, 1,
                                                                                                                 1]])
    for T in (5, 1):
        a = (p_ids, p_mask, c_ids[:, :T], c_mask[:, :T])
        plain = completion_logprobs(model, *a, share_prompts=False)
        shared = completion_logprobs(model, *a, share_prompts=True)
        torch.testing.assert_close(shared, plain, atol=2e-6, rtol=0)
        assert (shared[c_mask[:, :T] == 0] == 0).all() and (shared[c_mask[:, :T] == 1] < 0).all()


def test_gradient_checkpointing_falls_back_to_plain_path(tokenizer, rollout):
    """Under gradient checkpointing HF drops the cache: the plain path runs, with the right result."""
    from ugrpo.lm.tiny import build_tiny_model

    m = build_tiny_model(tokenizer, seed=3)
    m.activation_checkpointing_enable()
    m.train()
    r = rollout
    args = (r.prompt_ids, r.prompt_mask, r.completion_ids, r.completion_mask)
    batches: list[int] = []
    hook = m.model.register_forward_pre_hook(lambda mod, a, kw: batches.append(kw["input_ids"].shape[0]),
                                             with_kwargs=True)
    shared, g_shared = _logp_and_grads(m, args, share_prompts=True)
    hook.remove()
    assert batches == [len(r.texts)]  # one plain forward over all rows
    plain, g_plain = _logp_and_grads(m, args, share_prompts=False)
    torch.testing.assert_close(shared, plain, atol=2e-6, rtol=0)
    for name in g_plain:
        torch.testing.assert_close(g_shared[name], g_plain[name], atol=1e-6, rtol=0)


def test_shared_path_through_a_lora_wrapper(tokenizer, rollout):
    """A peft LoRA wrapper (nonzero adapters) passes the cache through: same values and adapter gradients."""
    from peft import LoraConfig, get_peft_model

    from ugrpo.lm.tiny import build_tiny_model

    torch.manual_seed(0)
    lora = LoraConfig(r=4, lora_alpha=8.0, target_modules=["q_proj", "v_proj", "down_proj"])
    m = get_peft_model(build_tiny_model(tokenizer, seed=6), lora)
    with torch.no_grad():  # lora_B starts at 0: make the adapters matter
        for n, p in m.named_parameters():
            if "lora_B" in n:
                p.normal_(0.0, 0.1)
    m.train()
    r = rollout
    args = (r.prompt_ids, r.prompt_mask, r.completion_ids, r.completion_mask)
    plain, g_plain = _logp_and_grads(m, args)
    batches: list[int] = []
    hook = m.get_base_model().model.register_forward_pre_hook(
        lambda mod, a, kw: batches.append(kw["input_ids"].shape[0]), with_kwargs=True
    )
    shared, g_shared = _logp_and_grads(m, args, share_prompts=True)
    hook.remove()
    assert batches == [3, 9]  # the shared path really ran: 3 distinct prompts, then 9 completions
    torch.testing.assert_close(shared, plain, atol=2e-6, rtol=0)
    assert g_plain.keys() == g_shared.keys() and all("lora_" in n for n in g_plain) and len(g_plain) > 0
    scale = max(float(g.abs().max()) for g in g_plain.values())
    for name in g_plain:
        torch.testing.assert_close(g_shared[name], g_plain[name], atol=2e-6 * scale, rtol=0, msg=name)
