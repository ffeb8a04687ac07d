"""Per-sample sequence scores W_n = grad_theta log pi(Y_n | x_n) of a language model (paper eq. 3, 5).

``W_n = sum_t grad log pi(y_nt | x_n, y_n,<t)`` is the gradient of the row sum of
:func:`ugrpo.lm.logprobs.completion_logprobs`. The variance components c1, c2, c3 of Theorem 7
(:mod:`ugrpo.stats.components`) need only inner products ``<W_i, W_j>``; this module gives the
exact scores (N, D) for small models or a parameter subset, and :mod:`ugrpo.lm.sketch` gives
random projections (N, k) with unbiased inner products for large ones (docs/scores.md).

Which parameters (``ScoreSpec``)
--------------------------------
* ``"trainable"`` (default): every parameter with ``requires_grad`` (for a peft model: the adapters);
* ``"all"``: every parameter, frozen or not;
* ``"lora"``: parameters whose name contains ``lora_`` (peft LoRA A/B matrices);
* ``"last_layers"``: the parameters of the last ``n_layers`` transformer blocks (the blocks are the
  ``nn.ModuleList`` holding the most parameters, ``model.model.layers`` for HF decoders);
* ``"modules"``: parameters whose name matches one of the ``patterns`` (``fnmatch`` globs, e.g.
  ``"*.layers.3.*"`` or ``"*q_proj.weight"``).

Tied weights: a tensor shared by several modules (``tie_word_embeddings``: the input embedding
*is* the output projection) is one parameter, listed once under its first name
(``model.embed_tokens.weight``); selecting it under either name (``"lm_head.weight"`` too) selects
the shared tensor, and its score is the gradient of the shared tensor, i.e. the sum of the
contributions of *every* use (embedding lookup and output logits), as in training.

Frozen parameters can be selected (``"all"``, ``"modules"``, ...): their ``requires_grad`` is
switched on for the computation and restored afterwards; the model is otherwise not changed and
no ``.grad`` is written.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn
from tqdm.auto import tqdm

from ugrpo.lm.logprobs import completion_logprobs

__all__ = ["ScoreSpec", "ScoreBatch", "SelectedParams", "select_parameters", "as_score_batch", "per_sample_scores"]

Selection = Literal["trainable", "all", "lora", "last_layers", "modules"]


@dataclass(frozen=True)
class ScoreSpec:
    """Which parameters theta the scores W = grad_theta log pi(Y|x) are taken with respect to."""

    select: Selection = "trainable"
    """"trainable" | "all" | "lora" | "last_layers" | "modules" (see the module docstring)."""
    n_layers: int = 1
    """number of final transformer blocks for select="last_layers"."""
    patterns: tuple[str, ...] = ()
    """fnmatch globs over parameter names for select="modules"."""

    def __post_init__(self):
        if self.select not in ("trainable", "all", "lora", "last_layers", "modules"):
            raise ValueError(
                f"ScoreSpec.select={self.select!r} is not one of 'trainable', 'all', 'lora', 'last_layers', 'modules'"
            )
        if isinstance(self.n_layers, bool) or not isinstance(self.n_layers, int) or self.n_layers < 1:
            raise ValueError(f"ScoreSpec.n_layers={self.n_layers!r} must be an int >= 1")
        if isinstance(self.patterns, str) or not all(isinstance(p, str) and p for p in self.patterns):
            raise TypeError(f"ScoreSpec.patterns={self.patterns!r} must be a tuple of non-empty glob strings, not one "
                            "string")
        if self.select == "modules" and not self.patterns:
            raise ValueError("ScoreSpec(select='modules') needs patterns, e.g. patterns=('*.layers.3.*',)")


@dataclass(frozen=True)
class SelectedParams:
    """The parameters of a :class:`ScoreSpec`, in ``named_parameters`` order (tied tensors once).

    ``names[i]`` is the first name of ``params[i]``; the columns of :func:`per_sample_scores` are
    ``params[0].flatten(), params[1].flatten(), ...``; ``offsets[i]`` is where ``params[i]`` starts.
    """

    names: tuple[str, ...]
    params: tuple[nn.Parameter, ...]
    offsets: tuple[int, ...]
    dim: int


@dataclass(frozen=True)
class ScoreBatch:
    """The four tensors of a batch of completions (as in :class:`ugrpo.lm.sampling.Rollout`), N rows."""

    prompt_ids: Tensor
    prompt_mask: Tensor
    completion_ids: Tensor
    completion_mask: Tensor

    @property
    def n(self) -> int:
        return int(self.completion_ids.shape[0])

    def rows(self, sl: slice) -> ScoreBatch:
        return ScoreBatch(self.prompt_ids[sl], self.prompt_mask[sl], self.completion_ids[sl], self.completion_mask[sl])


def as_score_batch(batch) -> ScoreBatch:
    """A :class:`ScoreBatch` from a Rollout-like object or a tuple (prompt_ids, prompt_mask, completion_ids,
    completion_mask)."""
    if isinstance(batch, ScoreBatch):
        return batch
    names = ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask")
    if all(hasattr(batch, a) for a in names):
        return ScoreBatch(*(getattr(batch, a) for a in names))
    if isinstance(batch, (tuple, list)) and len(batch) == 4 and all(isinstance(t, Tensor) for t in batch):
        return ScoreBatch(*batch)
    raise TypeError(
        f"expected a Rollout (or any object with {', '.join(names)}) or a tuple of those 4 tensors; got "
        f"{type(batch).__name__}"
    )


def _blocks(model: nn.Module) -> nn.ModuleList:
    lists = [m for m in model.modules() if isinstance(m, nn.ModuleList) and len(m) > 0]
    if not lists:
        raise ValueError(f"ScoreSpec(select='last_layers'): {type(model).__name__} has no nn.ModuleList of blocks; "
                         "use select='modules'")
    return max(lists, key=lambda m: sum(p.numel() for p in m.parameters()))


def select_parameters(model: nn.Module, spec: ScoreSpec = ScoreSpec()) -> SelectedParams:
    """The parameters of ``model`` selected by ``spec`` (see the module docstring).

    Raises
    ------
    ValueError
        When nothing is selected (the message lists some parameter names to choose from).
    """
    by_id: dict[int, str] = {}  # first name of each tensor
    for name, p in model.named_parameters(remove_duplicate=False):
        by_id.setdefault(id(p), name)
    first = dict(model.named_parameters())  # first name -> tensor, tied tensors once
    chosen: set[int] = set()
    if spec.select == "trainable":
        chosen = {id(p) for p in first.values() if p.requires_grad}
    elif spec.select == "all":
        chosen = {id(p) for p in first.values()}
    elif spec.select == "lora":
        chosen = {id(p) for n, p in model.named_parameters(remove_duplicate=False) if "lora_" in n}
    elif spec.select == "last_layers":
        blocks = _blocks(model)
        if spec.n_layers > len(blocks):
            raise ValueError(f"ScoreSpec.n_layers={spec.n_layers} but the model has {len(blocks)} transformer blocks")
        chosen = {id(p) for blk in list(blocks)[-spec.n_layers:] for p in blk.parameters()}
    else:
        chosen = {
            id(p) for n, p in model.named_parameters(remove_duplicate=False) if any(fnmatch.fnmatchcase(n,
                                                                                                        pat)
                                                                                    for pat in spec.patterns)
        }
    names, params, offsets, off = [], [], [], 0
    for name, p in first.items():
        if id(p) in chosen:
            names.append(name)
            params.append(p)
            offsets.append(off)
            off += p.numel()
    if not params:
        some = ", ".join(list(first)[:6])
        raise ValueError(
            f"{spec} selects no parameter of {type(model).__name__} (parameter names look like: {some}, ...); "
            f"fix the selection or the patterns"
        )
    return SelectedParams(tuple(names), tuple(params), tuple(offsets), off)


@contextmanager
def scoring_mode(model: nn.Module, params: tuple[nn.Parameter, ...]) -> Iterator[None]:
    """Eval mode (no dropout: the score of pi_theta itself) and ``requires_grad`` on exactly ``params``.

    Both are restored on exit.
    """
    saved = [(p, p.requires_grad) for p in model.parameters()]
    modes = [(m, m.training) for m in model.modules()]
    wanted = {id(p) for p in params}
    try:
        model.eval()
        for p, _ in saved:
            p.requires_grad_(id(p) in wanted)
        yield
    finally:
        for p, flag in saved:
            p.requires_grad_(flag)
        for m, flag in modes:
            m.training = flag


def row_logprob_sums(model, batch: ScoreBatch, temperature: float) -> Tensor:
    """(n,) log pi(Y_n | x_n) = sum_t log pi(y_nt | x_n, y_n,<t) (paper eq. 3), differentiable."""
    logp = completion_logprobs(
        model, batch.prompt_ids, batch.prompt_mask, batch.completion_ids, batch.completion_mask, temperature=temperature
    )  # (n, T), 0 on padding
    return logp.sum(dim=1)  # (n,)


def check_batch(batch: ScoreBatch) -> None:
    if batch.completion_ids.dim() != 2 or batch.n == 0:
        raise ValueError(f"completion_ids must be (N, T) with N >= 1 rows; got {tuple(batch.completion_ids.shape)}")
    if int(batch.completion_mask.sum()) == 0:
        raise ValueError("completion_mask is all 0: no completion token to score")


def per_sample_scores(
    model: nn.Module,
    rollout_or_tensors,
    *,
    params: ScoreSpec = ScoreSpec(),
    temperature: float = 1.0,
    progress: bool = False,
) -> Tensor:
    """Exact scores W_n = grad_theta log pi(Y_n | x_n), one row per completion (paper eq. 3, 5).

    One forward and one backward pass per row (rows of a transformer batch do not interact, so
    this equals the per-row gradient of a batched pass); memory N * D. The model is put in eval
    mode meanwhile (no dropout), then restored. For large D use
    :func:`ugrpo.lm.sketch.sketch_scores`.

    Parameters
    ----------
    model : causal LM (transformers / peft), as for :func:`ugrpo.lm.logprobs.completion_logprobs`
    rollout_or_tensors : Rollout or (prompt_ids, prompt_mask, completion_ids, completion_mask), N rows
    params : ScoreSpec, which parameters (columns ordered as :func:`select_parameters`)
    temperature : log-probabilities of softmax(logits / temperature), the sampling distribution
    progress : show a tqdm bar over rows

    Returns
    -------
    Tensor (N, D) in the parameters' dtype, on their device. For a Rollout with G samples per
    prompt, ``scores.view(B, G, D)`` is the layout :mod:`ugrpo.stats.components` takes.
    """
    batch = as_score_batch(rollout_or_tensors)
    check_batch(batch)
    sel = select_parameters(model, params)
    p0 = sel.params[0]
    out = torch.empty(batch.n, sel.dim, dtype=p0.dtype, device=p0.device)  # (N, D)
    with scoring_mode(model, sel.params):
        for n in tqdm(range(batch.n), desc="per-sample scores", unit="row", disable=not progress):
            logp = row_logprob_sums(model, batch.rows(slice(n, n + 1)), temperature)  # (1,)
            grads = torch.autograd.grad(logp.sum(), sel.params, allow_unused=True)
            for g, p, off in zip(grads, sel.params, sel.offsets):
                out[n, off:off + p.numel()] = 0.0 if g is None else g.reshape(-1)
    return out
