"""Per-token log-probabilities of completions: the ``log pi_theta(Y_t | X, Y_<t)`` of paper eq. (3).

The sequence score of the paper, ``W = grad log pi_theta(Y|x) = sum_t grad log pi_theta(Y_t|x, Y_<t)``
(eq. 3 and 5), is the gradient of ``completion_logprobs(...).sum(dim=1)``; the trainer
backpropagates through this function.

One forward pass over ``[prompt (left-padded) | completion (right-padded)]`` with position ids
``cumsum(attention_mask) - 1``, so a left-padded row gets the same positions (and logits) as
the same row without padding. Only the last ``T + 1`` positions are turned into logits
(``logits_to_keep``), so memory is O(N * T * V), not O(N * (P + T) * V).

Shared prompts (``share_prompts=True``, the trainer's fast path)
----------------------------------------------------------------
A GRPO batch holds each prompt G times in consecutive rows (:class:`ugrpo.lm.sampling.Rollout`).
When consecutive rows of a chunk have identical ``prompt_ids`` and ``prompt_mask``, the prompt is
run once per *distinct* prompt (with gradient) into a ``DynamicCache``, the cache is expanded to
one entry per row (``batch_select_indices``, differentiable), and only the completion tokens
are run on top of it, with the ``(n, P + T)`` attention mask and positions continuing after
each prompt. The first completion token's log-probability comes from the prompt's last logit.
The values and gradients are those of the plain path up to float rounding (tested in
``tests/lm/test_logprobs.py``); the gradient of the shared prompt states sums the G rows'
contributions, exactly as the plain path does through G copies. It is opt-in because the
prompt's activations then stand for G sequences at once: code that reads one activation row
per sequence (per-sample gradients by module hooks, as the linear trick of
:mod:`ugrpo.lm.sketch`) needs the plain path, the default. Rows with no repeated prompt
and a model under gradient checkpointing (which drops the cache) take the plain path even with
``share_prompts=True``. Precision: the G rows' prompt gradients are summed *before* float32
casts inside the model (Qwen2's RMSNorm), so even a float64 model agrees with the plain path
to float32 rounding only; use the plain path for exact per-row checks. Dropout (e.g. LoRA dropout in
training mode) draws one mask per distinct prompt instead of one per row: each row's gradient
keeps its expectation, but the G rows' prompt masks are shared, so the result is not
bit-comparable with the plain path then.

With ``temperature != 1`` the log-probabilities are those of ``softmax(logits / temperature)``,
the distribution :func:`ugrpo.lm.sampling.sample_groups` draws from. Top-p truncation is
*not* applied here (as in TRL and verl); with ``top_p < 1`` the samples come from the
truncated distribution, a deviation from on-policy sampling the caller must accept knowingly.
"""

from __future__ import annotations

from contextlib import nullcontext

import torch
from torch import Tensor
from transformers import DynamicCache

__all__ = ["completion_logprobs", "output_layer"]


def completion_logprobs(
    model,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    completion_ids: Tensor,
    completion_mask: Tensor,
    *,
    temperature: float = 1.0,
    chunk_size: int | None = None,
    share_prompts: bool = False,
    on_logits=None,
) -> Tensor:
    """``log pi(y_t | x, y_<t)`` of every completion token; 0 where ``completion_mask`` is 0.

    Parameters
    ----------
    model : transformers.PreTrainedModel
        A causal LM (or peft wrapper) accepting ``position_ids`` and ``logits_to_keep``.
    prompt_ids, prompt_mask : Tensor (N, P)
        Left-padded prompts and their 0/1 mask (as in :class:`ugrpo.lm.sampling.Rollout`).
    completion_ids, completion_mask : Tensor (N, T)
        Right-padded completions and their 0/1 mask (1 up to and including EOS).
    temperature : float
        > 0; log-probabilities of ``softmax(logits / temperature)``.
    chunk_size : int or None
        Rows per forward pass (bounds memory); None = all N at once. The result is the same.
        Keep whole groups in a chunk (a multiple of G) to share each prompt fully.
    share_prompts : bool
        True: run each run of consecutive identical prompts once and share its key/value
        cache (see the module docstring); same values and summed gradients up to float
        rounding. False (default): one activation row per sequence, as per-sample-gradient
        hooks (:mod:`ugrpo.lm.sketch`) need.
    on_logits : callable or None
        ``on_logits(rows, hidden, logprobs)`` once per chunk, ``rows`` a slice of the N rows, ``hidden``
        (n, T, d) the output projection's input at the position predicting each completion token and ``logprobs``
        (n, T, V) the tempered log-probabilities, both detached (:class:`ugrpo.lm.output_scores.OutputScores`).
        It reads what the forward computes anyway (the log-probabilities and gradients are unchanged); a model whose
        logits are not the output projection's output (e.g. soft-capped) is a ValueError.

    Returns
    -------
    Tensor (N, T) float32
        Differentiable with respect to the model parameters (no ``no_grad`` inside).

    Raises
    ------
    ValueError
        On shape mismatches, a prompt row with no real token, or a non-positive temperature.
    """
    _check(prompt_ids, prompt_mask, completion_ids, completion_mask, temperature, chunk_size)
    N, T = completion_ids.shape
    if T == 0:
        return torch.zeros(N, 0)
    device = next(model.parameters()).device
    step = N if chunk_size is None else chunk_size
    parts = []
    for start in range(0, N, step):
        sl = slice(start, min(start + step, N))
        fn = _shared_chunk_logprobs if share_prompts and _can_share(model) else _chunk_logprobs
        capture = None if on_logits is None else _OutputCapture(model)
        with capture if capture is not None else nullcontext():
            parts.append(
                fn(
                    model,
                    prompt_ids[sl].to(device),
                    prompt_mask[sl].to(device),
                    completion_ids[sl].to(device),
                    completion_mask[sl].to(device),
                    temperature,
                    capture,
                )
            )
        if capture is not None:
            on_logits(sl, *capture.result)
    return torch.cat(parts, dim=0)


