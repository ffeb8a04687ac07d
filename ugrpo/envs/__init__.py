"""Exact synthetic policies (softmax bandits, linear-softmax contextual policies) and the
Algorithm-1 simulator on them. Every quantity of the paper is an exact finite sum here.

Public API: :class:`SyntheticPolicy` (``SoftmaxBandit``, ``LinearSoftmax``),
:func:`load_env`, :func:`save_env`, :func:`random_env`, :func:`builtin_env`,
:func:`list_builtin_envs`, :func:`run_algorithm1`, :func:`run_algorithm1_batch`.
"""

from .algorithm1 import Algorithm1BatchResult, Algorithm1Result, run_algorithm1, run_algorithm1_batch
from .base import SIGMA_MAX_DIM, ExactQuantities, SampledBatch, SyntheticPolicy
from .generate import random_env
from .io import EnvFormatError, builtin_env, env_from_dict, env_to_dict, list_builtin_envs, load_env, save_env
from .policies import LinearSoftmax, SoftmaxBandit

__all__ = [
    "SyntheticPolicy", "SoftmaxBandit", "LinearSoftmax", "ExactQuantities", "SampledBatch", "SIGMA_MAX_DIM",
    "EnvFormatError", "load_env", "save_env", "env_from_dict", "env_to_dict", "builtin_env",
    "list_builtin_envs", "random_env", "run_algorithm1", "run_algorithm1_batch", "Algorithm1Result",
    "Algorithm1BatchResult",
]
