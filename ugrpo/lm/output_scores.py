"""Exact per-sample scores of the output projection, read off a forward pass (docs/math.md M70-M73).

``ustat`` (docs/allocation.md A3c) needs, per step, ||W_n||^2 of every sample and ||sum_{n in b} Z_n W_n||^2 of
every group b. With ``allocation.scores: output`` (the default) W is the score of the output projection E (the
``lm_head``, V x d, and its bias if it has one) of the tempered policy pi = softmax(E h / tau):

    W_n = (1/tau) sum_t u_nt h_nt^T,   u_nt = e_{y_nt} - p_nt,

h_nt the output projection's input at the position that predicts token t of sample n, p_nt the predicted
distribution, y_nt the sampled token (M70). Everything it needs, h and log p, exists in any forward pass over the
sample, so no backward pass and no per-sample gradient is formed:

* per sample, the ghost identity (M71) ||W_n||^2 = tau^-2 sum_{t,s} <u_t, u_s> (<h_t, h_s> + [bias]) with
  <u_t, u_s> = [y_t = y_s] - p_t(y_s) - p_s(y_t) + <p_t, p_s>: O(T^2 (V + d)) per sample (O(T V d) by forming the
  V x d matrix when T > d);
* per group, the Z-weighted sum sum_n Z_n W_n: by the same identity over the group's tokens when it is cheaper, else
  formed as a V x d matrix (one at a time, and the only way when the group's rows arrive in different forward
  calls, e.g. micro-batches smaller than the group).

:class:`OutputScores` collects them from the forward calls of :func:`ugrpo.lm.logprobs.completion_logprobs`
(its ``on_logits`` callback): the trainer feeds it from the forward it runs anyway at the sampling parameters
(:mod:`ugrpo.train.update`), :func:`output_score_norms` runs a forward of its own (no gradient, eval mode) for
the TRL adapter and for models with active dropout. Sampling by row (shared prompts or not) does not matter: the
prompt's positions carry no sample-specific gradient of E except the last one, which predicts the first token and
is in h_n0.

Which W this is: the output projection's block of the score (with tied embeddings, the output use of the shared
matrix only), not the score over all trainable parameters that ``allocation.scores: sketch`` measures. It is exact
and costs a few percent of a step; docs/allocation.md A3c says how well it stands in for the full score.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from ugrpo.lm.logprobs import completion_logprobs, output_layer

__all__ = ["OutputScores", "output_score_norms", "row_norms", "row_scores", "weighted_sum_norm"]

_ELEMS = 1 << 26  # float elements of p a batched ghost computation holds at a time (256 MB in float32)


def _has_bias(layer: nn.Module) -> bool:
    return isinstance(getattr(layer, "bias", None), Tensor)


def _dtype(x: Tensor) -> torch.dtype:
    return torch.promote_types(x.dtype, torch.float32)


def row_norms(hidden: Tensor, logprobs: Tensor, ids: Tensor, mask: Tensor, *, temperature: float,
              bias: bool = False) -> Tensor:
    """(n,) ||W_n||^2 of the output projection's score of each row (M70-M71), exact.

    Parameters
    ----------
    hidden : (n, T, d) the output projection's input at the position predicting token t
    logprobs : (n, T, V) log p_t, the tempered log-probabilities (``log_softmax(logits / temperature)``)
    ids : (n, T) the sampled tokens y_t; mask : (n, T) 1 on completion tokens
    temperature : tau; bias : the projection has a bias (its score u_t / tau is added)
    """
    n, T, V = logprobs.shape
    d = hidden.shape[-1]
    dt = _dtype(hidden)
    out = torch.empty(n, dtype=dt, device=hidden.device)
    if T > d:  # forming the V x d matrix per row is cheaper than the (T, T) ghost Gram
        for i in range(n):
            out[i] = weighted_sum_norm(hidden[i], logprobs[i], ids[i], mask[i].to(dt), temperature=temperature,
                                       bias=bias)
        return out
    step = max(1, _ELEMS // max(1, T * V))
    for a in range(0, n, step):
        sl = slice(a, min(a + step, n))
        m = mask[sl].to(dt)                                                 # (r, T)
        p = logprobs[sl].to(dt).exp()                                       # (r, T, V)
        y = ids[sl]                                                         # (r, T)
        py = p.gather(-1, y.unsqueeze(1).expand(-1, T, -1))                 # (r, T, T): p_t(y_s)
        uu = (y.unsqueeze(2) == y.unsqueeze(1)).to(dt) - py - py.transpose(1, 2) + p @ p.transpose(1, 2)
        h = hidden[sl].to(dt)
        hh = h @ h.transpose(1, 2) + (1.0 if bias else 0.0)                 # (r, T, T)
        out[sl] = torch.einsum("rt,rts,rs->r", m, uu * hh, m)
    return out.clamp_min(0.0) / temperature**2  # a norm: >= 0 (rounding of a near-deterministic sample's ~0)


def weighted_sum_norm(hidden: Tensor, logprobs: Tensor, ids: Tensor, weights: Tensor, *, temperature: float,
                      bias: bool = False) -> Tensor:
    """||sum_t w_t u_t h_t^T||^2 / tau^2 (+ ||sum_t w_t u_t||^2 / tau^2 with a bias) over M tokens, exact (M71).

    ``hidden`` (M, d), ``logprobs`` (M, V), ``ids`` (M,), ``weights`` (M,) (0 drops a token). By the ghost identity
    when M < V d / (V + d), else by forming the V x d matrix (the cheaper of O(M^2 (V + d)) and O(M V d)).
    """
    M, V = logprobs.shape
    d = hidden.shape[-1]
    dt = _dtype(hidden)
    keep = weights != 0
    h, lp, y, w = hidden[keep].to(dt), logprobs[keep].to(dt), ids[keep], weights[keep].to(dt)
    M = int(h.shape[0])
    if M == 0:
        return torch.zeros((), dtype=dt, device=hidden.device)
    p = lp.exp()                                                            # (M, V)
    if M * (V + d) < V * d:
        py = p[:, y]                                                        # (M, M): p_t(y_s)
        uu = (y.unsqueeze(1) == y.unsqueeze(0)).to(dt) - py - py.T + p @ p.T
        hh = h @ h.T + (1.0 if bias else 0.0)
        return (w @ (uu * hh) @ w).clamp_min(0.0) / temperature**2
    a = _matrix(h, p, y, w)                                                 # (V, d)
    total = (a * a).sum()
    if bias:
        u = _bias_vector(p, y, w)
        total = total + (u * u).sum()
    return total / temperature**2


def row_scores(hidden: Tensor, logprobs: Tensor, ids: Tensor, mask: Tensor, *, temperature: float,
               bias: bool = False) -> Tensor:
    """(n, V d [+ V]) the output projection's score vectors W_n themselves (M70), for checks on small models
    (memory n V d); arguments as in :func:`row_norms`."""
    dt = _dtype(hidden)
    out = []
    for i in range(hidden.shape[0]):
        p, w = logprobs[i].to(dt).exp(), mask[i].to(dt)
        parts = [_matrix(hidden[i].to(dt), p, ids[i], w).reshape(-1)]
        if bias:
            parts.append(_bias_vector(p, ids[i], w))
        out.append(torch.cat(parts) / temperature)
    return torch.stack(out)


def _matrix(h: Tensor, p: Tensor, y: Tensor, w: Tensor) -> Tensor:
    """sum_t w_t (e_{y_t} - p_t) h_t^T, (V, d)."""
    wh = w.unsqueeze(1) * h                                                 # (M, d)
    a = -(p.T @ wh)                                                         # (V, d)
    return a.index_add_(0, y, wh)


def _bias_vector(p: Tensor, y: Tensor, w: Tensor) -> Tensor:
    """sum_t w_t (e_{y_t} - p_t), (V,)."""
    u = -(w @ p)
    return u.index_add_(0, y, w)


class OutputScores:
    """Collects ||W_n||^2 (N,) and ||sum_{n in b} Z_n W_n||^2 (B,) of a rollout's rows from forward calls.

    Feed it as the ``on_logits`` callback of :func:`ugrpo.lm.logprobs.completion_logprobs` (through
    :func:`ugrpo.train.update.step_updates` or :func:`output_score_norms`); each row must be seen exactly once.
    A group whose rows come in several calls keeps its running V x d sum until its last row.

    Parameters
    ----------
    model : the policy (its output projection is checked, and whether it has a bias)
    completion_ids, completion_mask : (N, T) the rollout's completions
    group_index : (N,) group of each row (rows of a group need not be contiguous in the calls)
    rewards : (N,) Z of each row
    temperature : the sampling temperature tau
    """

    def __init__(self, model, completion_ids: Tensor, completion_mask: Tensor, group_index: Tensor, rewards: Tensor,
                 *, temperature: float) -> None:
        self.bias = _has_bias(output_layer(model))
        self.ids, self.mask = completion_ids, completion_mask
        self.group = torch.as_tensor(group_index, dtype=torch.long).cpu()
        self.z = torch.as_tensor(rewards, dtype=torch.float64).cpu()
        self.temperature = float(temperature)
        n, B = len(self.group), int(self.group.max()) + 1 if len(self.group) else 0
        self.w2 = torch.full((n,), float("nan"), dtype=torch.float64)
        self.zw2 = torch.zeros(B, dtype=torch.float64)
        self.seen = torch.zeros(n, dtype=torch.bool)
        self.left = torch.bincount(self.group, minlength=B)  # rows of each group not seen yet
        self.open: dict[int, list[Tensor | None]] = {}  # group -> [running (V, d) sum, running bias sum]
        self.seconds = 0.0

    def __call__(self, rows: Tensor | Sequence[int], hidden: Tensor, logprobs: Tensor) -> None:
        """Add rows ``rows`` (their global indices) with their ``hidden`` (n, T, d) and ``logprobs`` (n, T, V)."""
        t0 = time.perf_counter()
        rows = torch.as_tensor(rows, dtype=torch.long).cpu()
        if bool(self.seen[rows].any()):
            raise RuntimeError(f"OutputScores: row {int(rows[self.seen[rows]][0])} was seen twice")
        dev = hidden.device
        ids, mask = self.ids[rows].to(dev), self.mask[rows].to(dev)
        with torch.no_grad():
            self.w2[rows] = row_norms(hidden, logprobs, ids, mask, temperature=self.temperature,
                                      bias=self.bias).double().cpu()
            g = self.group[rows]
            for b in torch.unique(g).tolist():
                sel = torch.nonzero(g == b).squeeze(1)
                self._add_group(b, rows[sel], hidden[sel.to(dev)], logprobs[sel.to(dev)], ids[sel.to(dev)],
                                mask[sel.to(dev)])
        self.seen[rows] = True
        self.seconds += time.perf_counter() - t0

    def _add_group(self, b: int, rows: Tensor, hidden: Tensor, logprobs: Tensor, ids: Tensor, mask: Tensor) -> None:
        d, V = hidden.shape[-1], logprobs.shape[-1]
        w = (self.z[rows].to(hidden.device, _dtype(hidden)).unsqueeze(1) * mask.to(_dtype(hidden))).reshape(-1)
        h, lp, y = hidden.reshape(-1, d), logprobs.reshape(-1, V), ids.reshape(-1)
        self.left[b] -= len(rows)
        if b not in self.open and self.left[b] == 0:  # the whole group in this call
            self.zw2[b] = float(weighted_sum_norm(h, lp, y, w, temperature=self.temperature, bias=self.bias))
            return
        keep = w != 0
        dt = _dtype(hidden)
        p, hk, yk, wk = lp[keep].to(dt).exp(), h[keep].to(dt), y[keep], w[keep]
        acc = self.open.setdefault(b, [None, None])
        part = _matrix(hk, p, yk, wk)
        acc[0] = part if acc[0] is None else acc[0] + part
        if self.bias:
            u = _bias_vector(p, yk, wk)
            acc[1] = u if acc[1] is None else acc[1] + u
        if self.left[b] == 0:
            a, u = self.open.pop(b)
            total = (a * a).sum() + ((u * u).sum() if u is not None else 0.0)
            self.zw2[b] = float(total) / self.temperature**2

    def result(self) -> tuple[Tensor, Tensor]:
        """((N,) ||W_n||^2, (B,) ||sum_{n in b} Z_n W_n||^2), float64 on the CPU; a RuntimeError if a row is
        missing."""
        if not bool(self.seen.all()):
            raise RuntimeError(f"OutputScores: {int((~self.seen).sum())} rows were never seen, e.g. row "
                               f"{int(torch.nonzero(~self.seen)[0])}")
        return self.w2.clone(), self.zw2.clone()


def output_score_norms(model, batch, rewards: Tensor, group_index: Tensor, *, temperature: float,
                       chunk_size: int | None = None) -> tuple[Tensor, Tensor]:
    """((N,) ||W_n||^2, (B,) ||sum_{n in b} Z_n W_n||^2) of the output projection's score (M70-M72) from a forward
    pass of its own: no gradient, eval mode (no dropout: the score of pi_theta itself), prompts shared within
    consecutive equal rows.

    ``batch``: a Rollout or (prompt_ids, prompt_mask, completion_ids, completion_mask); ``chunk_size`` rows per
    forward (None: all), rounded to whole groups where they fit.
    """
    from ugrpo.lm.rollout import group_chunks
    from ugrpo.lm.scores import as_score_batch

    sb = as_score_batch(batch)
    rec = OutputScores(model, sb.completion_ids, sb.completion_mask, group_index, rewards, temperature=temperature)
    modes = [(m, m.training) for m in model.modules()]
    n = sb.n
    try:
        model.eval()
        with torch.no_grad():
            group = torch.as_tensor(group_index).cpu()
            for rows in group_chunks(torch.arange(n), chunk_size or n, group):
                completion_logprobs(model, sb.prompt_ids[rows], sb.prompt_mask[rows], sb.completion_ids[rows],
                                    sb.completion_mask[rows], temperature=temperature, share_prompts=True,
                                    on_logits=lambda sl, h, lp, rows=rows: rec(rows[sl], h, lp))
    finally:
        for m, flag in modes:
            m.training = flag
    return rec.result()