def output_layer(model) -> torch.nn.Module:
    """The output projection (``get_output_embeddings()``): a module with a (V, d) ``weight``; a ValueError naming
    the fix if the model has none (``ustat``'s output-projection scores, :mod:`ugrpo.lm.output_scores`)."""
    get = getattr(model, "get_output_embeddings", None)
    layer = get() if callable(get) else None
    w = getattr(layer, "weight", None)
    if layer is None or not isinstance(w, Tensor) or w.dim() != 2:
        raise ValueError(f"allocation.scores=output needs a model whose get_output_embeddings() is a linear output "
                         f"projection; {type(model).__name__} has {type(layer).__name__}. Use allocation.scores: "
                         "sketch")
    return layer


class _OutputCapture:
    """Records the output projection's inputs and outputs during a chunk's forward calls (a forward hook that
    returns None, so the forward is unchanged); the chunk's code then hands it (hidden, logprobs) in row order."""

    def __init__(self, model) -> None:
        self.layer = output_layer(model)
        self.calls: list[tuple[Tensor, Tensor]] = []
        self.result: tuple[Tensor, Tensor] | None = None

    def __enter__(self) -> _OutputCapture:
        self.handle = self.layer.register_forward_hook(
            lambda mod, args, out: self.calls.append((args[0].detach(), out.detach())))
        return self

    def __exit__(self, *exc) -> None:
        self.handle.remove()

    def take(self, logits: Tensor) -> Tensor:
        """The input of the call whose output is ``logits`` (the model's logits must be that output)."""
        x, y = self.calls.pop(0)
        same = y.data_ptr() == logits.data_ptr() and y.shape == logits.shape and y.dtype == logits.dtype
        if not same and (y.shape != logits.shape or not torch.equal(y.to(logits.dtype), logits.detach())):
            raise ValueError(f"allocation.scores=output: {type(self.layer).__name__}'s output is not the model's "
                             "logits (the model transforms them, e.g. soft-capping or scaling), so the output "
                             "projection's score cannot be read off the forward; use allocation.scores: sketch")
        return x


def _chunk_logprobs(model, p_ids, p_mask, c_ids, c_mask, temperature: float, capture=None) -> Tensor:
    T = c_ids.shape[1]
    input_ids = torch.cat([p_ids, c_ids], dim=1)  # (n, P+T)
    attn = torch.cat([p_mask, c_mask], dim=1).long()  # (n, P+T)
    position_ids = (attn.cumsum(dim=1) - 1).clamp(min=0)  # (n, P+T): 0 at the first real token
    out = model(input_ids=input_ids, attention_mask=attn, position_ids=position_ids, logits_to_keep=T + 1,
                use_cache=False)
    logits = out.logits[:, :-1, :].float() / temperature  # (n, T, V): position P-1+t predicts token t
    lsm = torch.log_softmax(logits, dim=-1)  # (n, T, V)
    logp = lsm.gather(-1, c_ids.unsqueeze(-1)).squeeze(-1)  # (n, T)
    if capture is not None:
        capture.calls = capture.calls[-1:]  # a fallback from the shared path: only this call counts
        capture.result = (capture.take(out.logits)[:, :-1], lsm.detach())
    return logp * c_mask.to(logp.dtype)


def _can_share(model) -> bool:
    """False under gradient checkpointing in training mode: HF models then turn the cache off."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    flag = getattr(type(base), "is_activation_checkpointing", None) or getattr(type(base), "is_gradient_checkpointing",
                                                                               None)
    return not (model.training and isinstance(flag, property) and bool(flag.fget(base)))


def _prompt_runs(p_ids: Tensor, p_mask: Tensor) -> Tensor:
    """(n,) index of each row's run of consecutive identical prompts: 0, 0, 0, 1, 1, 2, ..."""
    same = (p_ids[1:] == p_ids[:-1]).all(dim=1) & (p_mask[1:] == p_mask[:-1]).all(dim=1)  # (n-1,)
    starts = torch.cat([torch.ones(1, dtype=torch.long, device=p_ids.device), (~same).long()])  # (n,)
    return starts.cumsum(dim=0) - 1


