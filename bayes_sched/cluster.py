"""The cluster behind the scheduling loop: an interface a simulator and a real cluster both meet.

An *allocation* maps a job name to the GPUs it holds on each node, an integer array of shape
``(num_nodes,)``; jobs left out hold nothing. The nodes, their GPU types and topologies are data
(:mod:`bayes_sched.cluster_spec`); :class:`ClusterState` is what a policy sees of them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import numpy as np

from bayes_sched.cluster_spec import ClusterSpec
from bayes_sched.errors import AllocationError
from bayes_sched.jobs import JobView
from bayes_sched.topology import NodeTopology

if TYPE_CHECKING:
    import xarray as xr

Allocations = dict[str, np.ndarray]


class PackedAllocations(dict[str, np.ndarray]):
    """Allocations in which some pairs of jobs share their GPUs (space sharing, as Gavel's
    ``_packed`` policies do): both jobs of a pair in :attr:`pairs` hold the same GPUs per node,
    counted once against each node's capacity. A cluster that cannot share GPUs treats it as
    plain allocations (and rejects the oversubscription)."""

    def __init__(self, allocations: Mapping[str, np.ndarray] = (),  # type: ignore[assignment]
                 pairs: Sequence[tuple[str, str]] = ()) -> None:
        super().__init__(allocations)
        self.pairs: tuple[tuple[str, str], ...] = tuple(pairs)


def shared_pairs(allocations: Mapping[str, np.ndarray]) -> tuple[tuple[str, str], ...]:
    """The pairs of jobs sharing GPUs in ``allocations`` (none for plain allocations)."""
    return allocations.pairs if isinstance(allocations, PackedAllocations) else ()


@dataclass(frozen=True, init=False)
class ClusterState:
    """What a policy sees of the cluster: its nodes (GPU type, GPU count, topology), restart
    delays, the round interval, the time and the counters; read-only.

    Build it from a spec, ``ClusterState(spec=spec, now=600.0)``, or for a homogeneous cluster of
    the default type (:meth:`ClusterSpec.homogeneous`) as ``ClusterState(num_nodes, gpus_per_node,
    now)``.

    Attributes:
        spec: the nodes, restart delays and round interval (:class:`ClusterSpec`).
        now: seconds since the start.
        counters: the counters the cluster collected over its last rounds (a counters dataset,
            :mod:`counters.schema`), ``None`` where none are collected.
        time_origin: the second on the counters' time axis (seconds since the Unix epoch) that
            the cluster's time 0 stands for: a real cluster's start (its counters carry
            wall-clock times), 0 for the simulator (its counters carry cluster times).
    """

    spec: ClusterSpec
    now: float
    counters: xr.Dataset | None = field(default=None, compare=False, repr=False)
    time_origin: float = 0.0

    def __init__(self, num_nodes: int | None = None, gpus_per_node: int | None = None,
                 now: float = 0.0, counters: xr.Dataset | None = None, *,
                 spec: ClusterSpec | None = None, time_origin: float = 0.0) -> None:
        if spec is None:
            if num_nodes is None or gpus_per_node is None:
                raise TypeError("ClusterState needs spec= or num_nodes and gpus_per_node")
            spec = ClusterSpec.homogeneous(num_nodes, gpus_per_node)
        elif (num_nodes is not None and num_nodes != spec.num_nodes) or (
                gpus_per_node is not None and gpus_per_node != spec.gpus_per_node):
            raise TypeError(f"ClusterState: num_nodes={num_nodes}, gpus_per_node={gpus_per_node} "
                            f"contradict the spec {spec.describe()}")
        object.__setattr__(self, "spec", spec)
        object.__setattr__(self, "now", float(now))
        object.__setattr__(self, "counters", counters)
        object.__setattr__(self, "time_origin", float(time_origin))

    @property
    def num_nodes(self) -> int:
        return self.spec.num_nodes

    @property
    def gpus_per_node(self) -> int:
        """GPUs on each node; raises :class:`InputError` when nodes differ (see
        :attr:`ClusterSpec.gpus_per_node`); :meth:`capacity` holds for every cluster."""
        return self.spec.gpus_per_node

    @property
    def total_gpus(self) -> int:
        return self.spec.total_gpus

    def capacity(self) -> np.ndarray:
        """GPUs per node, shape ``(num_nodes,)``."""
        return self.spec.capacity()

    @property
    def gpu_types(self) -> tuple[str, ...]:
        """GPU type of each node, shape ``(num_nodes,)``."""
        return self.spec.gpu_types

    def gpus_of_type(self, name: str) -> int:
        """GPUs of type ``name`` in the cluster."""
        return self.spec.gpus_of_type(name)

    @property
    def topology(self) -> NodeTopology:
        """The topology every node shares (raises :class:`InputError` when nodes differ)."""
        return self.spec.topology

    @property
    def restart_delay(self) -> float:
        """Seconds a restarted job loses where its application's delay is not known."""
        return self.spec.restart_delay

    def restart_delay_of(self, application: str) -> float:
        """Seconds a restarted job of ``application`` loses."""
        return self.spec.restart_delay_of(application)

    @property
    def round_interval(self) -> float:
        """Seconds per scheduling round."""
        return self.spec.round_interval


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
                         job_names: Sequence[str], sharing: bool = False) -> Allocations:
    """Check a decision and return it as int arrays, dropping empty entries.

    With ``sharing``, the pairs of a :class:`PackedAllocations` share their GPUs: both jobs of a
    pair must hold the same GPUs per node, and they count once against the capacity.

    Raises:
        AllocationError: an unknown job, a wrong shape, a negative or fractional count, a node
            given more GPUs than it has, or a pair whose jobs hold different GPUs or that names a
            job twice (naming the job or node).
    """
    known = set(job_names)
    result: Allocations = {}
    shape = (state.num_nodes,)
    used = np.zeros(shape, dtype=np.int64)
    arrays = [np.asarray(counts) for counts in allocations.values()]
    if arrays and known.issuperset(allocations) and all(a.shape == shape for a in arrays):
        # Every job known and shaped right: check the counts of all jobs at once (a decision
        # is checked every round); a bad count falls through to the job-by-job loop's message.
        stack = np.stack(arrays)
        whole = stack.dtype.kind in "iu" or (np.all(np.isfinite(stack)) and np.all(
            stack == np.round(stack)))  # integer arrays are finite and whole
        if whole and not np.any(stack < 0):
            ints = stack.astype(np.int64)
            held = np.asarray(ints.any(axis=1), dtype=bool).tolist()
            result = {name: row for name, row, keep in zip(allocations, ints, list(held), strict=True)
                      if keep}
            used = ints.sum(axis=0)
            return _check_pairs_and_capacity(allocations, result, used, state, sharing)
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
    return _check_pairs_and_capacity(allocations, result, used, state, sharing)


