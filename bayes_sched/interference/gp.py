"""A Gaussian-process co-location model: log normalised speed of a job next to another as a smooth
function of what both show alone.

Input of one observation (``target`` next to ``other``): the target's solo features followed by
its neighbour's (:mod:`.tables`' solo-features table; whatever columns it has: throughputs,
counter means, log batch size, one-hot GPU type or job family), standardised on the training jobs.
Output: ``log(speed)``, standardised. Model::

    log speed = m + f(x_target, x_other) + eps,   f ~ GP(0, k_ARD),   eps ~ N(0, sigma^2)

with ``k_ARD`` a squared-exponential kernel with one length scale per input (automatic relevance
determination: an input that does not matter gets a long length scale): BoTorch's
``SingleTaskGP``, whose length scales carry its dimension-scaled log-normal prior. ``m``, the
length scales and ``sigma`` are fitted by maximising the exact marginal likelihood with those
priors (BoTorch's L-BFGS-B fit) of at most :data:`EVIDENCE_OBSERVATIONS` observations (a seeded
random subset where there are more); the prediction conditions on every observation. The
predictive distribution of a new pair is the GP's Gaussian conditional plus the noise, so a
pair unlike any measured one (a job family, GPU type or batch size never co-located) gets the
prior's spread back: its interval widens instead of collapsing. Speeds above 1 (a job faster next
to a neighbour than alone) are ordinary values of ``log speed > 0``; nothing caps them below
:data:`~.tables.MAX_SPEED`. Where the records were capped (every faster-than-alone speed written
as exactly 1), :mod:`.gp_censored` reads the capped rows as censored instead of exact.

Cost: one Cholesky factor of an ``M x M`` matrix per optimiser step (``M`` the evidence subset),
and one of ``N x N`` for the prediction (``N`` training observations, bounded by
:data:`MAX_OBSERVATIONS`).
"""

from __future__ import annotations

import math
import warnings
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import gpytorch
import numpy as np
import pandas as pd
import torch
from botorch.exceptions.warnings import InputDataWarning, OptimizationWarning
from botorch.fit import fit_gpytorch_mll
from botorch.models import SingleTaskGP
from linear_operator.utils.errors import NanError, NotPSDError

from bayes_sched.interference.model import (
    InterferenceFitError,
    SpeedPrediction,
    colocation_table,
)
from bayes_sched.interference.tables import InterferenceInputError, check_solo_features
from perfmodel.errors import UnreliableFitWarning

#: Most training observations an exact GP is fitted to (its memory grows as N^2: 20,000 rows
#: are 3.2 GB of float64).
MAX_OBSERVATIONS = 20_000
#: Observations whose marginal likelihood sets the hyperparameters (a random subset where there
#: are more): the evidence's cost grows as N^3 per optimiser step, while a few hundred pairs pin
#: down a dozen length scales and a noise level; the prediction then conditions on every
#: observation with those hyperparameters.
EVIDENCE_OBSERVATIONS = 300
#: L-BFGS-B iterations at most, and the gradient norm (of the negative marginal log likelihood per
#: observation, in the raw hyperparameters) below which the fit counts as converged: there a step
#: of 0.1 in every hyperparameter changes the loss, which is of order 1, by at most about 1e-3.
MAX_ITERATIONS = 500
GRADIENT_TOLERANCE = 1e-2


@dataclass(frozen=True)
class GpFitReport:
    """How the hyperparameter fit ended: final loss per observation ``loss`` (negative marginal
    log likelihood, or negative evidence lower bound for a variational fit; hyperparameter
    priors included), its gradient norm ``gradient_norm`` in the raw hyperparameters,
    ``converged``, and the fitted length scale per input (``lengthscales``, standardised units)
    and noise standard deviation (``noise``, log speed; where it differs between rows, their
    geometric mean), and where the noise has one level per noise group, each group's
    (``noise_groups``, log speed) and kernel amplitude (``amplitude_groups``, log speed: the
    standard deviation of the group's latent log speed a priori), and where the noise is
    Student-t (then ``noise`` and ``noise_groups`` are its scale), each group's degrees of
    freedom (``dof_groups``)."""

    loss: float
    gradient_norm: float
    converged: bool
    lengthscales: dict[str, float]
    noise: float
    noise_groups: dict[str, float] = field(default_factory=dict)
    amplitude_groups: dict[str, float] = field(default_factory=dict)
    dof_groups: dict[str, float] = field(default_factory=dict)

    def with_noise_scale(self, y_scale: float) -> GpFitReport:
        """This report with its noise and amplitudes in log-speed units (the fits see
        standardised targets)."""
        return replace(self, noise=self.noise * y_scale,
                       noise_groups={g: v * y_scale for g, v in self.noise_groups.items()},
                       amplitude_groups={g: v * y_scale
                                         for g, v in self.amplitude_groups.items()})


