"""A Bayesian-optimised scheduling policy: Pollux's allocation search, scored by a GP surrogate of
the realised objective, with Expected Improvement choosing between known-good and uncertain
co-locations.

Each round:

1. **Learn.** For every job whose allocation did not change over the last round, compare the
   progress it actually made with what its fitted goodput model predicted there: the residual
   ``log(realised / predicted)``, less the job's own model error (its residual when alone). The
   estimation module's throughput learner (:mod:`bayes_sched.estimation.pair_cells`: the same
   Gaussian-process learner the time-sharing policies read, over cells of *job classes*; class:
   the application and whether the job is distributed, both of which any scheduler knows) learns
   what each co-runner costs each job (:mod:`bayes_sched.interference.pairs`): the log slowdown
   on a node is the sum of the pair effects of the co-runners there, each the learner's paired
   cell over its alone cell, and a job goes at the pace of its worst node. So bo learns that
   (a, b) hurts and (a, c) does not, and shares evidence through the learner's effects (same
   application pair, same job class, same co-runner class). Nothing here needs the simulator's
   ground truth: only progress, which every cluster reports. Where the cluster collects counters,
   the contention network's posterior (:mod:`bayes_sched.interference.contention_prior`) gives
   each candidate co-location a prior slowdown from the jobs' inferred demands on each node's NIC
   and host DRAM, and the pair learner learns the residual around that prior; without counters
   the prior is the goodput models alone. Both are
   :class:`~bayes_sched.interference.predictor.SlowdownPredictor` s, composed in that order
   (:attr:`BayesOptPolicy.predictors`): bo reaches them only through that protocol.
2. **Search.** Pollux's genetic search over allocation matrices (``(P, jobs, nodes)`` GPU counts)
   maximises the power mean of job speedups, each multiplied by the co-location slowdown the pair
   learner's posterior mean predicts for it in that candidate, so co-locations that proved harmless are
   used and harmful ones avoided, with no hard rule against them. A second search, Pollux's own
   (models alone, at most one distributed job per node), runs alongside: its choice is always a
   candidate, so the avoid rule is a candidate generator rather than a constraint.
3. **Decide.** The best distinct candidates of the final population, Pollux's unconstrained choice
   and Pollux's avoid-rule choice are scored by the distribution of the cluster objective under
   joint posterior draws of the pair table. Pollux's avoid-rule choice is the incumbent: the
   candidate with the largest expected improvement over it (draw by draw) is taken when that
   improvement exceeds ``min_gain`` of the incumbent's objective, so an uncertain co-location is
   tried when its upside is worth it and, knowing nothing, bo does what Pollux does. The choice is
   checked against node capacity before it is returned.

:attr:`BayesOptPolicy.history` keeps, per round, the predicted objective (mean and standard
deviation), the objective realised over the following round, the surrogate's mean uncertainty and
the co-locations chosen, for the report.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Annotated, Any, TypeVar

import numpy as np
import torch
from botorch.acquisition.analytic import _log_ei_helper
from linear_operator.utils.errors import NotPSDError

from bayes_sched.cluster import Allocations, ClusterState, validate_allocations
from bayes_sched.errors import AllocationError, InputError
from bayes_sched.estimates import Estimate, Estimates
from bayes_sched.estimation import Estimator, JobModelEstimator, PosteriorSettings
from bayes_sched.estimation.pair_cells import PairPrior
from bayes_sched.interference.contention_prior import ContentionPrior
from bayes_sched.interference.pairs import PairResiduals
from bayes_sched.interference.posteriors import COLOCATION
from bayes_sched.interference.predictor import ColocationRound, SlowdownPredictor, speed_factor
from bayes_sched.jobs import JobSettings, JobSpec, JobView
from bayes_sched.policies.pollux import PolluxPolicy
from bayes_sched.registry import GPU_COUNT, PROBABILITY, SEED, Range
from bayes_sched.search.allocation import (
    STATE_DTYPE,
    AllocationProblem,
    GAConfig,
    power_mean,
    restart_delays,
    restart_penalty,
)
from bayes_sched.topology import NodeTopology

LOG = logging.getLogger(__name__)

_DEFAULT_GA = GAConfig()
_DEFAULT_PAIR_PRIOR = PairPrior()
_DEFAULT_POSTERIOR = PosteriorSettings()

_Predictor = TypeVar("_Predictor")

#: Names of the co-location flags :meth:`BayesOptPolicy.features` reports, in order.
FEATURE_NAMES = ("distributed", "shares_with_distributed", "shares_node")


@dataclass
class RoundRecord:
    """One decision: predicted objective of the chosen allocation (mean, std), the objective
    realised over the next round (``nan`` until known), mean posterior std of the co-location
    residuals, co-located distributed jobs chosen, candidates scored, the chosen one's rank by
    posterior mean (0: the exploiting choice), whether it is the candidate Pollux's objective
    ranks first and whether it is Pollux's choice under its avoid rule."""

    time: float
    predicted_mean: float
    predicted_std: float
    realised: float = float("nan")
    surrogate_std: float = float("nan")
    colocated_distributed: int = 0
    candidates: int = 0
    chosen_rank: int = 0
    pollux_choice: bool = False
    avoiding_choice: bool = False
    learned: dict[str, float] = field(default_factory=dict)


