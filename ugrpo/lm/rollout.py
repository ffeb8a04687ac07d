"""The layout every sampling backend returns: :class:`Rollout` (token ids, masks, group sizes, prompt index).

:func:`rollout_from_completions` builds it from generated rows (the HF backend :mod:`ugrpo.lm.sampling` and the vLLM
backend :mod:`ugrpo.lm.vllm_engine` both end there), so everything after sampling (log-probs recomputed by the
training model, scores, advantages) sees one layout whichever backend drew the tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ["Rollout", "completion_mask_from_ids", "rollout_from_completions", "concat_rollouts", "group_chunks"]


@dataclass(frozen=True)
class Rollout:
    """The completions of ``len(prompts)`` prompts, ``group_sizes[b]`` for prompt b, in prompt-major order.

    Rows ``offset_b .. offset_b + G_b - 1`` belong to prompt ``b`` (offset_b = G_0 + ... + G_{b-1}); N = sum_b G_b
    rows in all. With equal sizes (the usual case) rows ``b*G .. b*G+G-1`` belong to prompt ``b``.

    Attributes
    ----------
    prompt_ids : Tensor (N, P) long
        Prompt tokens, left-padded with ``pad_token_id`` (row b*G+g repeats prompt b).
    prompt_mask : Tensor (N, P) long
        1 on real prompt tokens, 0 on padding.
    completion_ids : Tensor (N, T) long
        Generated tokens, right-padded with ``pad_token_id`` after the first EOS.
    completion_mask : Tensor (N, T) long
        1 up to and including the first EOS (all ones up to ``max_new_tokens`` if none).
    texts : list[str]
        The N completions decoded with ``skip_special_tokens=True`` (EOS and padding dropped).
    truncated : Tensor (N,) bool
        True where no EOS was generated within ``max_new_tokens``.
    prompt_index : Tensor (N,) long
        ``b`` for each row: ``prompt_index = arange(B).repeat_interleave(group_sizes)``.
    group_size : int
        G when every prompt has G rows; for ragged groups the rounded mean N // B (only a hint for chunking:
        code that needs each group's size reads ``group_sizes``).
    group_sizes : Tensor (B,) long or None
        G_b per prompt; None (a hand-built equal-group Rollout) means ``group_size`` for every prompt.
    """

    prompt_ids: Tensor
    prompt_mask: Tensor
    completion_ids: Tensor
    completion_mask: Tensor
    texts: list[str]
    truncated: Tensor
    prompt_index: Tensor
    group_size: int
    group_sizes: Tensor | None = None

    def __post_init__(self) -> None:
        if self.group_sizes is None:
            object.__setattr__(self, "group_sizes",
                               torch.full((len(self.texts) // self.group_size,), self.group_size, dtype=torch.long))

    @property
    def num_prompts(self) -> int:
        return int(self.group_sizes.numel())

    @property
    def ragged(self) -> bool:
        """True when the prompts have different group sizes."""
        return bool((self.group_sizes != self.group_size).any())

    def first_samples(self, g: int) -> Rollout:
        """The equal-group Rollout of every prompt's first ``g`` rows (all prompts need G_b >= g).

        A prompt's first g samples are g iid draws from pi(.|x) whatever its G_b (the sizes are fixed before
        sampling), so the result is a valid (B, g) pilot of the same prompts (docs/allocation.md).
        """
        if int(self.group_sizes.min()) < g:
            raise ValueError(f"first_samples({g}): a prompt has only {int(self.group_sizes.min())} rows")
        rows = self.first_rows(g)
        return Rollout(self.prompt_ids[rows], self.prompt_mask[rows], self.completion_ids[rows],
                       self.completion_mask[rows], [self.texts[i] for i in rows.tolist()], self.truncated[rows],
                       torch.arange(self.num_prompts).repeat_interleave(g), g)

    def first_rows(self, g: int) -> Tensor:
        """(B*g,) row indices of every prompt's first ``g`` rows, prompt-major (see :meth:`first_samples`)."""
        offsets = torch.cumsum(self.group_sizes, 0) - self.group_sizes
        return (offsets[:, None] + torch.arange(g)[None, :]).reshape(-1)

    @property
    def completion_lengths(self) -> Tensor:
        """(N,) number of completion tokens counted by the mask (EOS included)."""
        return self.completion_mask.sum(dim=1)


def completion_mask_from_ids(completion_ids: Tensor, eos_ids: Sequence[int]) -> tuple[Tensor, Tensor]:
    """Mask up to and including the first EOS, and whether a row has no EOS.

    Returns
    -------
    mask : Tensor (N, T) long
    truncated : Tensor (N,) bool
    """
    is_eos = torch.isin(completion_ids, torch.tensor(list(eos_ids), device=completion_ids.device))  # (N, T)
    has_eos = is_eos.any(dim=1)
    T = completion_ids.shape[1]
    first = torch.where(has_eos, is_eos.float().argmax(dim=1), torch.full_like(has_eos, T, dtype=torch.long))
    pos = torch.arange(T, device=completion_ids.device).unsqueeze(0)  # (1, T)
    mask = (pos <= first.unsqueeze(1)).long() if T else torch.zeros_like(completion_ids)
    return mask, ~has_eos


