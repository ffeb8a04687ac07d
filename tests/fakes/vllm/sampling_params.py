"""``vllm.sampling_params`` of the fake engine: SamplingParams and the structured-outputs type TRL imports."""

from __future__ import annotations

from dataclasses import dataclass

from . import SamplingParams

__all__ = ["SamplingParams", "StructuredOutputsParams"]


@dataclass
class StructuredOutputsParams:
    """vLLM's guided-decoding options (TRL imports the name; the fake engine refuses any use of them)."""

    regex: str | None = None
    json: object = None
    choice: list | None = None
    grammar: str | None = None
