"""Banerjee et al. (ICML 2020)'s RL half: a placement policy whose state is what the cluster's
counters say of hidden resource use, as a policy reading trained weights.

``state="posterior"`` (the paper's method): the state is the contention network's posterior over
each node's hidden resource use, inferred by the estimation stage from the counters window the
cluster collected (the ``resource_use`` need, :mod:`bayes_sched.resource_use`; default estimator
``contention_network``, :mod:`bayes_sched.contention.state`, run only in rounds with a decision
to make): per node and resource (each PCIe switch, host DRAM, the NIC, the GPUs' SM use), the
posterior mean and standard deviation of load over capacity. ``state="counters"`` (the paper's
ablation): the counters window itself (per node, the mean PCIe rates and GPU utilisation:
:func:`~bayes_sched.policies.learned.counter_features`). Either way the policy sees only counters
a real cluster collects, never the simulator's truth.

It places waiting jobs as :class:`~bayes_sched.policies.harmony.HarmonyPolicy` does, with weights
trained by :mod:`bayes_sched.gym.train` without Harmony's heuristics and reward model on the
contention world (``experiments/train_learned.py --policy banerjee --world contention --state
...``; shipped: ``bayes_sched/data/learned/banerjee-contention-posterior.pt`` and
``banerjee-contention.pt``). Weights trained on the other state are refused (one line). The
features are per node, so the weights fit a cluster of as many nodes (and, for the posterior, the
same node topology) as they were trained on (else one line).
"""

from __future__ import annotations

from collections.abc import Mapping

from bayes_sched.errors import InputError
from bayes_sched.policies.harmony import LearnedPlacementPolicy
from bayes_sched.policies.learned import DATA_DIR

#: The states this policy reads, and the shipped weights of each.
BANERJEE_WEIGHTS = {"posterior": "banerjee-contention-posterior.pt",
                    "counters": "banerjee-contention.pt"}


class BanerjeePolicy(LearnedPlacementPolicy):
    """RL placement over the counters' posterior or the counters (see the module);
    ``state``: ``"posterior"`` or ``"counters"``; ``weights``: a weights file of that state
    (default: the shipped contention-world one)."""

    name = "banerjee"
    kind = "banerjee"

    def __init__(self, weights: str = "", state: str = "posterior") -> None:
        if state not in BANERJEE_WEIGHTS:
            raise InputError(f"banerjee state {state!r}: expected one of "
                             f"{', '.join(BANERJEE_WEIGHTS)}")
        super().__init__(weights or str(DATA_DIR / BANERJEE_WEIGHTS[state]))
        if self.state != state:
            raise InputError(f"{self.path}: weights trained on the {self.state!r} state: "
                             f"expected {state!r} (banerjee's state option)")
        #: What the decision reads from the estimation stage, and by which estimator by default.
        self.needs: tuple[str, ...] = ("resource_use",) if state == "posterior" else ()
        self.default_estimators: Mapping[str, str] = (
            {"resource_use": "contention_network"} if state == "posterior" else {})


__all__ = ["BANERJEE_WEIGHTS", "BanerjeePolicy"]
