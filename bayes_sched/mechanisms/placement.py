"""Placement: which nodes' GPUs a job takes, given the GPUs free per node.

Policies decide how many GPUs (and of which type) a job gets; these helpers turn that into GPUs
per node, shape ``(num_nodes,)``, taking them from ``free`` (GPUs free per node, updated in place
when they fit):

* :func:`pack`: consolidated, most-free node first (as few nodes as possible), as the Pollux
  artifact's baselines place jobs;
* :func:`spread`: load balancing, one GPU at a time on the most-free node;
* :func:`keep_or_pack`: a round's placement that restarts no job it need not: each job given
  the GPUs it holds keeps them where they are still free, the others are packed, most GPUs
  first, onto the nodes each may use (Shockwave's and Sia's placement);
* :func:`free_gpus`: the GPUs free per node once given allocations hold theirs.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from bayes_sched.cluster import Allocations, ClusterState

#: One job to place: its name, the GPUs it is to get, the GPUs per node it holds now ``(N,)``
#: and the nodes it may use ``(N,)`` bool (e.g. the nodes of the GPU type it is given).
Request = tuple[str, int, np.ndarray, np.ndarray]


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


def keep_or_pack(requests: Sequence[Request], free: np.ndarray) -> tuple[Allocations, list[str]]:
    """GPUs per node for ``requests``, taken from ``free`` (GPUs free per node ``(N,)``,
    consumed in place), and the names of the jobs that did not fit.

    In the requests' order, a job that holds exactly its GPUs, all on nodes it may use and all
    still free, keeps them (no restart). The others, most GPUs first (ties in the requests'
    order), are packed (:func:`pack`) onto the free GPUs of the nodes they may use. The answer
    holds the kept jobs first, then the packed ones, in the order they were placed."""
    out: Allocations = {}
    rest: list[tuple[str, int, np.ndarray]] = []
    if not requests:
        return out, []
    held = np.stack([np.asarray(r[2], dtype=np.int64) for r in requests])  # (J, N)
    allowed = np.stack([np.asarray(r[3], dtype=bool) for r in requests])
    may_keep = ((held.sum(axis=1) == np.array([r[1] for r in requests]))
                & ~np.any((held > 0) & ~allowed, axis=1))
    # Where every job that may keep its GPUs finds them free together, each finds them free
    # after those before it kept theirs: all keep, as the one-by-one rule below decides.
    all_fit = bool(np.all(held[may_keep].sum(axis=0) <= free))
    for i, (name, gpus, _, _) in enumerate(requests):
        if may_keep[i] and (all_fit or np.all(held[i] <= free)):
            out[name] = held[i].copy()
            free -= held[i]
        else:
            rest.append((name, gpus, allowed[i]))
    unplaced: list[str] = []
    for name, gpus, allowed in sorted(rest, key=lambda r: -r[1]):
        counts = pack(gpus, np.where(allowed, free, 0))
        if counts is None:
            unplaced.append(name)
            continue
        free -= counts
        out[name] = counts
    return out, unplaced


__all__ = ["Request", "free_gpus", "keep_or_pack", "pack", "spread"]
