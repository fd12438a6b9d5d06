"""One round's placement decision built one step at a time: the state and action a learned
scheduler (and the Gymnasium environments of :mod:`bayes_sched.gym`) share.

A round starts from the jobs holding GPUs (they keep them: placement is non-preemptive, as in
Harmony) and the waiting jobs in *slots* (oldest first, at most ``max_jobs``; later jobs wait
for a slot). A step either places one waiting job, with its user's GPU count, by one of the
world's *modes*, or stops the round:

* ``("pack", None)``: bin packing, the job's GPUs from the nodes with most free GPUs first
  (:func:`~bayes_sched.mechanisms.placement.pack`, as few nodes as possible);
* ``("spread", None)``: load balancing, one GPU at a time on the node with most free GPUs (the
  job over as many nodes as its GPUs allow; :func:`~bayes_sched.mechanisms.placement.spread`);
* ``("pack", gpu_type)``: bin packing on the nodes of one GPU type only (a throughput-table
  world runs a job on one type).

Action ``slot * len(modes) + mode`` places the job in ``slot`` by ``modes[mode]``; the last
action, :attr:`RoundBuilder.stop`, ends the round. :meth:`RoundBuilder.mask` says which actions
are possible (a job whose GPUs fit; stop always). :meth:`RoundBuilder.observation` is a flat
float32 vector of :func:`observation_size` entries, padded with zeros for empty slots: what a real
scheduler sees (job views, the cluster's free GPUs, per GPU type the modes name) and, where
given, ``extra`` features (the contention world's counters or a posterior over them).

Used by the learned policies at decision time and by the environments at training time, so both
see one definition of state and action.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import numpy as np

from bayes_sched.cluster import Allocations, ClusterState
from bayes_sched.jobs import JobView
from bayes_sched.mechanisms.placement import free_gpus, pack, spread

Mode = tuple[str, str | None]

#: Features per job slot: present, GPUs asked / cluster GPUs, log age (h), log attained service
#: (GPU-h), placed this round, log restarts, progress fraction, and an 8-way one-hot of the
#: application's name hash.
SLOT_FEATURES = 15
_APP_BUCKETS = 8
#: Cluster features besides the per-type ones: free fraction, fully free nodes' fraction,
#: fraction of nodes shared by two or more jobs, jobs waiting beyond the slots / slots.
_CLUSTER_FEATURES = 4

PLACEMENT_MODES: tuple[Mode, ...] = (("pack", None), ("spread", None))


def type_modes(types: Sequence[str]) -> tuple[Mode, ...]:
    """Bin packing on each GPU type (the modes of a throughput-table world)."""
    return tuple(("pack", t) for t in types)


def mode_types(modes: Sequence[Mode]) -> tuple[str, ...]:
    """The GPU types the modes name, in order (none for untyped modes): the types whose free
    fractions the observation carries, so that weights for untyped modes fit any cluster."""
    return tuple(dict.fromkeys(t for _, t in modes if t is not None))


def observation_size(max_jobs: int, modes: Sequence[Mode], extra: int = 0) -> int:
    """Length of :meth:`RoundBuilder.observation`."""
    return max_jobs * SLOT_FEATURES + _CLUSTER_FEATURES + len(mode_types(modes)) + extra


def _progress(job: JobView) -> float:
    if job.target_steps:
        return float(np.clip(job.progress / job.target_steps, 0.0, 1.0))
    return float(np.clip(job.epochs / max(job.target_epochs, 1), 0.0, 1.0))


class RoundBuilder:
    """One round's decision, built step by step (see the module).

    Args:
        state: the cluster as the policy sees it.
        jobs: the active jobs' views.
        max_jobs: job slots (waiting jobs beyond them wait for a later round).
        modes: the placement modes (:data:`PLACEMENT_MODES`, :func:`type_modes`).
        extra: further observation features (shape ``(k,)``), appended as given.
    """

    def __init__(self, state: ClusterState, jobs: Sequence[JobView], max_jobs: int,
                 modes: Sequence[Mode], extra: np.ndarray | None = None) -> None:
        self.state = state
        self.modes = tuple(modes)
        self.max_jobs = int(max_jobs)
        self.types = mode_types(self.modes)
        self._node_types = np.array(state.gpu_types)
        self.allocations: Allocations = {j.name: np.asarray(j.allocation, dtype=np.int64)
                                         for j in jobs if j.num_gpus > 0}
        self.free = free_gpus(state, self.allocations)
        waiting = sorted((j for j in jobs if j.num_gpus == 0),
                         key=lambda j: (j.submit_time, j.name))
        self.slots: list[JobView] = waiting[:self.max_jobs]
        self.overflow = len(waiting) - len(self.slots)
        self.placed: set[int] = set()
        self.extra = np.zeros(0, np.float32) if extra is None else np.asarray(extra, np.float32)

    @property
    def num_actions(self) -> int:
        return self.max_jobs * len(self.modes) + 1

    @property
    def stop(self) -> int:
        """The action that ends the round."""
        return self.num_actions - 1

    def _nodes(self, mode: Mode) -> np.ndarray:
        """Nodes mode ``mode`` may use (bool, shape ``(num_nodes,)``)."""
        gpu_type = mode[1]
        return np.ones(len(self.free), bool) if gpu_type is None else self._node_types == gpu_type

    def mask(self) -> np.ndarray:
        """Possible actions (bool, shape ``(num_actions,)``): a waiting, unplaced job whose GPUs
        fit the nodes its mode may use; stop always."""
        mask = np.zeros(self.num_actions, bool)
        mask[self.stop] = True
        for slot, job in enumerate(self.slots):
            if slot in self.placed:
                continue
            for m, mode in enumerate(self.modes):
                mask[slot * len(self.modes) + m] = (
                    self.free[self._nodes(mode)].sum() >= job.requested_replicas)
        return mask

    def can_place(self) -> bool:
        """Whether any action other than stop is possible."""
        return bool(self.mask()[:-1].any())

    def place(self, action: int) -> None:
        """Carry out ``action`` (not stop).

        Raises:
            ValueError: ``action`` outside the mask (one line naming it).
        """
        if not (0 <= action < self.stop) or not self.mask()[action]:
            raise ValueError(f"action {action} is outside the mask: expected one of "
                             f"{np.flatnonzero(self.mask()).tolist()}")
        slot, m = divmod(int(action), len(self.modes))
        kind, _ = mode = self.modes[m]
        nodes = self._nodes(mode)
        free = np.where(nodes, self.free, 0)
        need = self.slots[slot].requested_replicas
        counts = pack(need, free) if kind == "pack" else spread(need, free)
        if counts is None:  # the mask said it fits
            raise ValueError(f"action {action}: job '{self.slots[slot].name}' does not fit")
        self.free = self.free - counts
        self.allocations[self.slots[slot].name] = counts
        self.placed.add(slot)

    def observation(self) -> np.ndarray:
        """The flat observation (float32, :func:`observation_size` entries)."""
        total = max(self.state.total_gpus, 1)
        slots = np.zeros((self.max_jobs, SLOT_FEATURES), np.float32)
        for i, job in enumerate(self.slots):
            row = slots[i]
            row[0] = 1.0
            row[1] = job.requested_replicas / total
            row[2] = np.log1p(job.age / 3600.0)
            row[3] = np.log1p(job.attained_service / 3600.0)
            row[4] = float(i in self.placed)
            row[5] = np.log1p(job.num_restarts)
            row[6] = _progress(job)
            row[7 + zlib.crc32(job.application.encode()) % _APP_BUCKETS] = 1.0
        capacity = self.state.capacity()
        held = capacity - self.free
        sharers = np.zeros(len(capacity))
        for counts in self.allocations.values():
            sharers += counts > 0
        cluster = [self.free.sum() / total, float(np.mean(held == 0)),
                   float(np.mean(sharers > 1)), self.overflow / max(self.max_jobs, 1)]
        per_type = [self.free[self._node_types == t].sum() / max(capacity[self._node_types == t]
                                                                  .sum(), 1)
                    for t in self.types]
        return np.concatenate([slots.ravel(), np.array(cluster + per_type, np.float32),
                               self.extra]).astype(np.float32)


__all__ = ["PLACEMENT_MODES", "SLOT_FEATURES", "Mode", "RoundBuilder", "mode_types",
           "observation_size", "type_modes"]
