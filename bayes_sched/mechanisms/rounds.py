"""Gavel's round mechanism: time fractions per (combination, GPU type) -> one round's GPUs per node.

A time-sharing policy (the Gavel family) computes an *allocation*: for each combination (a job
alone, or two jobs sharing GPUs) and GPU type the fraction of time it should run there. This
module turns the allocation in force into rounds the way Gavel's scheduler does
(``scheduler/scheduler.py``, Narayanan et al., OSDI 2020, section 5). Its state, one
:class:`Rounds` per cluster's type set, is per combination (:class:`~bayes_sched.mechanisms.
combo_store.ComboStore`): time received and deficit per type, and the allocation in force.

* **Time received** (:meth:`Rounds.account`). From the jobs' own reports: a job that held
  ``g`` GPUs and attained ``a`` more GPU-seconds since the last round ran
  ``min(max(a / g, 0), seconds since the last round)`` seconds on the type of its first node;
  a pair that ran together (both members still holding the GPUs the pair was placed on) is
  credited the longer of its members' times, and its members nothing alone. Every
  combination starts with half a round of credit on each type (Gavel's
  ``time_per_iteration / 2``); the time all combinations ran on type ``t`` is ``W[t]``.
* **Reset** (:meth:`Rounds.reset_time`, at each recompute of the allocation; Gavel's
  ``_reset_time_run_so_far``): ``deficit[c, t] += fraction[c, t] * (now - last reset) -
  (time[c, t] - half round)``, then ``time[c, t] = half round`` and ``W[t] = half round *
  (combinations admitted)``.
* **Priority** (:func:`priorities`) of combination ``c`` on type ``t``:
  ``fraction[c, t] / (time[c, t] / W[t])`` where ``c`` has run on ``t`` (``W[t] > 0`` and
  ``time[c, t] > 0``), else ``fraction[c, t] * 1e9``; 0 where the fraction is 0, ``c`` cannot
  run on ``t``, or ``c`` is not in the allocation in force.
* **Greedy assignment** (:meth:`Rounds.greedy`). Per GPU type in the order given (Gavel's
  V100, P100, K80, then other types by name, :func:`cluster_types`; the policy may shuffle it),
  combinations in decreasing (priority, deficit, fraction), ties in candidate order, take GPUs
  while their scale factor fits in the type's GPUs left and no member is busy; each job runs
  in one combination on one type per round.
* **Placement and lease extension** (:meth:`Rounds.place`). Per type, scale factors largest
  first: a combination scheduled on the nodes it already holds, all of that type, all still
  free and as many GPUs as its scale factor (for a pair: placed there last round and both
  members holding them), keeps them (its lease is extended: no restart); the others, if in the
  allocation in force or profiled this round, fill the type's nodes in node order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

from bayes_sched.cluster import ClusterState, PackedAllocations
from bayes_sched.jobs import JobView
from bayes_sched.mechanisms.combo_store import Combo, ComboStore

#: Gavel's fixed worker-type order (``_schedule_jobs_on_workers``); other types follow by name.
GAVEL_TYPE_ORDER = ("v100", "p100", "k80")

#: :meth:`Rounds.greedy` scans the ranking in windows of this many combinations (growing to the
#: second number while none is taken).
_GREEDY_CHUNK = 32
_GREEDY_CHUNK_MAX = 2048


def cluster_types(cluster: ClusterState) -> tuple[str, ...]:
    """The cluster's GPU types in Gavel's order."""
    present = set(cluster.gpu_types)
    return (tuple(t for t in GAVEL_TYPE_ORDER if t in present)
            + tuple(sorted(present - set(GAVEL_TYPE_ORDER))))


def priorities(fractions: np.ndarray, job_time: np.ndarray, worker_time: np.ndarray,
               runs: np.ndarray, allocated: np.ndarray) -> np.ndarray:
    """Gavel's priorities ``(C, T)``: ``fractions / (job_time / worker_time)`` where the share
    of time received is positive, ``fractions * 1e9`` where it is not; 0 where the fraction is
    0, ``runs`` ``(C, T)`` is false, or ``allocated`` ``(C,)`` is false.

    ``fractions`` and ``job_time`` (seconds received since the last reset) are ``(C, T)``;
    ``worker_time`` ``(T,)`` is the seconds all combinations received per type."""
    share = np.divide(job_time, worker_time, out=np.zeros_like(job_time),
                      where=worker_time > 0)
    priority = np.where(share > 0, fractions / np.where(share > 0, share, 1.0),
                        fractions * 1e9)
    priority[(fractions == 0) | ~runs | ~allocated[:, None]] = 0.0
    return priority


class Accounted(NamedTuple):
    """What :meth:`Rounds.account` changed in the combinations admitted."""

    #: Combinations dropped because a member left.
    gone: list[Combo]
    #: Whether a job was admitted (its first round here).
    admitted: bool


class Placed(NamedTuple):
    """One round's placement (:meth:`Rounds.place`)."""

    #: GPUs per node of each job placed; pairs in ``allocations.pairs``.
    allocations: PackedAllocations
    #: Jobs that kept the GPUs they held (lease extensions).
    extensions: int
    #: Jobs that held GPUs coming into the round (could have kept them).
    opportunities: int


