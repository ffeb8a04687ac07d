"""A stand-in for the ``vllm`` package, for the CPU tests: vLLM's request/response shapes, Hugging Face underneath.

Importable as ``vllm`` once ``tests/fakes`` is on ``sys.path`` (the ``fake_vllm`` fixture of tests/conftest.py does
that for one test and removes it after). What it copies from vLLM (``vllm/entrypoints/llm.py``,
``vllm/sampling_params.py``, ``vllm/outputs.py``, ``vllm/v1/engine/parallel_sampling.py``):

* ``LLM(model=folder, load_format="dummy", ...)`` builds the architecture of ``folder/config.json`` with placeholder
  (random) weights; unknown keyword arguments are a TypeError, as vLLM's EngineArgs makes them;
* ``LLM.generate(prompts, sampling_params, use_tqdm=...)``: one SamplingParams for all prompts or one per prompt;
  under ``skip_tokenizer_init`` each prompt is ``{"prompt_token_ids": [...]}`` and ``detokenize`` must be False;
  returns one ``RequestOutput`` per prompt, in prompt order, whose ``outputs`` are the n children
  (``CompletionOutput``: ``index``, ``token_ids`` ending with the stop token, ``finish_reason`` "stop" or "length",
  ``stop_reason`` the stop token id); child j of a request with seed s draws from a generator seeded ``s + j``;
* ``LLM.apply_model(fn)`` -> ``[fn(model)]`` where ``model.load_weights([(hf_name, tensor), ...])`` copies weights by
  Hugging Face name (an unknown name is an error), and ``LLM.reset_prefix_cache()``.
* what TRL's colocate mode uses (``trl/generation/vllm_generation.py``): its engine arguments (``max_num_seqs``,
  ``enable_sleep_mode``, ``model_impl``, ``max_num_batched_tokens``, ``logprobs_mode``, ``quantization``,
  ``trust_remote_code``), the weight path ``llm.llm_engine.model_executor.driver_worker.model_runner.model``,
  SamplingParams' ``repetition_penalty``, ``top_k``, ``min_p`` (only their neutral values: the fake cannot apply
  them) and ``structured_outputs`` (None only), ``vllm.sampling_params.StructuredOutputsParams``, and
  ``logprobs=0``: each child's ``logprobs`` is one ``{token_id: Logprob}`` per token, the sampled token's
  log-probability after temperature (``logprobs_mode="processed_logprobs"``). Without ``stop_token_ids`` a request
  stops at the model's EOS, as vLLM's does.

What it does not copy: vLLM's numerics. The fake samples with ugrpo's Gumbel sampler (ugrpo.lm.sampling.generate_rows)
on the CPU, so unlike vLLM its samples do not depend on the batch shape; its children come back in reverse index
order (vLLM's order is not part of its contract; the adapter must sort by ``index``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch

__version__ = "0.31.0+fake"

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class SamplingParams:
    """The fields of vLLM's SamplingParams that ugrpo sets, with vLLM's defaults and checks."""

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    max_tokens: int | None = 16
    stop_token_ids: list[int] | None = None
    detokenize: bool = True
    skip_special_tokens: bool = True
    logprobs: int | None = None
    repetition_penalty: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    structured_outputs: Any = None

    def __post_init__(self) -> None:
        if not isinstance(self.n, int) or self.n < 1:
            raise ValueError(f"n must be at least 1, got {self.n}.")
        if self.temperature < 0:
            raise ValueError(f"temperature must be non-negative, got {self.temperature}.")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}.")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {self.max_tokens}.")
        if self.seed is not None and not isinstance(self.seed, int):
            raise TypeError(f"seed must be an int, got {type(self.seed)}")


@dataclass
class Logprob:
    """vLLM's ``vllm.logprobs.Logprob``: one token's log-probability and its rank."""

    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: float | None
    logprobs: Any
    finish_reason: str | None = None
    stop_reason: int | str | None = None


@dataclass
class RequestOutput:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    prompt_logprobs: Any
    outputs: list[CompletionOutput]
    finished: bool = True


class EngineModel(torch.nn.Module):
    """The model ``apply_model`` hands out: the Hugging Face model plus vLLM's ``load_weights``."""

    def __init__(self, hf_model):
        super().__init__()
        self.hf = hf_model
        self.loads: list[list[str]] = []
        """the names of every load_weights call"""

    @torch.no_grad()
    def load_weights(self, weights) -> set[str]:
        params = dict(self.hf.named_parameters())
        names = []
        for name, tensor in weights:
            if name not in params:
                raise KeyError(f"load_weights: no parameter {name!r} in the engine's model")
            if params[name].shape != tensor.shape:
                raise ValueError(f"load_weights: {name} has shape {tuple(tensor.shape)}, the engine's "
                                 f"{tuple(params[name].shape)}")
            params[name].copy_(tensor)
            names.append(name)
        self.loads.append(names)
        return set(names)


