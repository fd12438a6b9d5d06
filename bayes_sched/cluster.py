"""The cluster behind the scheduling loop: an interface a simulator and a real cluster both meet.

An *allocation* maps a job name to the GPUs it holds on each node, an integer array of shape
``(num_nodes,)``; jobs left out hold nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import numpy as np

from bayes_sched.errors import AllocationError
from bayes_sched.jobs import JobView

if TYPE_CHECKING:
    import xarray as xr

Allocations = dict[str, np.ndarray]


@dataclass(frozen=True)
class ClusterState:
    """What a policy sees of the cluster: its shape and the time.

    Attributes:
        num_nodes: nodes in the cluster.
        gpus_per_node: GPUs on each node.
        now: seconds since the start.
        counters: the counters the cluster collected over its last rounds (a counters dataset,
            :mod:`counters.schema`), ``None`` where none are collected.
    """

    num_nodes: int
    gpus_per_node: int
    now: float
    counters: xr.Dataset | None = field(default=None, compare=False, repr=False)

    @property
    def total_gpus(self) -> int:
        return self.num_nodes * self.gpus_per_node

    def capacity(self) -> np.ndarray:
        """GPUs per node, shape ``(num_nodes,)``."""
        return np.full(self.num_nodes, self.gpus_per_node, dtype=np.int64)


class Cluster(Protocol):
    """A cluster the scheduling loop can drive; :class:`~bayes_sched.sim.simulator.SimulatedCluster`
    is the first implementation."""

    @property
    def state(self) -> ClusterState: ...

    def job_views(self) -> list[JobView]:
        """The active (submitted, unfinished) jobs."""
        ...

    def allocations(self) -> Allocations:
        """The allocation in force."""
        ...

    def apply(self, allocations: Mapping[str, np.ndarray]) -> None:
        """Carry out a decision; raises :class:`AllocationError` (changing nothing) if it cannot."""
        ...

    def advance(self, seconds: float) -> None:
        """Let ``seconds`` pass (a simulator simulates them; a real cluster waits)."""
        ...

    def done(self) -> bool:
        """Whether every job has finished (a real cluster never is)."""
        ...


def validate_allocations(allocations: Mapping[str, np.ndarray], state: ClusterState,
                         job_names: Sequence[str]) -> Allocations:
    """Check a decision and return it as int arrays, dropping empty entries.

    Raises:
        AllocationError: an unknown job, a wrong shape, a negative or fractional count, or a node
            given more GPUs than it has (naming the job or node).
    """
    known = set(job_names)
    result: Allocations = {}
    used = np.zeros(state.num_nodes, dtype=np.int64)
    for name, counts in allocations.items():
        if name not in known:
            raise AllocationError(f"allocation for unknown or finished job '{name}'")
        array = np.asarray(counts)
        if array.shape != (state.num_nodes,):
            raise AllocationError(f"allocation of job '{name}' has shape {array.shape}: expected "
                                  f"({state.num_nodes},), GPUs per node")
        if not np.all(np.isfinite(array)) or np.any(array < 0) or np.any(array != np.round(array)):
            raise AllocationError(f"allocation of job '{name}' is {array.tolist()}: expected "
                                  "non-negative integers")
        ints = array.astype(np.int64)
        if ints.any():
            result[name] = ints
            used += ints
    over = np.flatnonzero(used > state.gpus_per_node)
    if over.size:
        node = int(over[0])
        raise AllocationError(f"decision oversubscribes node {node}: {int(used[node])} GPUs "
                              f"allocated, it has {state.gpus_per_node}")
    return result


def placement_of(counts: np.ndarray) -> tuple[int, ...]:
    """GPUs per used node, in node order (zeros dropped), e.g. ``(2, 2)``."""
    return tuple(int(c) for c in counts if c > 0)


def consolidated_placement(num_replicas: int, gpus_per_node: int) -> tuple[int, ...]:
    """GPUs per node when ``num_replicas`` are packed onto as few nodes as possible."""
    full, rest = divmod(num_replicas, gpus_per_node)
    return (gpus_per_node,) * full + ((rest,) if rest else ())
