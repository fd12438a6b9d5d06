"""Shockwave (Zheng et al., NSDI 2023): a market over future rounds for jobs with dynamic batches.

Our formulation of Shockwave's planner (``scheduler/shockwave.py`` of its artifact,
``dynamic_eisenberg_gale_scheduling``), a mixed-integer program over the next ``H`` rounds of
``R`` seconds for the ``J`` active jobs on ``G`` GPUs:

* ``x[j, h]`` in {0, 1}: job ``j`` runs in round ``h`` on its ``s_j`` GPUs; per round
  ``sum_j s_j x[j, h] <= G``.
* ``p_j >= 0``: epochs planned, ``p_j d_j <= R sum_h x[j, h]``, with ``d_j`` the mean epoch time
  of the job's profile over the epochs done so far (Shockwave's ``interpolate_epoch_duration``).
* Utility (Nash social welfare, the Eisenberg-Gale market's objective): ``log`` of the job's
  progress after the horizon, ``(e_j + p_j) / E_j <= 1``, by a piecewise-linear interpolation of
  ``log`` at the bases 0, 0.2, ..., 1 (``log 1e-6`` at 0). Shockwave models it with an SOS2 set
  (binaries); the interpolation is concave and every job's utility enters the objective with a
  positive weight, so its hypograph (``utility_j <=`` each segment's line) has the same optimum
  with no binaries: the program's only integers are ``x``, and the plans solve at the root node
  or the first (0-1 branch-and-bound nodes on the tacc_120 states measured).
* Objective: maximise ``sum_j utility_j / (J H) - k max_j r_j`` with
  ``r_j = max(0, T_j - p_j d_j)`` the predicted remaining seconds after the horizon, ``T_j`` from
  the ``remaining_work`` estimate (by default the ``dirichlet`` estimator, Shockwave's Dirichlet
  posterior over batch-size regimes, a point prediction; ``noise_scale``, ours, a posterior over
  the job's gradient-noise-scale curve; see :mod:`bayes_sched.estimation.remaining_work`).
  In the programs (the fairness constraint, the longest remaining time and the priority ratio
  below) ``T_j`` is its ``remaining_quantile`` (0.9) quantile
  (:func:`bayes_sched.acquisition.quantile`): these ask whether a job
  will finish by its fair finish time, a one-sided question a mean answers wrongly half of the
  time for a job whose remaining work is uncertain, so ours plans on a bound that holds with 90 %
  predictive probability (chosen before any run, not tuned); the fair finish-time targets
  ``F_j`` and the fill order use the mean (an estimate, not a guard). Dirichlet's quantile is its
  mean, so Shockwave's plan is unchanged.
* Finish-time fairness: ``now + H R + r_j / min(1, G / J) <= rho_max F_j`` where ``F_j`` is a
  momentum average (0.9) of the job's fair finish-time estimates ``submit + (done + T_j) /
  min(1, G / J)``, re-estimated for all jobs whenever the job set changes.
* When that is infeasible: no fairness constraints, and each job whose projected ratio
  ``(now + T_j / share) / F_j`` exceeds ``rho_max`` has its utility multiplied by ``ratio^lambda``
  (``ratio^100`` when less than a round is left); a second program then orders the rounds so that
  high-priority jobs run first (Shockwave's ``rank_in_schedule_jobs``).

The plan is kept for later rounds and recomputed when the job set changes or every
``reopt_rounds`` rounds (Shockwave's ``REOPT_ROUNDS = 8``). Each round's jobs are those planned for
it, then, while GPUs are idle, the others in decreasing predicted remaining time (Shockwave's
work-conserving fill). A job keeps its GPUs where they are still free.

What the policy reads: each job's declared settings (model and initial batch size from its job
type and ``requested_batch_size``, GPUs, batch-size mode, the epochs its user asked for), its epochs
done, and the ``throughput`` estimate: by default the world's ``oracle``, its measured table (a
scheduler-side input, as in Gavel). From these it builds the job's profile, the batch size of every
epoch under its mode and their times alone, as Shockwave precomputes at submission; it never reads
the simulator's state. With a learner as the throughput estimator the steps/s come from its belief
(posterior mean) fitted on the jobs' reports instead of the table, read when a plan is made. The
true remaining work reaches it only as the world's ``oracle_remaining_work`` estimator.

Solver: Shockwave used Gurobi (15 s cap, relative gap 1e-3); here cvxpy with an open solver (HiGHS
by default, one thread) under the same gap, with a *work* limit (``max_nodes`` branch-and-bound
nodes) and a fixed seed instead of a wall-clock cap, so a plan, and so a run, does not depend on
the machine's load (a wall-clock ``time_limit`` is optional and off by default). A MIP stopped by
the node limit uses its incumbent and is counted in :attr:`ShockwavePolicy.node_limit_hits`. A
solve that fails or returns no solution keeps the previous round's jobs (those still active) and
gives the GPUs they leave idle to the work-conserving fill, so a first plan that fails still runs
jobs; it is logged and counted in :attr:`ShockwavePolicy.solver_failures`.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping, Sequence
from typing import Annotated, Literal

import numpy as np

from bayes_sched.acquisition import quantile
from bayes_sched.batch_modes import (
    DATASET_SIZE,
    batch_size_schedule,
    epoch_seconds,
    job_type_of,
    model_of,
)
from bayes_sched.cells import Cell
from bayes_sched.cluster import Allocations, ClusterState
from bayes_sched.estimates import Estimates
from bayes_sched.jobs import JobSettings, JobSpec, JobView
from bayes_sched.mechanisms.highs_process import HIGHS_THREADS, quiet_stdout
from bayes_sched.mechanisms.placement import keep_or_pack
from bayes_sched.mechanisms.rounds import cluster_types
from bayes_sched.policies.gavel.throughput_reading import DEFAULT_STEPS_PER_SECOND
from bayes_sched.registry import SEED, Range
from bayes_sched.remaining_work import (
    REMAINING_SECONDS,
    RegimeProfile,
    RemainingWorkPosterior,
    RemainingWorkPredictor,
)
from bayes_sched.throughput_estimates import (
    THROUGHPUT,
    KnownThroughputs,
    LearnedThroughputs,
    ThroughputBelief,
    ThroughputEstimate,
)

LOG = logging.getLogger(__name__)

#: Points at which the log of normalised progress is interpolated (Shockwave's config).
LOG_BASES = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
#: Stand-in for log(0) at the first base (Shockwave's ``logapx_origin``).
LOG_ORIGIN = 1e-6
#: Weight of the running average in the fair finish-time target (``momentum``).
FINISH_TIME_MOMENTUM = 0.9
#: Exponent of a job's projected ratio when less than a round is left (``priority_M``).
LAST_ROUND_POWER = 100.0

#: Numerical guard on a priority (``ratio^100`` overflows or swamps the solver; Gurobi saw the
#: raw values): larger ones are cut to it, keeping their order against all smaller ones.
MAX_PRIORITY = 1e9

#: Mixed-integer solvers from pip that cvxpy can call.
MIP_SOLVERS = ("HIGHS", "SCIP")

#: Most rounds planned ahead or between re-plans (the program grows with the horizon; default 20).
MAX_FUTURE_ROUNDS = 1000


def log_segments() -> tuple[np.ndarray, np.ndarray]:
    """Slopes and intercepts ``(K,)`` of the ``K`` segments of the piecewise-linear log through
    :data:`LOG_BASES` (``log`` of :data:`LOG_ORIGIN` at 0): a concave function, the minimum of
    its segments' lines."""
    bases = np.array(LOG_BASES)
    logs = np.log(np.where(bases > 0, bases, LOG_ORIGIN))
    slopes = np.diff(logs) / np.diff(bases)
    return slopes, logs[:-1] - slopes * bases[:-1]


