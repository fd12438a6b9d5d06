"""POP: a granular allocation problem solved as ``k`` random sub-problems, the answers joined.

POP (Narayanan, Kazhamiaka, Abuzaid, Kraft, Agrawal, Kandula, Boyd, Zaharia: "Solving Large-Scale
Granular Resource Allocation Problems Efficiently with POP", SOSP 2021; its cluster-scheduling
harness, ``stanford-futuredata/POP`` ``cluster_scheduling/run_harness.py``) rests on one
observation: where a problem is *granular* (many jobs, each small against the cluster, many
interchangeable GPUs of each type), a random half of the jobs on half of each type's GPUs is a
problem of the same shape, and its optimum is close to half the whole optimum. So the jobs are
split at random into ``k`` groups, each type's GPUs into ``k`` sub-clusters, each group is
allocated on its sub-cluster by the policy's own program, and the allocations are put side by
side. A job is only ever paired (space sharing) with a job of its own group. The solver time
falls from one program over ``J`` jobs to ``k`` programs over ``J / k`` (interior point and
simplex grow faster than linearly in the size), and the joined allocation is feasible: each
sub-cluster's allocation fits its GPUs, and the sub-clusters' GPUs add up to the cluster's.

Here (:func:`split`):

* **Jobs.** A seeded random permutation, dealt round-robin to the ``k`` groups, so the groups'
  sizes differ by at most one. With ``strata`` (each job's class: job type and scale factor) the
  permutation is dealt stratum by stratum, so every group also holds about ``1 / k`` of each
  class (a stratified random split: the groups' demands for GPUs and their mix of partner
  classes stay alike; POP's harness deals jobs by id modulo ``k`` or at random).
* **GPUs.** Each type's ``C`` GPUs: ``C // k`` to every sub-cluster (POP's harness) and the
  ``C mod k`` left over to as many sub-clusters drawn at random, so no GPU is lost.
* **Sticky groups** (a policy's ``partition_groups="sticky"``, Sia's default): the split above
  is drawn anew each call unless a policy asks that a job keep its group for its life, as Sia's
  own POP does (:func:`sticky_labels`: a new job joins the group with the fewest jobs, or
  with the fewest GPUs asked for where the policy gives each job's GPUs). A job
  whose group changes meets other competitors for its sub-cluster's GPUs, and a policy whose
  answers move jobs (Sia's rigid configurations) moves it again.
* **Pairs.** Only within a group: the whole problem's pairs are never listed
  (:func:`pairs_within`; at 1,900 jobs they number ~900,000).
* **How many.** ``partitions="auto"``: one (the exact program) below ``2 * jobs_per_partition``
  jobs, else ``round(J / jobs_per_partition)``, at most so many that every sub-cluster keeps
  :data:`MIN_GPUS_PER_TYPE` GPUs of each type present (:func:`partition_count`); each policy
  states its ``jobs_per_partition`` (``None``: never split unless asked).

:func:`solve_partitioned` takes the whole problem (a :class:`Problem`: the
:class:`~bayes_sched.policies.gavel.time_sharing.AllocationInputs` a policy builds), hands each group's
:func:`restrict`-ed inputs to the policy's solve, and joins the answers into the whole
``(J + P, T)`` allocation (a pair across groups gets 0).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal, Protocol, TypeVar

import numpy as np

from bayes_sched.mechanisms.solver_pool import MAX_WORKERS, map_concurrently
from bayes_sched.registry import Range

#: The most sub-problems a caller may ask for.
MAX_PARTITIONS = 512

#: GPUs of each type a sub-cluster keeps at least when the count is chosen automatically: the
#: largest scale factor of Gavel's jobs, so every job fits on every type it runs on.
MIN_GPUS_PER_TYPE = 8

#: The type of a policy's ``partitions`` option: a count, or ``"auto"``.
PartitionSetting = Annotated[int, Range(1, MAX_PARTITIONS)] | Literal["auto"]

#: The type of a policy's ``partition_workers`` option: how many sub-problems are solved at once
#: (:func:`solve_partitioned`).
WorkerSetting = Annotated[int, Range(1, MAX_WORKERS)]


class Problem(Protocol):
    """What POP reads of a whole time-fraction problem: a dataclass with these fields
    (:class:`~bayes_sched.policies.gavel.time_sharing.AllocationInputs`; its docstring gives the
    shapes). Stated here, not imported, so that the mechanism does not depend on the policies
    that use it."""

    __dataclass_fields__: ClassVar[dict[str, Any]]

    @property
    def names(self) -> tuple[str, ...]: ...
    @property
    def throughputs(self) -> np.ndarray: ...
    @property
    def scale_factors(self) -> np.ndarray: ...
    @property
    def capacities(self) -> np.ndarray: ...
    @property
    def elapsed(self) -> np.ndarray: ...
    @property
    def remaining_steps(self) -> np.ndarray: ...
    @property
    def steps_done(self) -> np.ndarray | None: ...
    @property
    def pairs(self) -> np.ndarray: ...
    @property
    def pair_throughputs(self) -> np.ndarray: ...
    @property
    def job_classes(self) -> np.ndarray: ...
    @property
    def class_keys(self) -> tuple[Any, ...]: ...
    @property
    def num_jobs(self) -> int: ...


ProblemT = TypeVar("ProblemT", bound=Problem)


def check_partitions(value: object) -> int | Literal["auto"]:
    """``value`` as a partition setting; ``ValueError`` (one line) unless it is ``"auto"`` or an
    integer in 1..:data:`MAX_PARTITIONS`."""
    if value == "auto":
        return "auto"
    if (isinstance(value, bool) or not isinstance(value, int | np.integer)
            or not 1 <= int(value) <= MAX_PARTITIONS):
        raise ValueError(f"partitions is {value!r}: expected 'auto' or an integer from 1 to "
                         f"{MAX_PARTITIONS}")
    return int(value)


def partition_count(setting: int | Literal["auto"], num_jobs: int, capacities: np.ndarray,
                    jobs_per_partition: int | None) -> int:
    """How many sub-problems for ``num_jobs`` jobs on ``capacities`` ``(T,)`` GPUs per type:
    ``setting`` itself when it is a count (at most one per job), else the automatic rule of the
    module docstring."""
    if setting != "auto":
        return max(1, min(int(setting), num_jobs))
    if jobs_per_partition is None or num_jobs < 2 * jobs_per_partition:
        return 1
    present = capacities[capacities > 0]
    most = int(present.min()) // MIN_GPUS_PER_TYPE if present.size else 1
    return max(1, min(round(num_jobs / jobs_per_partition), most))


@dataclass(frozen=True)
class Partition:
    """One sub-problem: its jobs (indices into the whole problem's, ascending) and its GPUs per
    type ``(T,)``."""

    jobs: np.ndarray
    capacities: np.ndarray


def split(num_jobs: int, capacities: np.ndarray, k: int, rng: np.random.Generator,
          strata: np.ndarray | None = None) -> list[Partition]:
    """``num_jobs`` jobs and the GPUs ``capacities`` ``(T,)`` (integers) split into ``k``
    sub-problems at random (see the module docstring); ``strata`` ``(J,)`` optional ints (jobs
    of one stratum are spread evenly). Every job and every GPU is in exactly one sub-problem."""
    if k < 1:
        raise ValueError(f"k is {k}: expected at least one sub-problem")
    order = rng.permutation(num_jobs)
    if strata is not None:
        order = order[np.argsort(np.asarray(strata)[order], kind="stable")]
    label = np.empty(num_jobs, dtype=np.int64)
    label[order] = np.arange(num_jobs) % k
    whole = np.asarray(capacities).astype(np.int64)
    gpus = np.repeat((whole // k)[None, :], k, axis=0)  # (k, T)
    for t, extra in enumerate((whole % k).tolist()):
        if extra:
            gpus[rng.choice(k, size=extra, replace=False), t] += 1
    return [Partition(jobs=np.flatnonzero(label == i), capacities=gpus[i]) for i in range(k)]


def class_index(keys: Sequence[Hashable]) -> np.ndarray:
    """Each job's class ``(J,)``: ints from 0 in order of first appearance of its key (job type
    and scale factor), the strata :func:`split` spreads evenly."""
    index: dict[Hashable, int] = {}
    return np.array([index.setdefault(key, len(index)) for key in keys], dtype=np.int64)


def pairs_within(candidates: np.ndarray, groups: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The pairs ``(first, second)`` of ``candidates`` (job indices, ascending) whose two jobs
    are in one group (``groups`` ``(J,)``), in the order ``np.triu_indices`` lists all pairs:
    O(pairs within groups), never the ``n (n - 1) / 2`` of all of them."""
    owner = groups[candidates]
    firsts, seconds = [], []
    for group in np.unique(owner).tolist():
        members = candidates[owner == group]
        i, j = np.triu_indices(len(members), k=1)
        firsts.append(members[i])
        seconds.append(members[j])
    first = np.concatenate(firsts) if firsts else np.zeros(0, dtype=np.int64)
    second = np.concatenate(seconds) if seconds else np.zeros(0, dtype=np.int64)
    order = np.lexsort((second, first))
    return first[order], second[order]


