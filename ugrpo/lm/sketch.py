"""Random-projection sketches S W_n of per-sample scores, with unbiased inner products (docs/scores.md).

The projection S (k, D) is never formed. It is the column block ``[S_p]`` over the selected
parameters p, each drawn independently from a generator seeded by ``(seed, name of p)``, so the
same seed gives the same S in every call (sketches of different batches are comparable) and
adding a parameter to the selection does not change the blocks of the others:

* a matrix parameter p of shape (out, in) (or (out, ...) flattened to (out, in)): row j of S_p is
  ``vec(a_j c_j^T) / sqrt(k)`` with a_j ~ N(0, I_out), c_j ~ N(0, I_in), so
  ``(S_p vec g)_j = a_j^T g c_j / sqrt(k)``: k * (out + in) random numbers, not k * out * in;
* a vector parameter (bias, norm weight) of size d: a dense block with N(0, 1/k) entries.

Unbiasedness (docs/math.md M19 for the dense case): E[vec(a c^T) vec(a c^T)^T] = E[a a^T] kron
E[c c^T] = I, blocks of different parameters are independent with mean 0, so E[S^T S] = I and
E <S W_i, S W_j> = <W_i, W_j>. The k rows are i.i.d., so the error of an inner product is a mean of
k i.i.d. terms and shrinks like 1/sqrt(k); a rank-one row has heavier tails than a dense Gaussian
one (E (a^T U c)^4 <= 9 ||U||_F^4 instead of 3 ||U||_F^4), so the variance at a given k is larger by
a bounded factor (< 9; 1.3x measured on the test model, docs/scores.md).

Two ways to compute the same sketch (equal up to float rounding):

* ``"per_sample_backward"``: one forward/backward per row; each parameter's gradient is folded
  into the sketch right away (A_p g C_p^T summed on the diagonal), so one gradient is held at a time.
  Any parameter type. Cost ~ N small backward passes + k * D flops per row.
* ``"linear_trick"``: ONE batched backward of sum_n log pi(Y_n). Hooks record each module's input
  x (n, L, in) and output gradient delta (n, L, out); the per-row gradient of a Linear weight is
  sum_t delta_nt x_nt^T, so its sketch is sum_t (A delta_nt) * (C x_nt) (elementwise over the k rows),
  never forming an out x in matrix per row. Covered: ``nn.Linear`` (weight, bias), ``nn.Embedding``
  (weight; rows at ``padding_idx`` get no gradient, as in torch), tied embedding / output weights
  (both uses add into the one tensor's sketch), and norm layers whose output is ``w * xhat + b``
  (RMSNorm, LayerNorm: checked numerically at every call). Any other selected parameter raises an
  error (``method="auto"`` then falls back to ``"per_sample_backward"``). The parameters' own
  gradients are never computed: zero-valued scalar probes added to each hooked output are the
  only leaves differentiated.

Why not the Kronecker sketch A (sum_t delta x^T) C^T (A: k1 x out, C: k2 x in, k = k1 k2): its rows
share the a's and c's, so for near-rank-one gradients its error shrinks only like k^(-1/4) at
k1 = k2; the rows here are independent (a Khatri-Rao product), which keeps the 1/sqrt(k) rate at the
same O(k (out + in)) cost per token.
"""

from __future__ import annotations

import hashlib
import math
from typing import Literal

import torch
from torch import Tensor, nn
from tqdm.auto import tqdm

from ugrpo.lm.scores import (
    ScoreBatch,
    ScoreSpec,
    SelectedParams,
    as_score_batch,
    check_batch,
    row_logprob_sums,
    scoring_mode,
    select_parameters,
)

__all__ = ["SketchMethod", "sketch_scores", "projection_matrix", "linear_trick_supported"]

SketchMethod = Literal["auto", "per_sample_backward", "linear_trick"]


