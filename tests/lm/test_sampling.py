"""The sampler: reproducible per (prompt seed, row), correct masks, and the right distribution."""

import math

import pytest
import torch

from ugrpo.lm.sampling import completion_mask_from_ids, row_seed, sample_groups, top_p_filter

PROMPTS = ["1+2=", "12+37-5=", "3*4=", "25-(10+5)=", "9/3="]
SEEDS = [11, 12, 13, 14, 15]


def _rows(r, b, G):
    return r.completion_ids[b * G:(b + 1) * G], r.completion_mask[b * G:(b + 1) * G], r.texts[b * G:(b + 1) * G]


def _same(r1, b1, r2, b2, G):
    (i1, m1, t1), (i2, m2, t2) = _rows(r1, b1, G), _rows(r2, b2, G)
    T = min(i1.shape[1], i2.shape[1])
    # beyond the shorter width both must be padding
    assert (m1[:, T:] == 0).all() and (m2[:, T:] == 0).all()
    return torch.equal(i1[:, :T], i2[:, :T]) and torch.equal(m1[:, :T], m2[:, :T]) and t1 == t2


def test_same_seeds_same_samples_regardless_of_batch_order_and_split(model, tokenizer):
    G, kw = 4, dict(max_new_tokens=8)
    full = sample_groups(model, tokenizer, PROMPTS, G, seeds=SEEDS, **kw)
    again = sample_groups(model, tokenizer, PROMPTS, G, seeds=SEEDS, **kw)
    assert torch.equal(full.completion_ids, again.completion_ids) and full.texts == again.texts
    rev = sample_groups(model, tokenizer, PROMPTS[::-1], G, seeds=SEEDS[::-1], batch_size=3, **kw)
    alone = [sample_groups(model, tokenizer, [p], G, seeds=[s], **kw) for p, s in zip(PROMPTS, SEEDS)]
    halves = [sample_groups(model, tokenizer, PROMPTS[:2], G, seeds=SEEDS[:2], **kw),
              sample_groups(model, tokenizer, PROMPTS[2:], G, seeds=SEEDS[2:], batch_size=5, **kw)]
    B = len(PROMPTS)
    for b in range(B):
        assert _same(full, b, rev, B - 1 - b, G)
        assert _same(full, b, alone[b], 0, G)
        assert _same(full, b, halves[b // 2 if b < 2 else 1], b if b < 2 else b - 2, G)
    # the samples do vary: across rows of a group and with the seed (random model: ~uniform tokens)
    assert len(set(full.texts)) > len(full.texts) // 2
    other = sample_groups(model, tokenizer, PROMPTS, G, seeds=[s + 100 for s in SEEDS], **kw)
    assert other.texts != full.texts


def test_model_generation_config_does_not_leak_into_sampling(tokenizer):
    """A hub model's generation_config (repetition penalty, n-gram bans, ...) must not change the samples."""
    from ugrpo.lm.tiny import build_tiny_model

    m = build_tiny_model(tokenizer, seed=4).eval()
    kw = dict(seeds=SEEDS[:2], max_new_tokens=8)
    plain = sample_groups(m, tokenizer, PROMPTS[:2], 4, **kw)
    m.generation_config.repetition_penalty = 50.0
    m.generation_config.no_repeat_ngram_size = 1
    m.generation_config.min_new_tokens = 8
    m.generation_config.temperature = 0.1
    m.generation_config.do_sample = True
    dirty = sample_groups(m, tokenizer, PROMPTS[:2], 4, **kw)
    assert torch.equal(plain.completion_ids, dirty.completion_ids)
    assert m.generation_config.repetition_penalty == 50.0  # restored, not changed for the caller
    # the leak would be visible: repeated tokens occur in the plain samples
    assert any(len(set(ids)) < len(ids) for ids in plain.completion_ids[plain.completion_mask.sum(1) > 3].tolist())


def test_layout_masks_eos_and_truncation(model, tokenizer):
    G, T = 6, 8
    r = sample_groups(model, tokenizer, PROMPTS, G, seeds=SEEDS, max_new_tokens=T)
    N = len(PROMPTS) * G
    assert r.prompt_ids.shape[0] == N and r.completion_ids.shape == (N, T) == r.completion_mask.shape
    assert r.prompt_index.tolist() == [b for b in range(len(PROMPTS)) for _ in range(G)]
    assert r.group_size == G and r.num_prompts == len(PROMPTS)
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    for i in range(N):
        b = int(r.prompt_index[i])
        real = r.prompt_ids[i][r.prompt_mask[i].bool()].tolist()
        assert real == tokenizer(PROMPTS[b])["input_ids"]  # left-padded prompt of its own prompt
        assert r.prompt_mask[i].tolist() == sorted(r.prompt_mask[i].tolist())  # zeros first
        ids, m = r.completion_ids[i].tolist(), r.completion_mask[i].tolist()
        if eos in ids:
            k = ids.index(eos)
            assert m == [1] * (k + 1) + [0] * (T - k - 1) and not r.truncated[i]
            assert all(t == pad for t in ids[k + 1:])
        else:
            assert m == [1] * T and r.truncated[i]
        assert r.texts[i] == tokenizer.decode([t for t, mm in zip(ids, m) if mm], skip_special_tokens=True)
        assert "<" not in r.texts[i]
    # with ~1/22 EOS per step both cases occur among the 30 rows
    assert r.truncated.any() and (~r.truncated).any()
    assert torch.equal(r.completion_lengths, r.completion_mask.sum(1))


def test_completion_mask_from_ids_closed_cases():
    ids = torch.tensor([[5, 2, 0, 0], [2, 0, 0, 0], [5, 6, 7, 8], [5, 6, 7, 2], [9, 2, 2, 0]])
    mask, trunc = completion_mask_from_ids(ids, [2])
    assert mask.tolist() == [[1, 1, 0, 0], [1, 0, 0, 0], [1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 0, 0]]
    assert trunc.tolist() == [False, False, True, False, False]
    mask2, _ = completion_mask_from_ids(torch.tensor([[5, 7, 2]]), [2, 7])  # several EOS ids (chat models)
    assert mask2.tolist() == [[1, 1, 0]]


def test_row_seed_is_deterministic_and_distinct():
    assert row_seed(3, 1) == row_seed(3, 1)
    seeds = {row_seed(s, g) for s in range(50) for g in range(50)}
    assert len(seeds) == 2500 and all(0 <= s < 2**63 for s in seeds)
    with pytest.raises(ValueError):
        row_seed(-1, 0)


@pytest.mark.parametrize("p", [0.05, 0.3, 0.5, 0.8, 0.95, 1.0])
def test_top_p_filter_matches_brute_force(p):
    g = torch.Generator().manual_seed(int(p * 100))
    logits = torch.randn(8, 13, generator=g) * 2
    out = top_p_filter(logits, p)
    for row, orow in zip(logits, out):
        probs = row.softmax(-1).tolist()
        order = sorted(range(13), key=lambda k: -probs[k])
        kept, cum = set(), 0.0
        for k in order:  # smallest most-likely prefix whose mass reaches p
            kept.add(k)
            cum += probs[k]
            if cum >= p:
                break
        assert {k for k in range(13) if math.isfinite(orow[k])} == kept
        assert torch.equal(orow[list(kept)], row[list(kept)])


def _first_token_counts(model, tokenizer, prompt, n, temperature, top_p):
    r = sample_groups(model, tokenizer, [prompt], n, seeds=[2024], temperature=temperature, top_p=top_p,
                      max_new_tokens=1)
    return torch.bincount(r.completion_ids[:, 0], minlength=len(tokenizer)).double()


def _exact_probs(model, tokenizer, prompt, temperature, top_p):
    ids = torch.tensor([tokenizer(prompt)["input_ids"]])
    with torch.no_grad():
        logits = model(ids).logits[0, -1].double() / temperature
    if top_p < 1:
        logits = top_p_filter(logits[None], top_p)[0]
    return logits.softmax(-1)


def _max_z(counts, probs):
    n = counts.sum()
    se = torch.sqrt(n * probs * (1 - probs)).clamp(min=1e-12)
    z = (counts - n * probs).abs() / se
    return float(z[probs > 0].max()), bool((counts[probs == 0] == 0).all())


@pytest.mark.parametrize("temperature,top_p", [(1.0, 1.0), (0.7, 1.0), (1.6, 1.0), (1.0, 0.8), (1.3, 0.6)])
def test_next_token_frequencies_match_tempered_top_p_softmax(peaked_model, tokenizer, temperature, top_p):
    """Gumbel-max sampling: empirical first-token frequencies over 2000 rows agree with
    softmax(logits / T) restricted to the top-p set within 4 SE per token (22 tokens: a
    false alarm has probability < 22 * 6.3e-5 = 1.4e-3); tokens outside the set never occur."""
    prompt = "12+7-3="
    probs = _exact_probs(peaked_model, tokenizer, prompt, temperature, top_p)
    assert probs.max() > 0.2  # a peaked target, not ~uniform
    counts = _first_token_counts(peaked_model, tokenizer, prompt, 2000, temperature, top_p)
    zmax, outside_never = _max_z(counts, probs)
    assert zmax < 4.0, f"max |z| = {zmax:.2f}"
    assert outside_never
    # power check: the same counts are rejected against the untempered / untruncated distribution
    wrong = _exact_probs(peaked_model, tokenizer, prompt, 1.0 if temperature != 1.0 else 2.0, 1.0)
    assert _max_z(counts, wrong)[0] > 4.0


def test_bad_arguments(model, tokenizer):
    with pytest.raises(ValueError, match="one seed per prompt"):
        sample_groups(model, tokenizer, PROMPTS, 2, seeds=[1])
    with pytest.raises(TypeError, match="one string"):
        sample_groups(model, tokenizer, "1+2=", 2, seeds=[1])
    with pytest.raises(ValueError, match="temperature"):
        sample_groups(model, tokenizer, PROMPTS[:1], 2, seeds=[1], temperature=0)
    with pytest.raises(ValueError, match="top_p"):
        sample_groups(model, tokenizer, PROMPTS[:1], 2, seeds=[1], top_p=1.5)
    with pytest.raises(ValueError, match="group_size"):
        sample_groups(model, tokenizer, PROMPTS[:1], 0, seeds=[1])


@pytest.mark.parametrize("batch_size,kw", [(None, {}), (7, dict(temperature=0.7, top_p=0.9))])
def test_shared_prompt_prefill_gives_the_same_tokens(model, tokenizer, batch_size, kw):
    """Prefilling each prompt once and sharing its cache across the group changes no token.

    batch_size=7 with G=4 cuts groups across ``generate`` calls (runs of 1..4 rows).
    """
    G = 4
    args = dict(seeds=SEEDS, max_new_tokens=8, batch_size=batch_size, **kw)
    plain = sample_groups(model, tokenizer, PROMPTS, G, share_prompts=False, **args)
    prefill_rows: list[int] = []  # the shared prefill is the only forward with more than one input column per row
    hook = model.model.register_forward_pre_hook(
        lambda mod, a, k: prefill_rows.append(k["input_ids"].shape[0]) if k["input_ids"].shape[1] > 1 else None,
        with_kwargs=True
    )
    try:
        shared = sample_groups(model, tokenizer, PROMPTS, G, **args)
    finally:
        hook.remove()
    # distinct prompts per generate call (rows 0-6, 7-13, 14-19 hold 2, 3, 2 prompts); generate itself then runs 1
    # column
    assert prefill_rows == ([len(PROMPTS)] if batch_size is None else [2, 3, 2])
    assert torch.equal(shared.completion_ids, plain.completion_ids)
    assert torch.equal(shared.completion_mask, plain.completion_mask) and shared.texts == plain.texts
    assert torch.equal(shared.prompt_ids, plain.prompt_ids)
    assert len(set(plain.texts)) > len(plain.texts) // 2  # real, varied samples