def labels(parts: Sequence[Partition], num_jobs: int) -> np.ndarray:
    """Each job's sub-problem ``(J,)``."""
    out = np.full(num_jobs, -1, dtype=np.int64)
    for i, part in enumerate(parts):
        out[part.jobs] = i
    return out


def restrict(inputs: ProblemT, part: Partition, pair_rows: np.ndarray) -> ProblemT:
    """``inputs`` of the whole problem cut to ``part``: its jobs (in their order), its GPUs, and
    the pairs ``pair_rows`` (indices into ``inputs.pairs``, both members in ``part``),
    renumbered; job classes renumbered in order of first appearance among its jobs."""
    rows = part.jobs
    local = np.full(inputs.num_jobs, -1, dtype=np.int64)
    local[rows] = np.arange(len(rows))
    classes = inputs.job_classes[rows]
    seen, first = np.unique(classes, return_index=True)
    kept = seen[np.argsort(first)]  # the classes present, by first appearance
    renumber = np.full(len(inputs.class_keys), -1, dtype=np.int64)
    renumber[kept] = np.arange(len(kept))
    return dataclasses.replace(
        inputs, names=tuple(inputs.names[j] for j in rows.tolist()),
        throughputs=inputs.throughputs[rows], scale_factors=inputs.scale_factors[rows],
        capacities=part.capacities.astype(float), elapsed=inputs.elapsed[rows],
        remaining_steps=inputs.remaining_steps[rows],
        steps_done=None if inputs.steps_done is None else inputs.steps_done[rows],
        pairs=local[inputs.pairs[pair_rows]].reshape(len(pair_rows), 2),
        pair_throughputs=inputs.pair_throughputs[pair_rows], job_classes=renumber[classes],
        class_keys=tuple(inputs.class_keys[c] for c in kept.tolist()))


