"""A Bayesian-optimised scheduling policy: Pollux's allocation search, scored by a GP surrogate of
the realised objective, with Expected Improvement choosing between known-good and uncertain
co-locations.

Each round:

1. **Learn** (the ``bo_colocation`` estimator, :mod:`bayes_sched.interference.colocation`, in the
   loop's estimation stage). For every job whose allocation did not change over the last round, compare the
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
   :class:`~bayes_sched.colocation.SlowdownPredictor` s, composed in that order and published
   as the ``colocation`` estimate: bo reaches them only through that protocol.
2. **Search.** Pollux's genetic search over allocation matrices (``(P, jobs, nodes)`` GPU counts)
   maximises the power mean of job speedups, each multiplied by the co-location slowdown the pair
   learner's posterior mean predicts for it in that candidate, so co-locations that proved harmless are
   used and harmful ones avoided, with no hard rule against them (elitist survival, with the
   compiled mutation and repair of Pollux's search, on states by their nonzero entries:
   :func:`evolve_elitist`; where the predictors are one class pair table, the whole search and
   the scoring below run compiled, from the states' nonzero entries alone:
   :mod:`bayes_sched.policies.bo_search`). A second search, Pollux's own (models alone, at most one
   distributed job per node), runs alongside: its choice is always a candidate, so the avoid
   rule is a candidate generator rather than a constraint.
3. **Decide.** The best distinct candidates of the final population, Pollux's unconstrained choice
   and Pollux's avoid-rule choice are scored by the distribution of the cluster objective under
   joint posterior draws of the pair table. Pollux's avoid-rule choice is the incumbent: the
   candidate with the largest expected improvement over it (draw by draw,
   :func:`bayes_sched.acquisition.expected_improvement`) is taken when that
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
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Annotated, TypeVar

import numpy as np

from bayes_sched.acquisition import expected_improvement, log_expected_improvement
from bayes_sched.cluster import Allocations, ClusterState
from bayes_sched.colocation import (
    COLOCATION,
    SlowdownPredictor,
    colocation_features,
    predicted_rates,
    predictor_of,
    speed_factor,
)
from bayes_sched.estimates import DrawsPosterior, Estimates
from bayes_sched.jobs import BatchLimits, JobModel, JobSettings, JobSpec, JobView
from bayes_sched.mechanisms.genetic_allocation.search import (
    AllocationProblem,
    GAConfig,
    GeneticSearch,
    _int64,
    _kernels,
    power_mean,
)
from bayes_sched.mechanisms.genetic_allocation.sparse import SparseStates
from bayes_sched.policies.pollux import PolluxPolicy
from bayes_sched.registry import GPU_COUNT, Range

if TYPE_CHECKING:  # the compiled module loads numba: imported where it runs
    from bayes_sched.policies.bo_search import Arrays, Numbers

LOG = logging.getLogger(__name__)

_DEFAULT_GA = GAConfig()

_Predictor = TypeVar("_Predictor")


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


#: Most candidates scored per round (default 8).
MAX_CANDIDATES = 1024


class BayesOptPolicy:
    """The Bayesian-optimised policy (registered as ``"bo"``).

    Args:
        p: power-mean exponent of the cluster objective (Pollux's fairness knob).
        max_nodes_per_job, max_replicas_cap, ga: as for Pollux, but bo always runs the elitist
            search (:func:`evolve_elitist`: with the mutation of Pollux's search, so ``ga``'s
            ``grow_prob`` does not apply).
        candidates: distinct candidates scored by EI each round (under the joint draws of the
            ``colocation`` estimate: the pair table's ``posterior_draws``).
        offer_avoiding: also run Pollux's own search under its avoid rule (at most one distributed
            job per node) and offer its choice as a candidate, the incumbent of EI.
        min_gain: expected improvement over Pollux's avoid-rule choice, as a fraction of its
            objective, below which that choice is kept.
        risk: as for Pollux: ``None`` or 0 scores allocations by the point fit's goodput, ``q``
            by the ``q``-quantile of goodput under the throughput posterior (the default
            ``job_goodput`` estimator is then ``job_posterior``).

    Learning (the contention posterior from counters, the co-location residuals of the round just
    ended and the pair learner's fit) is the ``bo_colocation`` estimator's
    (:mod:`bayes_sched.interference.colocation`, whose options are the pair learner's and the
    contention posterior's), run in the loop's estimation stage apart from the decision;
    ``decide`` only searches and chooses, reading the predictors it publishes.
    """

    name = "bo"
    needs: tuple[str, ...] = ("job_goodput", "colocation")

    def __init__(self, p: float = -1.0, max_nodes_per_job: Annotated[int, GPU_COUNT] = 16,
                 max_replicas_cap: Annotated[int, GPU_COUNT] = 64,
                 ga: GAConfig = _DEFAULT_GA,
                 candidates: Annotated[int, Range(1, MAX_CANDIDATES)] = 8,
                 offer_avoiding: bool = True, min_gain: Annotated[float, Range(0.0)] = 0.01,
                 risk: float | None = None) -> None:
        # bo's searches are elitist whatever ``ga`` says: its co-location fitness has no
        # counterpart of NSGA-II's second objective, and its figures were measured so.
        ga = replace(ga, search="elitist")
        # Pollux's search and speedup tables, without its hard rule against co-location.
        self.pollux = PolluxPolicy(p=p, avoid_interference=False,
                                   max_nodes_per_job=max_nodes_per_job,
                                   max_replicas_cap=max_replicas_cap, ga=ga, risk=risk)
        #: Estimators serving the needs when the user names none (plain data).
        self.default_estimators: dict[str, str] = {
            "job_goodput": "job_models" if self.pollux.risk is None else "job_posterior",
            "colocation": "bo_colocation"}
        # Pollux as the artifact runs it (its own population, same seed): the incumbent candidate.
        self.avoiding = PolluxPolicy(p=p, avoid_interference=True,
                                     max_nodes_per_job=max_nodes_per_job,
                                     max_replicas_cap=max_replicas_cap,
                                     ga=ga, risk=risk) if offer_avoiding else None
        self.min_gain = min_gain
        self.num_candidates = candidates
        self.history: list[RoundRecord] = []
        # The jobs' names and progress at the last decision, in its priority order.
        self._previous_names: list[str] = []
        self._previous_progress = np.zeros(0)
        self._previous_time = 0.0
        self._previous_time_delta = 0.0
        # (_fair_rates) rates by the values they depend on, and by the model object
        self._fair_rate_memo: dict[tuple[object, ...], float | None] = {}
        self._fair_rate_models: dict[int, tuple[JobModel, object, int, tuple[object, ...],
                                                float | None]] = {}
        # (_fair_rates) the last call's fair share, models and limits (in job order) and rates
        self._fair_rate_last: tuple[int, list[JobModel | None], list[BatchLimits], np.ndarray] = (
            0, [], [], np.zeros(0))
        #: The co-location predictors of the last estimates decided on (for reports).
        self.predictors: tuple[SlowdownPredictor, ...] = ()

    def stats(self) -> Mapping[str, float]:
        """``rounds_recorded`` (:attr:`history`)."""
        return {"rounds_recorded": int(len(self.history))}

    def job_settings(self, spec: JobSpec) -> JobSettings:
        return self.pollux.job_settings(spec)

    def predictor(self, kind: type[_Predictor]) -> _Predictor:
        """The first of the last round's co-location predictors (:attr:`predictors`) of type
        ``kind``, for reports and tests (decisions reach the predictors only through
        :class:`SlowdownPredictor`)."""
        return predictor_of(self.predictors, kind, "policy 'bo'")

    # --- the report ------------------------------------------------------------------------------

    def _fair_rates(self, jobs: Sequence[JobView], fair_r: int) -> np.ndarray:
        """Each job's :func:`~bayes_sched.colocation.predicted_rate` on ``fair_r`` GPUs of one
        node, ``(J,)`` in the order of ``jobs`` (NaN for a job without a model or a positive
        rate; read-only). Memoised on what the rate depends on (the point fit, gradient
        statistics, limits and ``fair_r``), this round's and the last's: the last call's rates
        whole where its jobs' model and limits objects are this call's, in the same order
        (read-only, and the estimation stage passes an unchanged job's on); else first by each
        job's model and limits objects, with no key built or hashed; the other jobs by the
        values of what the rate depends on; and the rates not memoised computed in one
        vectorised call: most models are unchanged from one round to the next, and one rate
        costs a batch optimisation (for thousands of jobs, more than the rest of bo's
        round-keeping)."""
        models = [job.model for job in jobs]
        limits = [job.limits for job in jobs]
        last_r, last_models, last_limits, last_rates = self._fair_rate_last
        if (last_r == fair_r and len(last_models) == len(models)
                and all(map(operator.is_, models, last_models))
                and all(map(operator.is_, limits, last_limits))):
            return last_rates
        previous = self._fair_rate_models
        known_of = previous.get
        by_model: dict[int, tuple[JobModel, object, int, tuple[object, ...], float | None]] = {}
        nan = math.nan
        rates: list[float] = []
        others: list[tuple[int, JobView, JobModel]] = []
        for job, model, job_limits in zip(jobs, models, limits, strict=True):
            if model is None:
                rates.append(nan)
                continue
            known = known_of(id(model))
            if (known is not None and known[0] is model and known[1] is job_limits
                    and known[2] == fair_r):
                by_model[id(model)] = known
                rates.append(known[4] or nan)
            else:
                others.append((len(rates), job, model))
                rates.append(nan)
        if others:
            # The values' memo: the last round's keys, and those of the models kept since.
            memo = dict(self._fair_rate_memo)
            memo.update((known[3], known[4]) for known in by_model.values())
            keys = [(model.params, model.gradient, model.limits, job.limits, fair_r)
                    for _, job, model in others]
            missing = {key: job for key, (_, job, _) in zip(keys, others, strict=True)
                       if key not in memo}
            allocation = np.array([fair_r])
            memo.update(zip(missing, predicted_rates(list(missing.values()),
                                                     [allocation] * len(missing)), strict=True))
            for key, (index, job, model) in zip(keys, others, strict=True):
                rate = memo[key]
                by_model[id(model)] = (model, job.limits, fair_r, key, rate)
                rates[index] = rate or nan
            self._fair_rate_memo = {key: memo[key] for key in keys}
        self._fair_rate_models = by_model
        out = np.array(rates)
        out.flags.writeable = False
        self._fair_rate_last = (fair_r, models, limits, out)
        return out

    def _realised_objective(self, names: list[str], progress: np.ndarray, fair: np.ndarray,
                            scale: float) -> float:
        """The power mean of realised speedups over the round just ended, over the jobs
        ``names`` (``progress``: each one's now, ``(J,)``) known at the last decision and with a
        fair rate (``fair``, ``(J,)``, NaN where none), in that order."""
        elapsed = self._previous_time_delta
        if elapsed <= 0:
            return float("nan")
        if names == self._previous_names:  # the same jobs in the same order: no lookups
            before = self._previous_progress
        else:
            at = dict(zip(self._previous_names, self._previous_progress.tolist(), strict=True))
            before = np.array([at.get(name, math.nan) for name in names], dtype=float)
        known = ~(np.isnan(before) | np.isnan(fair))
        if not known.any():
            return float("nan")
        rate = np.maximum(progress[known] - before[known], 0.0) / elapsed
        return power_mean((rate / fair[known] * scale + 1e-3)[None], self.pollux.p)[0]

    # --- the decision ----------------------------------------------------------------------------

    def decide(self, cluster: ClusterState, jobs: Sequence[JobView],
               estimates: Estimates) -> Allocations:
        if not jobs:
            self._previous_names, self._previous_progress = [], np.zeros(0)
            self._previous_time = cluster.now
            return {}
        predictors: Sequence[SlowdownPredictor] = estimates.require(COLOCATION)
        self.predictors = tuple(predictors)
        pollux = self.pollux
        # Pollux's problem (status quo, replica caps, speedup tables, restart penalties), its
        # jobs in priority order; bo's and the avoid rule's searches read the same.
        plain, jobs = pollux.ordered_problem(cluster, jobs)
        names = [job.name for job in jobs]
        base, tables, max_replicas, penalty = (plain.base, plain.tables, plain.max_replicas,
                                               plain.penalty)
        applications = tuple(job.application for job in jobs)
        max_nodes = plain.max_nodes
        problem = _ColocationProblem(base, tables, max_replicas, penalty, cluster, pollux.p,
                                     max_nodes, pollux.rng, self.predictors, applications,
                                     base_entries=plain.base_entries)
        # Realised objective of the last round (for the report), against this round's fair rates.
        scale = cluster.num_nodes / cluster.total_gpus
        fair_r = max(1, math.ceil(cluster.total_gpus / len(jobs)))
        fair_rate = self._fair_rates(jobs, fair_r)
        self._previous_time_delta = cluster.now - self._previous_time
        progress = np.array([job.progress for job in jobs], dtype=float)
        if self.history and math.isnan(self.history[-1].realised):
            self.history[-1].realised = self._realised_objective(names, progress, fair_rate,
                                                                 scale)

        population, fitness = evolve_elitist(pollux.search, problem, names, problem.fitness,
                                             problem.pair_table())
        avoiding_choice = None
        if self.avoiding is not None:
            # Pollux's own search and objective under its avoid rule, on the same tables.
            rule = AllocationProblem(base, tables, max_replicas, penalty, cluster, pollux.p, True,
                                     max_nodes, self.avoiding.rng,
                                     base_entries=plain.base_entries)
            rule_population, rule_fitness = evolve_elitist(
                self.avoiding.search, rule, names, lambda s: rule.objectives_sparse(s)[0],
                _NO_PAIRS)
            avoiding_choice = rule_population.rows(np.array([int(np.argmax(rule_fitness))]))

        picked, record = self._choose(problem, population, fitness, avoiding_choice, cluster.now)
        decision = _allocations_of(picked, names)
        over = _oversubscribed(picked, cluster)
        if over is not None:  # never apply an oversubscribing allocation
            LOG.warning("bo: candidate rejected (node %d oversubscribed); current allocation kept",
                        over)
            decision = {job.name: job.allocation for job in jobs if job.allocation.any()}
        chosen: np.ndarray | None = None
        for predictor in self.predictors:
            # A predictor that reads entries is given the chosen state by them (the dense
            # (J, N) state is made only for one that does not).
            if getattr(predictor, "takes_entries", False):
                state: np.ndarray | SparseStates = picked
            else:
                chosen = picked.dense()[0] if chosen is None else chosen
                state = chosen
            record.learned.update(predictor.diagnostics(state, applications))  # type: ignore[arg-type]
        record.surrogate_std = record.learned.pop("surrogate_std", math.nan)
        self.history.append(record)
        self._previous_names, self._previous_progress = names, progress
        self._previous_time = cluster.now
        return decision

    def _choose(self, problem: _ColocationProblem, population: SparseStates,
                fitness: np.ndarray, avoiding_choice: SparseStates | None, now: float
                ) -> tuple[SparseStates, RoundRecord]:
        """Expected Improvement over the best distinct candidates of the final population
        (``(P, J, N)`` by its entries), plus the candidate Pollux's own objective (the models
        alone, no co-location residual) ranks first and Pollux's choice under its avoid rule
        (``avoiding_choice``, one state). Returns the chosen state (``(1, J, N)`` by its entries) and
        the record.

        With ``avoiding_choice`` it is the incumbent: the pick maximises the Monte Carlo expected
        improvement over it under the joint draws, and must expect to gain more than
        ``min_gain`` of its objective; otherwise (analytic LogEI) the incumbent is the best
        posterior mean."""
        plain = problem.fitness(population, models_only=True)
        order = np.argsort(-fitness, kind="stable")
        # Distinct candidates by their row keys (equal exactly where the states are).
        keys = population.row_keys()
        seen: dict[bytes, int] = {}
        for index in order:
            seen.setdefault(keys[index], int(index))
        distinct = dict(list(seen.items())[: self.num_candidates])
        top = list(distinct.values())
        pollux_best = int(np.argmax(plain))
        if keys[pollux_best] not in distinct:
            top.append(pollux_best)
        states = population.rows(np.array(top))                             # K candidates
        candidate_keys = [keys[i] for i in top]
        avoiding = -1
        if avoiding_choice is not None:
            key = avoiding_choice.row_keys()[0]
            if key in candidate_keys:
                avoiding = candidate_keys.index(key)
            else:
                states = states.concat(avoiding_choice)
                candidate_keys.append(key)
                avoiding = len(states) - 1
        # (S, K): one row where no predictor draws (all are certain)
        values = np.atleast_2d(problem.fitness(states, draws=True))
        mean, std = values.mean(axis=0), values.std(axis=0)
        if avoiding >= 0:
            # Pollux's choice is the incumbent: each candidate's improvement over it is taken
            # draw by draw (uncertainty both share cancels), and it is left only when the
            # expected improvement is worth it (the stopping rule of per-job search).
            gain = expected_improvement(DrawsPosterior(values, mean), avoiding, len(values))
            pick = int(np.argmax(gain))
            if gain[pick] <= self.min_gain * abs(float(mean[avoiding])):
                pick = avoiding
        else:
            log_ei = log_expected_improvement(mean, std, float(mean.max()))
            pick = int(np.argmax(log_ei))
        picked = states.rows(np.array([pick]))
        feats = colocation_features(picked)[0]
        record = RoundRecord(
            time=now, predicted_mean=float(mean[pick]), predicted_std=float(std[pick]),
            colocated_distributed=int(np.sum((feats[:, 0] > 0) & (feats[:, 1] > 0))),
            candidates=len(states), chosen_rank=int(np.sum(mean > mean[pick])),
            pollux_choice=candidate_keys[pick] == keys[pollux_best],
            avoiding_choice=pick == avoiding)
        return picked, record


def _allocations_of(state: SparseStates, names: list[str]) -> Allocations:
    """The one state ``state`` (``(1, J, N)`` by its entries) as each job's GPUs per node
    (int64 ``(N,)``) by name, the jobs holding GPUs alone, in job order; no dense ``(J, N)``
    is built."""
    _, j, n, v = state.entries
    jobs, row = np.unique(j, return_inverse=True)
    counts = np.zeros((jobs.size, state.shape[2]), np.int64)
    counts[row, n] = v
    return {names[index]: counts[i] for i, index in enumerate(jobs.tolist())}


def _oversubscribed(state: SparseStates, cluster: ClusterState) -> int | None:
    """The first node the one state ``state`` (by its entries: known jobs, positive whole GPU
    counts, one per job and node, so only the nodes' capacities can be broken) gives more GPUs
    than it has, or ``None`` (what :func:`~bayes_sched.cluster.validate_allocations` checks of
    such a decision, from the entries)."""
    _, _, n, v = state.entries
    used = np.bincount(n, weights=v, minlength=cluster.num_nodes)
    over = np.flatnonzero(used > cluster.capacity())
    return int(over[0]) if over.size else None


#: A pair table that predicts no slowdown: each job's application index ``(J,)`` (unread) and
#: a ``(0, 0)`` table.
_NO_PAIRS = (np.zeros(0, np.int64), np.zeros((0, 0)))


def pair_table(predictors: Sequence[SlowdownPredictor], applications: Sequence[str],
               draws: bool = False) -> tuple[np.ndarray, np.ndarray] | None:
    """The composition of ``predictors`` as one class pair table, where it is one: each job's
    application index ``(J,)`` and the table ``(K, K)`` (its posterior mean) or ``(S, K, K)``
    (``draws``), from the predictors' optional ``pair_table`` method (a table of zeros, or of
    no classes, adds nothing). ``None`` where a predictor has no such method or says it is
    not a pair table, or where two predictors add tables (their classes need not agree); a
    ``(0, 0)`` table (``(1, 0, 0)`` with ``draws``) where none adds anything."""
    found: tuple[np.ndarray, np.ndarray] | None = None
    for predictor in predictors:
        method = getattr(predictor, "pair_table", None)
        table = None if method is None else method(applications, draws)
        if table is None:
            return None
        if not np.any(table[1]):
            continue
        if found is not None:
            return None
        found = table
    if found is None:
        return _NO_PAIRS if not draws else (_NO_PAIRS[0], np.zeros((1, 0, 0)))
    return found


class _ColocationProblem(AllocationProblem):
    """Pollux's search problem with each job's speedup multiplied by its predicted co-location
    speed factor in the candidate: the product of ``exp(log slowdown)`` over the slowdown
    predictors (posterior means, or their draws)."""

    def __init__(self, base: np.ndarray, tables: np.ndarray, max_replicas: np.ndarray,
                 penalty: np.ndarray, cluster: ClusterState, p: float, max_nodes: int,
                 rng: np.random.Generator, predictors: Sequence[SlowdownPredictor],
                 applications: tuple[str, ...],
                 base_entries: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> None:
        super().__init__(base, tables, max_replicas, penalty, cluster, p, False, max_nodes, rng,
                         base_entries=base_entries)
        self.predictors = predictors
        self.applications = applications  # (J,), one object: predictors may cache per object

    def pair_table(self, draws: bool = False) -> tuple[np.ndarray, np.ndarray] | None:
        """The predictors as one class pair table (:func:`pair_table`) where the compiled
        scoring applies (compiled, a nonzero power-mean exponent), else ``None``."""
        if not self.compiled or self.p == 0:
            return None
        return pair_table(self.predictors, self.applications, draws)

    def fitness(self, states: np.ndarray | SparseStates, draws: bool = False,
                models_only: bool = False) -> np.ndarray:
        """Power mean of penalised, scaled speedups times co-location speed factors, shape
        ``(P,)``; with ``draws`` (the predictors' joint posterior draws, ``S`` of them),
        ``(S, P)``; ``models_only``: Pollux's own objective (no co-location term at all).
        ``states``: ``(P, J, N)``, dense or by their nonzero entries. Where the predictors
        are one pair table, scored from the states' nonzero entries alone
        (:func:`bayes_sched.policies.bo_search.scores`)."""
        sparse = states if isinstance(states, SparseStates) else self._sparse_of(states)
        if models_only:
            table = _NO_PAIRS if self.compiled and self.p != 0 else None
        else:
            table = self.pair_table(draws)
        if table is not None:
            values = _compiled_scores(self, sparse, table)                # (S, P)
            return values if draws else values[0]
        factor = 1.0 if models_only else speed_factor(self.predictors, sparse,
                                                      self.applications, draws)
        return power_mean(self.sparse_speedups(sparse) * factor + 1e-3, self.p)

    def sparse_speedups(self, states: SparseStates) -> np.ndarray:
        """:meth:`speedups` of states given by their nonzero entries, ``(P, J)`` (the compiled
        table reads where the problem is compiled)."""
        if self.compiled:
            return _kernels().table_reads(*_int64(states.entries), *states.shape, self.tables,
                                          self.base, self._base_nodes, self.penalty,
                                          float(self.scale))[1]
        return self._penalised(self._table_speedups(states), states)


def _compiled_inputs(problem: AllocationProblem, pairs: tuple[np.ndarray, np.ndarray],
                     ga: GAConfig = _DEFAULT_GA) -> tuple[Arrays, Numbers]:
    """``problem``, the pair table ``pairs`` (applications ``(J,)``, table ``(K, K)``) and the
    mutation rates of ``ga`` as the arrays and numbers of
    :mod:`bayes_sched.policies.bo_search`."""
    int64 = np.int64
    _, base_n, base_v = problem.base_entries
    num_jobs, num_nodes = problem.base.shape
    arrays = (problem.base, base_n.astype(int64), base_v.astype(int64),
              problem._base_bounds.astype(int64), problem._base_nodes.astype(int64),
              np.ascontiguousarray(problem.tables, dtype=float), problem.penalty.astype(float),
              problem.max_replicas.astype(int64), pairs[0].astype(int64),
              np.ascontiguousarray(pairs[1], dtype=float))
    numbers = (num_jobs, num_nodes, int(problem.capacity), int(problem.max_nodes),
               bool(problem.avoid_interference), float(problem.scale), float(problem.p),
               float(ga.reset_prob), float(ga.zero_prob))
    return arrays, numbers


def _compiled_scores(problem: AllocationProblem, states: SparseStates,
                     pairs: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """The fitness of ``states`` under the pair table ``pairs`` (its mean ``(K, K)`` or draws
    ``(S, K, K)``), ``(S, P)`` (``S = 1`` for the mean):
    :func:`bayes_sched.policies.bo_search.scores`."""
    from bayes_sched.policies import bo_search

    apps, table = pairs
    tables = table[None] if table.ndim == 2 else table
    arrays, numbers = _compiled_inputs(problem, (apps, np.zeros((0, 0))))
    return bo_search.scores(*_int64(states.entries), len(states), arrays, numbers,
                            np.ascontiguousarray(tables, dtype=float))


def evolve_elitist(search: GeneticSearch, problem: AllocationProblem, names: list[str],
                   score: Callable[[SparseStates], np.ndarray],
                   pairs: tuple[np.ndarray, np.ndarray] | None = None
                   ) -> tuple[SparseStates, np.ndarray]:
    """The elitist genetic search (parents and children compete, the fittest ``size``
    survive) on states carried by their nonzero entries, warm-started from ``search``'s last
    population and leaving this one there; the final population and its ``score`` ``(P,)``.

    Sizes as :meth:`GeneticSearch.evolve_sparse`'s; binary tournaments by ``score``, one-point
    crossover over jobs, and the problem's compiled mutation and repair (those of Pollux's
    NSGA-II search), so no step builds or scans a dense ``(P, J, N)`` population: the cost
    follows the GPUs in use and the free nodes, not rows x nodes. Where ``score`` is the
    problem's objective times the speed factors of the pair table ``pairs`` (applications
    ``(J,)``, mean table ``(K, K)``; :data:`_NO_PAIRS`: the objective alone) and the problem
    is compiled with a nonzero exponent, the generations run as one compiled kernel
    (:func:`bayes_sched.policies.bo_search.evolve`: its own draws, from a generator seeded from
    ``search.rng``).
    """
    ga = search.ga
    rng = search.rng
    num_jobs = problem.base.shape[0]
    size = int(np.clip(ga.max_elements // problem.base.size, ga.min_population, ga.population))
    generations = max(ga.min_generations, ga.generations * size // ga.population)
    start = search._initial_states(problem, names, size)
    # The status quo stays as it is; the other starting states are mutated.
    mutated = problem._mutate_sparse(start.rows(np.arange(1, size)), ga)
    population = problem.repair_sparse(start.rows(np.zeros(1, np.int64)).concat(mutated))
    if pairs is not None and problem.compiled and problem.p != 0:
        from bayes_sched.policies import bo_search

        arrays, numbers = _compiled_inputs(problem, pairs, ga)
        p, j, n, v, fitness = bo_search.evolve(*_int64(population.entries), size, generations,
                                               arrays, numbers, _kernels().seeded_state(rng))
        population = SparseStates((p, j, n, v.astype(population.entries[3].dtype)),
                                  population.shape)
        search._population, search._population_jobs = population, names
        return population, fitness
    fitness = score(population)
    for _ in range(generations):
        a, b = rng.integers(size, size=(2, size))
        first = np.where(fitness[a] >= fitness[b], a, b)
        a, b = rng.integers(size, size=(2, size))
        second = np.where(fitness[a] >= fitness[b], a, b)
        point = rng.integers(num_jobs + 1, size=size)
        children = population.crossover(first, second, point)
        children = problem.repair_sparse(problem._mutate_sparse(children, ga))
        merged = np.concatenate([fitness, score(children)])
        keep = np.argsort(-merged, kind="stable")[:size]
        population = population.concat(children).rows(keep)
        fitness = merged[keep]
    search._population, search._population_jobs = population, names
    return population, fitness