class ShockwavePolicy:
    """Shockwave's planner over future rounds (see the module docstring).

    Args:
        future_rounds: rounds planned ahead, ``H`` (Shockwave's tacc_32gpus config: 20).
        k: weight of the longest predicted remaining time (1e-3).
        lam: exponent of the priority of a job behind its fair finish time (12).
        rhomax: finish-time fairness bound (1.0).
        reopt_rounds: rounds between re-plans when the job set does not change (8).
        solver: cvxpy MIP solver (open source, from pip).
        max_nodes: branch-and-bound nodes a MIP may explore (a deterministic work limit).
        seed: the solver's random seed.
        time_limit: seconds a solve may take, or ``None`` (default: no wall-clock cap, so runs
            are reproducible; Shockwave: 15 s).
        mip_rel_gap: relative optimality gap at which a solve stops (1e-3).
        calibrate: rescale a job's profiled epoch times when its measured throughput disagrees
            (Shockwave's ``calibrate_profiled_epoch_duration``, see :meth:`calibration`).
        remaining_quantile: the quantile of the remaining-work estimate the programs plan on
            (a point predictor's is its point).
        whole_epochs: an epoch's time counts the whole iterations a job runs in it,
            ``ceil(examples per epoch / b)`` (as the job runs them), instead of Shockwave's
            ``examples per epoch / b``, which is short by the last, partial iteration (4 % for
            Recommendation at batch 8192). Default: as the remaining-work estimate is calibrated
            (its predictor's ``whole_epochs``): on with ours (``noise_scale``), whose quantiles
            are only calibrated on the epochs the jobs run; off with Shockwave's ``dirichlet``,
            so that its plans are as published.

    Estimates (chosen outside the policy; defaults :attr:`default_estimators`): ``throughput``,
    the world's measured table (``oracle``, Shockwave's tacc table in its world) or a learner's
    belief; ``remaining_work``, ``dirichlet`` (Shockwave's) or ``noise_scale`` (ours).

    Shockwave plans for a homogeneous cluster: on a cluster of several GPU types it plans and
    places jobs on the first type in Gavel's order (V100, P100, K80, then by name) only.
    """

    name = "shockwave"
    needs: tuple[str, ...] = ("throughput", "remaining_work")
    default_estimators: Mapping[str, str] = {"throughput": "oracle",
                                             "remaining_work": "dirichlet"}

    def __init__(self, future_rounds: Annotated[int, Range(1, MAX_FUTURE_ROUNDS)] = 20,
                 k: Annotated[float, Range(0)] = 1e-3,
                 lam: Annotated[float, Range(0, min_open=True)] = 12.0,
                 rhomax: Annotated[float, Range(0, min_open=True)] = 1.0,
                 reopt_rounds: Annotated[int, Range(1, MAX_FUTURE_ROUNDS)] = 8,
                 solver: Literal["HIGHS", "SCIP"] = "HIGHS",
                 max_nodes: Annotated[int, Range(1)] = 1000,
                 seed: Annotated[int, SEED] = 0, time_limit: float | None = None,
                 mip_rel_gap: Annotated[float, Range(0, 1, max_open=True)] = 1e-3,
                 calibrate: bool = True, remaining_quantile: float = 0.9,
                 whole_epochs: bool | None = None) -> None:
        if future_rounds < 1 or reopt_rounds < 1:
            raise ValueError(f"future_rounds {future_rounds}, reopt_rounds {reopt_rounds}: "
                             "expected rounds >= 1")
        if solver not in MIP_SOLVERS:
            raise ValueError(f"solver is {solver!r}: expected one of {', '.join(MIP_SOLVERS)}")
        if not 0.0 < remaining_quantile < 1.0:
            raise ValueError(f"remaining_quantile is {remaining_quantile}: expected 0 < q < 1")
        if not (k > 0 and rhomax > 0 and max_nodes >= 1 and mip_rel_gap >= 0
                and (time_limit is None or time_limit > 0)):
            raise ValueError("k, rhomax, max_nodes and time_limit must be > 0 and mip_rel_gap "
                             ">= 0")
        self.future_rounds = int(future_rounds)
        self.k, self.lam, self.rhomax = float(k), float(lam), float(rhomax)
        self.reopt_rounds = int(reopt_rounds)
        self.solver = solver
        self.max_nodes, self.seed = int(max_nodes), int(seed)
        self.time_limit = None if time_limit is None else float(time_limit)
        self.mip_rel_gap = float(mip_rel_gap)
        self.remaining_quantile = float(remaining_quantile)
        self.calibrate = bool(calibrate)
        self._whole_epochs = whole_epochs
        #: Whether profiles count whole iterations (the option, else the estimate's own, read
        #: at each decision; ``None`` before the first).
        self.whole_epochs: bool | None = None if whole_epochs is None else bool(whole_epochs)
        # The round's throughput estimate: a known table, or a learner's stage.
        self._known: KnownThroughputs | None = None
        self._learned: LearnedThroughputs | None = None
        self.solver_failures = 0
        self.allocation_updates = 0  # successful plans
        self.relaxed_plans = 0  # plans without the fairness constraints
        self.solve_seconds: list[float] = []
        self.solve_nodes: list[int] = []  # branch-and-bound nodes per MIP solved
        self.node_limit_hits = 0  # MIPs stopped by max_nodes (their incumbent used)
        self._round = 0
        self._round_seconds = 120.0
        self._since_plan = 0
        self._names: frozenset[str] = frozenset()
        self._plan: dict[int, list[str]] = {}
        self._previous: list[str] = []
        self._share_series: dict[str, list[tuple[int, float]]] = {}
        self._profiles: dict[tuple[str, int, str, int, int, str], RegimeProfile] = {}
        self._schedules: dict[tuple[str, int, str, int, int], tuple[int, ...]] = {}
        self._belief: ThroughputBelief | None = None  # the learner's, as of the last plan
        # Per job: measured (steps/s, batch size) by round, the last report seen, the factor on
        # its profiled epoch times with the profile it corrects.
        self._measured: dict[str, dict[int, tuple[float, int]]] = {}
        self._last_report: dict[str, tuple[float, float, int]] = {}
        self._factor: dict[str, tuple[float, RegimeProfile]] = {}

    # --- Policy interface -----------------------------------------------------------------------

    def stats(self) -> Mapping[str, float]:
        """``solver_failures``, ``allocation_updates`` (successful plans), ``node_limit_hits``
        (plans stopped at ``max_nodes``, their incumbent used), ``solves`` and
        ``solve_median_seconds`` (NaN without a solve)."""
        return {"solver_failures": int(self.solver_failures),
                "allocation_updates": int(self.allocation_updates),
                "node_limit_hits": int(self.node_limit_hits),
                "solves": int(len(self.solve_seconds)),
                "solve_median_seconds": (float(np.median(self.solve_seconds))
                                         if self.solve_seconds else math.nan)}

    def job_settings(self, spec: JobSpec) -> JobSettings:
        return JobSettings(batch_size=spec.batch_size, max_replicas=spec.num_replicas)

    def decide(self, cluster: ClusterState, jobs: Sequence[JobView],
               estimates: Estimates) -> Allocations:
        jobs = sorted(jobs, key=lambda j: (j.submit_time, j.name))
        self._round_seconds = cluster.round_interval
        gpu = cluster_types(cluster)[0]  # Shockwave plans one GPU type (see the class)
        num_gpus = cluster.gpus_of_type(gpu)
        names = frozenset(job.name for job in jobs)
        changed = names != self._names
        if changed:
            self._names = names
            for store in (self._share_series, self._measured, self._last_report, self._factor):
                for name in [n for n in store if n not in names]:
                    del store[name]
        chosen: list[str] | None = None
        if jobs:
            predictor = self.read_estimates(estimates)
            replan = (changed or self._since_plan >= self.reopt_rounds
                      or self._round not in self._plan)
            if replan and self._learned is not None:
                # The belief is read (and refitted on new reports) only when a plan uses it.
                belief = self._learned.belief
                if belief is not self._belief:
                    self._belief, self._profiles = belief, {}
            self._record_throughputs(jobs, gpu)
            profiles = [self._calibrated(job, self.profile(job, gpu)) for job in jobs]
            done = [self._epochs_done(job) for job in jobs]
            posteriors = [RemainingWorkPosterior(predictor, p, e, job)
                          for p, e, job in zip(profiles, done, jobs, strict=True)]
            remaining = np.array([float(posterior.mean()) for posterior in posteriors])
            if changed:
                self._estimate_shares(jobs, profiles, done, remaining, num_gpus)
            if replan:
                self._since_plan = 0
                at_risk = np.array([float(quantile(posterior, self.remaining_quantile))
                                    for posterior in posteriors])
                self._replan(cluster, jobs, profiles, done, remaining, at_risk, num_gpus)
            chosen = self._plan.get(self._round)
            if chosen is None:  # no plan: the previous round's jobs still here, then the fill
                at = {job.name: j for j, job in enumerate(jobs)}
                kept = [at[name] for name in self._previous if name in at]
                chosen = [jobs[j].name for j in _work_conserving(
                    kept, jobs, np.argsort(-remaining, kind="stable"), num_gpus)]
        self._round += 1
        self._since_plan += 1
        chosen = [name for name in (chosen or []) if name in names]
        self._previous = chosen
        return self._place(cluster, jobs, chosen, gpu)

    # --- profiles and predictions ---------------------------------------------------------------

    def read_estimates(self, estimates: Estimates) -> RemainingWorkPredictor:
        """Take the round's estimates, as :meth:`decide` does first: the throughput estimate (a
        new one clears the profiles built on the last) and the remaining-work predictor, which
        it returns (whole epochs follow it unless set). :meth:`profile` reads what it took."""
        throughput: ThroughputEstimate = estimates.require(THROUGHPUT)
        known = throughput if isinstance(throughput, KnownThroughputs) else None
        learned = None if known is not None else throughput
        if known is not self._known or learned is not self._learned:
            assert learned is None or not isinstance(learned, KnownThroughputs)
            self._known, self._learned, self._belief, self._profiles = known, learned, None, {}
        predictor: RemainingWorkPredictor = estimates.require(REMAINING_SECONDS)
        whole = (predictor.whole_epochs if self._whole_epochs is None
                 else bool(self._whole_epochs))
        if whole != self.whole_epochs:
            self.whole_epochs, self._profiles = whole, {}
        return predictor

    def profile(self, job: JobView, gpu: str) -> RegimeProfile:
        """The job's profile under its declared mode on ``gpu`` (cached per declared settings).

        An epoch at batch size ``b`` takes Shockwave's ``dataset / b / (steps/s)`` (with
        ``whole_epochs``, ``ceil(dataset / b)`` steps), at the known table's steps/s, or with a
        learner's estimate at its posterior mean as of the last plan; for a job whose model or
        type neither covers, ``ceil(examples per epoch / b)`` steps at Gavel's default of 1
        step/s (a finite guess, so that such a job is still planned)."""
        model = model_of(job.application)
        key = (model, job.requested_batch_size, job.batch_size_mode, job.target_epochs,
               job.requested_replicas, gpu)
        cached = self._profiles.get(key)
        if cached is None:
            regimes = self._schedules.get(key[:-1])
            if regimes is None:  # kept across beliefs: the schedule is the job's declaration's
                regimes = self._schedules[key[:-1]] = tuple(batch_size_schedule(
                    job.batch_size_mode, model, job.requested_batch_size,
                    max(job.target_epochs, 1), job.requested_replicas))
            seconds = {}
            learned = self._learned_epoch_seconds(model, sorted(set(regimes)),
                                                  job.requested_replicas, gpu)
            for batch in set(regimes):
                known = (learned.get(batch) if self._known is None else
                         epoch_seconds(self._known, model, batch, job.requested_replicas, gpu)
                         if model in DATASET_SIZE else None)
                if known is not None and self.whole_epochs:
                    examples = DATASET_SIZE[model]
                    known *= math.ceil(examples / batch) / (examples / batch)
                seconds[batch] = known if known is not None else (
                    math.ceil(max(job.examples_per_epoch, 1) / max(batch, 1))
                    / DEFAULT_STEPS_PER_SECOND)
            cached = RegimeProfile(regimes, tuple(seconds[b] for b in regimes))
            self._profiles[key] = cached
        return cached

    def _learned_epoch_seconds(self, model: str, batches: Sequence[int], scale_factor: int,
                               gpu: str) -> dict[int, float]:
        """Seconds of an epoch at each batch size from the learner's belief (posterior mean);
        none where the model has no dataset size or the belief no positive, finite rate."""
        if self._learned is None or model not in DATASET_SIZE:
            return {}
        cells = [Cell(job_type_of(model, b), scale_factor, gpu) for b in batches]
        rates = self._learned_belief().predict(cells).mean
        return {b: DATASET_SIZE[model] / b / float(r)
                for b, r in zip(batches, rates, strict=True) if np.isfinite(r) and r > 0}

    def _learned_belief(self) -> ThroughputBelief:
        """The learner's belief as of the last plan (read now where no plan has read one)."""
        assert self._learned is not None
        if self._belief is None:
            self._belief = self._learned.belief
        return self._belief

    def _solo_rate(self, job_type: str, scale_factor: int, gpu: str) -> float:
        """Steps/s of ``job_type`` alone: the known table's, or the learner's posterior mean
        as of the last plan (0 where neither has a positive, finite rate)."""
        if self._known is not None:
            return self._known.steps_per_second(job_type, scale_factor, gpu) or 0.0
        rate = float(self._learned_belief().predict([Cell(job_type, scale_factor, gpu)]).mean[0])
        return rate if np.isfinite(rate) and rate > 0 else 0.0

    def _record_throughputs(self, jobs: Sequence[JobView], gpu: str) -> None:
        """Each job's measured steps/s in the round just run, from its reports (steps and
        GPU-seconds since the last round), keyed by this round's index as Shockwave keys them."""
        for job in jobs:
            report = (job.progress, job.attained_service,
                      job.settings.batch_size or job.requested_batch_size)
            last = self._last_report.get(job.name)
            self._last_report[job.name] = report
            if last is None or report[1] == last[1]:  # new, or it did not run
                continue
            seconds = (report[1] - last[1]) / max(job.requested_replicas, 1)
            if seconds <= 0:
                continue
            if report[2] == last[2]:
                rate = (report[0] - last[0]) / seconds
            else:  # the batch changed after the round: its steps were recounted; the estimate's
                rate = self._solo_rate(job_type_of(model_of(job.application), last[2]),
                                       job.requested_replicas, gpu)
            self._measured.setdefault(job.name, {})[self._round] = (max(rate, 0.0), last[2])

    def calibration(self, job: JobView, profile: RegimeProfile) -> float:
        """Shockwave's factor on the profiled epoch times (1: unchanged).

        Its rule, kept as it is: the examples the job's measurements account for, each measured
        rate standing for every round since the previous measurement (from round 0), are compared
        with the examples its profile would have processed from time 0 to the last measured
        round; when they differ by more than 40 %, epoch times become the profile's times the
        ratio profile / measured (otherwise the factor in force stays).

        A factor corrects the profile it was computed on. With a learner's estimate the
        profile is rebuilt from each new belief, which has learned from the same measurements:
        a factor in force for an older profile would correct them twice (a job first profiled
        too fast kept its factor on a belief that had learned its rate, so was planned that much
        too slow and starved; docs/results/bench_shockwave_uncertainty.md). So a
        new profile starts from 1 and the rule is applied to it afresh; with the table the
        profile never changes and the rule is Shockwave's."""
        entry = self._factor.get(job.name)
        factor = entry[0] if entry is not None and entry[1] == profile else 1.0
        measured = self._measured.get(job.name)
        if not measured:
            return factor
        round_s = self._round_seconds
        examples = 0.0
        previous = 0
        for index in sorted(measured):
            rate, batch = measured[index]
            examples += batch * rate * round_s * (index - previous)
            previous = index
        horizon = round_s * max(measured)
        profiled_time, profiled_examples = 0.0, 0.0
        per_epoch = float(max(job.examples_per_epoch, 1))
        last = len(profile.epoch_seconds) - 1
        for index, seconds in enumerate(profile.epoch_seconds):
            if profiled_time + seconds > horizon:
                last = index
                break
            profiled_time += seconds
            profiled_examples += per_epoch
        if horizon - profiled_time > 0:  # the epoch reached, at its calibrated time
            profiled_examples += (per_epoch * (horizon - profiled_time)
                                  / (profile.epoch_seconds[last] * factor))
        if examples > 0 and profiled_examples > 0 \
                and abs(examples - profiled_examples) / profiled_examples > 0.4:
            factor = profiled_examples / examples
            self._factor[job.name] = (factor, profile)
        return factor

    def _calibrated(self, job: JobView, profile: RegimeProfile) -> RegimeProfile:
        if not self.calibrate:
            return profile
        factor = self.calibration(job, profile)
        if factor == 1.0:
            return profile
        return RegimeProfile(profile.regimes, tuple(s * factor for s in profile.epoch_seconds))

    @staticmethod
    def _epochs_done(job: JobView) -> int:
        return min(int(math.floor(job.epochs + 1e-9)), max(job.target_epochs, 1))

    def _estimate_shares(self, jobs: Sequence[JobView], profiles: Sequence[RegimeProfile],
                         done: Sequence[int], remaining: np.ndarray, num_gpus: int) -> None:
        """Append each job's fair finish-time estimate under an equal share of the cluster."""
        share = min(1.0, num_gpus / len(jobs))
        for job, profile, epochs, left in zip(jobs, profiles, done, remaining, strict=True):
            estimate = job.submit_time + (profile.seconds_done(epochs) + left) / share
            self._share_series.setdefault(job.name, []).append((self._round, float(estimate)))

    def finish_time_target(self, name: str) -> float:
        """Momentum average of the job's fair finish-time estimates (weights: how long each
        estimate stood, up to the current round)."""
        series = self._share_series[name]
        rounds = np.array([r for r, _ in series] + [self._round], dtype=float)
        values = np.array([v for _, v in series])
        windows = np.diff(rounds)
        weights = (windows / windows.sum() if windows.sum() > 0
                   else np.full(len(values), 1.0 / len(values)))
        return float(FINISH_TIME_MOMENTUM * (weights @ values)
                     + (1.0 - FINISH_TIME_MOMENTUM) * values[-1])

    # --- the plan -------------------------------------------------------------------------------

    def _replan(self, cluster: ClusterState, jobs: Sequence[JobView],
                profiles: Sequence[RegimeProfile], done: Sequence[int], remaining: np.ndarray,
                at_risk: np.ndarray, num_gpus: int) -> None:
        """A new plan: the programs on ``at_risk`` (the predictor's upper quantile of each
        job's remaining seconds), the work-conserving fill in order of ``remaining`` (means)."""
        start = time.perf_counter()
        try:
            x = self._solve(cluster, jobs, profiles, done, at_risk, num_gpus)
        except Exception as error:  # noqa: BLE001 -- a solver crash keeps the old plan
            LOG.warning("shockwave: solver %s failed (%s); previous jobs kept, idle GPUs "
                        "filled", self.solver, error)
            x = None
        self.solve_seconds.append(time.perf_counter() - start)
        if x is None:
            self.solver_failures += 1
            self._plan = {}
            return
        self.allocation_updates += 1
        self._plan = self._rounds_from(x, jobs, remaining, num_gpus)

    def _solve(self, cluster: ClusterState, jobs: Sequence[JobView],
               profiles: Sequence[RegimeProfile], done: Sequence[int], remaining: np.ndarray,
               num_gpus: int) -> np.ndarray | None:
        """The plan ``x`` ``(J, H)`` in {0, 1}, or ``None`` when no solution was found."""
        import cvxpy as cp

        count, horizon, round_s = len(jobs), self.future_rounds, cluster.round_interval
        scale = np.array([float(job.requested_replicas) for job in jobs])
        epochs = np.array([float(p.epochs) for p in profiles])
        progress = np.array([float(e) for e in done])
        # Mean epoch time of the profile's epochs up to the current one.
        epoch_s = np.array([float(np.mean(p.epoch_seconds[:e + 1]))
                            for p, e in zip(profiles, done, strict=True)])
        epoch_s = np.where(np.isfinite(epoch_s), epoch_s, 1e9)
        remaining = np.where(np.isfinite(remaining), remaining, 1e9)
        slopes, intercepts = log_segments()
        x = cp.Variable((count, horizon), boolean=True)
        planned = cp.Variable(count, nonneg=True)
        fraction = cp.multiply(progress + planned, 1.0 / epochs)  # of the job's epochs, (J,)
        utility = cp.Variable(count)
        left = cp.Variable(count, nonneg=True)
        longest = cp.Variable()
        constraints = [
            scale @ x <= num_gpus,
            cp.multiply(planned, epoch_s) <= cp.sum(x, axis=1) * round_s,
            fraction <= 1.0,
            # The hypograph of the concave piecewise-linear log: maximised with positive
            # weights, utility_j is the interpolation itself (no SOS2 binaries needed).
            utility[:, None] <= fraction[:, None] @ slopes[None, :]
            + np.ones((count, 1)) @ intercepts[None, :],
            left >= remaining - cp.multiply(planned, epoch_s),
            longest >= left,
        ]
        share = min(1.0, num_gpus / count)
        targets = np.array([self.finish_time_target(job.name) for job in jobs])
        fairness = [cluster.now + horizon * round_s + left / share <= targets * self.rhomax]
        scale_utility = 1.0 / (count * horizon)
        problem = cp.Problem(cp.Maximize(cp.sum(utility) * scale_utility - self.k * longest),
                             constraints + fairness)
        status = self._run(problem)
        if status in (cp.INFEASIBLE, cp.INFEASIBLE_INACCURATE):
            self.relaxed_plans += 1
            ratio = (cluster.now + remaining / share) / targets
            with np.errstate(over="ignore"):
                priority = np.where(ratio > self.rhomax,
                                    ratio ** np.where(remaining < round_s, LAST_ROUND_POWER,
                                                      self.lam), 1.0)
            priority = np.minimum(priority, MAX_PRIORITY)
            problem = cp.Problem(cp.Maximize(cp.sum(cp.multiply(priority, utility))
                                             * scale_utility - self.k * longest), constraints)
            self._run(problem)
            if x.value is None:
                return None
            return self._rank(np.round(x.value), priority, scale, num_gpus)
        if x.value is None:
            LOG.warning("shockwave: solver %s status %s", self.solver, status)
            return None
        return np.round(x.value)

    def _run(self, problem: object) -> str:
        """Solve under work limits (nodes, a fixed seed), so that the answer does not depend on
        the machine's load; a wall-clock cap only where ``time_limit`` is set."""
        import cvxpy as cp

        assert isinstance(problem, cp.Problem)
        options: dict[str, object]
        if self.solver == "HIGHS":
            options = {"mip_rel_gap": self.mip_rel_gap, "mip_max_nodes": self.max_nodes,
                       "random_seed": self.seed, "threads": HIGHS_THREADS}
            if self.time_limit is not None:
                options["time_limit"] = self.time_limit
        else:
            params: dict[str, object] = {"limits/gap": self.mip_rel_gap,
                                         "limits/nodes": self.max_nodes,
                                         "randomization/randomseedshift": self.seed}
            if self.time_limit is not None:
                params["limits/time"] = self.time_limit
            options = {"scip_params": params}
        with quiet_stdout():
            problem.solve(solver=self.solver, **options)
        stats = problem.solver_stats
        nodes = getattr(getattr(stats, "extra_stats", None), "mip_node_count", None)
        if nodes is not None:
            self.solve_nodes.append(int(nodes))
            if nodes >= self.max_nodes:
                self.node_limit_hits += 1
        return str(problem.status)

    def _rank(self, x: np.ndarray, priority: np.ndarray, scale: np.ndarray, num_gpus: int
              ) -> np.ndarray:
        """Reorder the planned rounds so that high-priority jobs run early (same number of
        rounds per job, same capacity); the plan unchanged if that fails."""
        import cvxpy as cp

        rounds = x.sum(axis=1)
        if not (rounds > 0).any():
            return x
        y = cp.Variable(x.shape, boolean=True)
        order = np.arange(x.shape[1], dtype=float)
        # Scaled by the largest priority: the same optimum, well-conditioned costs.
        cost = (priority / priority.max() / np.maximum(rounds, 1.0))[:, None] * order[None, :]
        problem = cp.Problem(cp.Minimize(cp.sum(cp.multiply(cost, y))),
                             [cp.sum(y, axis=1) == rounds, scale @ y <= num_gpus])
        try:
            self._run(problem)
        except Exception as error:  # noqa: BLE001 -- keep the unranked plan
            LOG.warning("shockwave: ranking failed (%s)", error)
            return x
        return x if y.value is None else np.round(y.value)

    def _rounds_from(self, x: np.ndarray, jobs: Sequence[JobView], remaining: np.ndarray,
                     num_gpus: int) -> dict[int, list[str]]:
        """Jobs per future round: the planned ones, then (work conservation) the others in
        decreasing predicted remaining time while their GPUs fit."""
        by_remaining = np.argsort(-remaining, kind="stable")
        return {self._round + h: [jobs[j].name for j in _work_conserving(
                    [j for j in range(len(jobs)) if x[j, h] >= 0.5], jobs, by_remaining,
                    num_gpus)]
                for h in range(x.shape[1])}

    # --- placement ------------------------------------------------------------------------------

    def _place(self, cluster: ClusterState, jobs: Sequence[JobView], chosen: Sequence[str],
               gpu: str) -> Allocations:
        """GPUs per node for the chosen jobs, on nodes of ``gpu``: a job keeps its GPUs where
        they are still free; the others are packed (most-free node first;
        :func:`~bayes_sched.mechanisms.placement.keep_or_pack`)."""
        by_name = {job.name: job for job in jobs}
        on_type = np.array([t == gpu for t in cluster.gpu_types])
        free = np.where(on_type, cluster.capacity(), 0).astype(np.int64)
        out, _ = keep_or_pack([(name, by_name[name].requested_replicas,
                                np.asarray(by_name[name].allocation), on_type)
                               for name in chosen], free)
        return out


def _work_conserving(chosen: list[int], jobs: Sequence[JobView], order: np.ndarray,
                     num_gpus: int) -> list[int]:
    """``chosen`` (indices into ``jobs``), then Shockwave's work-conserving fill: the other jobs
    in ``order`` (decreasing predicted remaining time) while their GPUs fit in the idle ones."""
    idle = num_gpus - sum(jobs[j].requested_replicas for j in chosen)
    taken = set(chosen)
    for j in order.tolist():
        if idle <= 0:
            break
        if j not in taken and jobs[j].requested_replicas <= idle:
            chosen.append(j)
            idle -= jobs[j].requested_replicas
    return chosen
