"""Placement: which nodes' GPUs a job takes, given the GPUs free per node.

Policies decide how many GPUs (and of which type) a job gets; these helpers turn that into GPUs
per node, shape ``(num_nodes,)``, taking them from ``free`` (GPUs free per node, updated in place
when they fit):

* :func:`pack`: consolidated, most-free node first (as few nodes as possible), as the Pollux
  artifact's baselines place jobs;
* :func:`spread`: load balancing, one GPU at a time on the most-free node;
* :func:`free_gpus`: the GPUs free per node once given allocations hold theirs.
"""

from __future__ import annotations

import numpy as np

from bayes_sched.cluster import Allocations, ClusterState


def pack(num_gpus: int, free: np.ndarray) -> np.ndarray | None:
    """Consolidated placement: take GPUs from the node with the most free GPUs first (ties: lowest
    index), as the artifact's baselines do. Returns GPUs per node, or ``None`` if they do not fit.

    ``free`` (shape ``(num_nodes,)``) is updated in place when the GPUs fit.
    """
    if num_gpus > free.sum():
        return None
    counts = np.zeros_like(free)
    left = num_gpus
    while left > 0:
        node = int(np.argmax(free))  # argmax returns the first (lowest-index) maximum
        take = min(int(free[node]), left)
        counts[node] += take
        free[node] -= take
        left -= take
    return counts


def free_gpus(cluster: ClusterState, allocations: Allocations) -> np.ndarray:
    """Free GPUs per node given ``allocations``, shape ``(num_nodes,)``."""
    free = cluster.capacity()
    for counts in allocations.values():
        free -= counts
    return free


def spread(num_gpus: int, free: np.ndarray) -> np.ndarray | None:
    """Load-balancing placement: one GPU at a time on the node with the most free GPUs (ties:
    lowest index). Returns GPUs per node, or ``None`` if they do not fit; ``free`` (shape
    ``(num_nodes,)``) is updated in place when they fit."""
    if num_gpus > free.sum():
        return None
    counts = np.zeros_like(free)
    for _ in range(num_gpus):
        node = int(np.argmax(free))
        counts[node] += 1
        free[node] -= 1
    return counts


__all__ = ["free_gpus", "pack", "spread"]
