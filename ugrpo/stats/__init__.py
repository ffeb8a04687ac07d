"""Pure tensor math: estimators, U-statistic, exact MSE, variance components, planner, Theorem 8 asymptotics.

Imports only torch / numpy / scipy. No I/O, no models. Every formula is numbered in
docs/math.md (M1, M2, ...) and cited by the function that computes it.
"""

from .advantages import (
    BASELINES,
    AdvantageResult,
    BaselineName,
    compute_advantages,
    loo_advantages,
    mean_advantages,
    oracle_advantages,
    vanilla_advantages,
    zero_std_groups,
)
from .asymptotics import (
    GapLimit,
    estimator_covariance,
    gap_limit,
    gap_weights,
    identifiable_subspace,
    lyapunov_covariance,
    prompt_covariances,
    weighted_chi2_cdf,
    weighted_chi2_quantile,
    weighted_chi2_sample,
)
from .bootstrap_ci import Estimate
from .components import (
    MIN_PILOT_GROUP,
    VarianceComponents,
    estimate_components,
    gaussian_sketch,
    point_estimates,
)
from .estimator import policy_gradient, prompt_gradients
from .exact_mse import (
    ESTIMATORS,
    EstimatorName,
    PolicyMoments,
    PromptMoments,
    hoeffding_split,
    minibatch_mse,
    policy_moments,
    prompt_error,
    prompt_mse,
    uniform_mse,
)
from .planner import GroupSizePlan, bound, candidate_groups, plan_group_size
from .ustat import HoeffdingParts, grpo_kernel, hoeffding_decomposition, pairwise_ustatistic

__all__ = [
    "BASELINES", "AdvantageResult", "BaselineName", "compute_advantages", "loo_advantages", "mean_advantages",
    "oracle_advantages", "vanilla_advantages", "zero_std_groups",
    "policy_gradient", "prompt_gradients",
    "HoeffdingParts", "grpo_kernel", "hoeffding_decomposition", "pairwise_ustatistic",
    "ESTIMATORS", "EstimatorName", "PolicyMoments", "PromptMoments", "hoeffding_split", "minibatch_mse",
    "policy_moments", "prompt_error", "prompt_mse", "uniform_mse",
    "MIN_PILOT_GROUP", "Estimate", "VarianceComponents", "estimate_components", "point_estimates", "gaussian_sketch",
    "GroupSizePlan", "bound", "candidate_groups", "plan_group_size",
    "GapLimit", "estimator_covariance", "gap_limit", "gap_weights", "identifiable_subspace", "lyapunov_covariance",
    "prompt_covariances", "weighted_chi2_cdf", "weighted_chi2_quantile", "weighted_chi2_sample",
]
