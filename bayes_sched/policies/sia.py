"""Sia (Jayaram Subramanya et al., SOSP 2023): goodput-optimised scheduling on heterogeneous GPUs.

Every round Sia lists, for each job, its candidate *configurations* (a GPU type and a GPU count)
with the job's goodput estimate on each, normalises each job's goodputs, and solves one integer
program: at most one configuration per job, GPUs per type within the type's capacity, maximising
the sum of normalised goodput to the power ``p``. The facts below are those of Sia's paper and its
public simulator (``sia-simulator/sia.py``, ``simulator_config.py``, ``cluster.py``, ``job.py``,
``run_experiment.sh`` of github.com/siasosp23/artifacts); the artifact carries no licence, so
nothing of its code or data is copied, only the formulation.

* **Normalised goodput.** A job's goodputs over its configurations are divided by its lowest one
  and multiplied by the GPUs of that configuration, so the job's slowest configuration counts as
  worth its GPUs (:func:`normalized_goodputs`). An adaptive job's slowest is one GPU of the slowest
  type (worth 1); a *rigid* job (fixed GPU count and batch: goodput is throughput) has one
  configuration per type and its slowest type counts as worth its GPU count.
* **Objective** (:func:`config_utilities`). With ``p < 0`` (Sia's default ``p = -0.5``) Sia
  minimises ``sum x_c g_c^p + lambda_n (J - sum x_c)``; with ``p > 0`` it maximises
  ``sum x_c g_c^p - lambda_n (J - sum x_c)``. Both are: maximise ``sum_c x_c (lambda_n +
  sign(p) g_c^p)``. ``lambda_n = 1.1`` (Sia's default) is the penalty for a job left without
  GPUs: a *soft* term, not a constraint, because more jobs than GPUs is normal; since ``g >= 1``,
  ``g^p <= 1 < lambda_n`` and every job that fits is given a configuration. Powered values are
  clipped at 3000 (Sia's ``sia_goodput_clip_val``).
* **Restart penalty.** A job that holds GPUs keeps its normalised goodput on its current
  configuration; every other configuration is multiplied by Pollux's re-allocation factor
  ``max(T - R delta, 0) / (T + delta)`` (age ``T``, restarts ``R``, restart delay ``delta`` of its
  application; Sia measured 25-250 s per model and uses 30 s elsewhere), and by 1 while the job has
  attained fewer GPU-seconds than ``delta`` (Sia's rule for rigid jobs). With ``p < 0`` a factor
  below 1 lowers ``(g f)^p``'s utility, so a job moves only where the gain outweighs the restart.
  (The artifact's ``lambda_a``, a penalty per allocation change, is set but never enters its
  objective; it is left out here.)
* **Tenant weights** (ours, issue 36; option ``tenant_weights``, off by default): the objective
  gains a concave term per tenant, ``sum_k G_k phi_p(S_k / G_k)`` with ``S_k`` the tenant's summed
  normalised goodput, ``G_k`` its weight's part of the GPUs and ``phi_p(s) = ((1 + s)^p - 1) / p``,
  and Sia's term is averaged over the jobs; tangents of ``phi_p`` keep the program a MILP
  (:mod:`bayes_sched.policies.sia_tenants`, where the formula is derived). Tenants then receive
  goodput in proportion to their weights where their jobs can use it; one tenant: Sia's
  decisions. (Weighting each job's term instead keeps the objective linear in the weights, and
  the heaviest tenant's jobs take every contended GPU.)
* **Solver** (:mod:`~bayes_sched.policies.sia_program`). One boolean per (job, configuration)
  pair that can run, an open MILP solver (HiGHS by default, SCIP optional; Sia used CBC) at
  Sia's relative gap ``1e-4``; HiGHS's sub-MIP and search heuristics are off unless asked for
  (option ``mip_heuristics``): on these programs they took most of the solve time, and the
  solve is optimal within the gap without them. When every job's best configuration fits at
  once no solver is needed: that choice is the optimum. When the program kept its
  configurations and capacities since the last solve and its utilities moved too little to
  matter (running jobs aged), the last answer is kept, certified within the same gap by a bound
  (:mod:`~bayes_sched.policies.sia_reuse`); under POP each sub-problem keeps its own last
  answer, which sticky groups make worth keeping. A failed solve keeps the previous allocation,
  logged and counted in :attr:`SiaPolicy.solver_failures`.
* **Bootstrapping** (Sia's paper; ``cluster.py`` ``compute_throughput_ratios``, ``sia.py``
  ``_compute_goodputs_v2``). A new adaptive job is profiled on one GPU of every type; until it
  has a throughput model somewhere, every type offers only its one-GPU configuration at
  normalised goodput 1; with ``project_throughputs`` (on in Sia's runs) a type without a model
  borrows the model of a type that has one, scaled by the ratio of the two types' one-GPU
  throughputs. An adaptive job's configurations reach twice the most GPUs it has been measured
  on (the most over all types, with ``share_max_replicas``, also on in Sia's runs), at most 64.
  Rigid jobs need none of it: Sia reads their throughput per type directly.

**Where Sia runs here: the throughput-table world** (Gavel's jobs: a job type and a scale factor;
steps/s per scale factor 1, 2, 4, 8 on K80 / P100 / V100, :mod:`bayes_sched.throughputs`). Its
jobs declare a fixed batch, so statistical efficiency is 1 and goodput is the table's throughput:
they are Sia's *rigid* jobs, and Sia chooses each round a GPU type per job (or none). Sia's
*adaptive* jobs run in the Pollux world on typed GPUs (per-type step times derived by
:mod:`bayes_sched.sim.typed_profiles`'s documented rule; Sia's own profiles cannot be shipped, no
licence) under :class:`~bayes_sched.policies.sia_adaptive.SiaAdaptivePolicy`. Elastic scale factors
(Sia choosing among the measured 1, 2, 4, 8) would need the table world to admit elastic jobs;
that is not done, and the configurations here are general enough to take them.

**Throughputs** are the round's ``throughput`` estimate, read through a belief's posterior mean:
by default the world's oracle (the known table, :attr:`SiaPolicy.belief`); with another
estimator chosen (a learner behind the loop's throughput estimator), the belief it learns from
the jobs' reports, as the Gavel-family policies read it: a new job first runs in its learner's
profiling cells (Sia's own learner: one GPU of every type, which for a rigid multi-GPU job means
none of them: it runs at its scale factor only), and ``acquisition="thompson"`` reads a
posterior draw instead of the mean. A job whose job type the belief does not know on any type
runs equally well everywhere (Sia's rule for a job with no throughput yet; Gavel's default
throughput is the same).

Not modelled: Sia's 60 s rounds (the cluster's round is used; Gavel's setting has 360 s), its
rounding of powered goodputs to two decimals (a tie-breaking artefact), and its rule that a job in
the middle of a checkpoint-restore keeps its allocation (the table world's restarts are free, as
in Gavel's simulator).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import ClassVar, Literal

import numpy as np

from bayes_sched.acquisition import thompson
from bayes_sched.cells import Cell
from bayes_sched.cluster import Allocations, ClusterState
from bayes_sched.estimates import Estimates
from bayes_sched.jobs import JobSettings, JobSpec, JobView
from bayes_sched.mechanisms.genetic_allocation.search import restart_delays, restart_penalty
from bayes_sched.mechanisms.highs_process import MIP_HEURISTICS_OFF
from bayes_sched.mechanisms.placement import Request, keep_or_pack
from bayes_sched.mechanisms.pop import GroupSetting, Partition, Partitioner, PartitionSetting
from bayes_sched.mechanisms.rounds import cluster_types
from bayes_sched.policies.sia_program import (
    SIA_SOLVERS,
    Assign,
    Configurations,
    best_if_all_fit,
    partitioned_assignment,
    solve_program,
    tenant_assignment,
)
from bayes_sched.policies.sia_reuse import SolvedAssignment, assignment_value
from bayes_sched.throughput_estimates import (
    THROUGHPUT,
    CellPosterior,
    CellPrediction,
    KnownThroughputs,
    LearnedThroughputs,
    ThroughputBelief,
)

LOG = logging.getLogger(__name__)

#: The slot of :attr:`SiaPolicy.solved` that holds the whole (unsplit) program's last answer.
WHOLE = -1

#: Sia's cap on powered normalised goodputs (``sia_goodput_clip_val``).
GOODPUT_CLIP = 3000.0


def normalized_goodputs(configs: Configurations, num_jobs: int) -> np.ndarray:
    """Sia's normalised goodput ``(C,)``: each job's goodputs over its lowest one, times the GPUs
    of that lowest configuration (a job's slowest configuration is worth its GPUs)."""
    # Each job's slowest configuration: sorted by job, then goodput, then GPUs; first per job.
    order = np.lexsort((configs.num_gpus, configs.goodput, configs.job))
    first = order[np.r_[True, configs.job[order][1:] != configs.job[order][:-1]]] \
        if len(order) else order
    lowest, gpus = np.ones(num_jobs), np.zeros(num_jobs)
    lowest[configs.job[first]] = configs.goodput[first]
    gpus[configs.job[first]] = configs.num_gpus[first]
    return configs.goodput / lowest[configs.job] * gpus[configs.job]


def realloc_factors(age: np.ndarray, restarts: np.ndarray, attained_service: np.ndarray,
                    restart_delay: np.ndarray) -> np.ndarray:
    """Sia's re-allocation factor per job ``(J,)``: Pollux's ``max(T - R delta, 0) / (T + delta)``,
    and 1 while the job has attained fewer GPU-seconds than ``delta`` (it has barely run)."""
    factor = restart_penalty(age, restarts, restart_delay)
    return np.where(attained_service < restart_delay, 1.0, factor)


def config_utilities(normalized: np.ndarray, p: float, lambda_n: float) -> np.ndarray:
    """What choosing each configuration adds to Sia's objective ``(C,)``: ``lambda_n + sign(p)
    min(g^p, clip)`` (the no-allocation penalty it avoids, plus or minus its powered goodput)."""
    with np.errstate(divide="ignore"):
        powered = np.minimum(np.power(np.maximum(normalized, 0.0), p), GOODPUT_CLIP)
    return lambda_n + np.sign(p) * powered


class _TableBelief:
    """A known throughput table (the oracle's) as a belief: its mean is the table, its one draw
    the mean; NaN where the table has no entry (Sia's rule for an unknown job type follows)."""

    def __init__(self, table: KnownThroughputs) -> None:
        self.table = table

    def predict(self, cells: Sequence[Cell], num_draws: int = 0, seed: int = 0
                ) -> CellPrediction:
        mean = np.full(len(cells), np.nan)
        for i, cell in enumerate(cells):
            if cell.partner is None:
                rate = self.table.steps_per_second(cell.job_type, cell.scale_factor,
                                                   cell.gpu_type)
            else:
                pair = self.table.pair_steps_per_second(
                    cell.gpu_type, (cell.job_type, cell.scale_factor),
                    (cell.partner, cell.scale_factor))
                rate = None if pair is None else pair[0]
            if rate is not None:
                mean[i] = rate
        return CellPrediction(mean, np.repeat(mean[None, :], max(num_draws, 1), axis=0))


class SiaPolicy:
    """Sia's policy for rigid jobs on typed GPUs (see the module docstring).

    Args:
        p: the exponent of normalised goodput (Sia: -0.5; not 0). Negative favours fairness.
        lambda_n: the penalty per job left without GPUs (Sia: 1.1; above 1 so that any
            configuration beats none).
        solver: the cvxpy MILP solver, ``"HIGHS"`` or ``"SCIP"`` (open source).
        mip_rel_gap: relative optimality gap at which a solve stops (Sia: 1e-4).
        time_limit: seconds a solve may take before its best solution is used.
        seed: the solver's random seed (ties between equally good choices).
        mip_heuristics: let HiGHS run its sub-MIP and search heuristics (off by default:
            :data:`~bayes_sched.mechanisms.highs_process.MIP_HEURISTICS_OFF`; on these
            programs they cost most of a solve, and the answer is optimal within
            ``mip_rel_gap`` either way, one of several tied choices where there are several).
            HiGHS only.
        certified_reuse: keep the last solved answer in a round whose program differs from it
            only in utilities, where a bound certifies it optimal within ``mip_rel_gap``
            (:mod:`~bayes_sched.policies.sia_reuse`); off: solve every such round. HiGHS
            only (SCIP's bound is not read).
        acquisition: how a learned belief is read: ``"mean"`` (its posterior mean) or
            ``"thompson"`` (one joint posterior draw per belief version, seeded by ``seed`` and
            the version). A known table (the world's oracle) is read as it is.

    Steps/s come from the round's ``throughput`` estimate (chosen outside the policy; by default
    the world's ``oracle``). A learning stage is read as the Gavel-family policies read it: the
    learner's profiling cells run first (one GPU type per job and round, at the job's own scale
    factor; a cell at another scale or in a pair is dropped: Sia's jobs are rigid and never share
    GPUs), then the belief's mean (or a draw) is the goodput.
        partitions: POP (:mod:`bayes_sched.mechanisms.pop`): solve the integer program as this
            many sub-problems (jobs, and each type's free GPUs, split alike; the jobs grouped
            as ``partition_groups`` says, seeded by ``seed``), the choices joined
            (:func:`partitioned_assignment`); ``"auto"``: the exact program below
            ``2 * jobs_per_partition`` jobs, more sub-problems above.
        partition_groups: how POP's groups are formed: ``"sticky"`` (a new job joins the
            group whose jobs ask for the fewest GPUs, where Sia's own POP counts jobs, and
            keeps it for its life) or ``"redrawn"`` (a fresh random split every round; a job
            then meets other competitors each round and is moved more often).
        tenant_weights: add the concave per-tenant term of
            :mod:`~bayes_sched.policies.sia_tenants` (tenants' goodput in proportion to their
            weights; needs ``p < 1``; off: Sia's objective).
    """

    name = "sia"
    needs: tuple[str, ...] = ("throughput",)
    #: Sia reads the known table (the world's oracle) unless another estimator is chosen.
    default_estimators: ClassVar[Mapping[str, str]] = {"throughput": "oracle"}
    #: The sub-problem size ``partitions="auto"`` aims at.
    jobs_per_partition = 512

    def __init__(self, p: float = -0.5, lambda_n: float = 1.1,
                 solver: Literal["HIGHS", "SCIP"] = "HIGHS", mip_rel_gap: float = 1e-4,
                 time_limit: float = 10.0, seed: int = 0,
                 acquisition: Literal["mean", "thompson"] = "mean",
                 partitions: PartitionSetting = "auto", tenant_weights: bool = False,
                 mip_heuristics: bool = False, certified_reuse: bool = True,
                 partition_groups: GroupSetting = "sticky") -> None:
        self.partitioner = Partitioner(partitions, seed, self.jobs_per_partition,
                                       partition_groups)
        self.tenant_weights = bool(tenant_weights)  # a concave term per tenant (see the module)
        if not np.isfinite(p) or p == 0:
            raise ValueError(f"p is {p}: expected a finite nonzero exponent")
        if self.tenant_weights and p >= 1:
            raise ValueError(f"p is {p}: tenant_weights needs p < 1 (a concave tenant term)")
        if not lambda_n > 0:
            raise ValueError(f"lambda_n is {lambda_n}: expected a penalty > 0")
        if solver not in SIA_SOLVERS:
            raise ValueError(f"solver is {solver!r}: expected one of {', '.join(SIA_SOLVERS)}")
        if not (mip_rel_gap >= 0 and time_limit > 0):
            raise ValueError("mip_rel_gap must be >= 0 and time_limit > 0")
        self.p, self.lambda_n = float(p), float(lambda_n)
        self.solver, self.mip_rel_gap, self.time_limit = solver, float(mip_rel_gap), time_limit
        self.seed = seed
        self.mip_heuristics = bool(mip_heuristics)
        self.certified_reuse = bool(certified_reuse)  # off: every such round is solved
        if acquisition not in ("mean", "thompson"):
            raise ValueError(f"acquisition is {acquisition!r}: expected 'mean' or 'thompson'")
        self.thompson = acquisition == "thompson"
        #: The round's throughput estimate (:meth:`read_throughputs`): a known table, read
        #: through :attr:`belief` (a posterior mean), or a learning stage.
        self.estimator: LearnedThroughputs | None = None
        self.belief: ThroughputBelief | None = None
        self.solver_failures = 0
        #: Programs the solver solved (a POP round counts each sub-problem it solved; not the
        #: programs whose every job's best configuration fitted at once: :func:`best_if_all_fit`).
        self.ilp_solves = 0
        #: The last program solved (or fitted at once) per slot (:data:`WHOLE`, or POP's
        #: sub-problem index), whose answer a later round with the same configurations and
        #: capacities may reuse (:mod:`.sia_reuse`).
        self.solved: dict[int, SolvedAssignment] = {}
        #: Programs whose last answer was reused, certified, instead of solved.
        self.reused = 0

    # --- Policy interface -----------------------------------------------------------------------

    def read_throughputs(self, estimates: Estimates) -> None:
        """Take the round's ``throughput`` estimate: a known table (the world's oracle) is read
        as a belief whose mean is the table (:class:`_TableBelief`), anything else as a learning
        stage; none (a subclass that reads goodput models instead) leaves both unset, and
        :meth:`configurations` then refuses to read throughputs."""
        value = estimates.get(THROUGHPUT)
        if value is None:
            self.belief, self.estimator = None, None
        elif isinstance(value, KnownThroughputs):
            known = self.belief.table if isinstance(self.belief, _TableBelief) else None
            if known is not value:
                self.belief = _TableBelief(value)
            self.estimator = None
        else:
            self.belief, self.estimator = None, value

    def stats(self) -> Mapping[str, float]:
        """``solver_failures`` (rounds whose assignment the solver could not give),
        ``ilp_solves`` (programs the solver solved; a POP round counts each sub-problem) and
        ``reused_answers`` (programs whose last solved answer was kept, certified optimal within
        the solver's gap)."""
        return {"solver_failures": int(self.solver_failures),
                "ilp_solves": int(self.ilp_solves), "reused_answers": int(self.reused)}

    def job_settings(self, spec: JobSpec) -> JobSettings:
        return JobSettings(batch_size=spec.batch_size, max_replicas=spec.num_replicas)

    def decide(self, cluster: ClusterState, jobs: Sequence[JobView],
               estimates: Estimates) -> Allocations:
        if not jobs:
            return {}
        self.read_throughputs(estimates)
        jobs = sorted(jobs, key=lambda j: (j.submit_time, j.name))
        types = cluster_types(cluster)
        node_types = np.array(cluster.gpu_types)
        free = cluster.capacity().copy()
        profiled = self._profiling(cluster, jobs, types, node_types, free)  # takes its GPUs from free
        others = [job for job in jobs if job.name not in profiled]
        if not others:
            return profiled
        return {**profiled, **self._decide(cluster, others, types, node_types, free)}

    def _decide(self, cluster: ClusterState, jobs: Sequence[JobView], types: tuple[str, ...],
                node_types: np.ndarray, free: np.ndarray) -> Allocations:
        """Sia's assignment of ``jobs`` to the GPUs per node still ``free``."""
        capacities = np.array([free[node_types == t].sum() for t in types], dtype=np.int64)
        configs = self.configurations(cluster, jobs, types, capacities)
        normalized = normalized_goodputs(configs, len(jobs))
        current = self._current_type(jobs, types, node_types)
        factors = realloc_factors(np.array([job.age for job in jobs]),
                                  self.penalised_restarts(jobs),
                                  np.array([job.attained_service for job in jobs]),
                                  restart_delays(cluster, jobs))
        held = np.array([job.num_gpus for job in jobs])
        moves = (current[configs.job] >= 0) & ~(
            (configs.gpu_type == current[configs.job]) & (configs.num_gpus == held[configs.job]))
        normalized = np.where(moves, normalized * factors[configs.job], normalized)
        utility = config_utilities(normalized, self.p, self.lambda_n)
        assign = self._tenant_assign(cluster, jobs, normalized) if self.tenant_weights else None
        chosen = self._fit_at_once(utility, configs, capacities, len(jobs), WHOLE)
        if chosen is None:
            keys = [(job.application, job.requested_replicas) for job in jobs]
            index = {key: c for c, key in enumerate(dict.fromkeys(keys))}
            strata = np.array([index[key] for key in keys], dtype=np.int64)
            parts = self.partitioner.parts(
                len(jobs), capacities, strata, [job.name for job in jobs],
                np.array([job.requested_replicas for job in jobs]))
            if parts is None and assign is None:
                chosen = self._solve_or_reuse(utility, configs, capacities, len(jobs), WHOLE)
            else:
                if assign is not None:
                    self.ilp_solves += 1
                self.solved = {slot: kept for slot, kept in self.solved.items()
                               if slot < len(parts or ())}  # gone: sub-problems beyond k
                chosen = partitioned_assignment(
                    utility, configs, parts or [Partition(np.arange(len(jobs)), capacities)],
                    self.solver, self._solver_options(), assign or self._sub_problem)
        if chosen is None:
            self.solver_failures += 1
            LOG.warning("sia: no assignment for %d jobs; previous allocation kept", len(jobs))
            return {job.name: np.array(job.allocation, dtype=np.int64) for job in jobs
                    if job.num_gpus}
        return self._place(free, jobs, configs, chosen, types, node_types)

    def _solve_or_reuse(self, utility: np.ndarray, configs: Configurations,
                        capacities: np.ndarray, num_jobs: int, slot: int) -> np.ndarray | None:
        """A program's answer ``(J,)``, its best configurations not fitting at once: the one
        last solved in ``slot`` (:data:`WHOLE` or a POP sub-problem's index) where its
        certificate holds (:mod:`~bayes_sched.policies.sia_reuse`; counted in
        :attr:`reused`), else the solver's (kept, with its bound, for the next rounds)."""
        last = self.solved.get(slot)
        if last is not None and self.certified_reuse:
            kept = last.reuse(utility, configs, capacities, num_jobs, self.mip_rel_gap)
            if kept is not None:
                self.reused += 1
                return kept
        self.ilp_solves += 1
        got = solve_program(utility, configs, capacities, num_jobs, self.solver,
                             self._solver_options())
        if got is None:
            self.solved.pop(slot, None)
            return None
        self.solved[slot] = SolvedAssignment(configs, capacities, utility, got[1], got[0])
        return got[0]

    def _sub_problem(self, index: int, utility: np.ndarray, configs: Configurations,
                     capacities: np.ndarray, part_jobs: np.ndarray, rows: np.ndarray
                     ) -> np.ndarray | None:
        """POP's sub-problem ``index`` (an :data:`~.sia_program.Assign`): every job's best
        configuration where they fit at once, else :meth:`_solve_or_reuse` in its own slot, so
        a sticky group's rounds reuse its answers as the whole program's do."""
        chosen = self._fit_at_once(utility, configs, capacities, len(part_jobs), index)
        if chosen is None:
            return self._solve_or_reuse(utility, configs, capacities, len(part_jobs), index)
        return chosen

    def _fit_at_once(self, utility: np.ndarray, configs: Configurations, capacities: np.ndarray,
                     num_jobs: int, slot: int) -> np.ndarray | None:
        """Every job's best configuration ``(J,)`` where they all fit at once
        (:func:`best_if_all_fit`, the optimum without a solver), kept in ``slot`` of
        :attr:`solved` for a later round's certified reuse; ``None`` where they do not fit."""
        chosen = best_if_all_fit(utility, configs, capacities, num_jobs)
        if chosen is not None:
            self.solved[slot] = SolvedAssignment(configs, capacities, utility,
                                                 assignment_value(utility, chosen), chosen)
        return chosen

    # --- the policy's parts ---------------------------------------------------------------------

    def configurations(self, cluster: ClusterState, jobs: Sequence[JobView],
                       types: Sequence[str], capacity: np.ndarray | None = None
                       ) -> Configurations:
        """Each job's configurations: its scale factor on every type with room for it (GPUs per
        type ``capacity``, default the cluster's) where the belief's mean steps/s (or draw) is
        positive; on every type with room where the belief knows the job on no type."""
        row = {key: k for k, key in enumerate(dict.fromkeys(
            (job.application, job.requested_replicas) for job in jobs))}
        keys = list(row)
        cells = [Cell(job_type, scale, t) for job_type, scale in keys for t in types]
        mean = self._believed(cells).reshape(len(keys), len(types))
        unknown = ~np.isfinite(mean).any(axis=1)
        mean[unknown] = 1.0  # no throughput anywhere: every type alike
        rates = np.nan_to_num(mean, nan=0.0)[[row[(job.application, job.requested_replicas)]
                                             for job in jobs]]
        if capacity is None:
            capacity = np.array([cluster.gpus_of_type(t) for t in types])
        scale = np.array([job.requested_replicas for job in jobs])
        runnable = (rates > 0) & (capacity[None, :] >= scale[:, None]) & (scale[:, None] > 0)
        job_index, type_index = np.nonzero(runnable)
        return Configurations(job=job_index, gpu_type=type_index, num_gpus=scale[job_index],
                              goodput=rates[job_index, type_index])

    def penalised_restarts(self, jobs: Sequence[JobView]) -> np.ndarray:
        """Restarts the re-allocation factor counts per job ``(J,)``: all of them here."""
        return np.array([job.num_restarts for job in jobs], dtype=np.int64)

    def _current_type(self, jobs: Sequence[JobView], types: Sequence[str],
                      node_types: np.ndarray) -> np.ndarray:
        """The type each job runs on now ``(J,)`` (its first node's; -1 for none)."""
        if not jobs:
            return np.full(0, -1, dtype=np.int64)
        held = np.array([job.allocation for job in jobs]) > 0
        type_of_node = np.array([types.index(str(t)) if str(t) in types else -1
                                 for t in node_types], dtype=np.int64)
        return np.where(held.any(axis=1), type_of_node[held.argmax(axis=1)], -1)

    def _tenant_assign(self, cluster: ClusterState, jobs: Sequence[JobView],
                       normalized: np.ndarray) -> Assign:
        """The (sub-)problem solve with the per-tenant term
        (:func:`~bayes_sched.policies.sia_program.tenant_assignment`): tenants' weights from the
        cluster's tenant table (1 for a tenant it does not list), ``normalized`` ``(C,)``."""
        listed = {t.name: t.weight for t in cluster.spec.tenant_table().tenants}
        names = list(dict.fromkeys(job.tenant for job in jobs))
        tenant = np.array([names.index(job.tenant) for job in jobs], dtype=np.int64)
        weights = np.array([listed.get(name, 1.0) for name in names])

        def assign(index: int, utility: np.ndarray, configs: Configurations,
                   capacities: np.ndarray, part_jobs: np.ndarray, rows: np.ndarray
                   ) -> np.ndarray | None:
            return tenant_assignment(utility, normalized[rows], configs, capacities,
                                     len(part_jobs), tenant[part_jobs], weights, self.p,
                                     self.solver, self._solver_options())

        return assign

    def _solver_options(self) -> dict[str, object]:
        if self.solver == "HIGHS":
            return {"mip_rel_gap": self.mip_rel_gap, "time_limit": float(self.time_limit),
                    "random_seed": int(self.seed),
                    **({} if self.mip_heuristics else MIP_HEURISTICS_OFF)}
        return {"scip_params": {"limits/gap": self.mip_rel_gap,
                                "limits/time": float(self.time_limit),
                                "randomization/randomseedshift": int(self.seed)}}

    def _believed(self, cells: list[Cell]) -> np.ndarray:
        """Steps/s of ``cells`` ``(N,)``: the table's (NaN where it has no entry), or the
        learner's posterior mean, or with ``acquisition="thompson"`` its draw for the belief in
        force."""
        if self.estimator is None:
            if self.belief is None:
                raise KeyError("sia: no estimate of 'throughput' this round (does the policy "
                               "declare it in its needs?)")
            return np.asarray(CellPosterior(self.belief, cells).mean(), dtype=float)
        # The belief refits when there are new reports.
        posterior = CellPosterior(self.estimator.belief, cells)
        if not self.thompson:
            return np.asarray(posterior.mean(), dtype=float)
        seed = self.seed * 1_000_003 + self.estimator.version
        return np.asarray(thompson(posterior, seed), dtype=float)

    def _profiling(self, cluster: ClusterState, jobs: Sequence[JobView],
                   types: tuple[str, ...], node_types: np.ndarray, free: np.ndarray
                   ) -> Allocations:
        """Jobs run this round in a cell of their learner's profiling plan: per job in
        submission order, its first pending cell on a type with room (taken from ``free``);
        cells that never can run (another scale factor, a pair, a type the cluster lacks or
        too small) are dropped from the plan."""
        estimator = self.estimator
        out: Allocations = {}
        if estimator is None:
            return out
        for job in jobs:
            size = job.requested_replicas
            for cell in estimator.pending_profiling(job.name):
                why = None
                if (cell.job_type, cell.scale_factor) != (job.application, size):
                    why = "Sia's jobs are rigid: the job runs at its own scale factor only"
                elif cell.partner is not None:
                    why = "Sia never shares a GPU between jobs"
                elif cell.gpu_type not in types or (node_types == cell.gpu_type).sum() == 0:
                    why = "the cluster has no such GPU type"
                elif cluster.gpus_of_type(cell.gpu_type) < size:
                    why = "the type has fewer GPUs than the job needs"
                if why is not None:
                    estimator.drop_profiling(job.name, cell, why)
                    continue
                # Already there: no restart; else packed on the cell's type.
                placed, _ = keep_or_pack([(job.name, size, job.allocation,
                                           node_types == cell.gpu_type)], free)
                out.update(placed)
                break  # one cell per job and round; a full type waits for the next round
        return out

    def _place(self, free: np.ndarray, jobs: Sequence[JobView], configs: Configurations,
               chosen: np.ndarray, types: Sequence[str], node_types: np.ndarray) -> Allocations:
        """GPUs per node for the chosen configurations: a job given its current type and GPU
        count keeps its GPUs (no restart) where they are still ``free``; the others, most GPUs
        first, take the nodes of their type with the most free GPUs
        (:func:`~bayes_sched.mechanisms.placement.keep_or_pack`); ``free`` is consumed."""
        requests: list[Request] = []
        type_of: dict[str, str] = {}
        nodes_of = {name: node_types == name for name in types}  # the nodes of each type
        for j in map(int, np.flatnonzero(chosen >= 0)):
            job, c = jobs[j], int(chosen[j])
            type_of[job.name] = types[int(configs.gpu_type[c])]
            requests.append((job.name, int(configs.num_gpus[c]), job.allocation,
                             nodes_of[type_of[job.name]]))
        out, unplaced = keep_or_pack(requests, free)
        for name in unplaced:  # cannot happen within the per-type capacity; kept as a guard
            LOG.warning("sia: no room for job %s on %s", name, type_of[name])
        return out

__all__ = ["GOODPUT_CLIP", "SiaPolicy", "config_utilities", "normalized_goodputs",
           "realloc_factors"]
