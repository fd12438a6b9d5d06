"""What a policy reads for the ``resource_use`` need: the contract, in the core.

The contention network (:mod:`bayes_sched.contention`) infers, from the counters a cluster
collects, a posterior over each node's hidden use of its shared resources (each PCIe switch, host
DRAM, the NIC, the GPUs' SMs). The estimation stage publishes it under :data:`RESOURCE_USE` as a
:class:`ResourceUse` (the estimator: :class:`~bayes_sched.contention.state.
ContentionNetworkEstimator`), which a learned policy reads as its state (Banerjee et al., ICML
2020). This module is core: it imports no estimator, policy or simulator.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from bayes_sched.estimates import Need


class ResourceUse(Protocol):
    """The posterior over each node's hidden resource use in the round's counters window."""

    def features(self) -> np.ndarray:
        """Per node (node-major), for each PCIe switch, host DRAM, the NIC and the GPUs' mean SM
        use: the posterior mean and standard deviation of load over capacity (fractions),
        ``(num_nodes * 2 * (switches + 3),)`` float32; zeros where there is nothing to infer
        from. Computed on first call (an inference), then kept."""
        ...


RESOURCE_USE: Need[ResourceUse] = Need("resource_use")

__all__ = ["RESOURCE_USE", "ResourceUse"]
