"""Sampling with vLLM colocated in the training process: the same :class:`~ugrpo.lm.rollout.Rollout` as
:func:`ugrpo.lm.sampling.sample_groups`, drawn by a vLLM engine whose weights the trainer pushes after every update.

How vLLM is driven (vLLM 0.22 to 0.31, the range TRL 1.16 supports; read from vLLM's and TRL's sources)
------------------------------------------------------------------------------------------------------
* The engine is ``vllm.LLM(model=<a folder with only the policy's config.json>, load_format="dummy",
  skip_tokenizer_init=True, ...)``: vLLM builds the architecture with placeholder weights and no tokenizer. The real
  weights come from :meth:`VLLMEngine.sync_weights` (the trainer calls it before step 1 and after every optimizer
  step); ugrpo's tokenizer encodes the prompts (the very tokens of the HF backend) and decodes the completions.
* One request per prompt: ``{"prompt_token_ids": ids}`` with its own ``SamplingParams(n=G_b, seed=..., temperature,
  top_p, max_tokens=max_new_tokens, stop_token_ids=<EOS ids>, detokenize=False)``. ``LLM.generate`` takes one
  SamplingParams per prompt, so ragged group sizes G_b (docs/allocation.md) map onto ``n`` directly.
* ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` is set before vLLM is imported (unless already set): the engine core then
  runs in this process, so a weight push is a direct ``load_weights`` on the engine's model (``LLM.apply_model``),
  and scheduling is deterministic. Under torchrun / accelerate each process builds its own engine on its own GPU
  (``distributed_executor_backend="external_launcher"``) and samples its own share of the prompts.
* After a push the prefix cache is reset: its keys/values were computed with the old weights.

The seeds contract
------------------
The trainer gives prompt b a seed s_b. Its request carries ``seed = request_seed(s_b)`` (62 bits); vLLM seeds the
j-th of its n children with ``seed + j`` (``vllm/v1/engine/parallel_sampling.py``) and draws that child's noise from
its own ``torch.Generator`` (per-request generators make vLLM use its PyTorch sampler, not FlashInfer's). So:

1. the random numbers of row j of prompt b are a function of (s_b, j) alone, as with the HF backend;
2. the same call (same prompts, sizes, seeds) on the same GPU, vLLM version and settings gives the same samples in
   practice (in-process, deterministic scheduling); vLLM does not promise it;
3. with another batch shape (another N, other G_b, other prompts in the call, another process count) the logits
   that this noise perturbs come from kernels whose float rounding depends on the batch (vLLM is not
   batch-invariant by default; bf16 rounding is about 1e-2 relative), so a token, and the rest of its completion,
   can change: samples are NOT reproducible across batch shapes, and row j of a prompt drawn with n = G_b equals
   row j drawn with n = G_b' only up to this. vLLM's batch-invariant mode (``VLLM_BATCH_INVARIANT=1``, beta, recent
   NVIDIA GPUs) is meant to remove it; ugrpo has not measured that;
4. HF and vLLM samples of one seed differ (vLLM perturbs with exponential noise, ugrpo's HF sampler with Gumbel
   noise): the backends agree in distribution, not sample by sample. Greedy decoding (temperature 0) needs no seed.

The distribution is softmax(logits / T) cut to the smallest top set of mass >= top_p (vLLM's rule and
:func:`ugrpo.lm.sampling.top_p_filter`'s), in vLLM's numerics (its dtype and kernels). The loss's log-probs are
recomputed by the training model, so a step is the gradient of the training model's log-probs at samples of a
policy equal to it up to numerics; ugrpo does not correct this mismatch (TRL's default corrects it with truncated
importance weights from vLLM's log-probs). A temperature below 1e-5 is greedy in vLLM.

LoRA: vLLM gets the merged weights W + (alpha / r) B A, computed without touching the training model (no
merge/unmerge round trip, which would drift bf16 base weights). ``modules_to_save`` adapters are refused.
"""

from __future__ import annotations

import copy
import importlib.util
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import torch
from torch import Tensor

from ugrpo.errors import UserError
from ugrpo.lm.rollout import Rollout, rollout_from_completions
from ugrpo.lm.sampling import _check_args, _group_sizes, encode_prompts, eos_token_ids, row_seed, sample_groups

__all__ = ["INSTALL_HINT", "VLLMEngine", "vllm_problem", "require_vllm", "build_engine", "frozen_sampler",
           "request_seed", "named_weights"]