@dataclass(frozen=True)
class TrainingSet:
    """Checked training data of a pair GP: ``solo`` features indexed by job, the raw inputs
    ``raw`` ``(N, 2F)`` (target's features, then its neighbour's), the observed ``speed``
    ``(N,)``, and the standardisation of inputs (``feature_mean``, ``feature_scale``, each
    ``(2F,)``) and of ``log speed`` (``y_mean``, ``y_scale``)."""

    solo: pd.DataFrame
    raw: np.ndarray
    speed: np.ndarray
    feature_mean: np.ndarray
    feature_scale: np.ndarray
    y_mean: float
    y_scale: float
    fitted_jobs: frozenset[str]

    @property
    def columns(self) -> list[str]:
        return list(self.solo.columns)

    def inputs(self) -> torch.Tensor:
        """Standardised training inputs ``(N, 2F)``."""
        return torch.as_tensor((self.raw - self.feature_mean) / self.feature_scale)

    def targets(self) -> torch.Tensor:
        """Standardised ``log speed`` ``(N,)``."""
        return torch.as_tensor((np.log(self.speed) - self.y_mean) / self.y_scale)

    def inputs_of(self, targets: Sequence[str], others: Sequence[str]) -> torch.Tensor:
        """Standardised inputs ``(N, 2F)`` of pairs of known jobs."""
        raw = _inputs(self.solo, pd.Series(list(targets)), pd.Series(list(others)))
        return torch.as_tensor((raw - self.feature_mean) / self.feature_scale)


def training_set(observations: pd.DataFrame, solo_features: pd.DataFrame) -> TrainingSet:
    """Check ``observations`` (columns ``target``, ``other``, ``speed``:
    :func:`~.tables.pair_observations`) against ``solo_features`` (indexed by job as
    :func:`~.tables.read_solo_features_csv` returns it, or with a ``job`` column, checked here)
    and standardise them; :class:`InterferenceInputError` names what is wrong."""
    solo = (check_solo_features(solo_features, source="solo features")
            if "job" in solo_features.columns else solo_features)
    if len(observations) > MAX_OBSERVATIONS:
        raise InterferenceInputError(f"{len(observations)} observations: expected at most "
                                     f"{MAX_OBSERVATIONS} for a GP")
    if len(observations) < 2:
        raise InterferenceInputError("expected at least two observations to fit a GP")
    missing = sorted((set(observations["target"]) | set(observations["other"]))
                     - set(solo.index))
    if missing:
        raise InterferenceInputError(f"job {missing[0]!r} has no row in the solo features")
    speed = observations["speed"].to_numpy(np.float64)
    if not np.all(np.isfinite(speed) & (speed > 0)):
        raise InterferenceInputError("speed: expected positive finite normalised speeds")
    raw = _inputs(solo, observations["target"], observations["other"])
    mean, scale = raw.mean(axis=0), raw.std(axis=0)
    y = np.log(speed)
    fitted = frozenset(observations["target"]) | frozenset(observations["other"])
    return TrainingSet(solo, raw, speed, mean, np.where(scale > 0, scale, 1.0),
                       float(y.mean()), float(y.std()) or 1.0, fitted)


