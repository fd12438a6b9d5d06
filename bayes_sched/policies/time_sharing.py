"""Gavel's round-based mechanism: time fractions per (job, GPU type) -> GPUs per node each round.

A time-sharing policy (the Gavel family) computes an *allocation*: for each job and GPU type the
fraction of time the job should run there (each job's fractions sum to at most 1; per type, the
fractions times scale factors sum to at most the type's GPUs). This module turns it into rounds the
way Gavel's scheduler does (``scheduler/scheduler.py``, Narayanan et al., OSDI 2020, section 5):

* **Time received.** From the jobs' own reports: the GPU-seconds a job attained since the last
  round over the GPUs it held is the time it ran there. Every job starts with half a round of
  credit on each type (Gavel's ``time_per_iteration / 2``).
* **Priority** on type ``t``: ``allocation[j, t] / (time j ran on t / time all jobs ran on t)``
  (``allocation * 1e9`` before any time is recorded; 0 where the allocation is 0, the job cannot
  run on ``t``, or the job is not in the allocation yet).
* **Greedy assignment.** Per GPU type (V100, P100, K80, then other types by name; shuffled each
  round for the heterogeneity-agnostic policies, with a seeded stream, as Gavel does), jobs in
  decreasing (priority, deficit, allocation) take GPUs while their scale factor fits, each job on
  one type per round.
* **Placement and lease extension.** Largest scale factors first; a job scheduled on the type it
  already runs on keeps its GPUs where they are still free (its lease is extended: no restart),
  the others fill nodes in order.
* **Recomputing the allocation** only when the job set changed or a job now runs as another job
  type (Shockwave's jobs change batch size; Shockwave's scheduler then recomputes), and at most
  once every
  ``min_reset_interval`` seconds (Gavel's 1920 s), resetting the time received and carrying the
  difference between time owed and time received as a deficit (the tie-breaker).

A policy that fails to produce an allocation (infeasible LP, solver error) keeps the previous one;
the failure is logged and counted in :attr:`TimeSharingPolicy.solver_failures`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import sys
from collections.abc import Iterator, Sequence
from typing import Literal

import numpy as np

from bayes_sched.cluster import Allocations, ClusterState
from bayes_sched.estimation import Estimator
from bayes_sched.jobs import JobSettings, JobSpec, JobView
from bayes_sched.throughputs import ThroughputTable, load_throughputs

LOG = logging.getLogger(__name__)

#: Gavel's fixed worker-type order (``_schedule_jobs_on_workers``); other types follow by name.
GAVEL_TYPE_ORDER = ("v100", "p100", "k80")

#: Open-source LP solvers the Gavel policies may use through cvxpy (pip-installable).
LP_SOLVERS = ("CLARABEL", "HIGHS")

#: Gavel's steps/s for a job whose type was never measured (``DEFAULT_THROUGHPUT``).
DEFAULT_STEPS_PER_SECOND = 1.0


def cluster_types(cluster: ClusterState) -> tuple[str, ...]:
    """The cluster's GPU types in Gavel's order."""
    present = set(cluster.gpu_types)
    return (tuple(t for t in GAVEL_TYPE_ORDER if t in present)
            + tuple(sorted(present - set(GAVEL_TYPE_ORDER))))


def measured_throughputs(jobs: Sequence[JobView], types: Sequence[str], cluster: ClusterState,
                         table: ThroughputTable) -> np.ndarray:
    """Steps/s of each job alone on each type, shape ``(J, T)``: the measured table for the job's
    type and scale factor (its requested GPUs); :data:`DEFAULT_STEPS_PER_SECOND` on every type for
    a job the table does not cover on some type; 0 where the type has fewer GPUs than the job
    needs."""
    out = np.zeros((len(jobs), len(types)))
    capacity = np.array([cluster.gpus_of_type(t) for t in types])
    for j, job in enumerate(jobs):
        rates = [table.steps_per_second(job.application, job.requested_replicas, t)
                 for t in types]
        out[j] = DEFAULT_STEPS_PER_SECOND if None in rates else rates
        out[j, capacity < job.requested_replicas] = 0.0
    return out


class TimeSharingPolicy:
    """Base of the Gavel family: subclasses give :meth:`allocate`; the mechanism is here.

    Args:
        solver: the cvxpy LP solver (open source, from pip). CLARABEL (default), an
            interior-point solver like the ECOS Gavel used: where an LP has several optima (LAS
            is indifferent to which type a job's time is on) it answers inside the optimal face,
            as ECOS does, and it solved the max-min LPs faster than HiGHS (``experiments/
            bench_gavel_lp.py``); HIGHS (simplex) answers at a vertex.
        min_reset_interval: seconds between allocation recomputations (Gavel: 1920).
        seed: seeds the per-round shuffle of GPU types (heterogeneity-agnostic policies; Gavel
            draws it from ``Random(seed + 5)``).
        throughputs: the measured table the policy reads: Gavel's ``"simulation"`` or
            ``"physical"``, or Shockwave's ``"tacc"`` (V100 re-measured).

    Subclasses that add no option write ``__init__ = TimeSharingPolicy.__init__``: the registry
    reads a policy's options from its class's own ``__init__``.
    """

    name = "time_sharing"
    #: Whether the policy uses per-type throughputs (Gavel's "Perf" policies keep the type order).
    heterogeneity_aware = False

    def __init__(self, solver: Literal["CLARABEL", "HIGHS"] = "CLARABEL",
                 min_reset_interval: float = 1920.0, seed: int = 0,
                 throughputs: Literal["simulation", "physical", "tacc"] = "simulation") -> None:
        if solver not in LP_SOLVERS:
            raise ValueError(f"solver is {solver!r}: expected one of {', '.join(LP_SOLVERS)}")
        self.solver = solver
        if not min_reset_interval >= 0:
            raise ValueError(f"min_reset_interval is {min_reset_interval}: expected seconds >= 0")
        self.min_reset_interval = float(min_reset_interval)
        self.table = load_throughputs(throughputs)
        self._shuffler = random.Random(seed + 5)
        self.solver_failures = 0
        self.allocation_updates = 0
        self.lease_extensions = 0
        self.lease_opportunities = 0
        self._reset_state(())

    def _reset_state(self, types: tuple[str, ...]) -> None:
        self._types = types
        self._fractions: dict[str, np.ndarray] = {}
        self._job_time: dict[str, np.ndarray] = {}
        self._deficit: dict[str, np.ndarray] = {}
        self._worker_time = np.zeros(len(types))
        self._last_reset = 0.0
        self._need_update = False
        self._attained: dict[str, float] = {}
        self._job_types: dict[str, str] = {}
        self._last_now: float | None = None

    # --- the policy's part ----------------------------------------------------------------------

    def allocate(self, throughputs: np.ndarray, scale_factors: np.ndarray,
                 capacities: np.ndarray) -> np.ndarray | None:
        """Time fractions ``(J, T)`` for jobs with measured steps/s ``throughputs`` ``(J, T)``
        (every row has a positive entry), scale factors ``(J,)`` and GPUs per type ``(T,)``;
        ``None`` when no allocation could be computed."""
        raise NotImplementedError

    # --- Policy interface -----------------------------------------------------------------------

    def estimators(self) -> Sequence[Estimator]:
        return ()

    def job_settings(self, spec: JobSpec) -> JobSettings:
        return JobSettings(batch_size=spec.batch_size, max_replicas=spec.num_replicas)

    def fractions(self) -> dict[str, dict[str, float]]:
        """The allocation in force: ``{job: {GPU type: fraction of time}}``."""
        return {name: dict(zip(self._types, map(float, x), strict=True))
                for name, x in self._fractions.items()}

    def decide(self, cluster: ClusterState, jobs: Sequence[JobView]) -> Allocations:
        types = cluster_types(cluster)
        if types != self._types:
            self._reset_state(types)
        jobs = sorted(jobs, key=lambda j: (j.submit_time, j.name))
        now = cluster.now
        half_round = cluster.round_interval / 2.0
        node_types = np.array(cluster.gpu_types)
        self._account(jobs, node_types, now, half_round)
        measured = measured_throughputs(jobs, types, cluster, self.table)
        capacities = np.array([cluster.gpus_of_type(t) for t in types], dtype=np.int64)
        if self._need_update and (now - self._last_reset >= self.min_reset_interval
                                  or self._last_reset == 0.0):
            self._reset_time(now, half_round)
            self._update_allocation(jobs, measured, capacities)
        order = list(range(len(types)))
        if not self.heterogeneity_aware:
            self._shuffler.shuffle(order)
        scheduled = self._greedy(jobs, measured, capacities, order)
        return self._place(jobs, scheduled, cluster, node_types)

    # --- the mechanism --------------------------------------------------------------------------

    def _account(self, jobs: Sequence[JobView], node_types: np.ndarray, now: float,
                 half_round: float) -> None:
        """Credit last round's run time (from the jobs' reports); admit and drop jobs."""
        names = {job.name for job in jobs}
        gone = [name for name in self._job_time if name not in names]
        for name in gone:
            del self._job_time[name], self._deficit[name]
            self._fractions.pop(name, None)
            self._need_update = True
        elapsed = 0.0 if self._last_now is None else max(now - self._last_now, 0.0)
        for job in jobs:
            if job.name not in self._job_time:
                self._job_time[job.name] = np.full(len(self._types), half_round)
                self._deficit[job.name] = np.zeros(len(self._types))
                self._need_update = True
                continue
            gpus = job.num_gpus
            before = self._attained.get(job.name)
            if gpus and before is not None:
                ran = min(max((job.attained_service - before) / gpus, 0.0), elapsed)
                where = self._types.index(str(node_types[np.flatnonzero(job.allocation)[0]]))
                self._job_time[job.name][where] += ran
                self._worker_time[where] += ran
        self._attained = {job.name: job.attained_service for job in jobs}
        job_types = {job.name: job.application for job in jobs}
        if any(self._job_types.get(name, kind) != kind for name, kind in job_types.items()):
            self._need_update = True  # a job's measured throughputs changed
        self._job_types = job_types
        self._last_now = now

    def _reset_time(self, now: float, half_round: float) -> None:
        """Gavel's ``_reset_time_run_so_far``: owed minus received time joins the deficit."""
        since = now - self._last_reset
        self._worker_time[:] = 0.0
        for name, received in self._job_time.items():
            owed = self._fractions.get(name, np.zeros(len(self._types))) * since
            self._deficit[name] += owed - (received - half_round)
            received[:] = half_round
            self._worker_time += half_round
        self._last_reset = now

    def _update_allocation(self, jobs: Sequence[JobView], measured: np.ndarray,
                           capacities: np.ndarray) -> None:
        self._need_update = False
        runnable = [int(j) for j in np.flatnonzero(measured.max(axis=1) > 0)]
        if not runnable:
            self._fractions = {}
            return
        scale_factors = np.array([float(jobs[j].requested_replicas) for j in runnable])
        try:
            x = self.allocate(measured[runnable], scale_factors, capacities.astype(float))
        except Exception as error:  # noqa: BLE001 -- a solver crash keeps the old allocation
            LOG.warning("policy %s: allocation failed (%s); previous allocation kept", self.name,
                        error)
            x = None
        if x is None:
            self.solver_failures += 1
            LOG.warning("policy %s: no allocation for %d jobs; previous allocation kept",
                        self.name, len(runnable))
            return
        self.allocation_updates += 1
        x = np.clip(np.nan_to_num(x), 0.0, 1.0)
        self._fractions = {jobs[j].name: x[i] for i, j in enumerate(runnable)}

    def _greedy(self, jobs: Sequence[JobView], measured: np.ndarray, capacities: np.ndarray,
                order: list[int]) -> dict[int, int]:
        """Job index -> type index for the next round."""
        share = np.divide(np.array([self._job_time[job.name] for job in jobs]).reshape(
            len(jobs), len(self._types)), self._worker_time,
            out=np.zeros((len(jobs), len(self._types))), where=self._worker_time > 0)
        left = capacities.copy()
        scheduled: dict[int, int] = {}
        for t in order:
            entries = []
            for j, job in enumerate(jobs):
                x = self._fractions.get(job.name)
                if x is None or x[t] == 0.0 or measured[j, t] <= 0:
                    priority = 0.0
                elif share[j, t] > 0:
                    priority = x[t] / share[j, t]
                else:
                    priority = x[t] * 1e9
                deficit = self._deficit[job.name][t]
                entries.append((priority, deficit, 0.0 if x is None else x[t], j))
            # Stable sort, decreasing: ties keep submission order, as Gavel's dicts do.
            entries.sort(key=lambda e: (e[0], e[1], e[2]), reverse=True)
            for priority, _, _, j in entries:
                if left[t] == 0:
                    break
                if j in scheduled or measured[j, t] <= 0 or self._skip(priority):
                    continue
                need = jobs[j].requested_replicas
                if need > left[t]:
                    continue
                # A job without an allocation yet still takes its GPUs here and is then left
                # unplaced (Gavel's _schedule_jobs_on_workers does the same).
                left[t] -= need
                scheduled[j] = t
        return scheduled

    def _skip(self, priority: float) -> bool:
        """Whether a job of this priority is left out of the round (FIFO policies: priority 0)."""
        return False

    def _place(self, jobs: Sequence[JobView], scheduled: dict[int, int], cluster: ClusterState,
               node_types: np.ndarray) -> Allocations:
        free = cluster.capacity().copy()
        out: Allocations = {}
        self.lease_opportunities += sum(1 for job in jobs if job.num_gpus)
        for t, gpu_type in enumerate(self._types):
            on_type = node_types == gpu_type
            chosen = sorted((j for j, tt in scheduled.items() if tt == t),
                            key=lambda j: -jobs[j].requested_replicas)
            nodes = np.flatnonzero(on_type)
            pointer = 0
            for size in sorted({jobs[j].requested_replicas for j in chosen}, reverse=True):
                group = [j for j in chosen if jobs[j].requested_replicas == size]
                for j in group:  # keep jobs where they run (lease extension)
                    held = np.asarray(jobs[j].allocation)
                    if (held.sum() == size and np.all(on_type[held > 0])
                            and np.all(held <= free)):
                        out[jobs[j].name] = held.astype(np.int64).copy()
                        free -= held
                        self.lease_extensions += 1
                for j in group:
                    name = jobs[j].name
                    if name in out or name not in self._fractions:
                        continue
                    counts = np.zeros(cluster.num_nodes, dtype=np.int64)
                    need = size
                    while need > 0 and pointer < len(nodes):
                        node = nodes[pointer]
                        take = min(int(free[node]), need)
                        counts[node] += take
                        free[node] -= take
                        need -= take
                        if free[node] == 0:
                            pointer += 1
                    out[name] = counts
        return out


