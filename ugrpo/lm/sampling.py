"""G completions per prompt, reproducible per (prompt seed, row), with Hugging Face ``generate``.

How a token is drawn (Gumbel-max trick)
---------------------------------------
``generate`` runs greedily (``do_sample=False``) with one extra ``LogitsProcessor``,
:class:`GumbelNoiseProcessor`, that at every step and for every row r

1. scales the next-token logits by ``1 / temperature``,
2. keeps the smallest set of most likely tokens whose probability reaches ``top_p``
   (the token that crosses ``top_p`` is kept; the rest get ``-inf``), and
3. adds i.i.d. standard Gumbel noise ``-log(-log U)`` drawn from a ``torch.Generator`` that
   belongs to row r alone and is seeded from ``(seed of its prompt, g)``.

The argmax of ``logits / T + Gumbel`` is an exact sample from ``softmax(logits / T)``
restricted to the top-p set. Because each row owns its generator and draws exactly one
vocabulary-sized block of uniforms per step, the completion of (prompt seed s, row g)
does not depend on which other rows share the batch, their order, the batch size or the
process: a multi-process trainer that shards prompts gets the samples of a 1-process run.

Two caveats, stated rather than hidden:

* the noise stream depends on the device of the model (CPU and CUDA generators differ), so
  "the same sample" means on the same kind of device;
* logits of a row are computed in a batch with other rows and left padding, which changes
  them by float rounding (~1e-6); an argmax can flip only when two perturbed logits tie
  within that rounding, which for float32 is of probability ~1e-6 per token.

Shared prompts: within a ``generate`` call, each run of rows with the same prompt (the G rows
of a group) prefills ``prompt[:, :-1]`` once; the key/value cache is expanded to one entry per
row and handed to ``generate``, which then runs the last prompt token and the new tokens. The
logits are those of the plain path up to float rounding (same caveat as above), so the tokens
are the same (tested); ``share_prompts=False`` runs the plain path.

The sampled distribution is ``pi_theta`` tempered by ``T`` (and truncated by top-p). With
``T = 1`` and ``top_p = 1`` it is exactly the policy of the paper's Algorithm 1 (on-policy).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor
from transformers import DynamicCache, GenerationConfig, LogitsProcessor, LogitsProcessorList

from ugrpo.lm.rollout import Rollout, completion_mask_from_ids, concat_rollouts, rollout_from_completions

# the layout lives in ugrpo.lm.rollout; re-exported here, where callers have always imported it from
__all__ = ["Rollout", "GumbelNoiseProcessor", "row_seed", "sample_groups", "completion_mask_from_ids", "top_p_filter",
           "concat_rollouts", "eos_token_ids", "encode_prompts", "generate_rows", "rollout_from_completions"]


def row_seed(seed: int, g: int) -> int:
    """The 63-bit seed of the noise generator of row ``g`` of the prompt with seed ``seed``.

    Mixed with numpy's ``SeedSequence`` so nearby (seed, g) pairs give unrelated streams.
    """
    if seed < 0 or g < 0:
        raise ValueError(f"row_seed: seed={seed} and g={g} must be >= 0")
    state = np.random.SeedSequence([int(seed), int(g)]).generate_state(2, dtype=np.uint32)
    return int((int(state[0]) << 31) ^ int(state[1])) & ((1 << 63) - 1)


class GumbelNoiseProcessor(LogitsProcessor):
    """Temperature, top-p and per-row Gumbel noise; the greedy argmax is then a sample.

    Parameters
    ----------
    generators : list[torch.Generator]
        One generator per row of the batch, on the device of the logits.
    temperature : float
        > 0; logits are divided by it.
    top_p : float
        In (0, 1]; nucleus truncation before the noise is added (1 = none).
    """

    def __init__(self, generators: list[torch.Generator], *, temperature: float = 1.0, top_p: float = 1.0):
        self.generators = generators
        self.temperature = float(temperature)
        self.top_p = float(top_p)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if scores.shape[0] != len(self.generators):
            raise RuntimeError(f"GumbelNoiseProcessor: batch has {scores.shape[0]} rows, {len(self.generators)} "
                               "generators")
        logits = scores.float() / self.temperature  # (N, V)
        if self.top_p < 1.0:
            logits = top_p_filter(logits, self.top_p)
        u = torch.stack([torch.rand(logits.shape[1], generator=gen, device=logits.device) for gen in self.generators])
        u = u.clamp_(min=torch.finfo(u.dtype).tiny, max=1.0 - torch.finfo(u.dtype).eps)
        gumbel = -torch.log(-torch.log(u))  # (N, V) standard Gumbel
        return logits + gumbel


def top_p_filter(logits: Tensor, top_p: float) -> Tensor:
    """Set to ``-inf`` every logit outside the smallest top set whose probability reaches ``top_p``.

    The token whose cumulative probability first reaches ``top_p`` is kept (as in HF's
    ``TopPLogitsWarper`` and the nucleus-sampling paper), so the most likely token always is.
    """
    sorted_logits, order = torch.sort(logits, dim=-1, descending=True)  # (N, V)
    cum = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
    remove_sorted = (cum - sorted_logits.softmax(dim=-1)) >= top_p  # mass before this token already >= p
    remove = remove_sorted.scatter(-1, order, remove_sorted)
    return logits.masked_fill(remove, float("-inf"))


def eos_token_ids(tokenizer, model) -> list[int]:
    """The ids that end a completion: the model's ``generation_config.eos_token_id`` and the tokenizer's, sorted."""
    ids: list[int] = []
    for src in (getattr(model, "generation_config", None), tokenizer):
        e = getattr(src, "eos_token_id", None)
        if e is None:
            continue
        ids.extend([e] if isinstance(e, int) else list(e))
    if not ids:
        raise ValueError("sample_groups: neither the tokenizer nor the model defines eos_token_id; set "
                         "tokenizer.eos_token")
    return sorted(set(ids))


def _group_sizes(group_size: int | Sequence[int], B: int) -> list[int]:
    """One G_b per prompt from an int (every prompt) or a sequence of B ints; each must be >= 1."""
    if isinstance(group_size, (int, np.integer)):
        sizes = [int(group_size)] * B
    else:
        sizes = [int(g) for g in group_size]
        if len(sizes) != B:
            raise ValueError(f"sample_groups: got {len(sizes)} group sizes for {B} prompts; pass one G_b per prompt "
                             "or one int")
    if min(sizes) < 1:
        raise ValueError(f"sample_groups: group_size={group_size} must be >= 1 for every prompt")
    return sizes


def _check_args(prompts, group_size, seeds, temperature, top_p, max_new_tokens, batch_size) -> None:
    if isinstance(prompts, str):
        raise TypeError("sample_groups: prompts must be a sequence of strings, got one string; wrap it in a list")
    if len(prompts) == 0:
        raise ValueError("sample_groups: prompts is empty")
    _group_sizes(group_size, len(prompts))
    if len(seeds) != len(prompts):
        raise ValueError(f"sample_groups: got {len(seeds)} seeds for {len(prompts)} prompts; pass one seed per prompt")
    if any(int(s) < 0 for s in seeds):
        raise ValueError("sample_groups: seeds must be >= 0")
    if not temperature > 0:
        raise ValueError(f"sample_groups: temperature={temperature} must be > 0 (use a small value such as 1e-3 for "
                         "near-greedy)")
    if not 0 < top_p <= 1:
        raise ValueError(f"sample_groups: top_p={top_p} must be in (0, 1]")
    if max_new_tokens < 1:
        raise ValueError(f"sample_groups: max_new_tokens={max_new_tokens} must be >= 1")
    if batch_size is not None and batch_size < 1:
        raise ValueError(f"sample_groups: batch_size={batch_size} must be >= 1 or None (all rows at once)")


@torch.no_grad()
def sample_groups(
    model,
    tokenizer,
    prompts: Sequence[str],
    group_size: int | Sequence[int],
    *,
    seeds: Sequence[int],
    temperature: float = 1.0,
    top_p: float = 1.0,
    max_new_tokens: int = 16,
    batch_size: int | None = None,
    add_special_tokens: bool = True,
    share_prompts: bool = True,
) -> Rollout:
    """Sample ``group_size`` completions for each prompt (Algorithm 1, "generate G outputs").

    Parameters
    ----------
    model : transformers.PreTrainedModel
        A causal LM (or a peft wrapper of one); used in eval mode, under ``no_grad``.
    tokenizer : PreTrainedTokenizerBase
        With ``pad_token_id`` and ``eos_token_id`` set; prompts are left-padded.
    prompts : sequence of str, length B
        Already formatted (see :func:`ugrpo.lm.loading.format_prompt`).
    group_size : int or sequence of B ints
        G >= 1 completions per prompt, or G_b for prompt b (ragged groups, docs/allocation.md).
    seeds : sequence of int, length B
        One seed per prompt; row g of prompt b draws its noise from ``row_seed(seeds[b], g)``, so the first
        G_b completions of a prompt are the same whatever its G_b (and whatever the other prompts get).
    temperature, top_p : float
        The sampled distribution is softmax(logits / temperature) restricted to the top-p set.
    max_new_tokens : int
        Completions stop at EOS or after this many tokens (then ``truncated`` is True).
    batch_size : int or None
        Rows (not prompts) per ``generate`` call; None = all N rows at once. Does not change
        the samples, only memory and speed.
    add_special_tokens : bool
        Passed to the tokenizer (the tiny tokenizer prepends ``<bos>``).
    share_prompts : bool
        True (default): prefill each prompt once per ``generate`` call and share its cache
        across the rows of its group; False: the plain path. Same samples (see the module
        docstring).

    Returns
    -------
    Rollout
        N = sum_b G_b rows in prompt-major order; see :class:`Rollout`.
    """
    _check_args(prompts, group_size, seeds, temperature, top_p, max_new_tokens, batch_size)
    if tokenizer.pad_token_id is None:
        raise ValueError("sample_groups: tokenizer.pad_token_id is None; load the policy with load_policy (sets it)")
    eos_ids = eos_token_ids(tokenizer, model)
    B, sizes = len(prompts), _group_sizes(group_size, len(prompts))
    ids, mask = encode_prompts(tokenizer, prompts, add_special_tokens=add_special_tokens)  # (B, P)
    reps = torch.tensor(sizes, dtype=torch.long)  # (B,)
    row_seeds = [row_seed(int(seeds[b]), g) for b in range(B) for g in range(sizes[b])]
    completion_ids = generate_rows(model, ids.repeat_interleave(reps, dim=0), mask.repeat_interleave(reps, dim=0),
                                   row_seeds, temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens,
                                   eos_ids=eos_ids, pad_id=tokenizer.pad_token_id, batch_size=batch_size,
                                   share_prompts=share_prompts)  # (N, T)
    return rollout_from_completions(tokenizer, ids, mask, sizes, completion_ids, eos_ids)


def encode_prompts(tokenizer, prompts: Sequence[str], *, add_special_tokens: bool = True) -> tuple[Tensor, Tensor]:
    """(B, P) prompt ids and mask, left-padded with ``pad_token_id`` (the caller's tokenizer is not changed)."""
    enc = tokenizer(list(prompts), padding=True, return_tensors="pt", add_special_tokens=add_special_tokens)
    if tokenizer.padding_side != "left":  # re-pad on the left without touching the caller's tokenizer
        enc = _left_pad(enc["input_ids"], enc["attention_mask"], tokenizer.pad_token_id)
    return enc["input_ids"], enc["attention_mask"]


@torch.no_grad()
def generate_rows(model, prompt_ids: Tensor, prompt_mask: Tensor, row_seeds: Sequence[int], *, temperature: float,
                  top_p: float, max_new_tokens: int, eos_ids: Sequence[int], pad_id: int,
                  batch_size: int | None = None, share_prompts: bool = True) -> Tensor:
    """``(N, T)`` generated tokens of N left-padded prompt rows, row i's noise from a generator seeded
    ``row_seeds[i]`` (module docstring); rows end at EOS or after ``max_new_tokens``, padded with ``pad_id``."""
    N, device = prompt_ids.shape[0], next(model.parameters()).device
    gen_config = GenerationConfig(do_sample=False, max_new_tokens=max_new_tokens, pad_token_id=pad_id,
                                  eos_token_id=list(eos_ids), num_beams=1, repetition_penalty=1.0,
                                  no_repeat_ngram_size=0, min_new_tokens=0)
    step = N if batch_size is None else batch_size
    was_training = model.training
    model.eval()
    # generate() fills every unset option from model.generation_config (e.g. a hub model's
    # repetition_penalty=1.05), which would change the distribution: swap in a neutral one.
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    saved_config = base.generation_config
    base.generation_config = GenerationConfig(pad_token_id=pad_id, eos_token_id=list(eos_ids))
    chunks: list[Tensor] = []
    try:
        for start in range(0, N, step):
            sl = slice(start, min(start + step, N))
            ids, mask = _strip_left(prompt_ids[sl], prompt_mask[sl])
            gens = [torch.Generator(device=device).manual_seed(int(s)) for s in row_seeds[sl]]
            proc = GumbelNoiseProcessor(gens, temperature=temperature, top_p=top_p)
            ids, mask = ids.to(device), mask.to(device)
            extra = {"cache": _shared_prefill(model, ids, mask)} if share_prompts else {}
            out = model.generate(
                input_ids=ids,
                attention_mask=mask,
                generation_config=gen_config,
                logits_processor=LogitsProcessorList([proc]),
                **{k: v for k, v in extra.items() if v is not None},
            )
            chunks.append(out[:, ids.shape[1]:].cpu())  # (n, t_chunk)
    finally:
        base.generation_config = saved_config
        model.train(was_training)
    completion_ids = torch.full((N, max(c.shape[1] for c in chunks)), pad_id, dtype=torch.long)
    row = 0
    for c in chunks:
        completion_ids[row:row + c.shape[0], : c.shape[1]] = c
        row += c.shape[0]
    return completion_ids


def _shared_prefill(model, ids: Tensor, mask: Tensor) -> DynamicCache | None:
    """The cache of ``ids[:, :-1]`` computed once per run of identical consecutive rows, one entry per row.

    None when no prompt repeats or the prompts are one token long (nothing to share).
    """
    n, P = ids.shape
    if P < 2 or n < 2:
        return None
    same = (ids[1:] == ids[:-1]).all(dim=1) & (mask[1:] == mask[:-1]).all(dim=1)  # (n-1,)
    starts = torch.cat([torch.ones(1, dtype=torch.bool, device=ids.device), ~same])  # (n,)
    if int(starts.sum()) == n:
        return None
    run = starts.long().cumsum(dim=0) - 1  # (n,) run index of each row
    first_row = torch.nonzero(starts).squeeze(1)  # (u,)
    u_ids, u_mask = ids[first_row, :-1], mask[first_row, :-1].long()  # (u, P-1)
    cache = DynamicCache(config=model.config)
    model(input_ids=u_ids, attention_mask=u_mask, position_ids=(u_mask.cumsum(dim=1) - 1).clamp(min=0), cache=cache,
          use_cache=True,
          logits_to_keep=1)
    if cache.get_seq_length() != P - 1:  # the model did not fill the cache: plain path
        return None
    cache.batch_select_indices(run)  # (u, ...) -> (n, ...)
    return cache


def _left_pad(ids: Tensor, mask: Tensor, pad_id: int) -> dict[str, Tensor]:
    """Move the padding of right-padded rows to the left."""
    lengths = mask.sum(dim=1)
    P = ids.shape[1]
    out_ids = torch.full_like(ids, pad_id)
    out_mask = torch.zeros_like(mask)
    for i, n in enumerate(lengths.tolist()):
        out_ids[i, P - n:] = ids[i, mask[i].bool()]
        out_mask[i, P - n:] = 1
    return {"input_ids": out_ids, "attention_mask": out_mask}


def _strip_left(ids: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """Drop the columns that are padding in every row of a chunk (smaller, same result)."""
    keep = int(mask.sum(dim=1).max())
    return ids[:, ids.shape[1] - keep:], mask[:, mask.shape[1] - keep:]
