"""Sia in its natural setting: adaptive jobs on typed GPUs (the Pollux world on a typed cluster).

:class:`~bayes_sched.policies.sia.SiaPolicy` holds Sia's formulation (normalised goodput to the
power ``p``, ``lambda_n``, the re-allocation factor, the integer program, placement on one GPU type)
and runs rigid jobs from a throughput table. This module feeds the same program with *adaptive*
jobs (Pollux's: they tune their batch, their goodput is throughput times statistical efficiency)
whose goodput per GPU type comes from the job's own fitted models, as Sia's paper describes:

* **Configurations** of a job: on every GPU type, ``n`` GPUs for ``n`` in 1, 2, 4, ... up to a
  node's GPUs, then whole nodes, up to twice the most GPUs it was measured on over all types
  (Sia's ``share_max_replicas``), at most 64 and what its batch limits allow; ``n`` GPUs span
  ``ceil(n / gpus_per_node)`` nodes. Goodput is the job model's (examples at ``B0`` per second at
  the best batch, :meth:`~bayes_sched.jobs.JobModel.goodput`).
* **Profiling of new jobs** (Sia's paper, bootstrapping): Sia profiles every new job on one GPU
  of each GPU type to learn the job's per-type throughput ratio (on a cluster of one type there
  is nothing to learn and no profiling). Here that profiling is real
  allocation, so its cost is in every result: a job with a type it has not been profiled on (no
  model of it there, and no profiling round there yet) is given one GPU of that type for a round,
  before the integer program and ahead of it (types in the cluster's order, Gavel's V100, P100,
  K80; a job that already holds one GPU of the type keeps it). Each such round's GPU-seconds are
  counted in :attr:`SiaAdaptivePolicy.profiling_gpu_seconds`, and the job's JCT includes the rounds
  and their restarts. Sia profiles outside the job's run, so the restarts profiling causes (one
  per profiling round at most) are not counted against the job in the re-allocation factor
  (:meth:`SiaAdaptivePolicy.penalised_restarts`). ``profile_types=False`` leaves profiling out
  (the jobs then start where the program puts them and learn a type only by running there).
* **Skipping profiling where the posterior is sure** (ours, ``skip_profiling_within > 0``): once
  a job has a model on some type ``A``, a profiling round on type ``B`` is skipped where the jobs
  of its application already measured on both predict its throughput ratio ``B / A`` within
  ``±skip_profiling_within`` (:meth:`SiaAdaptivePolicy.ratio_is_sure`): the log ratios of those
  jobs (their models' one-GPU throughput at their initial micro-batch) under a normal model with
  unknown mean and variance (reference prior), whose predictive for a new job's log ratio is
  Student-t with ``n - 1`` degrees of freedom, location the mean and scale ``s sqrt(1 + 1/n)``;
  sure where its central 90 % interval lies within ``log(1 ± within)`` of its location, with at
  least :data:`MIN_JOBS_FOR_SKIP` jobs. The job's goodput there is then the ratio's
  (:meth:`SiaAdaptivePolicy.type_ratio`, over the application's jobs). Skipped rounds are counted
  in :attr:`SiaAdaptivePolicy.profiling_skipped`.
* **Models per type.** A job reports the measurements of the type it runs on
  (:meth:`~bayes_sched.agent.JobAgent.use_gpu_type`); the policy keeps the last model it saw per
  job and type, and the most GPUs it saw the job measured on per type.
* **Bootstrapping the multi-GPU model** (Sia's ``project_throughputs``): on a type where the job
  was measured on one GPU only (its profiling) or not at all, while another type measured it on
  more, the goodput of ``n`` GPUs is the other type's model's times the ratio of the two types'
  one-GPU throughputs; where the type measured it on several GPUs (or no type did), its own model
  is used. The ratio is the job's own (its two models' one-GPU throughput at its initial
  micro-batch: what its profiling measured); where the job lacks a model on one of the two types,
  the application's median over the jobs the policy watched on both, else 1 (the types taken as
  alike, Sia's rule for a job it knows nothing of).
* **A job with no model on any type** (profiling gave none yet, or it is off) offers one GPU on
  every type, goodput 1 (Sia's rule).

Job settings are Pollux's (the artifact's NCF override included), so both policies run the same
jobs. Everything else (objective, restart factor, solver, placement) is
:class:`~bayes_sched.policies.sia.SiaPolicy`'s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar, Literal

import numpy as np

from bayes_sched.cluster import Allocations, ClusterState
from bayes_sched.errors import InputError
from bayes_sched.estimates import Estimates
from bayes_sched.jobs import JobModel, JobSettings, JobSpec, JobView
from bayes_sched.mechanisms.placement import pack
from bayes_sched.policies.pollux import ARTIFACT_JOB_SETTINGS
from bayes_sched.policies.sia import SiaPolicy
from bayes_sched.policies.sia_program import Configurations

#: Sia's cap on GPUs per job.
MAX_GPUS_PER_JOB = 64

#: Fewest jobs of an application measured on both types before a ratio can be sure (two give a
#: Student-t of one degree of freedom, whose 90 % interval is 12.7 standard errors wide).
MIN_JOBS_FOR_SKIP = 3

#: Central mass of the predictive interval :meth:`SiaAdaptivePolicy.ratio_is_sure` checks.
SKIP_INTERVAL = 0.9


def gpu_counts(max_gpus: int, gpus_per_node: int) -> np.ndarray:
    """Sia's GPU counts up to ``max_gpus``: powers of two up to a node, then whole nodes."""
    counts = []
    n = 1
    while n < gpus_per_node and n <= max_gpus:
        counts.append(n)
        n *= 2
    counts += list(range(gpus_per_node, max_gpus + 1, gpus_per_node))
    return np.array(counts or [1], dtype=np.int64)


