"""ugrpo: GRPO's policy gradient is a U-statistic (arXiv 2603.01162).

Train with vanilla / GRPO / oracle gradient estimators, measure their gradient error
against the true gradient as the group size G grows, and plan G for a fixed sampling
budget N = B x G from a small pilot run.
"""

__version__ = "0.1.0"