def pairs_by_partition(inputs: Problem, parts: Sequence[Partition]
                       ) -> list[np.ndarray]:
    """Per sub-problem, the rows of ``inputs.pairs`` whose two jobs are both in it."""
    label = labels(parts, inputs.num_jobs)
    first, second = label[inputs.pairs[:, 0]], label[inputs.pairs[:, 1]]
    owner = np.where(first == second, first, -1)
    order = np.argsort(owner, kind="stable")
    bounds = np.searchsorted(owner[order], np.arange(len(parts) + 1))
    return [order[bounds[i]:bounds[i + 1]] for i in range(len(parts))]


def solve_partitioned(inputs: ProblemT, parts: Sequence[Partition],
                      solve: Callable[[ProblemT], np.ndarray | None], workers: int = 1
                      ) -> np.ndarray | None:
    """The whole ``(J + P, T)`` allocation joined from ``solve`` on each sub-problem of
    ``parts`` (a sub-problem without jobs is skipped); ``None`` when any sub-problem has no
    answer (the caller keeps its previous allocation, as after a failed exact solve).

    ``workers`` > 1: the sub-problems are solved side by side, ``solve`` on that many threads
    and its solver calls in as many worker processes
    (:func:`~bayes_sched.mechanisms.solver_pool.map_concurrently`); ``solve`` must then be
    safe to call from several threads at once on disjoint jobs, and its effects must not depend
    on the order of the calls."""
    num_types = len(inputs.capacities)
    out = np.zeros((inputs.num_jobs + len(inputs.pairs), num_types))
    work = [(part, pair_rows) for part, pair_rows
            in zip(parts, pairs_by_partition(inputs, parts), strict=True) if len(part.jobs)]
    tasks = [functools.partial(_restricted_solve, solve, inputs, part, pair_rows)
             for part, pair_rows in work]
    # One worker: in order, and no sub-problem after one without an answer is solved.
    answers = ((task() for task in tasks) if workers == 1
               else iter(map_concurrently(tasks, workers)))
    for (part, pair_rows), answer in zip(work, answers, strict=True):
        if answer is None:
            return None
        answer = np.asarray(answer, dtype=float).reshape(len(part.jobs) + len(pair_rows),
                                                         num_types)
        out[part.jobs] = answer[:len(part.jobs)]
        out[inputs.num_jobs + pair_rows] = answer[len(part.jobs):]
    return out


