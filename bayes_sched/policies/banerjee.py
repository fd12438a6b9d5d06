"""Banerjee et al. (ICML 2020)'s RL half: a placement policy whose state includes what the
cluster's counters say of hidden resource use, as a policy reading trained weights.

The paper's scheduler reads a Bayesian network's posterior over hidden resource use; this policy
reads the counters window itself (per node, the mean PCIe rates and GPU utilisation:
:func:`~bayes_sched.policies.learned.counter_features`), the paper's raw-counter ablation. It
places waiting jobs as :class:`~bayes_sched.policies.harmony.HarmonyPolicy` does, with weights
trained by :mod:`bayes_sched.gym.train` without Harmony's heuristics and reward model on the
contention world (``experiments/train_learned.py``; shipped:
``bayes_sched/data/learned/banerjee-contention.pt``). The counter features are per node, so the
weights fit a cluster of as many nodes as they were trained on (else one line).
"""

from __future__ import annotations

from bayes_sched.policies.harmony import LearnedPlacementPolicy
from bayes_sched.policies.learned import DATA_DIR


class BanerjeePolicy(LearnedPlacementPolicy):
    """RL placement over counters (see the module); ``weights``: a weights file (default: the
    shipped contention-world one)."""

    name = "banerjee"
    kind = "banerjee"

    def __init__(self, weights: str = "") -> None:
        super().__init__(weights or str(DATA_DIR / "banerjee-contention.pt"))


__all__ = ["BanerjeePolicy"]