class PairGP(ABC):
    """What the pair GPs share: the training data they were fitted to, the fit's report, and
    predictions from their predictive moments of ``log speed``."""

    def __init__(self, data: TrainingSet, report: GpFitReport) -> None:
        self.data = data
        self.report = report

    @property
    def solo_features(self) -> pd.DataFrame:
        return self.data.solo

    @property
    def fitted_jobs(self) -> frozenset[str]:
        return self.data.fitted_jobs

    @abstractmethod
    def log_speed_moments(self, targets: Sequence[str], others: Sequence[str]
                          ) -> tuple[np.ndarray, np.ndarray]:
        """Predictive mean and standard deviation of ``log(speed)`` (noise included), each
        ``(N,)``."""

    def log_speed_draws(self, targets: Sequence[str], others: Sequence[str],
                        num_samples: int, rng: np.random.Generator) -> np.ndarray:
        """Predictive draws of ``log(speed)`` ``(num_samples, N)``: by default Gaussian with
        :meth:`log_speed_moments`; a model whose predictive distribution is not Gaussian
        draws from it instead."""
        mean, sd = self.log_speed_moments(targets, others)
        return mean + sd * rng.standard_normal((num_samples, len(mean)))

    def require_converged(self) -> None:
        """Raise :class:`InterferenceFitError` (one line) if the hyperparameter fit did not
        converge (:attr:`GpFitReport.converged`)."""
        if not self.report.converged:
            raise InterferenceFitError(
                f"the co-location GP's fit stopped with gradient norm "
                f"{self.report.gradient_norm:.2g} (tolerance {GRADIENT_TOLERANCE}); expected a "
                "converged fit: check the tables for duplicated or contradictory rows")

    def predict_speed(self, targets: Sequence[str], others: Sequence[str],
                      num_samples: int = 2000, seed: int = 0) -> SpeedPrediction:
        """Predictive draws of each target's normalised speed next to its other, shape
        ``(num_samples, N)``; ``cold_start`` marks targets never seen in a fitted pair."""
        unknown = sorted((set(targets) | set(others)) - set(self.solo_features.index))
        if unknown:
            raise InterferenceInputError(f"job {unknown[0]!r} has no row in the solo features")
        rng = np.random.default_rng(seed)
        draws = np.exp(self.log_speed_draws(targets, others, num_samples, rng))
        cold = np.array([t not in self.fitted_jobs for t in targets])
        return SpeedPrediction(draws, cold)

    def predict_colocation(self, jobs: Sequence[str], level: float = 0.9) -> pd.DataFrame:
        """The table of :func:`~.model.colocation_table` for two jobs sharing: each one's speed
        next to the other. The GP is a model of pairs; a co-location of more jobs is refused
        (:class:`InterferenceInputError`)."""
        if len(jobs) != 2:
            raise InterferenceInputError(f"{len(jobs)} jobs: the GP co-location model predicts "
                                         "pairs; expected two")
        return colocation_table(jobs, self.predict_speed(list(jobs), list(jobs)[::-1]), level)


class ColocationGP(PairGP):
    """A fitted GP co-location model; build it with :meth:`fit`."""

    def __init__(self, model: SingleTaskGP, data: TrainingSet, report: GpFitReport) -> None:
        super().__init__(data, report)
        self._model = model

    @classmethod
    def fit(cls, observations: pd.DataFrame, solo_features: pd.DataFrame, seed: int = 0
            ) -> ColocationGP:
        """Fit to ``observations`` (columns ``target``, ``other``, ``speed``:
        :func:`~.tables.pair_observations`) with ``solo_features`` indexed by job as
        :func:`~.tables.read_solo_features_csv` returns it, or with a ``job`` column (checked
        here); every job of the observations must have a row. Raises
        :class:`InterferenceFitError` where the fit goes non-finite; warns
        :class:`~perfmodel.errors.UnreliableFitWarning` where L-BFGS stopped before the
        gradient was small."""
        data = training_set(observations, solo_features)
        torch.manual_seed(seed)
        x_t, y_t = data.inputs(), data.targets()
        hyper, report = fit_evidence(x_t, y_t, seed, data.columns)
        model = _gp(x_t, y_t)
        model.load_state_dict(hyper.state_dict())
        model.eval()
        return cls(model, data, report.with_noise_scale(data.y_scale))

    def log_speed_moments(self, targets: Sequence[str], others: Sequence[str]
                          ) -> tuple[np.ndarray, np.ndarray]:
        """Predictive mean and standard deviation of ``log(speed)`` (noise included), each
        ``(N,)``."""
        x = self.data.inputs_of(targets, others)
        self._model.eval()
        with torch.no_grad():
            predictive = self._model.posterior(x, observation_noise=True)
            mean = predictive.mean.numpy().reshape(-1) * self.data.y_scale + self.data.y_mean
            sd = (predictive.variance.clamp_min(0).sqrt().numpy().reshape(-1)
                  * self.data.y_scale)
        return mean, sd


