"""The contention network's posterior as a scheduler's state: per node, what the counters say of
hidden resource use (Banerjee et al., ICML 2020: a Bayesian network over performance counters,
built from the architecture, whose posterior is the state of an RL scheduler).

:func:`posterior_features` turns a counters window into that state; the estimation stage's
:class:`ContentionNetworkEstimator` (``contention_network``) publishes it each round as the
``resource_use`` estimate (:mod:`bayes_sched.resource_use`), inferred only when a decision reads
it. The learning environments (:mod:`bayes_sched.gym`) call the same function, so training and
decisions see one definition of the state. Only counters go in: never a simulator's truth.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Annotated, Any

import numpy as np

from bayes_sched.cluster import ClusterState
from bayes_sched.estimates import Estimate
from bayes_sched.jobs import JobView
from bayes_sched.registry import Range
from bayes_sched.resource_use import RESOURCE_USE
from bayes_sched.topology import NodeTopology

#: SVI steps of the per-round fit (see :func:`posterior_features`).
POSTERIOR_STEPS = 20
#: Posterior draws the features summarise.
POSTERIOR_DRAWS = 64
#: Counter samples of the latest round the features average over (the contention law's samples
#: per round).
POSTERIOR_RECENT = 6


def posterior_size(topology: NodeTopology) -> int:
    """Posterior features per node: a mean and a spread for each PCIe switch, host DRAM, the NIC
    and the GPUs' mean SM use."""
    return 2 * (topology.num_switches + 3)


def posterior_features(counters: Any, num_nodes: int, topology: NodeTopology,
                       steps: int = POSTERIOR_STEPS, seed: int = 0) -> np.ndarray:
    """The contention network's posterior over each node's hidden resource use, from the counters
    window alone (Banerjee et al.'s state).

    The window (``counters``: a :class:`~bayes_sched.cluster.ClusterState`'s counters, or
    ``None``) goes through :func:`~bayes_sched.contention.inference.prepare` (every node of
    ``topology``) and a short, seeded SVI fit (``steps`` steps from the data,
    :func:`~bayes_sched.contention.inference.fit_svi`; the fit is run once per decision round,
    so it is short: its convergence warning is silenced), then
    :func:`~bayes_sched.contention.inference.resource_utilization` over
    :data:`POSTERIOR_DRAWS` draws. Per node, for each PCIe switch, host DRAM, the NIC and the mean
    over GPUs of SM use: the posterior mean and standard deviation of load over capacity
    (fractions) averaged over the window's last :data:`POSTERIOR_RECENT` samples. Shape
    ``(num_nodes * posterior_size(topology),)``, node-major; zeros where there are no counters
    yet or no finite sample to infer from.
    """
    per_node = posterior_size(topology)
    out = np.zeros((num_nodes, per_node), np.float32)
    if counters is None:
        return out.ravel()
    from bayes_sched.contention.inference import fit_svi, prepare, resource_utilization
    from counters.errors import CountersError

    try:
        window = prepare(counters, topology, where="counters window")
    except CountersError:
        return out.ravel()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        draws = fit_svi(window, num_steps=steps, num_samples=POSTERIOR_DRAWS, seed=seed)
    load = resource_utilization(draws, window)[:, -POSTERIOR_RECENT:].mean(1).numpy()
    nodes = min(num_nodes, load.shape[1])
    shared = topology.num_switches + 2  # switches, DRAM, NIC; then one column per GPU's SMs
    per_draw = np.concatenate([load[:, :nodes, :shared],
                               load[:, :nodes, shared:].mean(-1, keepdims=True)], axis=-1)
    out[:nodes, 0::2] = per_draw.mean(0)
    out[:nodes, 1::2] = per_draw.std(0)
    return np.nan_to_num(out).ravel()


class NetworkResourceUse:
    """One round's :class:`~bayes_sched.resource_use.ResourceUse`: the counters window, inferred
    on the first :meth:`features` call (see :func:`posterior_features`)."""

    def __init__(self, counters: Any, num_nodes: int, topology: NodeTopology, steps: int,
                 seed: int) -> None:
        self._args = (counters, num_nodes, topology, steps, seed)
        self._features: np.ndarray | None = None
        #: Whether the inference ran.
        self.inferred = False

    def features(self) -> np.ndarray:
        if self._features is None:
            counters, num_nodes, topology, steps, seed = self._args
            self._features = posterior_features(counters, num_nodes, topology, steps, seed)
            self.inferred = True
        return self._features


class ContentionNetworkEstimator:
    """The ``contention_network`` estimator (see the module): each round, the cluster's counters
    window as a :class:`NetworkResourceUse` under ``resource_use`` (every node with the first
    node's topology). ``steps``: SVI steps per inference; ``seed``: the fits' seed."""

    name = "contention_network"

    def __init__(self, steps: Annotated[int, Range(1, 10_000)] = POSTERIOR_STEPS,
                 seed: int = 0) -> None:
        self.steps, self.seed = int(steps), int(seed)
        self._last: NetworkResourceUse | None = None
        self._inferences = 0

    def estimate(self, cluster: ClusterState, jobs: Sequence[JobView]) -> list[JobView]:
        if self._last is not None and self._last.inferred:
            self._inferences += 1
        self._last = NetworkResourceUse(cluster.counters, cluster.spec.num_nodes,
                                        cluster.spec.nodes[0].topology, self.steps, self.seed)
        return list(jobs)

    def published(self) -> Sequence[Estimate[Any]]:
        return [] if self._last is None else [Estimate(RESOURCE_USE, self.name, self._last)]

    def stats(self) -> Mapping[str, float]:
        last = int(self._last is not None and self._last.inferred)
        return {"contention_network_inferences": float(self._inferences + last)}


__all__ = ["POSTERIOR_DRAWS", "POSTERIOR_RECENT", "POSTERIOR_STEPS", "ContentionNetworkEstimator",
           "NetworkResourceUse", "posterior_features", "posterior_size"]