def _param_seed(seed: int, name: str) -> int:
    digest = hashlib.blake2b(f"{int(seed)}:{name}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << 63) - 1)


def _factors(sel: SelectedParams, k: int, seed: int) -> dict[int, tuple[Tensor, ...]]:
    """id(param) -> (A (k, out), C (k, in)) for matrices, (G (k, d),) for vectors; N(0, 1) entries.

    Drawn in float32 on the CPU (the same numbers whatever the model's dtype or device), then cast.
    """
    out: dict[int, tuple[Tensor, ...]] = {}
    for name, p in zip(sel.names, sel.params):
        gen = torch.Generator().manual_seed(_param_seed(seed, name))
        shapes = [(k, p.shape[0]), (k, p[0].numel())] if p.dim() >= 2 else [(k, p.numel())]
        out[id(p)] = tuple(torch.randn(s, generator=gen).to(p.dtype).to(p.device) for s in shapes)
    return out


def _project(g: Tensor, f: tuple[Tensor, ...]) -> Tensor:
    """(k,) unscaled sketch of one parameter's gradient g (a_j^T g c_j, or G g)."""
    if len(f) == 2:
        A, C = f
        return ((A @ g.reshape(g.shape[0], -1)) * C).sum(-1)  # (k, out) @ (out, in) -> (k, in) -> (k,)
    return f[0] @ g.reshape(-1)


def projection_matrix(model: nn.Module, k: int, *, seed: int = 0, params: ScoreSpec = ScoreSpec()) -> Tensor:
    """The dense S (k, D) that :func:`sketch_scores` applies, for checks on small models.

    Columns are ordered as the columns of :func:`ugrpo.lm.scores.per_sample_scores`, so
    ``sketch_scores(...) == per_sample_scores(...) @ S.T`` up to float rounding. Memory k * D.
    """
    _check_k(k)
    sel = select_parameters(model, params)
    fac = _factors(sel, k, seed)
    blocks = []
    for p in sel.params:
        f = fac[id(p)]
        blocks.append((f[0][:, :, None] * f[1][:, None, :]).reshape(k, -1) if len(f) == 2 else f[0])
    return torch.cat(blocks, dim=1) / math.sqrt(k)


def _check_k(k) -> None:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"sketch dimension k must be an int >= 1, got {k!r}")


# ---------------------------------------------------------------------------------------------
# per-sample backward


def _sketch_backward(model, batch: ScoreBatch, sel: SelectedParams, fac, k: int, temperature: float,
                     progress: bool) -> Tensor:
    out = torch.zeros(batch.n, k, dtype=sel.params[0].dtype, device=sel.params[0].device)  # (N, k)
    for n in tqdm(range(batch.n), desc="sketch (per-sample backward)", unit="row", disable=not progress):
        logp = row_logprob_sums(model, batch.rows(slice(n, n + 1)), temperature)  # (1,)
        grads = torch.autograd.grad(logp.sum(), sel.params, allow_unused=True)
        for g, p in zip(grads, sel.params):
            if g is not None:
                out[n] += _project(g, fac[id(p)])
    return out


# ---------------------------------------------------------------------------------------------
# linear trick


def _is_norm(module: nn.Module) -> bool:
    direct = dict(module.named_parameters(recurse=False))
    return (
        "Norm" in type(module).__name__
        and "weight" in direct
        and set(direct) <= {"weight", "bias"}
        and all(p.dim() == 1 for p in direct.values())
    )


def _plan(model: nn.Module, sel: SelectedParams) -> tuple[list[tuple[nn.Module, str]], list[str]]:
    """Modules to hook, with their kind, and the names of selected parameters no hook covers."""
    wanted = {id(p) for p in sel.params}
    covered: set[int] = set()
    hooks = []
    for module in model.modules():
        direct = [p for _, p in module.named_parameters(recurse=False, remove_duplicate=False) if id(p) in wanted]
        if not direct:
            continue
        kind = ("linear" if isinstance(module, nn.Linear) else "embedding" if isinstance(module, nn.Embedding)
                else "norm" if _is_norm(module) else None)
        if kind is None:
            continue
        hooks.append((module, kind))
        covered.update(id(p) for p in direct)
    missing = [n for n, p in zip(sel.names, sel.params) if id(p) not in covered]
    return hooks, missing