def _gp(x: torch.Tensor, y: torch.Tensor) -> SingleTaskGP:
    """The GP (constant prior mean) on standardised inputs ``(N, D)`` and targets ``(N,)``."""
    with warnings.catch_warnings():
        # Inputs are standardised here, not scaled to the unit cube BoTorch checks for.
        warnings.filterwarnings("ignore", category=InputDataWarning)
        return SingleTaskGP(x, y[:, None], outcome_transform=None)


def fit_evidence(x: torch.Tensor, y: torch.Tensor, seed: int, columns: list[str]
                 ) -> tuple[SingleTaskGP, GpFitReport]:
    """The exact GP fitted (:func:`_maximise_evidence`) to the evidence subset of standardised
    inputs ``x`` ``(N, 2F)`` and targets ``y`` ``(N,)``, and its fit's report (``columns``: the
    ``F`` solo-feature names)."""
    subset = evidence_subset(len(y), seed)
    model = _gp(x[subset], y[subset])
    return model, _maximise_evidence(model, columns)


def evidence_subset(num_observations: int, seed: int) -> np.ndarray:
    """Indices of the observations whose marginal likelihood sets the hyperparameters: all of
    them up to :data:`EVIDENCE_OBSERVATIONS`, else that many drawn without replacement."""
    if num_observations <= EVIDENCE_OBSERVATIONS:
        return np.arange(num_observations)
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(num_observations, EVIDENCE_OBSERVATIONS, replace=False))


def _inputs(solo: pd.DataFrame, targets: pd.Series, others: pd.Series) -> np.ndarray:
    # Target's solo features, then its neighbour's: (N, 2F).
    return np.hstack([solo.loc[list(targets)].to_numpy(np.float64),
                      solo.loc[list(others)].to_numpy(np.float64)])


def _maximise_evidence(model: SingleTaskGP, columns: list[str]) -> GpFitReport:
    """Maximise the marginal likelihood (with BoTorch's default hyperparameter priors) by
    BoTorch's L-BFGS-B fit, which retries from fresh values where a start fails; the fit's
    report, its gradient measured after the fit."""
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(model.likelihood, model)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", OptimizationWarning)
        # Inputs are standardised here, not scaled to the unit cube BoTorch checks for.
        warnings.filterwarnings("ignore", category=InputDataWarning)
        try:
            fit_gpytorch_mll(mll, optimizer_kwargs={"options": {"maxiter": MAX_ITERATIONS}})
        except (NanError, NotPSDError, RuntimeError) as error:
            raise InterferenceFitError(f"the GP's hyperparameter fit failed: {error}") from None
    stopped = [w for w in caught if issubclass(w.category, OptimizationWarning)]
    model.train()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=InputDataWarning)
        loss = -mll(model(*model.train_inputs), model.train_targets)
    parameters = [p for p in model.parameters() if p.requires_grad]
    grads = torch.autograd.grad(loss, parameters, allow_unused=True)
    gradient_norm = math.sqrt(sum(float((g**2).sum()) for g in grads if g is not None))
    model.eval()
    loss = loss.detach()
    if not (math.isfinite(float(loss)) and math.isfinite(gradient_norm)):
        raise InterferenceFitError("the GP's hyperparameter fit went non-finite")
    converged = gradient_norm < GRADIENT_TOLERANCE and not stopped
    if not converged:
        why = f"; {stopped[0].message}" if stopped else ""
        warnings.warn(f"co-location GP: the fit stopped with gradient norm {gradient_norm:.2g} "
                      f"(tolerance {GRADIENT_TOLERANCE}){why}; its intervals may be off",
                      UnreliableFitWarning, stacklevel=4)
    lengths = model.covar_module.lengthscale.detach().numpy().reshape(-1)
    names = [f"target.{c}" for c in columns] + [f"other.{c}" for c in columns]
    return GpFitReport(float(loss), gradient_norm, converged,
                       dict(zip(names, (float(v) for v in lengths), strict=True)),
                       float(model.likelihood.noise.detach().sqrt()))