class Rounds:
    """The round mechanism's state for one ordered set of GPU ``types`` (see the module).

    Attributes:
        types: the GPU types, in the order every ``(…, T)`` array uses.
        store: per combination, time received, deficit and the allocation in force.
        worker_time: ``(T,)`` seconds all combinations received per type since the last reset.
        last_reset: when :meth:`reset_time` last ran (0 before the first).
        attained: each job's attained GPU-seconds at the last :meth:`account`.
        placed: last round's placement of each combination, GPUs per node ``(N,)``.
    """

    def __init__(self, types: tuple[str, ...]) -> None:
        self.types = types
        self.store = ComboStore(len(types))
        self.worker_time = np.zeros(len(types))
        self.last_reset = 0.0
        self.attained: dict[str, float] = {}
        self.last_now: float | None = None
        self.placed: dict[Combo, np.ndarray] = {}
        self._node_types = np.zeros(0, dtype=str)  # the nodes' types, and their index in types
        self._node_type_index = np.zeros(0, dtype=np.int64)
        self._nodes_of_type: list[list[int]] = []  # per type (index in types), its nodes
        self._held_now = np.zeros((0, 0), dtype=np.int64)  # this round's jobs' GPUs per node

    def account(self, jobs: Sequence[JobView], node_types: np.ndarray, now: float,
                half_round: float) -> Accounted:
        """Credit last round's run time (from the jobs' reports) to the combination each of
        ``jobs`` (in submission order) ran in; drop the combinations of jobs gone, admit new
        jobs alone with ``half_round`` seconds of credit. ``node_types`` ``(N,)``: each node's
        GPU type; ``now``: seconds."""
        store = self.store
        names = {job.name for job in jobs}
        # The combinations with a member gone (found through the members, not by scanning
        # every combination admitted).
        gone = store.remove_jobs(store.names() - names)
        elapsed = 0.0 if self.last_now is None else max(now - self.last_now, 0.0)
        ran: dict[str, tuple[float, int]] = {}
        # Each job's GPUs held, and the type of its first node, for all jobs at once.
        held = self._held(jobs, node_types)
        gpus_held = held.sum(axis=1).tolist()
        first_type = self._node_type_index[np.argmax(held > 0, axis=1)].tolist()
        fresh = [(job.name,) for job in jobs if (job.name,) not in store]
        store.add_many(fresh, half_round)
        admitted = bool(fresh)
        fresh_names = {name for name, in fresh}
        for j, job in enumerate(jobs):
            if job.name in fresh_names:
                continue
            before = self.attained.get(job.name)
            if before is None:
                continue
            gpus = gpus_held[j]
            if gpus:
                seconds = min(max((job.attained_service - before) / gpus, 0.0), elapsed)
                ran[job.name] = (seconds, first_type[j])
        by_name = {job.name: job for job in jobs}
        credited: set[str] = set()
        for combo in [c for c in self.placed if len(c) == 2]:  # the pairs that ran
            counts = self.placed[combo]
            if not all(n in by_name for n in combo):
                credited.update(combo)  # the pair ended with its finished job (Gavel drops it)
                continue
            if all(n in ran and np.array_equal(by_name[n].allocation, counts)
                   for n in combo) and combo in store:
                seconds = max(ran[n][0] for n in combo)
                where = ran[combo[0]][1]
                store.time[store.index[combo], where] += seconds
                self.worker_time[where] += seconds
                credited.update(combo)
        for name, (seconds, where) in ran.items():
            if name not in credited:
                store.time[store.index[(name,)], where] += seconds
                self.worker_time[where] += seconds
        self.attained = {job.name: job.attained_service for job in jobs}
        self.last_now = now
        return Accounted(gone, admitted)

    def _held(self, jobs: Sequence[JobView], node_types: np.ndarray) -> np.ndarray:
        """The jobs' GPUs per node ``(J, N)``, kept for this round's placement; refreshes each
        node's type index ``(N,)`` when the nodes change."""
        if not np.array_equal(self._node_types, node_types):
            self._node_types = node_types
            self._node_type_index = np.array([self.types.index(str(t)) for t in node_types],
                                             dtype=np.int64)
            self._nodes_of_type = [np.flatnonzero(self._node_type_index == t).tolist()
                                   for t in range(len(self.types))]
        self._held_now = (np.stack([job.allocation for job in jobs]) if jobs
                          else np.zeros((0, len(node_types)), dtype=np.int64))
        return self._held_now

    def reset_time(self, now: float, half_round: float) -> None:
        """Gavel's ``_reset_time_run_so_far``: owed minus received time joins the deficit (the
        module's formula)."""
        since = now - self.last_reset
        self.worker_time[:] = 0.0
        store = self.store
        rows = store.live_rows()
        # Elementwise the same arithmetic as one combination at a time (a combination outside
        # the allocation is owed 0 * since).
        owed = store.fraction[rows] * since
        store.deficit[rows] += owed - (store.time[rows] - half_round)
        store.time[rows] = half_round
        worker = 0.0
        for _ in range(len(rows)):  # the same sum as adding half a round per combination
            worker += half_round
        self.worker_time += worker
        self.last_reset = now

    def greedy(self, combos: Sequence[Combo], runs: np.ndarray, capacities: np.ndarray,
               order: Sequence[int], busy: set[str], combo_index: np.ndarray,
               skip: Callable[[float], bool] | None = None) -> dict[int, int]:
        """Combination index -> type index for the next round (the module's greedy rule).

        Args:
            combos: the candidates (every combination admitted among them).
            runs: ``(C, T)`` bool, where each candidate can run (``C <= len(combos)``: only
                the first ``C`` candidates are ranked).
            capacities: ``(T,)`` GPUs left per type.
            order: the type indices, in the order they are filled.
            busy: jobs already running this round (they take no more GPUs).
            combo_index: ``(4, >= C)`` ints per candidate: its store row, its scale factor
                (GPUs), and the store rows of its first and second member alone (-1: none).
            skip: ``skip(priority)`` true leaves a combination out (``None``: none is).
        """
        combos = combos[:len(runs)]  # profiling pairs appended after the candidates
        store = self.store
        rows, size_of, first, second = combo_index[:, :len(combos)]
        fractions = store.fraction[rows]
        deficit = store.deficit[rows]
        priority = priorities(fractions, store.time[rows], self.worker_time, runs,
                              store.allocated[rows])
        # Which jobs are busy, by the store row of the job alone; the last entry stands for a
        # job alone's absent second member and is never busy.
        busy_rows = np.zeros(len(store.allocated) + 1, dtype=bool)
        for name in busy:
            busy_rows[store.index[(name,)]] = True
        second = np.where(second < 0, len(busy_rows) - 1, second)
        sizes = size_of.tolist()
        scheduled: dict[int, int] = {}
        for t in order:
            left = int(capacities[t])
            # Only those that run on t and fit in its GPUs left could be taken; ranked in
            # decreasing (priority, deficit, allocation), a stable sort keeping ties in index
            # order (sorting only these gives the same order as filtering the whole ranking).
            could = np.flatnonzero(runs[:, t] & (size_of <= left))
            ranked = could[np.lexsort((-fractions[could, t], -deficit[could, t],
                                       -priority[could, t]))]
            if skip is not None:  # a combination the policy leaves out is never taken
                ranked = ranked[~np.fromiter(map(skip, priority[ranked, t].tolist()),
                                             dtype=bool, count=len(ranked))]
            # Take the first combination, in rank order, that fits in the GPUs left and has no
            # busy member (as one pass over the ranking would), scanning it in chunks: a round
            # takes tens of combinations among ~10^4 candidates of a packed run.
            at, chunk = 0, _GREEDY_CHUNK
            while left > 0 and at < len(ranked):
                window = ranked[at:at + chunk]
                ok = ((size_of[window] <= left) & ~busy_rows[first[window]]
                      & ~busy_rows[second[window]])
                hit = int(ok.argmax())
                if not ok[hit]:
                    at += len(window)
                    chunk = min(4 * chunk, _GREEDY_CHUNK_MAX)
                    continue
                c = int(window[hit])
                at += hit + 1
                chunk = _GREEDY_CHUNK
                # A job without an allocation yet still takes its GPUs here and is then left
                # unplaced (Gavel's _schedule_jobs_on_workers does the same).
                left -= sizes[c]
                busy_rows[first[c]] = True
                busy_rows[second[c]] = second[c] != len(busy_rows) - 1
                scheduled[c] = t
        return scheduled

    def place(self, jobs: Sequence[JobView], combos: Sequence[Combo],
              scheduled: dict[int, int], cluster: ClusterState,
              profiling: set[Combo]) -> Placed:
        """GPUs per node for the combinations ``scheduled`` (index into ``combos`` -> type
        index; :meth:`greedy`), keeping leases where it can (the module's rule). ``jobs``: those
        of the last :meth:`account`, in its order; ``profiling``: combinations run this round
        to profile a job (placed though outside the allocation in force)."""
        free = cluster.capacity().tolist()
        out = PackedAllocations()
        pairs: list[tuple[str, str]] = []
        placed: dict[Combo, np.ndarray] = {}
        store = self.store
        by_name = {job.name: job for job in jobs}
        # Per job: its row of this round's GPUs held (:meth:`_held`, jobs in this order), and
        # the (node, GPUs) it holds, in node order.
        row = {job.name: j for j, job in enumerate(jobs)}
        held_now = self._held_now
        held_rows, held_nodes = np.nonzero(held_now)
        held_at: dict[int, list[tuple[int, int]]] = {}
        for j, node, count in zip(held_rows.tolist(), held_nodes.tolist(),
                                  held_now[held_rows, held_nodes].tolist(), strict=True):
            held_at.setdefault(j, []).append((node, count))
        extensions = 0
        type_of_node = self._node_type_index.tolist()
        for t in range(len(self.types)):
            chosen = [c for c, tt in scheduled.items() if tt == t]
            size = {c: by_name[combos[c][0]].requested_replicas for c in chosen}
            nodes = self._nodes_of_type[t]
            pointer = 0
            for current in sorted(set(size.values()), reverse=True):
                group = [c for c in chosen if size[c] == current]
                for c in group:  # keep combinations where they run (lease extension)
                    combo = combos[c]
                    j = row[combo[0]]
                    held = held_at.get(j)
                    if (held is None or any(type_of_node[node] != t for node, _ in held)
                            or sum(count for _, count in held) != current
                            or any(count > free[node] for node, count in held)):
                        continue
                    if len(combo) == 2:
                        was = self.placed.get(combo)
                        if (was is None or not np.array_equal(was, held_now[j])
                                or not np.array_equal(by_name[combo[1]].allocation,
                                                      held_now[j])):
                            continue
                    placed[combo] = held_now[j].astype(np.int64)
                    for node, count in held:
                        free[node] -= count
                    extensions += len(combo)
                for c in group:
                    combo = combos[c]
                    if combo in placed or (not store.in_force(combo) and combo not in profiling):
                        continue
                    counts = np.zeros(cluster.num_nodes, dtype=np.int64)
                    need = current
                    while need > 0 and pointer < len(nodes):
                        node = nodes[pointer]
                        take = min(free[node], need)
                        counts[node] += take
                        free[node] -= take
                        need -= take
                        if free[node] == 0:
                            pointer += 1
                    placed[combo] = counts
        for combo, counts in placed.items():
            for name in combo:
                out[name] = counts
            if len(combo) == 2:
                pairs.append((combo[0], combo[1]))
        out.pairs = tuple(pairs)
        self.placed = placed
        return Placed(out, extensions, len(held_at))


__all__ = ["GAVEL_TYPE_ORDER", "Accounted", "Placed", "Rounds", "cluster_types", "priorities"]