def linear_trick_supported(model: nn.Module, params: ScoreSpec = ScoreSpec()) -> list[str]:
    """Names of the selected parameters the linear trick cannot sketch (empty list: all covered)."""
    return _plan(model, select_parameters(model, params))[1]


def _sel(module: nn.Module, name: str, wanted: set[int]) -> Tensor | None:
    p = getattr(module, name, None)
    return p if isinstance(p, Tensor) and id(p) in wanted else None


def _contribution(module, kind, x, d, wanted, fac) -> Tensor:
    """(n, k) unscaled sketch of this use's per-row gradient; x: input (or xhat, or ids), d: output grad."""
    n, like = d.shape[0], next(iter(fac.values()))[0]
    d = d.reshape(n, -1, d.shape[-1]).to(like.dtype)  # (n, L, out); autocast (bf16 mixed precision) gives bf16 grads
    acc = torch.zeros(n, like.shape[0], dtype=d.dtype, device=d.device)  # (n, k), in the factors' dtype
    w, b = _sel(module, "weight", wanted), _sel(module, "bias", wanted)
    if kind == "linear":
        if w is not None:
            A, C = fac[id(w)]
            acc += ((d @ A.T) * (x.reshape(n, -1, x.shape[-1]).to(d.dtype) @ C.T)).sum(1)  # (n, L, k) -> (n, k)
    elif kind == "embedding":
        A, C = fac[id(w)]
        ids = x.reshape(n, -1)  # (n, L)
        rows = A.T[ids]  # (n, L, k): a_j[token]
        if module.padding_idx is not None:
            rows = rows * (ids != module.padding_idx).unsqueeze(-1).to(rows.dtype)
        acc += (rows * (d @ C.T)).sum(1)
    elif w is not None:  # norm: per-row grad of w is sum_t delta_t * xhat_t
        acc += (d * x.reshape(n, -1, x.shape[-1]).to(d.dtype)).sum(1) @ fac[id(w)][0].T
    if b is not None:
        acc += d.sum(1) @ fac[id(b)][0].T
    return acc


def _xhat(module: nn.Module, x: Tensor, y: Tensor) -> Tensor:
    """Normalised input of a norm layer (its output with weight 1 and bias 0); checks y = w * xhat + b."""
    w = module.weight
    b = getattr(module, "bias", None)
    with torch.no_grad():
        xhat = torch.func.functional_call(
            module, {"weight": torch.ones_like(w), **({"bias": torch.zeros_like(b)} if isinstance(b, Tensor) else {})},
            (x,)
        )
        pred = w * xhat + (b if isinstance(b, Tensor) else 0)
        if not torch.allclose(pred, y, rtol=1e-4, atol=1e-5 * float(y.abs().max()) + 1e-12):
            raise ValueError(
                f"linear_trick: {type(module).__name__} output is not weight * normalised input + bias; "
                f"use method='per_sample_backward' or exclude its parameters from the ScoreSpec"
            )
    return xhat