#: Most candidates scored per round and most joint posterior draws (memory follows
#: ``draws x jobs x jobs``; defaults 8 and 64).
MAX_CANDIDATES = 1024
MAX_DRAWS = 4096


class BayesOptPolicy:
    """The Bayesian-optimised policy (registered as ``"bo"``).

    Args:
        p: power-mean exponent of the cluster objective (Pollux's fairness knob).
        max_nodes_per_job, max_replicas_cap, ga: as for Pollux, but bo always runs the elitist search.
        pair_prior: the starting prior scales of the pair learner's paired effects (see
            :mod:`bayes_sched.estimation.pair_cells`).
        pair_hyper_every: rounds between the pair learner's hyperparameter fits (0: its
            prior's scales throughout; it conditions on the reports every round).
        residual_noise: standard deviation of one job-round residual, log units.
        forget: per-round weight decay of old residuals (models and workloads drift).
        candidates: distinct candidates scored by EI each round.
        posterior_draws: joint posterior draws of the pair table used to score them.
        offer_avoiding: also run Pollux's own search under its avoid rule (at most one distributed
            job per node) and offer its choice as a candidate, the incumbent of EI.
        min_gain: expected improvement over Pollux's avoid-rule choice, as a fraction of its
            objective, below which that choice is kept.
        error_forget: per-observation weight decay of each job's model-error estimate.
        node_topology: the nodes' layout and capacities, for the contention posterior where the
            cluster collects counters (default: two GPUs per PCIe switch, the topology module's
            default capacities).
        contention_every: rounds between fits of the contention network on the counters.
        seed: seeds the search and the draws.
        risk: as for Pollux: ``None`` or 0 scores allocations by the point fit's goodput, ``q``
            by the ``q``-quantile of goodput under the throughput posterior.

    Learning (the contention posterior from counters, the co-location residuals of the round just
    ended and the pair learner's fit) runs in the loop's estimation stage (:meth:`estimators`), apart
    from the decision; ``decide`` only searches and chooses.
    """

    name = "bo"
    needs: tuple[str, ...] = ("job_goodput", "colocation")

    def __init__(self, p: float = -1.0, max_nodes_per_job: Annotated[int, GPU_COUNT] = 16,
                 max_replicas_cap: Annotated[int, GPU_COUNT] = 64,
                 ga: GAConfig = _DEFAULT_GA, pair_prior: PairPrior = _DEFAULT_PAIR_PRIOR,
                 residual_noise: Annotated[float, Range(0.0, min_open=True)] = 0.15,
                 forget: Annotated[float, Range(0.0, 1.0, min_open=True)] = 0.998,
                 candidates: Annotated[int, Range(1, MAX_CANDIDATES)] = 8,
                 posterior_draws: Annotated[int, Range(1, MAX_DRAWS)] = 64,
                 offer_avoiding: bool = True, min_gain: Annotated[float, Range(0.0)] = 0.01,
                 error_forget: Annotated[float, PROBABILITY] = 0.8,
                 node_topology: NodeTopology | None = None,
                 contention_every: Annotated[int, Range(1)] = 10,
                 seed: Annotated[int, SEED] = 0, risk: float | None = None,
                 posterior: PosteriorSettings = _DEFAULT_POSTERIOR,
                 pair_hyper_every: Annotated[int, Range(0)] = 0) -> None:
        # bo's searches are elitist whatever ``ga`` says: its co-location fitness has no
        # counterpart of NSGA-II's second objective, and its figures were measured so.
        ga = replace(ga, search="elitist")
        # Pollux's search and speedup tables, without its hard rule against co-location.
        self.pollux = PolluxPolicy(p=p, avoid_interference=False,
                                   max_nodes_per_job=max_nodes_per_job,
                                   max_replicas_cap=max_replicas_cap, ga=ga, risk=risk)
        self.job_models = JobModelEstimator(
            posterior=posterior if self.pollux.risk is not None else None)
        self.learning = _ColocationLearning(self)
        # Pollux as the artifact runs it (its own population, same seed): the incumbent candidate.
        self.avoiding = PolluxPolicy(p=p, avoid_interference=True,
                                     max_nodes_per_job=max_nodes_per_job,
                                     max_replicas_cap=max_replicas_cap,
                                     ga=ga, risk=risk) if offer_avoiding else None
        self.min_gain = min_gain
        self.num_candidates = candidates
        self.posterior_draws = posterior_draws
        self.history: list[RoundRecord] = []
        self.fit_problems: list[str] = []
        self._previous: dict[str, tuple[np.ndarray, float]] = {}  # name -> (allocation, progress)
        self._previous_time = 0.0
        self._previous_time_delta = 0.0
        self.error_forget = error_forget
        self._model_error: dict[str, tuple[float, float]] = {}  # name -> (weight, sum) alone
        self._application_of: dict[str, str] = {}
        self._changed_at: dict[str, float] = {}  # name -> time its allocation last changed
        self._fair_rate_memo: dict[tuple[object, ...], float | None] = {}  # (_fair_rates)
        self.node_topology = node_topology
        # The co-location slowdown predictors, in order: the contention posterior's prior (from
        # counters, where the cluster collects them; the cluster's topology unless
        # ``node_topology``), then the pair learner learning the residual around it.
        self.predictors: list[SlowdownPredictor] = [
            ContentionPrior(node_topology, every=contention_every),
            PairResiduals(pair_prior, noise=residual_noise, forget=forget, draws=posterior_draws,
                          seed=seed, hyper_every=pair_hyper_every),
        ]

    def stats(self) -> Mapping[str, float]:
        """``rounds_recorded`` (:attr:`history`) and ``fit_problems`` (failed predictor
        fits, previous posterior kept)."""
        return {"rounds_recorded": int(len(self.history)),
                "fit_problems": int(len(self.fit_problems))}

    def job_settings(self, spec: JobSpec) -> JobSettings:
        return self.pollux.job_settings(spec)

    def predictor(self, kind: type[_Predictor]) -> _Predictor:
        """The first of :attr:`predictors` of type ``kind``, for reports and tests (decisions
        reach the predictors only through :class:`SlowdownPredictor`)."""
        for predictor in self.predictors:
            if isinstance(predictor, kind):
                return predictor
        raise KeyError(f"policy 'bo' has no {kind.__name__} predictor")

    def estimators(self) -> Sequence[Estimator]:
        """The job models first (the residuals compare progress with them), then the learning
        from the round just ended."""
        return (self.job_models, self.learning)

    # --- co-location features --------------------------------------------------------------------

    def features(self, states: np.ndarray) -> np.ndarray:
        """Co-location flags (:data:`FEATURE_NAMES`) of every job in every state,
        ``(P, J, N) -> (P, J, 3)``."""
        used = states > 0
        nodes = used.sum(axis=2)
        distributed = nodes > 1
        jobs_on_node = used.sum(axis=1)                                   # (P, N)
        dist_on_node = (used & distributed[:, :, None]).sum(axis=1)       # (P, N)
        others_dist = dist_on_node[:, None, :] - (used & distributed[:, :, None])
        shares_dist = np.any(used & (others_dist > 0), axis=2)
        shares = np.any(used & (jobs_on_node[:, None, :] > 1), axis=2)
        return np.stack([distributed, shares_dist, shares], axis=2).astype(np.float64)

    # --- learning from the last round ------------------------------------------------------------

    def _predicted_rate(self, job: JobView, allocation: np.ndarray) -> float | None:
        """Progress per second (steps at ``B0``) the job's model predicts at ``allocation``, at
        the batch the job itself would choose there (point fit)."""
        model = job.model
        replicas = int(allocation.sum())
        if model is None or replicas == 0:
            return None
        goodput = float(model.goodput(np.array([np.count_nonzero(allocation)]),
                                      np.array([replicas]))[0])
        return goodput / job.limits.init_batch_size if goodput > 0 else None

    def _measure(self, cluster: ClusterState, jobs: Sequence[JobView]
                 ) -> list[tuple[int, float, float]] | None:
        """The round just ended: ``(row, log(realised / predicted progress), model error)`` of
        every job that held the same GPUs all round and was not restarting, and whose model
        error is known; ``None`` when no round can be measured (the first, or no time passed).

        A job's goodput model has its own error, the same wherever the job runs; left in, it would
        be blamed on whatever co-location the job happened to be in. So each job's residual is
        taken relative to its *model error*: its recent mean residual in rounds when it shared no
        node (or, before it has had one, the mean of such errors over jobs of its application).
        Alone, no predictor predicts a slowdown, so that residual is the model's own. Rounds that
        start with a restart are skipped: the restart, not the co-location, cost them.
        """
        elapsed = cluster.now - self._previous_time
        if elapsed <= 0 or not self._previous:
            return None
        states = np.stack([job.allocation for job in jobs])[None]
        feats = self.features(states)[0]
        measured: list[tuple[int, float]] = []
        for j, job in enumerate(jobs):
            self._application_of[job.name] = job.application
            before = self._previous.get(job.name)
            if before is None or not np.array_equal(before[0], job.allocation):
                continue
            if not job.allocation.any():
                continue
            restart_delay = cluster.restart_delay_of(job.application)
            if self._changed_at.get(job.name, -math.inf) + restart_delay > self._previous_time:
                continue
            predicted = self._predicted_rate(job, job.allocation)
            rate = (job.progress - before[1]) / elapsed
            if predicted is None or rate <= 0:
                continue
            residual = math.log(rate / predicted)
            if feats[j, 2] == 0:  # alone on its nodes: this is the model's own error
                weight, total = self._model_error.get(job.name, (0.0, 0.0))
                self._model_error[job.name] = (self.error_forget * weight + 1.0,
                                               self.error_forget * total + residual)
            measured.append((j, residual))
        by_application: dict[str, list[float]] = {}
        for name, (weight, total) in self._model_error.items():
            if weight > 0 and name in self._application_of:
                by_application.setdefault(self._application_of[name], []).append(total / weight)
        rows = []
        for j, residual in measured:
            error = self._job_model_error(jobs[j], by_application)
            if error is not None:
                rows.append((j, residual, error))
        return rows

    def _job_model_error(self, job: JobView, by_application: dict[str, list[float]]
                         ) -> float | None:
        """Mean log residual of ``job``'s model when alone (else the mean over jobs of its
        application, ``by_application``); ``None`` when nothing is known."""
        weight, total = self._model_error.get(job.name, (0.0, 0.0))
        if weight > 0:
            return total / weight
        same = by_application.get(job.application)
        return float(np.mean(same)) if same else None

    def _fair_rates(self, jobs: Sequence[JobView], fair_r: int) -> dict[str, float]:
        """Each job's :meth:`_predicted_rate` on ``fair_r`` GPUs of one node, by name (jobs
        without a model or a positive rate left out). Memoised on what the rate depends on (the
        point fit, gradient statistics, limits and ``fair_r``), this round's and the last's:
        most models are unchanged from one round to the next, and one rate costs a batch
        optimisation (~0.1 ms; 2,000 jobs took longer than the rest of bo's round-keeping)."""
        memo: dict[tuple[object, ...], float | None] = {}
        rates = {}
        for job in jobs:
            model = job.model
            if model is None:
                continue
            key = (model.params, model.gradient, model.limits, job.limits, fair_r)
            if key in memo:
                rate = memo[key]
            elif key in self._fair_rate_memo:
                rate = memo[key] = self._fair_rate_memo[key]
            else:
                rate = memo[key] = self._predicted_rate(job, np.array([fair_r]))
            if rate:
                rates[job.name] = rate
        self._fair_rate_memo = memo
        return rates

    def _realised_objective(self, jobs: Sequence[JobView], fair_rate: dict[str, float],
                            scale: float) -> float:
        """The power mean of realised speedups over the round just ended."""
        elapsed = self._previous_time_delta
        speedups = []
        for job in jobs:
            before = self._previous.get(job.name)
            if before is None or job.name not in fair_rate or elapsed <= 0:
                continue
            rate = max(job.progress - before[1], 0.0) / elapsed
            speedups.append(rate / fair_rate[job.name] * scale + 1e-3)
        if not speedups:
            return float("nan")
        return power_mean(np.array(speedups)[None], self.pollux.p)[0]

    # --- the decision ----------------------------------------------------------------------------

    def learn(self, cluster: ClusterState, jobs: Sequence[JobView]) -> None:
        """The estimation step: each predictor in turn learns from the round just ended (the
        counters, and the co-location residuals less what the predictors before it predict)."""
        jobs = sorted(jobs, key=lambda j: (j.attained_service, j.submit_time, j.name))
        measured = self._measure(cluster, jobs)
        allocation = np.stack([job.allocation for job in jobs])
        applications = tuple(job.application for job in jobs)
        # The nodes' topology matters only with counters (a cluster of mixed node layouts has
        # none to give, and needs none without counters).
        topology = (self.node_topology or cluster.topology if cluster.counters is not None
                    else self.node_topology)
        observation = ColocationRound(
            self._previous_time, cluster.now, tuple(job.name for job in jobs), applications,
            allocation, cluster.counters, topology, time_origin=cluster.time_origin)
        for k, predictor in enumerate(self.predictors):
            residuals = None
            if measured is not None:
                earlier = [p.log_slowdown(allocation[None], applications)[0]
                           for p in self.predictors[:k]]
                residuals = {}
                for j, residual, error in measured:
                    for prior in earlier:
                        residual = residual - prior[j]
                    residuals[j] = residual - error
            try:
                predictor.learn(replace(observation, residuals=residuals))
            except (np.linalg.LinAlgError, torch.linalg.LinAlgError, NotPSDError) as error:
                # keep the last posterior; the search goes on
                message = f"t={cluster.now:g}s: {predictor.name} fit failed ({error})"
                self.fit_problems.append(message)
                LOG.warning("%s; previous posterior kept", message)

    def decide(self, cluster: ClusterState, jobs: Sequence[JobView],
               estimates: Estimates) -> Allocations:
        if self.node_topology is not None and self.node_topology.num_gpus != cluster.gpus_per_node:
            raise InputError(f"policy 'bo': node_topology holds {self.node_topology.num_gpus} "
                             f"GPUs, the cluster's nodes {cluster.gpus_per_node}: expected a "
                             "topology that fits the nodes")
        if not jobs:
            self._previous, self._previous_time = {}, cluster.now
            return {}
        jobs = sorted(jobs, key=lambda j: (j.attained_service, j.submit_time, j.name))
        pollux = self.pollux
        names = [job.name for job in jobs]
        base = np.stack([job.allocation for job in jobs]).astype(STATE_DTYPE)
        max_replicas = np.array([pollux.max_replicas(job) for job in jobs])
        tables = pollux.speedup_tables(jobs, cluster, max_replicas)
        age = np.array([job.age for job in jobs])
        restarts = np.array([job.num_restarts for job in jobs])
        penalty = restart_penalty(age, restarts, restart_delays(cluster, jobs))
        applications = tuple(job.application for job in jobs)
        max_nodes = min(pollux.max_nodes_per_job, cluster.num_nodes)
        problem = _ColocationProblem(base, tables, max_replicas, penalty, cluster, pollux.p,
                                     max_nodes, pollux.rng, self.predictors, applications)
        # Realised objective of the last round (for the report), against this round's fair rates.
        scale = cluster.num_nodes / cluster.total_gpus
        fair_r = max(1, math.ceil(cluster.total_gpus / len(jobs)))
        fair_rate = self._fair_rates(jobs, fair_r)
        self._previous_time_delta = cluster.now - self._previous_time
        if self.history and math.isnan(self.history[-1].realised):
            self.history[-1].realised = self._realised_objective(jobs, fair_rate, scale)

        population, fitness = pollux.evolve(problem, names)
        avoiding_choice = None
        if self.avoiding is not None:
            # Pollux's own search and objective under its avoid rule, on the same tables.
            rule = AllocationProblem(base, tables, max_replicas, penalty, cluster, pollux.p, True,
                            max_nodes, self.avoiding.rng)
            rule_population, rule_fitness = self.avoiding.evolve(rule, names)
            avoiding_choice = rule_population[int(np.argmax(rule_fitness))]

        chosen, record = self._choose(problem, population, fitness, avoiding_choice, cluster.now)
        decision = {name: chosen[j].astype(np.int64) for j, name in enumerate(names)
                    if chosen[j].any()}
        try:
            validate_allocations(decision, cluster, names)
        except AllocationError as error:  # never apply an oversubscribing allocation
            LOG.warning("bo: candidate rejected (%s); current allocation kept", error)
            decision = {job.name: job.allocation for job in jobs if job.allocation.any()}
        for predictor in self.predictors:
            record.learned.update(predictor.diagnostics(chosen, applications))
        record.surrogate_std = record.learned.pop("surrogate_std", math.nan)
        self.history.append(record)
        for job in jobs:
            if not np.array_equal(decision.get(job.name, np.zeros_like(job.allocation)),
                                  job.allocation):
                self._changed_at[job.name] = cluster.now
        self._previous = {job.name: (decision.get(job.name, np.zeros_like(job.allocation)),
                                     job.progress) for job in jobs}
        self._previous_time = cluster.now
        return decision

    def _choose(self, problem: _ColocationProblem, population: np.ndarray, fitness: np.ndarray,
                avoiding_choice: np.ndarray | None, now: float) -> tuple[np.ndarray, RoundRecord]:
        """Expected Improvement over the best distinct candidates of the final population, plus
        the candidate Pollux's own objective (the models alone, no co-location residual) ranks
        first and Pollux's choice under its avoid rule (``avoiding_choice``, ``(J, N)``).

        With ``avoiding_choice`` it is the incumbent: the pick maximises the Monte Carlo expected
        improvement over it under the joint draws, and must expect to gain more than
        ``min_gain`` of its objective; otherwise (analytic LogEI) the incumbent is the best
        posterior mean."""
        plain = problem.fitness(population, models_only=True)
        order = np.argsort(-fitness, kind="stable")
        # Distinct candidates by their bytes (np.unique over rows of P x J*N is far slower).
        seen: dict[bytes, int] = {}
        for index in order:
            seen.setdefault(population[index].tobytes(), int(index))
        distinct = dict(list(seen.items())[: self.num_candidates])
        top = np.array(list(distinct.values()))
        pollux_best = int(np.argmax(plain))
        if population[pollux_best].tobytes() not in distinct:
            top = np.append(top, pollux_best)
        states = population[top]                                             # (K, J, N)
        avoiding = -1
        if avoiding_choice is not None:
            same = np.flatnonzero(np.all(states == avoiding_choice, axis=(1, 2)))
            if same.size:
                avoiding = int(same[0])
            else:
                states = np.concatenate([states, avoiding_choice[None]])
                avoiding = len(states) - 1
        # (S, K): one row where no predictor draws (all are certain)
        values = np.atleast_2d(problem.fitness(states, draws=True))
        mean, std = values.mean(axis=0), values.std(axis=0)
        if avoiding >= 0:
            # Pollux's choice is the incumbent: each candidate's improvement over it is taken
            # draw by draw (uncertainty both share cancels), and it is left only when the
            # expected improvement is worth it (the stopping rule of per-job search).
            gain = np.maximum(values - values[:, avoiding : avoiding + 1], 0.0).mean(axis=0)
            pick = int(np.argmax(gain))
            if gain[pick] <= self.min_gain * abs(float(mean[avoiding])):
                pick = avoiding
        else:
            incumbent = float(mean.max())
            z = (mean - incumbent) / np.maximum(std, 1e-9)
            log_ei = np.log(np.maximum(std, 1e-12)) + _log_ei_helper(
                torch.as_tensor(z, dtype=torch.float64)).numpy()
            pick = int(np.argmax(log_ei))
        feats = self.features(states[pick : pick + 1])[0]
        record = RoundRecord(
            time=now, predicted_mean=float(mean[pick]), predicted_std=float(std[pick]),
            colocated_distributed=int(np.sum((feats[:, 0] > 0) & (feats[:, 1] > 0))),
            candidates=len(states), chosen_rank=int(np.sum(mean > mean[pick])),
            pollux_choice=bool(np.array_equal(states[pick], population[pollux_best])),
            avoiding_choice=pick == avoiding)
        return states[pick], record


