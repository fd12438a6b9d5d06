"""Discrete job configurations and their encoding by physical attributes.

A configuration spreads ``gpus_per_node`` GPUs evenly over ``num_nodes`` nodes, with per-GPU
micro-batch ``local_bsz`` and ``accum_steps`` gradient-accumulation steps. The GP sees it through
features in ``[0, 1]``, never through an id, so what one trial teaches carries over to neighbours:
log GPUs per node, log nodes spanned, log GPUs in all, log micro-batch, log(accumulation + 1), and,
where the topology has PCIe switches, the switches spanned per node.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from bayes_sched.errors import InputError
from bayes_sched.jobs import BatchLimits
from perfmodel.throughput import total_batch


@dataclass(frozen=True)
class Configuration:
    """One way to run a job. ``placement`` is GPUs per used node, e.g. ``(2, 2)``."""

    num_nodes: int
    gpus_per_node: int
    local_bsz: int
    accum_steps: int

    @property
    def num_gpus(self) -> int:
        return self.num_nodes * self.gpus_per_node

    @property
    def placement(self) -> tuple[int, ...]:
        return (self.gpus_per_node,) * self.num_nodes

    @property
    def batch_size(self) -> int:
        """Examples per optimiser step, ``K * m * (s + 1)``."""
        return total_batch(self.num_gpus, self.local_bsz, self.accum_steps)


@dataclass(frozen=True)
class CandidateSet:
    """The configurations a search may try and their features.

    Attributes:
        configs: the configurations, length ``C``.
        features: shape ``(C, D)``, each column scaled to ``[0, 1]``.
        feature_names: length ``D``.
    """

    configs: tuple[Configuration, ...]
    features: np.ndarray
    feature_names: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.configs)

    def column(self, name: str) -> np.ndarray:
        """An attribute of every configuration (``num_nodes``, ``num_gpus``, ...), shape ``(C,)``."""
        return np.array([getattr(c, name) for c in self.configs])


def _log_scaled(values: np.ndarray, top: float) -> np.ndarray:
    return np.log2(values) / max(np.log2(top), 1.0)


def enumerate_candidates(limits: BatchLimits, num_nodes: int, gpus_per_node: int,
                         max_gpus: int | None = None, gpus_per_switch: int | None = None,
                         batch_grid: int = 5, accum_choices: tuple[int, ...] = (0, 1, 3)
                         ) -> CandidateSet:
    """Every even placement of at most ``max_gpus`` GPUs on a ``num_nodes x gpus_per_node``
    cluster, crossed with a geometric grid of ``batch_grid`` micro-batches in the job's limits and
    the given accumulation steps, keeping total batches within ``[B0, max_batch_size]``.

    Raises:
        InputError: no configuration fits (naming the limit at fault).
    """
    if num_nodes < 1 or gpus_per_node < 1:
        raise InputError(f"cluster of {num_nodes} nodes x {gpus_per_node} GPUs: expected at "
                         "least one node with one GPU", column="num_nodes")
    max_gpus = num_nodes * gpus_per_node if max_gpus is None else max_gpus
    if max_gpus < 1:
        raise InputError(f"max_gpus is {max_gpus}: expected at least 1", column="max_gpus")
    micro = np.unique(np.round(np.geomspace(limits.min_local_bsz, limits.max_local_bsz,
                                            batch_grid)).astype(int))
    configs = [
        Configuration(n, g, int(m), s)
        for n in range(1, num_nodes + 1) for g in range(1, gpus_per_node + 1)
        if n * g <= max_gpus
        for m in micro for s in accum_choices
        if limits.init_batch_size <= total_batch(n * g, int(m), s) <= limits.max_batch_size
    ]
    if not configs:
        raise InputError(
            f"no feasible configuration: batch limits {limits.init_batch_size}..."
            f"{limits.max_batch_size} examples cannot be met with micro-batches "
            f"{limits.min_local_bsz}..{limits.max_local_bsz} on at most {max_gpus} GPUs",
            column="max_batch_size")
    attrs = np.array([(c.gpus_per_node, c.num_nodes, c.num_gpus, c.local_bsz, c.accum_steps + 1)
                      for c in configs], dtype=np.float64)
    tops = (gpus_per_node, num_nodes, max_gpus, limits.max_local_bsz, max(accum_choices) + 1)
    columns = [_log_scaled(attrs[:, i], top) for i, top in enumerate(tops)]
    names = ["gpus_per_node", "nodes_spanned", "gpus", "local_bsz", "accum_steps"]
    if gpus_per_switch is not None and gpus_per_node > gpus_per_switch:
        switches = np.ceil(attrs[:, 0] / gpus_per_switch)
        columns.append((switches - 1) / max(math.ceil(gpus_per_node / gpus_per_switch) - 1, 1))
        names.append("switches_per_node")
    return CandidateSet(tuple(configs), np.stack(columns, axis=1), tuple(names))