@contextlib.contextmanager
def _quiet_stdout() -> Iterator[None]:
    """Silence file descriptor 1: HiGHS prints a banner from C++ on its first use in a process,
    which would corrupt a command's ``--json`` output."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 1)
            yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def solve_lp(problem: object, variable: object, solver: str) -> np.ndarray | None:
    """Solve a cvxpy ``problem`` with ``solver``; the variable's value, or ``None`` when the
    problem is infeasible, unbounded or the solver fails (the caller keeps its previous answer)."""
    import cvxpy as cp

    assert isinstance(problem, cp.Problem) and isinstance(variable, cp.Variable)
    try:
        with _quiet_stdout():
            problem.solve(solver=solver)
    except cp.error.SolverError as error:
        LOG.warning("LP solver %s failed: %s", solver, error)
        return None
    if problem.status not in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE) or variable.value is None:
        LOG.warning("LP status %s with solver %s", problem.status, solver)
        return None
    return np.asarray(variable.value, dtype=float)


def base_constraints(x: object, scale_factors: np.ndarray, capacities: np.ndarray) -> list:
    """Gavel's constraints on time fractions ``x`` ``(J, T)``: non-negative, each job's sum at
    most 1, per type GPUs used (fraction x scale factor) at most the type's GPUs."""
    import cvxpy as cp

    assert isinstance(x, cp.Variable)
    return [x >= 0,
            cp.sum(cp.multiply(scale_factors[:, None], x), axis=0) <= capacities,
            cp.sum(x, axis=1) <= 1]