class SiaAdaptivePolicy(SiaPolicy):
    """Sia for adaptive jobs on typed GPUs (see the module docstring).

    Args:
        p: the exponent of normalised goodput (Sia: -0.5).
        lambda_n: the penalty per job left without GPUs (Sia: 1.1).
        solver: the cvxpy MILP solver, ``"HIGHS"`` or ``"SCIP"``.
        mip_rel_gap: relative optimality gap (Sia: 1e-4).
        time_limit: seconds a solve may take.
        seed: the solver's random seed.
        mip_heuristics: let HiGHS run its sub-MIP and search heuristics (as for ``sia``).
        certified_reuse: keep a certified last answer instead of solving (as for ``sia``).
        job_overrides: per-application fixed settings (default: Pollux's artifact's).
        profile_types: profile each new job on one GPU of every type first (Sia's paper).
        skip_profiling_within: skip a type's profiling round where the application's jobs
            predict the job's throughput ratio there within this relative error (0: never skip,
            Sia's behaviour; see the module).

    Attributes:
        profiling_gpu_seconds: GPU-seconds given to profiling rounds (one GPU for a round each).
        profiling_rounds: profiling allocations made (job-rounds).
        profiling_skipped: profiling rounds skipped as sure (job-types).
    """

    name = "sia_adaptive"
    needs: tuple[str, ...] = ("job_goodput",)
    default_estimators: ClassVar[Mapping[str, str]] = {"job_goodput": "job_models"}

    def __init__(self, p: float = -0.5, lambda_n: float = 1.1,
                 solver: Literal["HIGHS", "SCIP"] = "HIGHS", mip_rel_gap: float = 1e-4,
                 time_limit: float = 10.0, seed: int = 0,
                 job_overrides: Mapping[str, JobSettings] = ARTIFACT_JOB_SETTINGS,
                 profile_types: bool = True, skip_profiling_within: float = 0.0,
                 mip_heuristics: bool = False, certified_reuse: bool = True) -> None:
        super().__init__(p, lambda_n, solver, mip_rel_gap, time_limit, seed,
                         mip_heuristics=mip_heuristics, certified_reuse=certified_reuse)
        if not 0.0 <= skip_profiling_within < 1.0:
            raise InputError(f"skip_profiling_within is {skip_profiling_within}: expected a "
                             "relative error in [0, 1)", column="skip_profiling_within")
        self.job_overrides = dict(job_overrides)
        self.profile_types = bool(profile_types)
        self.skip_profiling_within = float(skip_profiling_within)
        self._skipped: dict[str, set[str]] = {}  # job -> types whose profiling was skipped
        self.profiling_skipped = 0
        self._models: dict[tuple[str, str], JobModel] = {}   # (job, type) -> last model seen
        self._max_profiled: dict[str, int] = {}
        self._replicas: dict[tuple[str, str], int] = {}  # (job, type) -> most GPUs measured on
        # (application, type) -> {job: one-GPU throughput of its model, steps/s}
        self._one_gpu: dict[tuple[str, str], dict[str, float]] = {}
        self._profiled: dict[str, set[str]] = {}  # job -> types it had a profiling round on
        self._profiling_now: dict[str, str] = {}  # job -> type of its profiling GPU this round
        self._profiling_rounds: dict[str, int] = {}
        self.profiling_gpu_seconds = 0.0
        self.profiling_rounds = 0

    def job_settings(self, spec: JobSpec) -> JobSettings:
        return self.job_overrides.get(spec.application, JobSettings())

    def decide(self, cluster: ClusterState, jobs: Sequence[JobView],
               estimates: Estimates) -> Allocations:
        names = {job.name for job in jobs}
        for table in (self._models, self._replicas):
            for key in [k for k in table if k[0] not in names]:
                del table[key]
        for per_job in (self._max_profiled, self._profiled, self._profiling_now,
                        self._profiling_rounds, self._skipped):
            for name in [n for n in per_job if n not in names]:
                del per_job[name]
        node_types = np.array(cluster.gpu_types)
        for job in jobs:
            self._max_profiled[job.name] = max(self._max_profiled.get(job.name, 0),
                                               job.max_profiled_replicas)
            for obs in job.observations.values():
                key = (job.name, obs.gpu_type)
                self._replicas[key] = max(self._replicas.get(key, 0), obs.num_replicas)
            profiling = self._profiling_now.pop(job.name, None)
            held = np.flatnonzero(np.asarray(job.allocation))
            if profiling is not None and held.size and str(node_types[held[0]]) == profiling:
                self._profiled.setdefault(job.name, set()).add(profiling)
            for gpu_type, model in job.models.items():
                self._models[job.name, gpu_type] = model
                local = _initial_local_bsz(job)
                step = float(model.step_time(np.array([1]), np.array([1]),
                                             np.array([local]))[0])
                if step > 0:
                    self._one_gpu.setdefault((job.application, gpu_type), {})[job.name] = \
                        1.0 / step
        return super().decide(cluster, jobs, estimates)

    def type_ratio(self, application: str, to_type: str, from_type: str,
                   job: str | None = None) -> float:
        """One-GPU throughput on ``to_type`` over ``from_type``: ``job``'s own where it has a
        model on both; else the median over the jobs of ``application`` seen on each; else 1."""
        to = self._one_gpu.get((application, to_type))
        frm = self._one_gpu.get((application, from_type))
        if not to or not frm:
            return 1.0
        if job is not None and job in to and job in frm:
            return to[job] / frm[job]
        return float(np.median(list(to.values())) / np.median(list(frm.values())))

    def pending_profiling(self, job: JobView, types: Sequence[str]) -> list[str]:
        """The types ``job`` still has to be profiled on, in ``types``' order (none with
        ``profile_types`` off or a single type): those with no model of it and no profiling
        round yet."""
        if not self.profile_types or len(types) < 2:
            return []  # one type: no ratio to learn (a new job starts on one GPU anyway)
        done = self._profiled.get(job.name, set()) | self._skipped.get(job.name, set())
        pending = [t for t in types if t not in done and (job.name, t) not in self._models]
        if self.skip_profiling_within <= 0:
            return pending
        have = [t for t in types if (job.name, t) in self._models]
        left = []
        for gpu_type in pending:
            if any(self.ratio_is_sure(job.application, gpu_type, t, job.name) for t in have):
                self._skipped.setdefault(job.name, set()).add(gpu_type)
                self.profiling_skipped += 1
            else:
                left.append(gpu_type)
        return left

    def ratio_is_sure(self, application: str, to_type: str, from_type: str,
                      job: str | None = None) -> bool:
        """Whether the jobs of ``application`` (other than ``job``) measured on both types
        predict a new job's one-GPU throughput ratio ``to_type / from_type`` within
        ``skip_profiling_within`` (the module's rule)."""
        from scipy.stats import t as student_t

        to = self._one_gpu.get((application, to_type), {})
        frm = self._one_gpu.get((application, from_type), {})
        both = [name for name in to if name in frm and name != job]
        n = len(both)
        if n < MIN_JOBS_FOR_SKIP:
            return False
        logs = np.log([to[name] / frm[name] for name in both])
        scale = float(np.std(logs, ddof=1)) * np.sqrt(1.0 + 1.0 / n)
        half = float(student_t.ppf(0.5 + SKIP_INTERVAL / 2, n - 1)) * scale
        return half <= np.log1p(self.skip_profiling_within)  # the narrower side of the band

    def stats(self) -> Mapping[str, float]:
        """The solver's figures, ``profiling_gpu_hours`` (GPU-hours of profiling rounds),
        ``profiling_rounds`` and ``profiling_skipped``."""
        return {**super().stats(), "profiling_gpu_hours": self.profiling_gpu_seconds / 3600.0,
                "profiling_rounds": int(self.profiling_rounds),
                "profiling_skipped": int(self.profiling_skipped)}

    def penalised_restarts(self, jobs: Sequence[JobView]) -> np.ndarray:
        """Restarts the re-allocation factor counts ``(J,)``: the job's, less one per profiling
        round it had (Sia profiles outside the job's run; a profiling round causes at most one
        restart: the move to the next type or out of profiling)."""
        return np.array([max(job.num_restarts - self._profiling_rounds.get(job.name, 0), 0)
                         for job in jobs], dtype=np.int64)

    def _profiling(self, cluster: ClusterState, jobs: Sequence[JobView],
                   types: tuple[str, ...], node_types: np.ndarray, free: np.ndarray
                   ) -> Allocations:
        """One GPU of its first pending type (with a free GPU) for each job still to be profiled,
        in submission order, taken from ``free``; a job already on one GPU of that type keeps
        it."""
        out: Allocations = {}
        for job in jobs:
            for gpu_type in self.pending_profiling(job, types):
                on_type = node_types == gpu_type
                held = np.asarray(job.allocation, dtype=np.int64)
                if held.sum() == 1 and np.all(on_type[held > 0]) and np.all(held <= free):
                    counts: np.ndarray | None = held.copy()
                else:
                    counts = pack(1, np.where(on_type, free, 0))
                if counts is None:
                    continue  # the type is full this round: try the job's next one
                free -= counts
                out[job.name] = counts
                self._profiling_now[job.name] = gpu_type
                self._profiling_rounds[job.name] = self._profiling_rounds.get(job.name, 0) + 1
                self.profiling_rounds += 1
                self.profiling_gpu_seconds += float(cluster.round_interval)
                break
        return out

    def max_gpus(self, job: JobView) -> int:
        """Twice the most GPUs ``job`` was measured on over all types (at least 1), at most 64,
        its batch limits and its own cap."""
        limit = min(max(2 * self._max_profiled.get(job.name, 0), 1), MAX_GPUS_PER_JOB,
                    job.limits.max_batch_size // job.limits.min_local_bsz)
        if job.settings.max_replicas is not None:
            limit = min(limit, job.settings.max_replicas)
        return max(limit, 1)

    def configurations(self, cluster: ClusterState, jobs: Sequence[JobView],
                       types: Sequence[str], capacity: np.ndarray | None = None
                       ) -> Configurations:
        """Each job's configurations per type and GPU count with its (projected) goodput, within
        ``capacity`` GPUs per type (default the cluster's)."""
        job_index, type_index, num_gpus, goodput = [], [], [], []
        for j, job in enumerate(jobs):
            known = {t: self._models[job.name, t] for t in types
                     if (job.name, t) in self._models}
            # The type whose model saw the job on the most GPUs (the first such in types' order).
            widest = max(known, key=lambda t: self._replicas.get((job.name, t), 0), default=None)
            wide = self._replicas.get((job.name, widest), 0) > 1 if widest else False
            for k, gpu_type in enumerate(types):
                room = (cluster.gpus_of_type(gpu_type) if capacity is None
                        else int(capacity[k]))
                nodes = cluster.spec.nodes_of_type(gpu_type)
                per_node = int(cluster.capacity()[nodes].max()) if nodes.size else 0
                if room < 1:
                    continue
                if not known:
                    counts, rates = np.array([1]), np.array([1.0])
                else:
                    own = gpu_type in known and (
                        self._replicas.get((job.name, gpu_type), 0) > 1 or not wide)
                    source = gpu_type if own else str(widest)
                    counts = gpu_counts(min(self.max_gpus(job), room), per_node)
                    model = known[source]
                    rates = model.goodput(np.ceil(counts / per_node).astype(np.int64), counts)
                    rates = rates * (1.0 if source == gpu_type else self.type_ratio(
                        job.application, gpu_type, source, job.name))
                ok = rates > 0
                job_index += [j] * int(ok.sum())
                type_index += [k] * int(ok.sum())
                num_gpus += counts[ok].tolist()
                goodput += rates[ok].tolist()
        return Configurations(job=np.array(job_index, dtype=np.int64),
                              gpu_type=np.array(type_index, dtype=np.int64),
                              num_gpus=np.array(num_gpus, dtype=np.int64),
                              goodput=np.array(goodput, dtype=float))


def _initial_local_bsz(job: JobView) -> int:
    """The job's initial batch on one GPU, within its micro-batch limits."""
    limits = job.limits
    return int(min(max(limits.init_batch_size, limits.min_local_bsz), limits.max_local_bsz))


__all__ = ["MAX_GPUS_PER_JOB", "MIN_JOBS_FOR_SKIP", "SKIP_INTERVAL", "SiaAdaptivePolicy",
           "gpu_counts"]
