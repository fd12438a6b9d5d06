"""The Gavel family's base policy: estimates in, a time-fraction allocation, one round out.

A time-sharing policy (the Gavel family) computes an *allocation*: for each job (and, packing
policies, each pair of jobs sharing GPUs) and GPU type the fraction of time it should run there
(each job's fractions sum to at most 1; per type, the fractions times scale factors sum to at most
the type's GPUs). :class:`TimeSharingPolicy` owns the policy's part: reading the round's estimates,
building the allocation's inputs, calling the subclass's program, and deciding when to recompute.
The round mechanism that turns the allocation in force into each round's GPUs per node, as Gavel's
scheduler does (time received, priorities, greedy selection per type, placement with lease
extension), is :class:`bayes_sched.mechanisms.rounds.Rounds`; this policy feeds it the candidates
(every job alone, then the pairs in force), the types' order (Gavel's V100, P100, K80, then the
others by name, :func:`~bayes_sched.mechanisms.rounds.cluster_types`; shuffled each round for the
heterogeneity-agnostic policies, with a seeded stream, as Gavel does) and the profiling rounds a
learner asks for, which run first.

**Recomputing the allocation** happens only when the job set changed or a job now runs as another
job type (Shockwave's jobs change batch size; Shockwave's scheduler then recomputes), and at most
once every ``min_reset_interval`` seconds (Gavel's 1920 s), resetting the time received and
carrying the difference between time owed and time received as a deficit (the tie-breaker;
:meth:`~bayes_sched.mechanisms.rounds.Rounds.reset_time`).

A policy that fails to produce an allocation (infeasible LP, solver error) keeps the previous one;
the failure is logged and counted in :attr:`TimeSharingPolicy.solver_failures`.

**Throughputs** come from the round's estimates (the ``throughput`` need; the estimator is chosen
outside the policy, by default the world's ``oracle``). A known table
(:class:`~bayes_sched.throughput_estimates.KnownThroughputs`, what the oracle publishes) is read as
Gavel reads its measured table. A learning stage
(:class:`~bayes_sched.throughput_estimates.LearnedThroughputs`: a learner behind the loop's
throughput estimator, learning from the jobs' reports) is read instead as: at each allocation
recompute one joint prediction of the solo matrix ``(J, T)`` and the pair rates ``(P, 2, T)``
(``acquisition="thompson"``: one joint posterior draw, seeded by the policy's seed and the
recompute count, so unknown cells are tried where their draw is high: which GPU type a job tries
next, which unknown pairs are packed; ``"mean"``: the posterior mean). The belief changing (a
refit) triggers a recompute, still at most every ``min_reset_interval``. *Where* a job can run at
all is learned too: a job (or a pair) that fails to launch in a cell reports it (out of memory),
and the estimator keeps it from then on
(:meth:`~bayes_sched.estimation.throughput_stage.ThroughputEstimator.fits`); until then every type
with room, and every pair of one scale factor, may be tried (the oracle's table behind the learning
stage, ``oracle_stage``, knows the table's zero pattern, so it runs as the table does). A cell
never measured: a known table gives
:data:`~bayes_sched.policies.gavel.throughput_reading.DEFAULT_STEPS_PER_SECOND` on every type to a job
type it lacks (Gavel's rule) and does not pack a pair it lacks; ``oracle_stage`` the same; a point
learner its prior mean; a Thompson policy a draw from the prior. The cells a learner asks a new job
to be profiled in (``profiling_cells``) run first, one per job per round while the job has any (a
pair with a running job of the partner type; a cell that cannot run, such as a pair with no job of
that type active, is dropped and counted): real rounds, the job progressing at that cell's rate,
their GPU-seconds counted by the estimator as profiling.

**Remaining steps** (finish-time fairness, min total duration, AlloX) come from the round's
``remaining_steps`` estimate (by default ``declared``: the steps declared less the steps done;
:mod:`bayes_sched.estimation.remaining_steps`); without one, the declared steps.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np

from bayes_sched.cells import Cell
from bayes_sched.cluster import Allocations, ClusterState
from bayes_sched.estimates import Estimates
from bayes_sched.jobs import JobSettings, JobSpec, JobView
from bayes_sched.mechanisms.combo_store import Combo
from bayes_sched.mechanisms.pop import (
    GroupSetting,
    Partitioner,
    PartitionSetting,
    WorkerSetting,
    class_index,
    labels,
    solve_partitioned,
)
from bayes_sched.mechanisms.rounds import Rounds, cluster_types
from bayes_sched.mechanisms.solver_pool import check_workers
from bayes_sched.policies.gavel.throughput_reading import ThroughputReading, measured_throughputs
from bayes_sched.remaining_work import REMAINING_STEPS, RemainingStepsPredictor, declared_steps_left
from bayes_sched.throughput_estimates import JobClass as JobKey
from bayes_sched.throughput_estimates import KnownThroughputs, LearnedThroughputs

LOG = logging.getLogger(__name__)

#: Open-source LP solvers the Gavel policies may use (pip-installable; called directly by
#: :mod:`bayes_sched.mechanisms.time_fraction_lp`).
LP_SOLVERS = ("CLARABEL", "HIGHS")

def equal_split(scale_factors: np.ndarray, capacities: np.ndarray) -> np.ndarray:
    """Each of ``n`` jobs (or combinations) gets 1/n of every type's GPUs: time fractions
    ``(n, T)`` = ``(GPUs of t / n) / scale factor``, each row scaled down to sum at most 1
    (Gavel's ``IsolatedPolicy``)."""
    share = (capacities / len(scale_factors))[None, :] / scale_factors[:, None]
    return share / np.maximum(share.sum(axis=1), 1.0)[:, None]


#: Pair fractions below this are dropped from the allocation in force (an interior-point LP
#: leaves ~1e-9 on most pairs; such a pair would rank last and never run).
MIN_PAIR_FRACTION = 1e-6


@dataclass(frozen=True)
class AllocationInputs:
    """What a time-sharing policy computes an allocation from; rows are the runnable jobs in
    submission order, then (packing policies) the pairs of them that may share GPUs.

    Attributes:
        names: the jobs' names, ``(J,)``.
        throughputs: measured steps/s alone, shape ``(J, T)`` (0 where a job cannot run).
        scale_factors: GPUs per job, ``(J,)``.
        capacities: GPUs per type, ``(T,)``.
        elapsed: seconds since each job's submission, ``(J,)``.
        remaining_steps: steps each job has left, ``(J,)``: the ``remaining_steps`` estimate
            where the policy reads one (NaN where it cannot say), else the steps its user
            declared minus the steps done (NaN where a job declares none).
        pairs: job indices of each pair, ``(P, 2)`` (empty unless the policy packs).
        pair_throughputs: steps/s of each member while sharing, ``(P, 2, T)`` (0 where the pair
            was not measured or does not fit on the type).
        job_classes: each job's class, ``(J,)`` ints from 0: jobs of one job type and scale
            factor (Gavel's job-type key), numbered in order of first appearance.
        class_keys: each class's ``(job type, scale factor)``, ``(C,)`` in that order.
        steps_done: each job's steps done, ``(J,)`` (``None`` where not given).
    """

    names: tuple[str, ...]
    throughputs: np.ndarray
    scale_factors: np.ndarray
    capacities: np.ndarray
    elapsed: np.ndarray
    remaining_steps: np.ndarray
    pairs: np.ndarray
    pair_throughputs: np.ndarray
    job_classes: np.ndarray
    class_keys: tuple[JobKey, ...]
    steps_done: np.ndarray | None = None

    @property
    def num_jobs(self) -> int:
        return len(self.scale_factors)


class TimeSharingPolicy(ThroughputReading):
    """Base of the Gavel family: subclasses give :meth:`allocate` (or, for policies that read
    more than throughputs or that pack pairs, :meth:`allocate_combinations`); the mechanism is
    here.

    Args:
        solver: the LP solver (open source, from pip). CLARABEL (default), an
            interior-point solver like the ECOS Gavel used: where an LP has several optima (LAS
            is indifferent to which type a job's time is on) it answers inside the optimal face,
            as ECOS does, and it solved the max-min LPs faster than HiGHS (``experiments/
            bench_gavel_lp.py``); HIGHS (simplex) answers at a vertex.
        min_reset_interval: seconds between allocation recomputations (Gavel: 1920).
        seed: seeds the per-round shuffle of GPU types (heterogeneity-agnostic policies; Gavel
            draws it from ``Random(seed + 5)``) and the posterior draws.
        acquisition: how a learned belief is read at each recompute: ``"thompson"``, one joint
            posterior draw (unknown cells are tried where their draw is high), or ``"mean"``,
            the posterior mean (see the module). A known table is read as it is.
        partitions: POP (:mod:`bayes_sched.mechanisms.pop`, the LP policies only): solve the
            allocation as this many random sub-problems (jobs and each type's GPUs split
            alike, seeded by ``seed``), joined; ``"auto"``: the exact program (1) below
            ``2 * jobs_per_partition`` runnable jobs, more sub-problems above.
        partition_workers: POP's sub-problems solved at once: that many threads build the
            programs, and as many worker processes (:mod:`~bayes_sched.mechanisms.solver_pool`)
            solve them. The allocation is the same as with 1 (the default: one after another,
            no process started); set it to the cores the policy may use.
        partition_groups: how POP's groups are formed: ``"redrawn"`` (the default: a fresh
            random split at every recomputation) or ``"sticky"`` (a job keeps its group for
            its life; :func:`~bayes_sched.mechanisms.pop.sticky_labels`).

    Subclasses that add no option write ``__init__ = TimeSharingPolicy.__init__``: the registry
    reads a policy's options from its class's own ``__init__``.
    """

    name = "time_sharing"
    needs: tuple[str, ...] = ("throughput",)
    #: Gavel reads the measured table: the world's oracle, unless another estimator is chosen.
    default_estimators: ClassVar[Mapping[str, str]] = {"throughput": "oracle"}
    #: Whether the policy uses per-type throughputs (Gavel's "Perf" policies keep the type order).
    heterogeneity_aware = False
    #: Whether the policy's allocation holds pairs of jobs sharing GPUs (Gavel's "_packed").
    packing = False
    #: Whether the policy solves a program POP may split (``partitions``), and the sub-problem
    #: size its automatic count aims at (``None``: never split unless asked).
    partitionable = False
    jobs_per_partition: int | None = None

    def __init__(self, solver: Literal["CLARABEL", "HIGHS"] = "CLARABEL",
                 min_reset_interval: float = 1920.0, seed: int = 0,
                 acquisition: Literal["thompson", "mean"] = "thompson",
                 partitions: PartitionSetting = "auto",
                 partition_workers: WorkerSetting = 1,
                 partition_groups: GroupSetting = "redrawn") -> None:
        if not self.partitionable and partitions not in ("auto", 1):
            raise ValueError(f"partitions is {partitions!r}: {self.name} solves no program to "
                             "partition (expected 'auto' or 1)")
        if not self.partitionable and partition_groups != "redrawn":
            raise ValueError(f"partition_groups is {partition_groups!r}: {self.name} solves no "
                             "program to partition (expected 'redrawn')")
        self.partitioner = Partitioner(partitions, seed, self.jobs_per_partition,
                                       partition_groups)
        if not self.partitionable and partition_workers != 1:
            raise ValueError(f"partition_workers is {partition_workers!r}: {self.name} solves "
                             "no program to partition (expected 1)")
        #: Sub-problems solved at once (threads here, the solves in as many worker processes).
        self.partition_workers = check_workers(partition_workers)
        if solver not in LP_SOLVERS:
            raise ValueError(f"solver is {solver!r}: expected one of {', '.join(LP_SOLVERS)}")
        self.solver = solver
        if not min_reset_interval >= 0:
            raise ValueError(f"min_reset_interval is {min_reset_interval}: expected seconds >= 0")
        self.min_reset_interval = float(min_reset_interval)
        if acquisition not in ("thompson", "mean"):
            raise ValueError(f"acquisition is {acquisition!r}: expected 'thompson' or 'mean'")
        #: The round's throughput estimate (:meth:`_read_throughputs`): a known table, or
        #: a learning stage; the other is ``None``.
        self.table: KnownThroughputs | None = None
        self.estimator: LearnedThroughputs | None = None
        self.thompson = acquisition == "thompson"
        #: The round's ``remaining_steps`` estimate (``None``: the declared steps are read).
        self.steps_left: RemainingStepsPredictor | None = None
        self.draws_made = 0
        self._belief_version = 0
        #: The last recompute's predicted pair rates per class pair: its classes and ``(C, C,
        #: T, 2)`` steps/s of ``a`` and ``b`` sharing type ``t`` (0 where they may not).
        self._pair_draw: tuple[list[JobKey], np.ndarray] = ([], np.zeros((0, 0, 0, 2)))
        self.seed = seed
        self._shuffler = random.Random(seed + 5)
        self.solver_failures = 0
        self.fallbacks = 0
        self.allocation_updates = 0
        self.lease_extensions = 0
        self.lease_opportunities = 0
        self.missing_pairs: set[tuple[JobKey, JobKey, str]] = set()
        self._reset_state(())

    def _reset_state(self, types: tuple[str, ...]) -> None:
        self._types = types
        # _may_run's rows per job class, for the capacities and estimator state they were read in.
        self._may_run_rows: dict[tuple[str, int], list[float]] = {}
        self._may_run_state: tuple[object, ...] = ()
        self._measured_rows: dict[JobKey, np.ndarray] = {}  # by job class, for these types
        # The round mechanism: time received and deficit per combination admitted, and the
        # allocation in force.
        self._rounds = Rounds(types)
        # The pairs in force as _candidates reads them: (the version of _pair_usable and the
        # estimator's fits_version ((0, 0) for the table) they were read in, the pairs, their
        # (4, P) index (:meth:`_pair_index`), types where each may run now (P, T)).
        self._pairs_version = 0
        self._pair_rows_cache: tuple[tuple[int, tuple[int, int]], list[Combo], np.ndarray,
                                     np.ndarray] | None = None
        # _pairs' table rates per class pair on these types ((T, 2) each).
        self._table_pair_rows: dict[tuple[JobKey, JobKey], np.ndarray] = {}
        self._need_update = False
        self._job_types: dict[str, str] = {}
        self._profiling_now: set[Combo] = set()  # combos run this round to profile a job
        self._pair_usable: dict[Combo, np.ndarray] = {}  # pairs in force: types they can share
        # With a learner, _pair_may_fit's answers (per type, and per class pair over the
        # types) for the estimator state they were read in (:meth:`_pair_fit_memo`).
        self._pair_fits: dict[tuple[str, JobKey, JobKey], bool] = {}
        self._pair_fit_masks: dict[tuple[JobKey, JobKey], np.ndarray] = {}
        # :meth:`_believed`'s cells, kept (~1,500 a recompute): per class its alone cell on
        # each type, and per class pair (a, b), read with its mask, each type index where they
        # may share it with a's cell beside b and b's beside a.
        self._alone_cells: dict[JobKey, list[Cell]] = {}
        self._pair_slots: dict[tuple[JobKey, JobKey], list[tuple[int, Cell, Cell]]] = {}
        self._pair_fits_state: tuple[int, int] = (-1, -1)

    # --- the policy's part ----------------------------------------------------------------------

    def allocate(self, throughputs: np.ndarray, scale_factors: np.ndarray,
                 capacities: np.ndarray) -> np.ndarray | None:
        """Time fractions ``(J, T)`` for jobs with measured steps/s ``throughputs`` ``(J, T)``
        (every row has a positive entry), scale factors ``(J,)`` and GPUs per type ``(T,)``;
        ``None`` when no allocation could be computed."""
        raise NotImplementedError

    def allocate_combinations(self, inputs: AllocationInputs) -> np.ndarray | None:
        """Time fractions ``(J + P, T)``: the jobs alone, then the pairs sharing GPUs; ``None``
        when no allocation could be computed. By default :meth:`allocate` on the jobs alone."""
        return self.allocate(inputs.throughputs, inputs.scale_factors, inputs.capacities)

    def sub_problems_commute(self) -> bool:
        """Whether :meth:`allocate_combinations` may run on POP's sub-problems at once, on
        threads, in any order: true where its effects on the policy are per job (or none);
        a policy whose calls draw from one random stream in turn says false, and its
        sub-problems are solved one after another whatever ``partition_workers`` says."""
        return True

    def undeclared_fallback(self, inputs: AllocationInputs) -> np.ndarray | None:
        """For policies that read the jobs' remaining steps: ``None`` when every job declares
        its steps; otherwise :meth:`equal_split_fallback`."""
        undeclared = int(np.isnan(inputs.remaining_steps).sum())
        if not undeclared:
            return None
        return self.equal_split_fallback(inputs, f"{undeclared} of {inputs.num_jobs} jobs "
                                                 "declare no steps")

    def equal_split_fallback(self, inputs: AllocationInputs, why: str) -> np.ndarray:
        """The equal split (Gavel's ``IsolatedPolicy``, FTF's own fallback) for inputs the
        policy cannot allocate by its own rule, logged with ``why`` and counted in
        :attr:`fallbacks`."""
        self.fallbacks += 1
        LOG.warning("policy %s: %s; time split equally instead", self.name, why)
        x = np.zeros((inputs.num_jobs + len(inputs.pairs), len(inputs.capacities)))
        x[:inputs.num_jobs] = equal_split(inputs.scale_factors, inputs.capacities)
        return x

    # --- Policy interface -----------------------------------------------------------------------

    def stats(self) -> Mapping[str, float]:
        """``solver_failures``, ``allocation_updates``, ``fallback_allocations`` (equal splits
        for inputs the policy could not allocate by its rule), ``lease_extension_fraction``
        and, with a learner, ``thompson_draws`` (recomputes decided on a posterior draw)."""
        stats = {"solver_failures": int(self.solver_failures),
                 "allocation_updates": int(self.allocation_updates),
                 "fallback_allocations": int(self.fallbacks),
                 "lease_extension_fraction": (self.lease_extensions
                                              / max(self.lease_opportunities, 1))}
        if self.estimator is not None:
            stats["thompson_draws"] = int(self.draws_made if self.thompson else 0)
        return stats

    def job_settings(self, spec: JobSpec) -> JobSettings:
        return JobSettings(batch_size=spec.batch_size, max_replicas=spec.num_replicas)

    def fractions(self) -> dict[str, dict[str, float]]:
        """The allocation in force for the jobs alone: ``{job: {GPU type: fraction of time}}``."""
        return {combo[0]: dict(zip(self._types, map(float, x), strict=True))
                for combo, x in self._rounds.store.allocation().items() if len(combo) == 1}

    def pair_fractions(self) -> dict[tuple[str, str], dict[str, float]]:
        """The allocation in force for pairs sharing GPUs: ``{(job a, job b): {type: fraction}}``."""
        return {(combo[0], combo[1]): dict(zip(self._types, map(float, x), strict=True))
                for combo, x in self._rounds.store.allocation().items() if len(combo) == 2}

    def decide(self, cluster: ClusterState, jobs: Sequence[JobView],
               estimates: Estimates) -> Allocations:
        self._read_throughputs(estimates)
        self.steps_left = estimates.get(REMAINING_STEPS)
        types = cluster_types(cluster)
        if types != self._types:
            self._reset_state(types)
        jobs = sorted(jobs, key=lambda j: (j.submit_time, j.name))
        now = cluster.now
        half_round = cluster.round_interval / 2.0
        node_types = np.array(cluster.gpu_types)
        self._account(jobs, node_types, now, half_round)
        # With a learner this is only where a job may run at all (learned from failed launches).
        measured = (measured_throughputs(jobs, types, cluster, self.table, self._measured_rows)
                    if self.table is not None else self._may_run(jobs, types, cluster))
        capacities = np.array([cluster.gpus_of_type(t) for t in types], dtype=np.int64)
        may_recompute = (now - self._rounds.last_reset >= self.min_reset_interval
                         or self._rounds.last_reset == 0.0)
        if self.estimator is not None and may_recompute:
            self.estimator.refresh()  # fits only when the new belief can be used
        if self.estimator is not None and self.estimator.version != self._belief_version:
            self._belief_version = self.estimator.version
            self._need_update = True  # the belief changed
        if self._need_update and may_recompute:
            self._rounds.reset_time(now, half_round)
            self._update_allocation(jobs, measured, capacities, half_round)
        order = list(range(len(types)))
        if not self.heterogeneity_aware:
            self._shuffler.shuffle(order)
        combos, rates_ok, combo_index = self._candidates(jobs, measured)
        profiling = self._profiling(jobs, measured, capacities)
        left = capacities.copy()
        busy: set[str] = set()
        scheduled: dict[int, int] = {}
        sizes = {job.name: job.requested_replicas for job in jobs}
        for combo, t in profiling.items():  # profiling rounds first, then the allocation
            if combo not in combos:
                combos.append(combo)
            scheduled[combos.index(combo)] = t
            left[t] -= sizes[combo[0]]
            busy.update(combo)
        skip = self._skip if type(self)._skip is not TimeSharingPolicy._skip else None
        scheduled.update(self._rounds.greedy(combos, rates_ok, left, order, busy, combo_index,
                                             skip))
        self._profiling_now = set(profiling)
        placed = self._rounds.place(jobs, combos, scheduled, cluster, self._profiling_now)
        self.lease_extensions += placed.extensions
        self.lease_opportunities += placed.opportunities
        return placed.allocations

    # --- what the round mechanism is fed ----------------------------------------------------------

    def _account(self, jobs: Sequence[JobView], node_types: np.ndarray, now: float,
                 half_round: float) -> None:
        """Credit last round's run time and admit and drop jobs (:meth:`Rounds.account`); a
        job set changed, or a job now running as another job type, asks for a recompute."""
        accounted = self._rounds.account(jobs, node_types, now, half_round)
        for combo in accounted.gone:
            self._pair_usable.pop(combo, None)
            self._need_update = True
        if accounted.gone:
            self._pairs_version += 1
        if accounted.admitted:
            self._need_update = True
        job_types = {job.name: job.application for job in jobs}
        if any(self._job_types.get(name, kind) != kind for name, kind in job_types.items()):
            self._need_update = True  # a job's measured throughputs changed
            self._pairs_version += 1  # and where its pairs may fit
        self._job_types = job_types

    def _inputs(self, jobs: Sequence[JobView], measured: np.ndarray, capacities: np.ndarray,
                groups: np.ndarray | None = None) -> AllocationInputs:
        """The allocation's inputs; ``groups`` ``(J,)``: each job's POP sub-problem (pairs only
        within one), ``None`` for the exact program."""
        scale_factors = np.array([float(job.requested_replicas) for job in jobs])
        left = declared_steps_left if self.steps_left is None else self.steps_left.remaining_steps
        remaining = np.array([left(job) for job in jobs], dtype=float)
        keys = [(job.application, job.requested_replicas) for job in jobs]
        classes = list(dict.fromkeys(keys))
        position = {key: c for c, key in enumerate(classes)}
        index = np.array([position[k] for k in keys], dtype=np.int64)
        pairs, pair_rates = (self._pairs(classes, index, measured, groups) if self.packing
                             else (np.zeros((0, 2), np.int64),
                                   np.zeros((0, 2, len(self._types)))))
        return AllocationInputs(
            names=tuple(job.name for job in jobs), throughputs=measured, scale_factors=scale_factors,
            capacities=capacities.astype(float),
            elapsed=np.array([job.age for job in jobs]), remaining_steps=remaining,
            pairs=pairs, pair_throughputs=pair_rates, job_classes=index,
            class_keys=tuple(classes), steps_done=np.array([job.progress for job in jobs]))

    def _update_allocation(self, jobs: Sequence[JobView], measured: np.ndarray,
                           capacities: np.ndarray, half_round: float) -> None:
        self._need_update = False
        runnable = [int(j) for j in np.flatnonzero(measured.max(axis=1) > 0)]
        if not runnable:
            self._pair_usable = {}
            self._rounds.store.set_allocation([], np.zeros((0, len(self._types))))
            self._pairs_version += 1
            return
        chosen = [jobs[j] for j in runnable]
        rates = (measured[runnable] if self.estimator is None
                 else self._believed(chosen, measured[runnable] > 0))
        parts = self.partitioner.parts(len(chosen), capacities, class_index(
            [(job.application, job.requested_replicas) for job in chosen]),
            [job.name for job in chosen], np.array([job.requested_replicas for job in chosen]))
        inputs = self._inputs(chosen, rates, capacities,
                              None if parts is None else labels(parts, len(chosen)))
        try:
            x = (self.allocate_combinations(inputs) if parts is None
                 else solve_partitioned(inputs, parts, self.allocate_combinations,
                                      self.partition_workers if self.sub_problems_commute()
                                      else 1))
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
        x = np.clip(np.nan_to_num(np.asarray(x, dtype=float)), 0.0, 1.0)
        names = [jobs[j].name for j in runnable]
        pair_rows = x[len(names):]
        kept = np.flatnonzero(pair_rows.max(axis=1, initial=0.0) >= MIN_PAIR_FRACTION)
        usable = inputs.pair_throughputs[kept].min(axis=1) > 0  # (kept, T)
        # The pairs kept, in order, named (an object array keeps the names' own str).
        by_index = np.array(names, dtype=object)
        pair_combos: list[Combo] = list(zip(by_index[inputs.pairs[kept, 0]].tolist(),
                                            by_index[inputs.pairs[kept, 1]].tolist(),
                                            strict=True))
        self._pair_usable = dict(zip(pair_combos, usable, strict=True))
        index = self._rounds.store.index
        self._rounds.store.add_many([combo for combo in pair_combos if combo not in index],
                                    half_round)
        self._rounds.store.set_allocation([(name,) for name in names] + pair_combos,
                                   np.concatenate([x[:len(names)], pair_rows[kept]]))
        self._pairs_version += 1

    def _candidates(self, jobs: Sequence[JobView], measured: np.ndarray
                    ) -> tuple[list[Combo], np.ndarray, np.ndarray]:
        """The combinations the next round may run: every job alone, then the pairs in the
        allocation in force; where each can run, ``(C, T)`` bool; and per combination
        ``(4, C)`` ints: its row in the combination store, its scale factor (GPUs), and the
        store rows of its members alone (the second -1 for a job alone)."""
        combos: list[Combo] = [(job.name,) for job in jobs]
        num_types = len(self._types)
        singles = np.reshape(measured > 0, (len(jobs), num_types))
        single_rows = self._rounds.store.rows(combos)
        single_index = np.stack([single_rows,
                                 np.array([job.requested_replicas for job in jobs],
                                          dtype=np.int64).reshape(len(jobs)),
                                 single_rows, np.full(len(jobs), -1, dtype=np.int64)])
        # The pairs' part stands while the allocation in force does and, with a learner, where
        # pairs may fit (its fits_version; the table's (0, 0) never moves).
        state = (self._pairs_version,
                 (0, 0) if self.estimator is None else self.estimator.fits_version)
        cache = self._pair_rows_cache
        if cache is None or cache[0] != state:
            pairs = list(self._pair_usable)
            usable = np.array(list(self._pair_usable.values()), dtype=bool).reshape(
                len(pairs), num_types)
            if self.estimator is not None:
                # A pair that failed to launch since the allocation was computed is not tried
                # again on that type while the allocation stays in force.
                keys = {job.name: (job.application, job.requested_replicas) for job in jobs}
                for p, combo in enumerate(pairs):
                    if all(n in keys for n in combo):
                        usable[p] &= self._pair_fit_mask(keys[combo[0]], keys[combo[1]])
            cache = self._pair_rows_cache = (state, pairs, self._pair_index(jobs, pairs), usable)
        combos.extend(cache[1])
        return (combos, np.concatenate([singles, cache[3]]),
                np.concatenate([single_index, cache[2]], axis=1))

    def _pair_index(self, jobs: Sequence[JobView], pairs: Sequence[Combo]) -> np.ndarray:
        """:meth:`_candidates`' ``(4, P)`` ints for ``pairs`` (of ``jobs``): store rows, scale
        factors (the first member's), and the store rows of the first and second member."""
        size_of = {job.name: job.requested_replicas for job in jobs}
        store = self._rounds.store
        return np.stack([store.rows(pairs),
                         np.array([size_of[c[0]] for c in pairs], dtype=np.int64),
                         store.rows([(c[0],) for c in pairs]),
                         store.rows([(c[1],) for c in pairs])]).reshape(4, len(pairs))

    def _profiling(self, jobs: Sequence[JobView], measured: np.ndarray, capacities: np.ndarray
                   ) -> dict[Combo, int]:
        """The combinations run this round to profile jobs (type index each): per job in
        submission order its first pending cell that can run now; cells that never can are
        dropped from its plan."""
        estimator = self.estimator
        if estimator is None:
            return {}
        left = capacities.copy()
        busy: set[str] = set()
        out: dict[Combo, int] = {}
        for j, job in enumerate(jobs):
            size = job.requested_replicas
            for cell in estimator.pending_profiling(job.name):
                if job.name in busy:
                    break
                why = self._unrunnable(job, j, cell, measured, capacities)
                if why is None and cell.partner is not None:
                    if not any(k.application == cell.partner and k.requested_replicas == size
                               and k.name != job.name for k in jobs):
                        why = f"no job of type {cell.partner} on {size} GPUs is active"
                if why is not None:
                    estimator.drop_profiling(job.name, cell, why)
                    continue
                t = self._types.index(cell.gpu_type)
                if left[t] < size:
                    break  # the type is full this round: try again next round
                combo: Combo = (job.name,)
                if cell.partner is not None:
                    partner = next((k for k in jobs if k.application == cell.partner
                                    and k.requested_replicas == size and k.name != job.name
                                    and k.name not in busy), None)
                    if partner is None:
                        break
                    combo = tuple(sorted((job.name, partner.name),
                                         key=lambda n: [k.name for k in jobs].index(n)))
                out[combo] = t
                left[t] -= size
                busy.update(combo)
                break
        return out

    def _unrunnable(self, job: JobView, j: int, cell: Cell, measured: np.ndarray,
                    capacities: np.ndarray) -> str | None:
        """Why ``job`` can never be profiled in ``cell`` (``None``: it can)."""
        if (cell.job_type, cell.scale_factor) != (job.application, job.requested_replicas):
            return "the job runs as another job type or scale factor"
        if cell.gpu_type not in self._types:
            return "the cluster has no such GPU type"
        t = self._types.index(cell.gpu_type)
        if measured[j, t] <= 0 or capacities[t] < job.requested_replicas:
            return "the job does not fit there"
        if cell.partner is not None and not self._pair_may_fit(
                cell.gpu_type, (job.application, job.requested_replicas),
                (cell.partner, job.requested_replicas)):
            return "the pair is known not to fit in one GPU's memory"
        return None

    def _skip(self, priority: float) -> bool:
        """Whether a job of this priority is left out of the round (FIFO policies: priority 0)."""
        return False