INSTALL_HINT = ("install it with `pip install 'ugrpo[vllm]'` on a machine with an NVIDIA GPU, after a CUDA build of "
                "torch (README, section 'GPU')")


def vllm_problem(device: torch.device | str | None, option: str = "sampling.backend") -> str | None:
    """Why ``<option>=vllm`` cannot run here (None when it can): vLLM missing, no CUDA, or a CPU device. ``option``
    is the setting as the command spells it (``sampling.backend`` for ``train``, ``--sampling-backend`` for
    ``plan`` / ``mse``), so that the message names what to change."""
    if importlib.util.find_spec("vllm") is None:
        return f"{option}=vllm needs the vllm package, which is not installed: {INSTALL_HINT}"
    return _device_problem(device, option)


def _device_problem(device: torch.device | str | None, option: str = "sampling.backend") -> str | None:
    if not torch.cuda.is_available():
        return (f"{option}=vllm needs a CUDA GPU (vLLM runs on NVIDIA GPUs only) and torch sees none "
                f"(torch.cuda.is_available() is False); use {option}=hf on this machine")
    if device is not None and torch.device(device).type != "cuda":
        return (f"{option}=vllm needs the policy on a CUDA device, got model.device={device}; set "
                f"model.device=auto (this process's GPU) or use {option}=hf")
    return None


def require_vllm(device: torch.device | str | None, option: str = "sampling.backend") -> None:
    """Raise :class:`~ugrpo.errors.UserError` with :func:`vllm_problem`'s message, before any work starts."""
    problem = vllm_problem(device, option)
    if problem is not None:
        raise UserError(problem)


def request_seed(seed: int) -> int:
    """The vLLM request seed of a prompt whose ugrpo seed is ``seed``: 62 bits of ``row_seed(seed, 0)``, so that
    vLLM's child seeds ``request_seed + j`` stay below 2**63 and the seed ranges of two prompts almost never meet."""
    return row_seed(int(seed), 0) >> 1


def named_weights(model) -> Iterator[tuple[str, Tensor]]:
    """(Hugging Face parameter name, tensor) of the policy as vLLM's ``load_weights`` reads a checkpoint; a peft
    LoRA model gives its merged weights (module docstring), one layer at a time, the training model left as it is.
    A LoRA model with ``modules_to_save`` raises :class:`~ugrpo.errors.UserError` before the first tensor."""
    if not hasattr(model, "get_base_model"):
        for name, p in model.named_parameters():
            yield name, p.detach()
        return
    base = model.get_base_model()
    _check_pushable(model)
    lora = {name: mod for name, mod in base.named_modules() if hasattr(mod, "get_delta_weight")
            and hasattr(mod, "base_layer")}
    for name, p in base.named_parameters():
        owner, _, leaf = name.rpartition(".")
        if ".lora_" in f".{name}":
            continue  # adapter matrices: merged into their base weight below
        if owner.endswith(".base_layer"):
            layer = owner[: -len(".base_layer")]
            yield f"{layer}.{leaf}", _merged(lora[layer], p) if leaf == "weight" else p.detach()
        else:
            yield name, p.detach()


def _check_pushable(model) -> None:
    """A peft model with ``modules_to_save`` copies is refused (the push would need their names mapped)."""
    if not hasattr(model, "get_base_model"):
        return
    names = (n for n, _ in model.get_base_model().named_parameters())
    saved = next((n for n in names if "modules_to_save" in n or "original_module" in n), None)
    if saved is not None:
        raise UserError(f"sampling.backend=vllm: the LoRA model has a modules_to_save copy ({saved}), which the "
                        "weight push does not handle; train without modules_to_save or use sampling.backend=hf")


@torch.no_grad()
def _merged(layer, weight: Tensor) -> Tensor:
    if getattr(layer, "merged", False):
        return weight.detach()  # the adapter is already folded into the base weight
    out = weight.detach().clone()
    for adapter in layer.active_adapters:
        if adapter in layer.lora_A:
            out += layer.get_delta_weight(adapter).to(out.dtype)
    return out


