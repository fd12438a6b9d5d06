"""Which co-runners cost a job what: the pair table of co-location log slowdowns between job
classes, a :class:`~bayes_sched.colocation.SlowdownPredictor` learned from job
progress (the ``bo`` policy's residual predictor), its posterior from the estimation module's
throughput learner (:mod:`bayes_sched.estimation.pair_cells`; one machinery with the
time-sharing policies' throughput beliefs).

A job's *class* is its application and whether it is distributed (spans more than one node);
both are known to any scheduler. On each node a job uses, its co-location log slowdown is modelled
as additive over its co-runners there,

    log slowdown on node n = sum over co-runners k on n of  w[class(job), class(k)],

and the job goes at the pace of its worst node (a synchronous data-parallel job waits for its
slowest replica). The table ``w`` (``K x K``, log units, 0 = harmless) is the learner's
``log paired(job | co-runner) - log alone(job)``
(:func:`~bayes_sched.estimation.pair_cells.log_slowdown_table`): its posterior mean and joint
draws.

What the learner is told. A job-round's residual (the log of realised over predicted progress,
less the job's own model error and what the predictors before this one predict) is a report of
the job's class *alone* where it shared no node, and of its class beside its co-runner where its
worst node (under the current posterior mean) held one co-runner. Where that node held several,
the additive model makes the residual a sum of pair effects; each co-runner's cell is then told
the residual less the other co-runners' current posterior means, over its share of the round's
seconds (a backfitting step: the evidence is split, not counted once per co-runner).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from types import ModuleType

import numpy as np

from bayes_sched.colocation import ColocationRound, SparseCandidates, state_entries
from bayes_sched.estimation.pair_cells import (
    NODE_SHARING_PRIORS,
    PairCellObservations,
    PairPrior,
    class_cell,
    log_slowdown_table,
)
from bayes_sched.estimation.throughput.bayesian import BayesianThroughputLearner

#: Seconds of one job-round the residual noise is stated over (the Pollux world's round).
ROUND_SECONDS = 60.0
_DEFAULT_PRIOR = PairPrior()


def _pair_kernel() -> ModuleType:
    """The compiled loop, imported on first use (importing numba is slow)."""
    from bayes_sched.interference import pair_kernel

    return pair_kernel


class PairResiduals:
    """The pair table's posterior, learned from per-job co-location residuals through a
    throughput learner; a :class:`~bayes_sched.colocation.SlowdownPredictor`.

    Args:
        prior: the starting standard deviations of the learner's paired effects.
        noise: standard deviation of one job-round residual (``ROUND_SECONDS`` of progress),
            log units: the learner's measurement noise.
        forget: per-round weight decay of old observations.
        draws: joint posterior draws of the table kept in :attr:`draws` at each fit.
        seed: seeds the draws.
        hyper_every: rounds between the learner's hyperparameter fits (type-II maximum
            likelihood, warm-started); the rounds between only condition on the reports with the
            current hyperparameters. 0: never fit them (the prior's scales throughout).
    """

    name = "pair surrogate"
    #: :meth:`log_slowdown` reads candidates by their nonzero entries too.
    takes_entries = True

    def __init__(self, prior: PairPrior = _DEFAULT_PRIOR, noise: float = 0.15, forget: float = 0.998,
                 draws: int = 64, seed: int = 0, hyper_every: int = 0) -> None:
        self.prior = prior
        self.noise = noise
        self.forget = forget
        self.num_draws = draws
        self.hyper_every = hyper_every
        self.rng = np.random.default_rng(seed)
        self.learner = BayesianThroughputLearner(measurement_noise=noise,
                                                 reference_seconds=ROUND_SECONDS,
                                                 log_variances=prior.log_variances(),
                                                 learn_pair_fits=False,  # nodes always share
                                                 fixed_priors=NODE_SHARING_PRIORS)
        self.reports = PairCellObservations()
        self.applications: list[str] = []
        self.mean = np.zeros((0, 0))
        self.std = np.zeros((0, 0))
        self.draws = np.zeros((draws, 0, 0))
        self.fits = 0
        self.fallback_reason: str | None = None
        self._indexed: tuple[Sequence[str] | None, np.ndarray] = (None, np.zeros(0, np.int64))

    @property
    def num_classes(self) -> int:
        return 2 * len(self.applications)

    def application_index(self, applications: Sequence[str]) -> np.ndarray:
        """Index of each application, ``(J,)``, adding unseen ones (the table grows with them)."""
        known = self.applications
        at = {app: i for i, app in enumerate(known)}
        for app in dict.fromkeys(applications):  # each distinct one once, in order of sight
            if app not in at:
                at[app] = len(known)
                known.append(app)
        return np.fromiter(map(at.__getitem__, applications), np.int64, len(applications))

    def _covering(self, table: np.ndarray) -> np.ndarray:
        """``table`` ``(..., K', K')`` padded to all ``K`` classes known now: classes added since
        the last fit get the prior mean."""
        pad = self.num_classes - table.shape[-1]
        if pad <= 0:
            return table
        widths = [(0, 0)] * (table.ndim - 2) + [(0, pad), (0, pad)]
        return np.pad(table, widths, constant_values=0.0)

    # --- the predictor ---------------------------------------------------------------------------

    def learn(self, observation: ColocationRound) -> None:
        """Add the round's residuals (where it was measured), cover its applications and refit
        (:meth:`fit`; a failed fit raises and keeps the previous posterior)."""
        if observation.residuals is not None:
            self.observe(observation.allocation, observation.applications,
                         list(observation.residuals), list(observation.residuals.values()),
                         seconds=observation.end - observation.start)
        self.application_index(observation.applications)
        self.fit()

    def log_slowdown(self, states: np.ndarray | SparseCandidates, applications: Sequence[str],
                     draws: bool = False) -> np.ndarray:
        """:meth:`log_factor` with the posterior mean ``(P, J)`` or the fit's draws ``(S, P, J)``."""
        return self.log_factor(states, self._index_of(applications),
                               self.draws if draws else None)

    def pair_table(self, applications: Sequence[str], draws: bool = False
                   ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`log_slowdown` as its pair table: each job's application index ``(J,)`` (a
        job's class is ``2 * index + distributed``) and the table ``(K, K)`` (posterior mean) or
        ``(S, K, K)`` (the fit's draws), every known class covered."""
        return self._index_of(applications), self._covering(self.draws if draws else self.mean)

    def diagnostics(self, allocation: np.ndarray | SparseCandidates,
                    applications: Sequence[str]) -> dict[str, float]:
        """``surrogate_std`` and ``worst_pair``: the mean posterior std and the lowest mean of
        the table over the classes of ``applications`` the last fit covers; ``pairs_observed``;
        ``chosen_log_factor``: the mean predicted log slowdown in ``allocation`` ``(J, N)`` (or
        that one state by its entries, ``(1, J, N)``)."""
        index = self._index_of(applications)
        present = np.unique(np.concatenate([2 * index, 2 * index + 1]))
        present = present[present < len(self.std)]  # classes the last fit covers
        known = np.ix_(present, present)
        return {
            "surrogate_std": float(self.std[known].mean()) if present.size else math.nan,
            "worst_pair": float(self.mean[known].min()) if present.size else math.nan,
            "pairs_observed": float(self.observed_pairs()),
            "chosen_log_factor": float(self.log_factor(
                allocation[None] if isinstance(allocation, np.ndarray) else allocation,
                index).mean()),
        }

    def _index_of(self, applications: Sequence[str]) -> np.ndarray:
        """:meth:`application_index`, cached for the last sequence object asked about (a search
        asks about the same jobs for every generation; indices never change once given)."""
        cached, index = self._indexed
        if applications is not cached:
            index = self.application_index(applications)
            self._indexed = (applications, index)
        return index

    # --- co-runners ------------------------------------------------------------------------------

    def entries(self, states: np.ndarray | SparseCandidates, apps: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The nonzero ``(state, job, node)`` entries of ``states`` ``(P, J, N)`` (dense, or by
        their entries): flat job index ``p * J + j`` ``(E,)``, each entry's class ``(E,)`` and
        co-runner class counts on its node ``(E, K)``, and the flat node index ``(E,)``."""
        size, num_jobs, num_nodes = states.shape
        classes = self.num_classes
        p, j, n, _ = state_entries(states)
        pj = p * num_jobs + j
        pn = p * num_nodes + n
        nodes = np.bincount(pj, minlength=size * num_jobs)
        own = apps[j] * 2 + (nodes[pj] > 1)
        on_node = np.bincount(pn * classes + own, minlength=size * num_nodes * classes)
        counts = on_node.reshape(size * num_nodes, classes)[pn]
        counts[np.arange(own.size), own] -= 1
        return pj, own, counts, pn

    def log_factor(self, states: np.ndarray | SparseCandidates, apps: np.ndarray,
                   table: np.ndarray | None = None) -> np.ndarray:
        """Predicted co-location log slowdown of every job in every state, ``(P, J, N) -> (P, J)``,
        with the posterior mean table, or with draws ``table`` ``(S, K, K)`` -> ``(S, P, J)``
        (the compiled loop of :mod:`bayes_sched.interference.pair_kernel`)."""
        size, num_jobs, num_nodes = states.shape
        table = self._covering(self.mean if table is None else table)
        lead = table.shape[:-2]
        p, j, n, _ = state_entries(states)
        flat = _pair_kernel().worst_node_log_factor(
            *(np.asarray(a, dtype=np.int64) for a in (p, j, n)), size, num_jobs, num_nodes,
            np.asarray(apps, dtype=np.int64),
            np.ascontiguousarray(table.reshape(-1, *table.shape[-2:]), dtype=np.float64))
        return flat.reshape(*lead, size, num_jobs)

    # --- learning --------------------------------------------------------------------------------

    def observe(self, allocation: np.ndarray, applications: Sequence[str], jobs: Sequence[int],
                residuals: Sequence[float], seconds: float = ROUND_SECONDS) -> int:
        """Add one round of ``seconds``: the cluster's allocation ``(J, N)``, every job's
        application, and the residuals (log units) of the jobs ``jobs`` measured over it, as
        reports of their cells (see the module docstring). Returns the reports added (one per job
        alone, one per co-runner class on a shared worst node)."""
        self.reports.decay(self.forget)
        apps = self.application_index(applications)
        pj, own, counts, _ = self.entries(allocation[None], apps)
        if pj.size == 0:
            return 0
        # The job's worst node under the current posterior mean (ties: most co-runners).
        table = self._covering(self.mean)
        effects = table[own] * counts                                    # (E, K)
        score = effects.sum(axis=1) - 1e-6 * counts.sum(axis=1)
        added = 0
        for j, residual in zip(jobs, residuals, strict=True):
            mine = np.flatnonzero(pj == j)
            if mine.size == 0:
                continue
            worst = mine[int(np.argmin(score[mine]))]
            job_class = int(own[worst])
            partners = np.flatnonzero(counts[worst])
            if partners.size == 0:  # shares no node: its class alone
                self.reports.add(class_cell(self.applications, job_class), float(residual),
                                 seconds)
                added += 1
                continue
            total = float(effects[worst].sum())
            share = seconds / float(counts[worst].sum())
            for other in partners:
                # the residual less the other co-runners' current posterior means
                rest = total - float(table[job_class, other])
                self.reports.add(class_cell(self.applications, job_class, int(other)),
                                 float(residual) - rest, share * float(counts[worst, other]))
                added += 1
        return added

    def fit(self) -> None:
        """Fit the learner to the reports (hyperparameters every ``hyper_every`` fits, else
        conditioning only) and read the table from its belief: updates :attr:`mean` and
        :attr:`std` ``(K, K)``, the joint :attr:`draws` ``(S, K, K)`` and
        :attr:`fallback_reason` (the belief's, where its fit fell back to the prior's settings)."""
        self.fits += 1
        hyper = self.hyper_every > 0 and self.fits % self.hyper_every == 0
        learner = self.learner if hyper else self.learner.conditioning_only()
        belief = learner.fit(self.reports.observations())
        self.fallback_reason = belief.fallback_reason
        seed = int(self.rng.integers(2**31))
        self.mean, self.draws = log_slowdown_table(belief, self.applications, self.num_draws,
                                                   seed)
        self.std = self.draws.std(axis=0)

    def observed(self) -> np.ndarray:
        """``(K, K)``: whether the pair (job class, co-runner class) has reports."""
        seen = np.zeros((self.num_classes, self.num_classes), dtype=bool)
        index = {app: a for a, app in enumerate(self.applications)}
        for cell in self.reports.cells():
            if cell.partner is None:
                continue
            own = 2 * index[cell.job_type] + cell.scale_factor - 1
            for other in range(self.num_classes):
                if class_cell(self.applications, own, other) == cell:
                    seen[own, other] = True
        return seen

    def observed_pairs(self) -> int:
        """Distinct (class, co-runner class) pairs with evidence."""
        return int(self.observed().sum())