def rollout_from_completions(tokenizer, prompt_ids: Tensor, prompt_mask: Tensor, sizes: Sequence[int],
                             completion_ids: Tensor, eos_ids: Sequence[int]) -> Rollout:
    """The :class:`Rollout` of ``sizes[b]`` completions of prompt b (``prompt_ids`` (B, P) left-padded), given the
    N = sum_b G_b generated rows ``completion_ids`` (N, T) in prompt-major order (any padding after the first EOS).

    Every backend ends here, so the layout (masks up to and including the first EOS, padding, texts) is one."""
    reps = torch.tensor([int(g) for g in sizes], dtype=torch.long)  # (B,)
    B, N = len(reps), int(reps.sum())
    if completion_ids.shape[0] != N:
        raise ValueError(f"rollout_from_completions: {completion_ids.shape[0]} rows for group sizes summing to {N}")
    completion_mask, truncated = completion_mask_from_ids(completion_ids, eos_ids)
    completion_ids = completion_ids.masked_fill(completion_mask == 0, tokenizer.pad_token_id)
    texts = tokenizer.batch_decode(
        [ids[m.bool()].tolist() for ids, m in zip(completion_ids, completion_mask)], skip_special_tokens=True
    )
    return Rollout(
        prompt_ids=prompt_ids.repeat_interleave(reps, dim=0),  # (N, P)
        prompt_mask=prompt_mask.repeat_interleave(reps, dim=0),
        completion_ids=completion_ids,
        completion_mask=completion_mask,
        texts=list(texts),
        truncated=truncated,
        prompt_index=torch.arange(B).repeat_interleave(reps),
        group_size=N // B,
        group_sizes=reps,
    )


def concat_rollouts(pieces: Sequence[tuple[Rollout, Tensor]], pad_id: int) -> Rollout:
    """One rollout from whole groups of others: ``pieces`` = (rollout, its rows of one group), in order.

    Prompts are re-padded on the left and completions on the right to the widest piece (masks say which
    tokens are real, so log-probs and samples are unchanged).
    """
    P = max(int(r.prompt_ids.shape[1]) for r, _ in pieces)
    T = max(int(r.completion_ids.shape[1]) for r, _ in pieces)
    cols = {"prompt_ids": [], "prompt_mask": [], "completion_ids": [], "completion_mask": [], "truncated": []}
    texts: list[str] = []
    for r, rows in pieces:
        p, t = r.prompt_ids.shape[1], r.completion_ids.shape[1]
        cols["prompt_ids"].append(torch.nn.functional.pad(r.prompt_ids[rows], (P - p, 0), value=pad_id))
        cols["prompt_mask"].append(torch.nn.functional.pad(r.prompt_mask[rows], (P - p, 0), value=0))
        cols["completion_ids"].append(torch.nn.functional.pad(r.completion_ids[rows], (0, T - t), value=pad_id))
        cols["completion_mask"].append(torch.nn.functional.pad(r.completion_mask[rows], (0, T - t), value=0))
        cols["truncated"].append(r.truncated[rows])
        texts += [r.texts[int(i)] for i in rows]
    sizes = torch.tensor([len(rows) for _, rows in pieces], dtype=torch.long)
    return Rollout(**{k: torch.cat(v) for k, v in cols.items()}, texts=texts,
                   prompt_index=torch.arange(len(pieces)).repeat_interleave(sizes),
                   group_size=int(sizes.sum()) // len(pieces), group_sizes=sizes)


def group_chunks(rows: Tensor, size: int, owner: Tensor) -> list[Tensor]:
    """``rows`` in chunks of at most ``size``, packing whole groups greedily (``owner``: the group of each row,
    consecutive rows of a group together); a group larger than ``size`` is split into pieces of ``size``.

    >>> [c.tolist() for c in group_chunks(torch.arange(7), 4, torch.tensor([0, 0, 1, 1, 1, 2, 2]))]
    [[0, 1], [2, 3, 4], [5, 6]]
    """
    starts = [0] + [i for i in range(1, len(rows)) if owner[i] != owner[i - 1]] + [len(rows)]
    out: list[Tensor] = []
    lo = 0
    for a, b in zip(starts[:-1], starts[1:]):  # group [a, b)
        if b - lo > size and a > lo:  # the group does not fit: close the current chunk
            out.append(rows[lo:a])
            lo = a
        while b - lo > size:  # a group larger than a micro-batch
            out.append(rows[lo:lo + size])
            lo += size
    if lo < len(rows):
        out.append(rows[lo:])
    return out