class VLLMEngine:
    """A vLLM ``LLM`` with ugrpo's sampling interface; build it with :func:`build_engine`.

    Parameters
    ----------
    llm : vllm.LLM
        The engine (placeholder weights until the first :meth:`sync_weights`).
    sampling_params : type
        ``vllm.SamplingParams``.
    eos_ids : sequence of int
        Tokens that end a completion (stop tokens of every request).
    folder : str or None
        The config folder the engine was built from; removed by :meth:`close`.
    """

    def __init__(self, llm, sampling_params: type, eos_ids: Sequence[int], folder: str | None = None):
        self.llm = llm
        self.sampling_params = sampling_params
        self.eos_ids = sorted({int(e) for e in eos_ids})
        self.folder = folder
        self.syncs = 0
        """weight pushes so far"""

    def sync_weights(self, model) -> int:
        """Push the policy's current weights into the engine (merged under LoRA); returns how many tensors.

        The tensors stream into vLLM's ``load_weights`` (in-process, nothing is pickled), so a LoRA push holds one
        merged layer at a time."""
        pushed = [0]

        def counted():
            for item in named_weights(model):
                pushed[0] += 1
                yield item

        _check_pushable(model)  # before the engine is touched
        self.llm.apply_model(lambda engine_model: engine_model.load_weights(counted()))
        self.llm.reset_prefix_cache()  # cached prompt keys/values belong to the old weights
        self.syncs += 1
        return pushed[0]

    def sample_groups(self, tokenizer, prompts: Sequence[str], group_size: int | Sequence[int], *,
                      seeds: Sequence[int], temperature: float = 1.0, top_p: float = 1.0, max_new_tokens: int = 16,
                      add_special_tokens: bool = True) -> Rollout:
        """:func:`ugrpo.lm.sampling.sample_groups` drawn by vLLM: G_b completions of prompt b (request ``n``), the
        same :class:`Rollout` layout; seeds as in the module docstring's contract."""
        _check_args(prompts, group_size, seeds, temperature, top_p, max_new_tokens, None)
        sizes = _group_sizes(group_size, len(prompts))
        ids, mask = encode_prompts(tokenizer, prompts, add_special_tokens=add_special_tokens)  # (B, P)
        params = [self._params(n=g, seed=request_seed(s), temperature=temperature, top_p=top_p,
                               max_tokens=max_new_tokens) for g, s in zip(sizes, seeds)]
        rows = self._generate(ids, mask, params, sizes)
        return rollout_from_completions(tokenizer, ids, mask, sizes, self._pad(rows, tokenizer.pad_token_id),
                                        self.eos_ids)

    def greedy_completions(self, tokenizer, prompts: Sequence[str], *, max_new_tokens: int) -> list[str]:
        """Greedy (temperature 0) completions, decoded without special tokens and cut at the first EOS (as
        :func:`ugrpo.train.evaluate.greedy_completions`)."""
        ids, mask = encode_prompts(tokenizer, prompts)
        params = [self._params(n=1, seed=None, temperature=0.0, top_p=1.0, max_tokens=max_new_tokens)
                  for _ in prompts]
        rows = self._generate(ids, mask, params, [1] * len(prompts))
        cuts = [next((i for i, t in enumerate(r) if t in self.eos_ids), len(r)) for r in rows]
        return [tokenizer.decode(r[:k], skip_special_tokens=True) for r, k in zip(rows, cuts)]

    def close(self) -> None:
        """Drop the engine and its config folder."""
        self.llm = None
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None

    # ------------------------------------------------------------------ helpers

    def _params(self, *, n: int, seed: int | None, temperature: float, top_p: float, max_tokens: int):
        return self.sampling_params(n=n, seed=seed, temperature=temperature, top_p=top_p, max_tokens=max_tokens,
                                    stop_token_ids=list(self.eos_ids), detokenize=False)

    def _generate(self, ids: Tensor, mask: Tensor, params: list, sizes: Sequence[int]) -> list[list[int]]:
        """Token rows of every request's children, prompt-major, each child in its index order, EOS kept."""
        requests = [{"prompt_token_ids": row[m.bool()].tolist()} for row, m in zip(ids, mask)]
        outputs = self.llm.generate(requests, sampling_params=params, use_tqdm=False)
        if len(outputs) != len(requests):
            raise RuntimeError(f"vLLM returned {len(outputs)} outputs for {len(requests)} requests")
        rows: list[list[int]] = []
        for out, g in zip(outputs, sizes):
            children = sorted(out.outputs, key=lambda c: c.index)
            if len(children) != g:
                raise RuntimeError(f"vLLM returned {len(children)} completions for a request with n={g}")
            rows += [self._with_stop(c) for c in children]
        return rows

    def _with_stop(self, child) -> list[int]:
        """The child's tokens; a completion that stopped on a stop token ends with it (the Rollout's mask counts the
        EOS, as the HF backend's does), whether or not this vLLM version returned it."""
        toks = [int(t) for t in child.token_ids]
        if child.finish_reason == "stop" and (not toks or toks[-1] not in self.eos_ids):
            stop = child.stop_reason if isinstance(child.stop_reason, int) else self.eos_ids[0]
            toks.append(int(stop))
        return toks

    @staticmethod
    def _pad(rows: list[list[int]], pad_id: int) -> Tensor:
        out = torch.full((len(rows), max([len(r) for r in rows] + [1])), pad_id, dtype=torch.long)  # (N, T)
        for i, r in enumerate(rows):
            out[i, : len(r)] = torch.tensor(r, dtype=torch.long)
        return out