def _sketch_linear(model, batch: ScoreBatch, sel, fac, k, temperature, chunk_size, progress) -> Tensor:
    hooks_plan, missing = _plan(model, sel)
    if missing:
        raise ValueError(
            f"linear_trick cannot sketch {len(missing)} selected parameter(s) of unsupported modules, e.g. "
            f"{missing[:3]}; "
            "use method='per_sample_backward' (or 'auto'), or exclude them with ScoreSpec(select='modules', "
            "patterns=...)"
        )
    wanted = {id(p) for p in sel.params}
    out = torch.zeros(batch.n, k, dtype=sel.params[0].dtype, device=sel.params[0].device)  # (N, k)
    step = batch.n if chunk_size is None else chunk_size
    for start in tqdm(range(0, batch.n, step), desc="sketch (linear trick)", unit="chunk", disable=not progress):
        chunk = batch.rows(slice(start, min(start + step, batch.n)))
        probes: list[Tensor] = []
        acc = [torch.zeros(chunk.n, k, dtype=out.dtype, device=out.device)]
        inside = [False]

        def fwd_hook(module, args, kwargs, output, kind, inside=inside, probes=probes, acc=acc):
            if inside[0]:
                return None
            x = args[0] if args else kwargs.get("input")
            if not isinstance(output, Tensor) or not isinstance(x, Tensor):
                raise ValueError(
                    f"linear_trick: {type(module).__name__} was called without a tensor input or output; "
                    f"use method='per_sample_backward'"
                )
            if kind == "norm":
                inside[0] = True
                try:
                    x = _xhat(module, x, output)
                finally:
                    inside[0] = False
            probe = torch.zeros((), dtype=output.dtype, device=output.device, requires_grad=True)
            probes.append(probe)
            y = output + probe

            def bwd(d, module=module, kind=kind, x=x, acc=acc):
                acc[0] += _contribution(module, kind, x.detach(), d, wanted, fac)

            y.register_hook(bwd)
            return y

        handles = [
            m.register_forward_hook(lambda mod, a, kw, o, kind=kind: fwd_hook(mod, a, kw, o, kind), with_kwargs=True)
            for m, kind in hooks_plan
        ]
        try:
            logp = row_logprob_sums(model, chunk, temperature)  # (n,)
        finally:
            for h in handles:
                h.remove()
        if probes:  # fires the hooks; the probes' grads are discarded
            torch.autograd.grad(logp.sum(), probes, allow_unused=True)
        out[start:start + chunk.n] = acc[0]
    return out


def sketch_scores(
    model: nn.Module,
    rollout_or_tensors,
    k: int,
    *,
    seed: int = 0,
    params: ScoreSpec = ScoreSpec(),
    method: SketchMethod = "auto",
    temperature: float = 1.0,
    chunk_size: int | None = None,
    progress: bool = False,
) -> Tensor:
    """Sketched scores S W_n (N, k) with E <S W_i, S W_j> = <W_i, W_j> (paper eq. 3; docs/math.md M19).

    Parameters
    ----------
    model : causal LM (transformers / peft)
    rollout_or_tensors : Rollout or (prompt_ids, prompt_mask, completion_ids, completion_mask), N rows
    k : sketch dimension; the error of an inner product is O(||W_i|| ||W_j|| / sqrt(k))
    seed : selects S; the same seed (and parameter names) gives the same S in every call
    params : ScoreSpec, which parameters theta
    method : "linear_trick" (one batched backward), "per_sample_backward" (one per row), or
        "auto" (the linear trick when it covers every selected parameter)
    temperature : as in :func:`ugrpo.lm.logprobs.completion_logprobs`
    chunk_size : rows per batched pass of the linear trick (bounds memory); None = all N
    progress : show a tqdm bar

    Returns
    -------
    Tensor (N, k) in the parameters' dtype. ``view(B, G, k)`` it for :mod:`ugrpo.stats.components`.
    Equals ``per_sample_scores(...) @ projection_matrix(model, k, seed=seed, params=params).T``.
    """
    _check_k(k)
    if method not in ("auto", "per_sample_backward", "linear_trick"):
        raise ValueError(f"method={method!r} is not one of 'auto', 'per_sample_backward', 'linear_trick'")
    if chunk_size is not None and (isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1):
        raise ValueError(f"chunk_size={chunk_size!r} must be an int >= 1 or None")
    batch = as_score_batch(rollout_or_tensors)
    check_batch(batch)
    sel = select_parameters(model, params)
    fac = _factors(sel, k, seed)
    if method == "auto":
        method = "per_sample_backward" if _plan(model, sel)[1] else "linear_trick"
    if method == "linear_trick":
        with scoring_mode(model, ()):  # no parameter needs a gradient: the probes are the leaves
            out = _sketch_linear(model, batch, sel, fac, k, temperature, chunk_size, progress)
    else:
        with scoring_mode(model, sel.params):
            out = _sketch_backward(model, batch, sel, fac, k, temperature, progress)
    return out / math.sqrt(k)