class _ColocationLearning:
    """bo's estimation step (:meth:`BayesOptPolicy.learn`), as the loop runs it; publishes
    ``colocation`` (:data:`~bayes_sched.interference.posteriors.COLOCATION`): the policy's slowdown
    predictors, in order."""

    name = "bo_colocation"

    def __init__(self, policy: BayesOptPolicy) -> None:
        self.policy = policy

    def estimate(self, cluster: ClusterState, jobs: Sequence[JobView]) -> list[JobView]:
        if jobs:
            self.policy.learn(cluster, jobs)
        return list(jobs)

    def published(self) -> Sequence[Estimate[Any]]:
        return (Estimate(COLOCATION, self.name, tuple(self.policy.predictors)),)

    def stats(self) -> Mapping[str, float]:
        return {"colocation_fit_problems": int(len(self.policy.fit_problems))}


class _ColocationProblem(AllocationProblem):
    """Pollux's search problem with each job's speedup multiplied by its predicted co-location
    speed factor in the candidate: the product of ``exp(log slowdown)`` over the slowdown
    predictors (posterior means, or their draws)."""

    def __init__(self, base: np.ndarray, tables: np.ndarray, max_replicas: np.ndarray,
                 penalty: np.ndarray, cluster: ClusterState, p: float, max_nodes: int,
                 rng: np.random.Generator, predictors: Sequence[SlowdownPredictor],
                 applications: tuple[str, ...]) -> None:
        super().__init__(base, tables, max_replicas, penalty, cluster, p, False, max_nodes, rng)
        self.predictors = predictors
        self.applications = applications  # (J,), one object: predictors may cache per object

    def fitness(self, states: np.ndarray, draws: bool = False,
                models_only: bool = False) -> np.ndarray:
        """Power mean of penalised, scaled speedups times co-location speed factors, shape
        ``(P,)``; with ``draws`` (the predictors' joint posterior draws, ``S`` of them),
        ``(S, P)``; ``models_only``: Pollux's own objective (no co-location term at all)."""
        factor = 1.0 if models_only else speed_factor(self.predictors, states,
                                                      self.applications, draws)
        return power_mean(self.speedups(states) * factor + 1e-3, self.p)
