"""Which co-runners cost a job what: a GP over (job class, co-runner class) pairs, a
:class:`~bayes_sched.interference.predictor.SlowdownPredictor` learned from job progress (the
``bo`` policy's residual predictor).

A job's *class* is its application and whether it is distributed (spans more than one node);
both are known to any scheduler. On each node a job uses, its co-location log slowdown is modelled
as additive over its co-runners there,

    log slowdown on node n = sum over co-runners k on n of  w[class(job), class(k)],

and the job goes at the pace of its worst node (a synchronous data-parallel job waits for its
slowest replica). The table ``w`` (``K x K``, log units, 0 = harmless) has a Gaussian-process prior
over pairs whose kernel adds a shared level, an effect of the job's class, one of the co-runner's
class, one of the pair of *applications* (so a distributed and a single-node job of the same pair
share evidence) and one of the class pair itself::

    k((a, b), (a', b')) = s_level^2 + s_own^2 [a = a'] + s_other^2 [b = b']
                          + s_apps^2 [app(a) = app(a'), app(b) = app(b')] + s_pair^2 [a = a', b = b']

A job-round's residual (the log of realised over predicted progress, less the job's own model
error) is a linear functional of ``w`` -- its co-runner class counts on its worst node -- so the
posterior is Gaussian: BoTorch's ``SingleTaskGP`` with a linear kernel over the counts mapped
through the kernel's root (:meth:`PairResiduals.fit`); the kernel is low rank (``K^2``), so the
cost stays flat however many rounds are observed. Observations are kept as exponentially forgotten
means per distinct (class, co-runner counts) row, each with variance ``noise^2 / weight``.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from botorch.exceptions import InputDataWarning
from botorch.models import SingleTaskGP
from botorch.posteriors import GPyTorchPosterior
from gpytorch.kernels import LinearKernel
from gpytorch.means import ZeroMean

from bayes_sched.interference.predictor import ColocationRound


@dataclass(frozen=True)
class PairPrior:
    """Prior standard deviations (log slowdown per co-runner) of the kernel's parts, and the prior
    mean of every pair (0: co-location is harmless until shown otherwise)."""

    level: float = 0.05
    own: float = 0.04
    other: float = 0.04
    apps: float = 0.08
    pair: float = 0.04
    mean: float = 0.0


class PairResiduals:
    """The pair table's posterior, learned from per-job co-location residuals; a
    :class:`~bayes_sched.interference.predictor.SlowdownPredictor`.

    Args:
        prior: the kernel's scales and the prior mean.
        noise: standard deviation of one job-round residual, log units.
        forget: per-round weight decay of old observations.
        draws: joint posterior draws of the table kept in :attr:`draws` at each fit.
        seed: seeds the draws.
    """

    name = "pair surrogate"

    def __init__(self, prior: PairPrior = PairPrior(), noise: float = 0.15, forget: float = 0.998,
                 draws: int = 64, seed: int = 0) -> None:
        self.prior = prior
        self.noise = noise
        self.forget = forget
        self.num_draws = draws
        self.rng = np.random.default_rng(seed)
        self.applications: list[str] = []
        self._weight: dict[tuple[int, tuple[tuple[int, int], ...]], float] = {}
        self._total: dict[tuple[int, tuple[tuple[int, int], ...]], float] = {}
        self.mean = np.zeros((0, 0))
        self.std = np.zeros((0, 0))
        self.draws = np.zeros((draws, 0, 0))
        self._indexed: tuple[Sequence[str] | None, np.ndarray] = (None, np.zeros(0, np.int64))

    @property
    def num_classes(self) -> int:
        return 2 * len(self.applications)

    def application_index(self, applications: Sequence[str]) -> np.ndarray:
        """Index of each application, ``(J,)``, adding unseen ones (the table grows with them)."""
        for app in applications:
            if app not in self.applications:
                self.applications.append(app)
        return np.array([self.applications.index(a) for a in applications], dtype=np.int64)

    def _covering(self, table: np.ndarray) -> np.ndarray:
        """``table`` ``(..., K', K')`` padded to all ``K`` classes known now: classes added since
        the last fit get the prior mean."""
        pad = self.num_classes - table.shape[-1]
        if pad <= 0:
            return table
        widths = [(0, 0)] * (table.ndim - 2) + [(0, pad), (0, pad)]
        return np.pad(table, widths, constant_values=self.prior.mean)

    # --- the predictor ---------------------------------------------------------------------------

    def learn(self, observation: ColocationRound) -> None:
        """Add the round's residuals (where it was measured), cover its applications and refit
        (:meth:`fit`; a failed fit raises and keeps the previous posterior)."""
        if observation.residuals is not None:
            self.observe(observation.allocation, observation.applications,
                         list(observation.residuals), list(observation.residuals.values()))
        self.application_index(observation.applications)
        self.fit()

    def log_slowdown(self, states: np.ndarray, applications: Sequence[str],
                     draws: bool = False) -> np.ndarray:
        """:meth:`log_factor` with the posterior mean ``(P, J)`` or the fit's draws ``(S, P, J)``."""
        return self.log_factor(states, self._index_of(applications),
                               self.draws if draws else None)

    def diagnostics(self, allocation: np.ndarray, applications: Sequence[str]
                    ) -> dict[str, float]:
        """``surrogate_std`` and ``worst_pair``: the mean posterior std and the lowest mean of
        the table over the classes of ``applications`` the last fit covers; ``pairs_observed``;
        ``chosen_log_factor``: the mean predicted log slowdown in ``allocation`` ``(J, N)``."""
        index = self._index_of(applications)
        present = np.unique(np.concatenate([2 * index, 2 * index + 1]))
        present = present[present < len(self.std)]  # classes the last fit covers
        known = np.ix_(present, present)
        return {
            "surrogate_std": float(self.std[known].mean()) if present.size else math.nan,
            "worst_pair": float(self.mean[known].min()) if present.size else math.nan,
            "pairs_observed": float(self.observed_pairs()),
            "chosen_log_factor": float(self.log_factor(allocation[None], index).mean()),
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

    def entries(self, states: np.ndarray, apps: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The nonzero ``(state, job, node)`` entries of ``states`` ``(P, J, N)``: flat job index
        ``p * J + j`` ``(E,)``, each entry's class ``(E,)`` and co-runner class counts on its node
        ``(E, K)``, and the flat node index ``(E,)``."""
        size, num_jobs, num_nodes = states.shape
        classes = self.num_classes
        p, j, n = np.nonzero(states)
        pj = p * num_jobs + j
        pn = p * num_nodes + n
        nodes = np.bincount(pj, minlength=size * num_jobs)
        own = apps[j] * 2 + (nodes[pj] > 1)
        on_node = np.bincount(pn * classes + own, minlength=size * num_nodes * classes)
        counts = on_node.reshape(size * num_nodes, classes)[pn]
        counts[np.arange(own.size), own] -= 1
        return pj, own, counts, pn

    def log_factor(self, states: np.ndarray, apps: np.ndarray,
                   table: np.ndarray | None = None) -> np.ndarray:
        """Predicted co-location log slowdown of every job in every state, ``(P, J, N) -> (P, J)``,
        with the posterior mean table, or with draws ``table`` ``(S, K, K)`` -> ``(S, P, J)``."""
        size, num_jobs, _ = states.shape
        cells = size * num_jobs
        table = self._covering(self.mean if table is None else table)
        pj, own, counts, _ = self.entries(states, apps)
        lead = table.shape[:-2]
        if pj.size == 0:  # nobody runs anywhere: nothing slows anyone
            return np.zeros((*lead, size, num_jobs))
        per_node = np.einsum("...ek,ek->...e", table[..., own, :], counts)
        flat = np.zeros((*lead, cells)).reshape(-1, cells)
        per_node = per_node.reshape(-1, per_node.shape[-1])
        for row in range(flat.shape[0]):  # the job's worst node
            np.minimum.at(flat[row], pj, per_node[row])
        return flat.reshape(*lead, size, num_jobs)

    # --- learning --------------------------------------------------------------------------------

    def observe(self, allocation: np.ndarray, applications: Sequence[str], jobs: Sequence[int],
                residuals: Sequence[float]) -> int:
        """Add one round: the cluster's allocation ``(J, N)``, every job's application, and the
        residuals (log units) of the jobs ``jobs`` measured over it. Returns the rows added (jobs
        that shared a node; a job alone on its nodes says nothing about pairs)."""
        for key in self._weight:
            self._weight[key] *= self.forget
            self._total[key] *= self.forget
        apps = self.application_index(applications)
        state = allocation[None]
        pj, own, counts, _ = self.entries(state, apps)
        if pj.size == 0:
            return 0
        # The job's worst node under the current posterior mean (ties: most co-runners).
        table = self._covering(self.mean)
        score = np.einsum("ek,ek->e", table[own], counts) - 1e-6 * counts.sum(axis=1)
        added = 0
        for j, residual in zip(jobs, residuals, strict=True):
            mine = np.flatnonzero(pj == j)
            if mine.size == 0:
                continue
            worst = mine[int(np.argmin(score[mine]))]
            if not counts[worst].any():
                continue
            row = tuple((int(k), int(c)) for k, c in enumerate(counts[worst]) if c)
            key = (int(own[worst]), row)
            self._weight[key] = self._weight.get(key, 0.0) + 1.0
            self._total[key] = self._total.get(key, 0.0) + float(residual)
            added += 1
        return added

    def prior_covariance(self) -> np.ndarray:
        """The kernel over all ``K x K`` pairs, ``(K^2, K^2)``, pairs flattened row-major."""
        classes = self.num_classes
        cls = np.arange(classes)
        own_grid, other_grid = np.meshgrid(cls, cls, indexing="ij")
        own, other = own_grid.ravel(), other_grid.ravel()
        prior = self.prior
        same_own = own[:, None] == own[None, :]
        same_other = other[:, None] == other[None, :]
        same_apps = ((own // 2)[:, None] == (own // 2)[None, :]) & (
            (other // 2)[:, None] == (other // 2)[None, :])
        return (prior.level**2 + prior.own**2 * same_own + prior.other**2 * same_other
                + prior.apps**2 * same_apps + prior.pair**2 * (same_own & same_other))

    def fit(self) -> None:
        """Condition on the observations: updates :attr:`mean` and :attr:`std` ``(K, K)`` and the
        joint :attr:`draws` ``(S, K, K)``.

        The model is a BoTorch :class:`~botorch.models.SingleTaskGP` with a linear kernel on the
        inputs ``x L`` (``L`` the Cholesky root of the pair kernel ``Sigma``), so that
        ``cov(f(x), f(x')) = x Sigma x'``: a row's co-runner counts ``x`` give its residual
        ``x . w``, and the table itself is the GP at the rows of ``L`` (the unit vectors). Each row's
        noise variance is fixed at ``noise^2 / weight``.
        """
        classes = self.num_classes
        size = classes * classes
        keys = [k for k, w in self._weight.items() if w > 1e-3]
        design = np.zeros((len(keys), size))
        target = np.zeros(len(keys))
        noise_var = np.zeros(len(keys))
        for i, key in enumerate(keys):
            own, row = key
            for other, count in row:
                design[i, own * classes + other] = count
            weight = self._weight[key]
            target[i] = self._total[key] / weight - self.prior.mean * design[i].sum()
            noise_var[i] = self.noise**2 / weight
        root = np.linalg.cholesky(self.prior_covariance() + 1e-9 * np.eye(size))
        if keys:
            mean, cov = _linear_gp_posterior(design @ root, target, noise_var, root)
        else:
            mean, cov = np.zeros(size), root @ root.T
        mean = mean + self.prior.mean
        chol = np.linalg.cholesky(cov + 1e-10 * np.eye(size))
        draws = mean + self.rng.standard_normal((self.num_draws, size)) @ chol.T
        self.mean = mean.reshape(classes, classes)
        self.std = np.sqrt(np.clip(np.diag(cov), 0.0, None)).reshape(classes, classes)
        self.draws = draws.reshape(self.num_draws, classes, classes)

    def observed_pairs(self) -> int:
        """Distinct (class, co-runner class) pairs with evidence."""
        pairs = {(own, other) for (own, row), w in self._weight.items() if w > 1e-3
                 for other, _ in row}
        return len(pairs)


def _linear_gp_posterior(train_x: np.ndarray, train_y: np.ndarray, train_var: np.ndarray,
                         test_x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Posterior mean ``(T,)`` and covariance ``(T, T)`` at ``test_x`` ``(T, D)`` of a zero-mean
    GP with a unit-variance linear kernel, given ``train_x`` ``(N, D)``, targets ``(N,)`` and
    their fixed noise variances ``(N,)``."""
    kernel = LinearKernel()
    kernel.variance = 1.0
    with warnings.catch_warnings():
        # The inputs are co-runner counts mapped through the kernel's root, not unit-cube features.
        warnings.simplefilter("ignore", InputDataWarning)
        model = SingleTaskGP(torch.as_tensor(train_x), torch.as_tensor(train_y)[:, None],
                             train_Yvar=torch.as_tensor(train_var)[:, None],
                             covar_module=kernel, mean_module=ZeroMean(), outcome_transform=None)
    model.eval()
    with torch.no_grad():
        posterior = model.posterior(torch.as_tensor(test_x))
        assert isinstance(posterior, GPyTorchPosterior)  # no outcome transform
        mean = posterior.mean.squeeze(-1).numpy()
        cov = posterior.distribution.covariance_matrix.numpy()
    return mean, cov