def _restricted_solve(solve: Callable[[ProblemT], np.ndarray | None], inputs: ProblemT,
                      part: Partition, pair_rows: np.ndarray) -> np.ndarray | None:
    return solve(restrict(inputs, part, pair_rows))


#: How a policy's POP groups are formed each call: ``"redrawn"``, a fresh random split
#: (:func:`split`); ``"sticky"``, a job keeps its group for its life (:func:`sticky_labels`).
GroupSetting = Literal["redrawn", "sticky"]


def sticky_labels(keys: Sequence[Hashable], k: int, kept: dict[Hashable, int],
                  strata: np.ndarray | None = None, demands: np.ndarray | None = None
                  ) -> np.ndarray:
    """Each job's group ``(J,)`` in ``0..k-1``, a job keeping the group it had (``kept``, a
    job's key to its group; updated in place: departed jobs dropped, new ones added).

    This is how Sia's own POP deals jobs (its artifact's ``SiaILPPOP.add_new_jobs``): a new job
    joins the group with the fewest jobs and stays there until it completes, so from round to
    round a job meets the same competitors for the same sub-cluster. New jobs are dealt in the
    order of ``keys``; ties go to the group with the fewest jobs of the new job's stratum
    (``strata`` ``(J,)``, as in :func:`split`), then to the lowest group. With ``demands``
    ``(J,)`` (each job's GPUs), a new job joins the group with the least summed demand instead
    of the fewest jobs, so the sub-problems' loads stay alike when jobs differ in size."""
    if len(set(keys)) != len(keys):
        raise ValueError("sticky groups need distinct job keys")
    present = set(keys)
    for key in [key for key in kept if key not in present]:
        del kept[key]
    out = np.array([kept.get(key, -1) for key in keys], dtype=np.int64)
    stratum = np.zeros(len(keys), dtype=np.int64) if strata is None else np.asarray(strata)
    demand = np.ones(len(keys)) if demands is None else np.asarray(demands, dtype=float)
    dealt = out >= 0
    sizes = np.bincount(out[dealt], weights=demand[dealt], minlength=k)
    per_stratum = np.zeros((int(stratum.max(initial=-1)) + 1, k), dtype=np.int64)  # (S, k)
    np.add.at(per_stratum, (stratum[dealt], out[dealt]), 1)
    for j in np.flatnonzero(~dealt).tolist():
        mine = per_stratum[stratum[j]]  # a view: the new job's stratum per group
        group = int(np.lexsort((np.arange(k), mine, sizes))[0])
        out[j] = group
        sizes[group] += demand[j]
        mine[group] += 1
        kept[keys[j]] = group
    return out