def build_engine(model, tokenizer, *, gpu_memory: float, max_model_len: int = 0, distributed: bool = False,
                 dtype: str | None = None, option: str = "sampling.backend") -> VLLMEngine:
    """A colocated vLLM engine for ``model`` (placeholder weights: call :meth:`VLLMEngine.sync_weights` before
    sampling). Raises :class:`~ugrpo.errors.UserError` when vLLM cannot run here (:func:`vllm_problem`; ``option``
    names the setting in its message)."""
    device = next(model.parameters()).device
    require_vllm(device, option)
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine core in this process (docstring)
    try:
        import vllm
    except Exception as e:  # an install that cannot load (CUDA libraries, a torch it was not built for)
        raise UserError(f"{option}=vllm: importing vllm failed ({type(e).__name__}: {e}); {INSTALL_HINT}") \
            from e
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    folder = tempfile.mkdtemp(prefix="ugrpo-vllm-")
    config = copy.deepcopy(base.config)
    config.architectures = [type(base).__name__]  # vLLM picks its model class by this name
    config.save_pretrained(folder)
    kwargs = {"model": folder, "load_format": "dummy", "skip_tokenizer_init": True, "generation_config": "vllm",
              "dtype": dtype or str(next(base.parameters()).dtype).removeprefix("torch."),
              "gpu_memory_utilization": gpu_memory, "enable_prefix_caching": True, "seed": 0}
    if max_model_len:
        kwargs["max_model_len"] = max_model_len
    if distributed:
        kwargs["distributed_executor_backend"] = "external_launcher"  # one engine per process, on its own GPU
    try:
        llm = vllm.LLM(**kwargs)
    except Exception:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return VLLMEngine(llm, vllm.SamplingParams, eos_token_ids(tokenizer, model), folder)


FROZEN_GPU_MEMORY = 0.3
"""share of GPU memory a :func:`frozen_sampler` engine takes (``sampling.vllm_gpu_memory``'s default)"""


@contextmanager
def frozen_sampler(model, tokenizer, backend: str, *, max_model_len: int = 0,
                   option: str = "--sampling-backend") -> Iterator[Callable[..., Rollout]]:
    """The sampler of a policy that does not change (``ugrpo plan --model``, ``ugrpo mse --model``): a callable with
    :func:`ugrpo.lm.sampling.sample_groups`'s signature that draws with ``backend``.

    ``"hf"``: ``sample_groups`` itself. ``"vllm"``: one engine (:func:`build_engine`, the policy's dtype, a
    :data:`FROZEN_GPU_MEMORY` share of the GPU, ``max_model_len`` tokens of prompt + completion, 0 = the model's
    context), given ``model``'s weights once on entry and closed on exit; the callable ignores its ``model``
    argument and its ``batch_size`` / ``share_prompts`` (the engine batches by itself), one request per prompt with
    ``n = G_b``, seeds as in the module docstring's contract (the train backend's). ``option`` names the setting in
    the errors (vLLM missing, no CUDA: :func:`vllm_problem`).
    """
    if backend == "hf":
        yield sample_groups
        return
    if backend != "vllm":
        raise ValueError(f"{option} {backend!r}: choose hf or vllm")
    engine = build_engine(model, tokenizer, gpu_memory=FROZEN_GPU_MEMORY, max_model_len=max_model_len, option=option)
    try:
        engine.sync_weights(model)  # the only push: the policy is frozen

        def sample(_model, tok, prompts: Sequence[str], group_size: int | Sequence[int], *, seeds: Sequence[int],
                   temperature: float = 1.0, top_p: float = 1.0, max_new_tokens: int = 16,
                   batch_size: int | None = None, add_special_tokens: bool = True,
                   share_prompts: bool = True) -> Rollout:
            return engine.sample_groups(tok, prompts, group_size, seeds=seeds, temperature=temperature, top_p=top_p,
                                        max_new_tokens=max_new_tokens, add_special_tokens=add_special_tokens)

        sample.engine = engine  # type: ignore[attr-defined]
        yield sample
    finally:
        engine.close()