def _check_pairs_and_capacity(allocations: Mapping[str, np.ndarray], result: Allocations,
                              used: np.ndarray, state: ClusterState, sharing: bool
                              ) -> Allocations:
    """The rest of :func:`validate_allocations` once each job's counts are valid: pairs hold the
    same GPUs and count once, and no node is oversubscribed."""
    seen: set[str] = set()
    for a, b in shared_pairs(allocations) if sharing else ():
        if a == b or a in seen or b in seen:
            raise AllocationError(f"job '{a if a in seen or a == b else b}' is in two GPU-sharing "
                                  "pairs: expected each job in at most one pair")
        seen.update((a, b))
        held_a, held_b = result.get(a), result.get(b)
        if held_a is None or held_b is None or not np.array_equal(held_a, held_b):
            raise AllocationError(f"jobs '{a}' and '{b}' share GPUs but hold different GPUs per "
                                  "node: expected the same")
        used -= held_b
    capacity = state.capacity()
    over = np.flatnonzero(used > capacity)
    if over.size:
        node = int(over[0])
        raise AllocationError(f"decision oversubscribes node {node}: {int(used[node])} GPUs "
                              f"allocated, it has {int(capacity[node])}")
    return result


def placement_of(counts: np.ndarray) -> tuple[int, ...]:
    """GPUs per used node, in node order (zeros dropped), e.g. ``(2, 2)``."""
    return tuple(int(c) for c in counts if c > 0)


def consolidated_placement(num_replicas: int, gpus_per_node: int) -> tuple[int, ...]:
    """GPUs per node when ``num_replicas`` are packed onto as few nodes as possible."""
    full, rest = divmod(num_replicas, gpus_per_node)
    return (gpus_per_node,) * full + ((rest,) if rest else ())