class LLM:
    """vLLM's offline engine, in miniature (module docstring)."""

    instances: ClassVar[list[LLM]] = []
    include_stop_token: ClassVar[bool] = True
    """False: the stop token is left out of ``token_ids`` (tests that the adapter does not depend on it)"""

    def __init__(self, model: str, *, load_format: str = "auto", skip_tokenizer_init: bool = False,
                 dtype: str = "auto", gpu_memory_utilization: float = 0.9, max_model_len: int | None = None,
                 enable_prefix_caching: bool = True, seed: int = 0, generation_config: str = "auto",
                 distributed_executor_backend: str | None = None, tensor_parallel_size: int = 1,
                 max_num_seqs: int | None = None, enable_sleep_mode: bool = False, model_impl: str = "auto",
                 max_num_batched_tokens: int | None = None, logprobs_mode: str = "raw_logprobs",
                 quantization: str | None = None, trust_remote_code: bool = False):
        from types import SimpleNamespace

        from transformers import AutoConfig, AutoModelForCausalLM

        if not 0 < gpu_memory_utilization <= 1:
            raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}")
        config = AutoConfig.from_pretrained(model)
        torch_dtype = _DTYPES.get(dtype, torch.float32)
        if load_format == "dummy":
            torch.manual_seed(1234)  # placeholder weights: anything but the policy's
            hf = AutoModelForCausalLM.from_config(config, dtype=torch_dtype)
        else:
            hf = AutoModelForCausalLM.from_pretrained(model, dtype=torch_dtype)
        if quantization is not None or enable_sleep_mode:
            raise NotImplementedError("the fake engine has no quantization and no sleep mode")
        self.model = EngineModel(hf.eval())
        # TRL's colocate weight push reaches the model through the engine's internals (vLLM V0/V1 in-process)
        self.llm_engine = SimpleNamespace(model_executor=SimpleNamespace(driver_worker=SimpleNamespace(
            model_runner=SimpleNamespace(model=self.model))))
        eos = hf.generation_config.eos_token_id if hf.generation_config.eos_token_id is not None else \
            config.eos_token_id
        self.eos_ids = [] if eos is None else [eos] if isinstance(eos, int) else list(eos)
        self.kwargs = {"model": model, "load_format": load_format, "skip_tokenizer_init": skip_tokenizer_init,
                       "dtype": dtype, "max_model_len": max_model_len, "seed": seed,
                       "distributed_executor_backend": distributed_executor_backend, "logprobs_mode": logprobs_mode,
                       "max_num_seqs": max_num_seqs}
        self.calls: list[tuple[list, list[SamplingParams]]] = []
        self.prefix_resets = 0
        LLM.instances.append(self)

    def apply_model(self, func):
        return [func(self.model)]

    def reset_prefix_cache(self) -> bool:
        self.prefix_resets += 1
        return True

    def generate(self, prompts, sampling_params=None, *, use_tqdm: bool = True, lora_request=None):
        prompts = list(prompts)
        if sampling_params is None:
            sampling_params = SamplingParams()
        params = list(sampling_params) if isinstance(sampling_params, (list, tuple)) else \
            [sampling_params] * len(prompts)
        if len(params) != len(prompts):
            raise ValueError("The lengths of prompts and sampling_params must be the same.")
        if self.kwargs["skip_tokenizer_init"]:
            if any(not isinstance(p, dict) or "prompt_token_ids" not in p for p in prompts):
                raise ValueError("skip_tokenizer_init=True needs prompts given as {'prompt_token_ids': [...]}")
            if any(p.detokenize for p in params):
                raise ValueError("Cannot detokenize when skip_tokenizer_init=True")
        self.calls.append((prompts, params))
        return [self._request(str(i), p["prompt_token_ids"], sp) for i, (p, sp) in enumerate(zip(prompts, params))]

    # ------------------------------------------------------------------ helpers

    def _request(self, rid: str, ids: list[int], sp: SamplingParams) -> RequestOutput:
        from ugrpo.lm.sampling import generate_rows

        if sp.repetition_penalty != 1.0 or sp.top_k not in (0, -1) or sp.min_p != 0.0 or sp.structured_outputs:
            raise NotImplementedError("the fake engine samples without repetition_penalty, top_k, min_p or "
                                      "structured outputs; leave them at their neutral values")
        stops = list(sp.stop_token_ids) if sp.stop_token_ids is not None else list(self.eos_ids)
        prompt = torch.tensor([ids] * sp.n, dtype=torch.long)  # (n, P)
        mask = torch.ones_like(prompt)
        if sp.temperature == 0.0:
            out = self.model.hf.generate(input_ids=prompt, attention_mask=mask, do_sample=False,
                                         max_new_tokens=sp.max_tokens, eos_token_id=stops or None,
                                         pad_token_id=stops[0] if stops else 0)[:, prompt.shape[1]:]
        else:
            base = sp.seed if sp.seed is not None else int(torch.randint(0, 2**62, (1,)))
            out = generate_rows(self.model.hf, prompt, mask, [base + j for j in range(sp.n)],
                                temperature=sp.temperature, top_p=sp.top_p, max_new_tokens=sp.max_tokens,
                                eos_ids=stops or [-1], pad_id=stops[0] if stops else 0)
        children = [self._child(j, row.tolist(), stops) for j, row in enumerate(out)]
        if sp.logprobs is not None:
            self._add_logprobs(ids, children, sp.temperature or 1.0)
        return RequestOutput(rid, None, list(ids), None, children[::-1])

    @torch.no_grad()
    def _add_logprobs(self, ids: list[int], children: list[CompletionOutput], temperature: float) -> None:
        """Each child's sampled-token log-probabilities under the engine's weights, after temperature."""
        from ugrpo.lm.logprobs import completion_logprobs

        T = max(len(c.token_ids) for c in children)
        comp = torch.zeros(len(children), T, dtype=torch.long)
        cmask = torch.zeros_like(comp)
        for i, c in enumerate(children):
            comp[i, :len(c.token_ids)] = torch.tensor(c.token_ids, dtype=torch.long)
            cmask[i, :len(c.token_ids)] = 1
        prompt = torch.tensor([ids] * len(children), dtype=torch.long)
        lp = completion_logprobs(self.model.hf, prompt, torch.ones_like(prompt), comp, cmask, temperature=temperature)
        for i, c in enumerate(children):
            c.logprobs = [{t: Logprob(float(lp[i, j]), rank=1)} for j, t in enumerate(c.token_ids)]

    def _child(self, j: int, row: list[int], stops: list[int]) -> CompletionOutput:
        cut = next((i for i, t in enumerate(row) if t in stops), None)
        if cut is None:
            return CompletionOutput(j, "", row, None, None, "length", None)
        toks = row[: cut + 1] if self.include_stop_token else row[:cut]
        return CompletionOutput(j, "", toks, None, None, "stop", row[cut])


__all__ = ["LLM", "SamplingParams", "RequestOutput", "CompletionOutput", "EngineModel", "Logprob"]