def _shared_chunk_logprobs(model, p_ids, p_mask, c_ids, c_mask, temperature: float, capture=None) -> Tensor:
    n, T = c_ids.shape
    run = _prompt_runs(p_ids, p_mask)  # (n,)
    u = int(run[-1]) + 1
    if u == n:  # no prompt repeats: nothing to share
        return _chunk_logprobs(model, p_ids, p_mask, c_ids, c_mask, temperature, capture)
    first_row = torch.nonzero(torch.cat([torch.ones(1, dtype=torch.bool, device=run.device),
                                         run[1:] != run[:-1]])).squeeze(1)
    keep = int(p_mask.sum(dim=1).max())  # drop columns that are padding in every row
    up_ids = p_ids[first_row, p_ids.shape[1] - keep:]  # (u, P')
    up_mask = p_mask[first_row, p_mask.shape[1] - keep:].long()  # (u, P')
    up_pos = (up_mask.cumsum(dim=1) - 1).clamp(min=0)  # (u, P')
    cache = DynamicCache(config=model.config)
    out = model(input_ids=up_ids, attention_mask=up_mask, position_ids=up_pos, cache=cache, use_cache=True,
                logits_to_keep=1)
    if cache.get_seq_length() != keep:  # model ignored the cache: stay correct
        return _chunk_logprobs(model, p_ids, p_mask, c_ids, c_mask, temperature, capture)
    # expand in the model's dtype before the float32 cast, so the backward sums the G rows in that dtype
    first = torch.log_softmax(out.logits[run, -1, :].float() / temperature, dim=-1)  # (n, V): predicts token 0
    lp0 = first.gather(-1, c_ids[:, :1])  # (n, 1)
    h0 = None if capture is None else capture.take(out.logits)[run, -1:]  # (n, 1, d): the prompt's last position
    if T == 1:
        if capture is not None:
            capture.result = (h0, first.detach().unsqueeze(1))
        return lp0 * c_mask.to(lp0.dtype)
    cache.batch_select_indices(run)  # (u, ...) -> (n, ...), differentiable
    attn = torch.cat([up_mask[run], c_mask.long()], dim=1)  # (n, P'+T)
    c_pos = up_pos[run, -1:] + 1 + torch.arange(T, device=c_ids.device).unsqueeze(0)  # (n, T)
    out2 = model(input_ids=c_ids[:, :-1], attention_mask=attn[:, :-1], position_ids=c_pos[:, :-1], cache=cache,
                 use_cache=True)
    logits = out2.logits.float() / temperature  # (n, T-1, V): completion position t predicts token t+1
    lsm = torch.log_softmax(logits, dim=-1)  # (n, T-1, V)
    rest = lsm.gather(-1, c_ids[:, 1:].unsqueeze(-1)).squeeze(-1)  # (n, T-1)
    if capture is not None:
        capture.result = (torch.cat([h0, capture.take(out2.logits)], dim=1),
                          torch.cat([first.detach().unsqueeze(1), lsm.detach()], dim=1))
    logp = torch.cat([lp0, rest], dim=1)  # (n, T)
    return logp * c_mask.to(logp.dtype)


def _check(prompt_ids, prompt_mask, completion_ids, completion_mask, temperature, chunk_size) -> None:
    if prompt_ids.dim() != 2 or completion_ids.dim() != 2:
        raise ValueError(
            f"completion_logprobs: prompt_ids {tuple(prompt_ids.shape)} and completion_ids "
            f"{tuple(completion_ids.shape)} must be 2-D (N, P) and (N, T)"
        )
    if prompt_mask.shape != prompt_ids.shape:
        raise ValueError(f"completion_logprobs: prompt_mask {tuple(prompt_mask.shape)} != prompt_ids "
                         f"{tuple(prompt_ids.shape)}")
    if completion_mask.shape != completion_ids.shape:
        raise ValueError(
            f"completion_logprobs: completion_mask {tuple(completion_mask.shape)} != completion_ids "
            f"{tuple(completion_ids.shape)}"
        )
    if prompt_ids.shape[0] != completion_ids.shape[0]:
        raise ValueError(f"completion_logprobs: {prompt_ids.shape[0]} prompt rows but {completion_ids.shape[0]} "
                         "completion rows")
    if prompt_ids.shape[1] == 0 or bool((prompt_mask.sum(dim=1) == 0).any()):
        raise ValueError("completion_logprobs: a prompt row has no real token (prompt_mask all 0); every row needs >= "
                         "1 (e.g. <bos>)")
    if not temperature > 0:
        raise ValueError(f"completion_logprobs: temperature={temperature} must be > 0")
    if chunk_size is not None and chunk_size < 1:
        raise ValueError(f"completion_logprobs: chunk_size={chunk_size} must be >= 1 or None")