class Partitioner:
    """A policy's POP setting and its random stream.

    ``groups="redrawn"``: :meth:`parts` draws a fresh split per call (seeded by the policy's
    seed and the number of splits drawn so far), so one seed gives one sequence of splits.
    ``groups="sticky"``: a job keeps its group while the count stays the same
    (:func:`sticky_labels`; a new count deals all jobs afresh), and each type's GPUs left over
    after ``C // k`` to every group go to the groups in one order drawn once per count, so the
    sub-clusters change only where the free GPUs do.

    Args:
        setting: ``"auto"`` or a count (:func:`check_partitions`).
        seed: the policy's seed.
        jobs_per_partition: the sub-problem size the automatic count aims at (``None``: the
            automatic count is always 1).
        groups: ``"redrawn"`` or ``"sticky"`` (:data:`GroupSetting`).
    """

    def __init__(self, setting: object, seed: int, jobs_per_partition: int | None,
                 groups: object = "redrawn") -> None:
        self.setting = check_partitions(setting)
        self.seed = int(seed) % 2**32  # a SeedSequence entropy word
        self.jobs_per_partition = jobs_per_partition
        if groups not in ("redrawn", "sticky"):
            raise ValueError(f"partition_groups is {groups!r}: expected 'redrawn' or 'sticky'")
        self.sticky = groups == "sticky"
        #: Splits drawn (calls with more than one sub-problem).
        self.splits = 0
        #: The last call's number of sub-problems.
        self.last_count = 1
        #: Sticky groups: each present job's group (for the count ``last_count``).
        self._kept: dict[Hashable, int] = {}
        #: Sticky groups: the order in which the sub-clusters take leftover GPUs ``(k,)``.
        self._leftover_order = np.zeros(0, dtype=np.int64)

    def parts(self, num_jobs: int, capacities: np.ndarray, strata: np.ndarray | None = None,
              keys: Sequence[Hashable] | None = None, demands: np.ndarray | None = None
              ) -> list[Partition] | None:
        """The sub-problems for this call, or ``None`` where the count is 1 (solve exactly).
        ``keys`` ``(J,)``: the jobs' names, which sticky groups need (``ValueError``
        without); ``demands`` ``(J,)``: their GPUs, which sticky groups balance
        (:func:`sticky_labels`)."""
        k = partition_count(self.setting, num_jobs, capacities, self.jobs_per_partition)
        self.last_count = k
        if k == 1:
            self._kept.clear()
            self._leftover_order = np.zeros(0, dtype=np.int64)
            return None
        rng = np.random.default_rng([self.seed, self.splits])
        self.splits += 1
        whole = np.asarray(capacities).round().astype(np.int64)
        if not self.sticky:
            return split(num_jobs, whole, k, rng, strata)
        if keys is None or len(keys) != num_jobs:
            raise ValueError("sticky groups need one key per job")
        if len(self._leftover_order) != k:  # a new count: deal every job afresh
            self._kept.clear()
            self._leftover_order = rng.permutation(k)
        label = sticky_labels(keys, k, self._kept, strata, demands)
        gpus = np.repeat((whole // k)[None, :], k, axis=0)  # (k, T)
        for t, extra in enumerate((whole % k).tolist()):
            gpus[self._leftover_order[:extra], t] += 1
        return [Partition(jobs=np.flatnonzero(label == i), capacities=gpus[i])
                for i in range(k)]
