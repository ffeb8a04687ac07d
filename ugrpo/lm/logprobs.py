"""Per-token log-probabilities of completions: the ``log pi_theta(Y_t | X, Y_<t)`` of paper eq. (3).

The sequence score of the paper, ``W = grad log pi_theta(Y|x) = sum_t grad log pi_theta(Y_t|x, Y_<t)``
(eq. 3 and 5), is the gradient of ``completion_logprobs(...).sum(dim=1)``; the trainer
backpropagates through this function.

One forward pass over ``[prompt (left-padded) | completion (right-padded)]`` with position ids
``cumsum(attention_mask) - 1``, so a left-padded row gets the same positions (and logits) as
the same row without padding. Only the last ``T + 1`` positions are turned into logits
(``logits_to_keep``), so memory is O(N * T * V), not O(N * (P + T) * V).

With ``temperature != 1`` the log-probabilities are those of ``softmax(logits / temperature)``,
the distribution :func:`ugrpo.lm.sampling.sample_groups` draws from. Top-p truncation is
*not* applied here (as in TRL and verl); with ``top_p < 1`` the samples come from the
truncated distribution, a deviation from on-policy sampling the caller must accept knowingly.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["completion_logprobs"]


def completion_logprobs(
    model,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    completion_ids: Tensor,
    completion_mask: Tensor,
    *,
    temperature: float = 1.0,
    chunk_size: int | None = None,
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
        parts.append(
            _chunk_logprobs(
                model,
                prompt_ids[sl].to(device),
                prompt_mask[sl].to(device),
                completion_ids[sl].to(device),
                completion_mask[sl].to(device),
                temperature,
            )
        )
    return torch.cat(parts, dim=0)


def _chunk_logprobs(model, p_ids, p_mask, c_ids, c_mask, temperature: float) -> Tensor:
    T = c_ids.shape[1]
    input_ids = torch.cat([p_ids, c_ids], dim=1)  # (n, P+T)
    attn = torch.cat([p_mask, c_mask], dim=1).long()  # (n, P+T)
    position_ids = (attn.cumsum(dim=1) - 1).clamp(min=0)  # (n, P+T): 0 at the first real token
    out = model(input_ids=input_ids, attention_mask=attn, position_ids=position_ids, logits_to_keep=T + 1, use_cache=False)
    logits = out.logits[:, :-1, :].float() / temperature  # (n, T, V): position P-1+t predicts token t
    logp = torch.log_softmax(logits, dim=-1).gather(-1, c_ids.unsqueeze(-1)).squeeze(-1)  # (n, T)
    return logp * c_mask.to(logp.dtype)


def _check(prompt_ids, prompt_mask, completion_ids, completion_mask, temperature, chunk_size) -> None:
    if prompt_ids.dim() != 2 or completion_ids.dim() != 2:
        raise ValueError(
            f"completion_logprobs: prompt_ids {tuple(prompt_ids.shape)} and completion_ids {tuple(completion_ids.shape)} must be 2-D (N, P) and (N, T)"
        )
    if prompt_mask.shape != prompt_ids.shape:
        raise ValueError(f"completion_logprobs: prompt_mask {tuple(prompt_mask.shape)} != prompt_ids {tuple(prompt_ids.shape)}")
    if completion_mask.shape != completion_ids.shape:
        raise ValueError(
            f"completion_logprobs: completion_mask {tuple(completion_mask.shape)} != completion_ids {tuple(completion_ids.shape)}"
        )
    if prompt_ids.shape[0] != completion_ids.shape[0]:
        raise ValueError(f"completion_logprobs: {prompt_ids.shape[0]} prompt rows but {completion_ids.shape[0]} completion rows")
    if prompt_ids.shape[1] == 0 or bool((prompt_mask.sum(dim=1) == 0).any()):
        raise ValueError("completion_logprobs: a prompt row has no real token (prompt_mask all 0); every row needs >= 1 (e.g. <bos>)")
    if not temperature > 0:
        raise ValueError(f"completion_logprobs: temperature={temperature} must be > 0")
    if chunk_size is not None and chunk_size < 1:
        raise ValueError(f"completion_logprobs: chunk_size={chunk_size} must be >= 1 or None")
