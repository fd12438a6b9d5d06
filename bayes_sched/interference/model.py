"""A Bayesian interference model: predictive distribution of each job's speed in a co-location.

Every job ``j`` has a latent *sensitivity* ``c_j`` and *demand* ``d_j`` (vectors of ``K``
non-negative numbers, one per hidden shared resource). Job ``a`` running next to the set of jobs
``B`` has normalised speed (co-located throughput / throughput alone)::

    speed_a ~ Normal(exp(-sum_{b in B} c_a . d_b), sigma)

so a job slows down when it is sensitive on the resources its neighbours use heavily. Demands and
sensitivities are tied to what a job shows alone (its solo features ``x_j``, standardised) through a
learned linear map plus a job residual that is *smooth in feature space*::

    c_j = softplus(W_c x_j + b_c + tau_c r_cj),   d_j = softplus(W_d x_j + b_d + tau_d r_dj)
    r[:, a, k] ~ MultivariateNormal(0, (1 - nugget) k_ell(x_i, x_j) + nugget delta_ij)

with ``k_ell`` a squared-exponential kernel with one learned length scale per feature (empirical
Bayes: the lengths and the ``nugget``, the share of a job's residual no feature explains, are fitted
with everything else). Measured pairs pin down the residuals of the jobs they involve. A job never
co-located (cold start) gets its residual from the Gaussian conditional given the fitted jobs'
residuals: jobs that look alike alone (e.g. the same model at another batch size) lend it their
residuals, and its interval keeps the conditional spread, so it is honestly wider. Fitted by SVI (a
mean-field normal guide), seeded.

Measured normalised speeds above 1 occur (measurement noise, or a job that runs faster next to a
light neighbour), so the mean carries a learned log-offset ``speed_offset`` shared by every
observation and may exceed 1. The noise scale varies with the target's features through a
*bounded* factor (between 0 and 2 times ``sigma``): an unbounded (exponential) one let a fit run
away. Predictive draws are clipped to the valid range (0, MAX_SPEED]. Convergence is judged by the
project's one rule (:mod:`perfmodel.convergence`): a fit whose loss has not stopped moving or whose
gradient is not small is reported as not converged (:attr:`InterferenceModel.convergence`, with an
:class:`~perfmodel.errors.UnreliableFitWarning`) rather than used; one whose loss or parameters go
non-finite raises :class:`InterferenceFitError`.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, cast

import numpy as np
import pandas as pd
import pyro
import pyro.distributions as dist
import torch
from pyro import poutine
from pyro.infer import Trace_ELBO
from pyro.infer.autoguide import AutoNormal
from pyro.optim import ClippedAdam
from torch.nn.functional import softplus

from bayes_sched.estimation.pyro_scope import private_param_store
from bayes_sched.interference.tables import (
    MAX_SPEED,
    InterferenceInputError,
    check_pairs,
    check_solo_features,
    pair_observations,
    select_feature_columns,
)
from perfmodel.convergence import Convergence, FitMonitor, svi_fit
from perfmodel.errors import FitError, UnreliableFitWarning
from perfmodel.saved_fits import FitCache, fit_key, quiet_arviz

if TYPE_CHECKING:
    from arviz import InferenceData


class InterferenceFitError(FitError):
    """SVI diverged or did not converge: the fit must not be used or printed as a result."""


#: Added to kernel diagonals so that their Cholesky factors exist in float32.
JITTER = 1e-4


def feature_kernel(
    left: torch.Tensor, right: torch.Tensor, lengthscale: torch.Tensor
) -> torch.Tensor:
    """Squared-exponential kernel ``(..., M, N)`` between features ``(M, P)`` and ``(N, P)`` with
    (batched) length scales ``(..., P)`` in standardised feature units."""
    scaled_left = left / lengthscale.unsqueeze(-2)
    scaled_right = right / lengthscale.unsqueeze(-2)
    distance = (scaled_left.unsqueeze(-2) - scaled_right.unsqueeze(-3)).pow(2).sum(-1)
    return torch.exp(-0.5 * distance)


def residual_covariance(
    features: torch.Tensor, lengthscale: torch.Tensor, nugget: torch.Tensor
) -> torch.Tensor:
    """``(..., J, J)`` prior correlation of job residuals: feature-smooth part plus a per-job
    ``nugget`` (``(...,)``)."""
    eye = torch.eye(features.shape[0])
    nugget = nugget[..., None, None]
    smooth = feature_kernel(features, features, lengthscale)
    return (1.0 - nugget) * smooth + (nugget + JITTER) * eye


def interference_model(
    features: torch.Tensor,
    target: torch.Tensor,
    other: torch.Tensor,
    speed: torch.Tensor | None = None,
    latent_dim: int = 3,
) -> torch.Tensor:
    """The generative model, a plain function of data.

    Args:
        features: ``(J, P)`` standardised solo features of the jobs.
        target: ``(N,)`` index of the job whose speed is observed.
        other: ``(N,)`` index of the job it shares with.
        speed: ``(N,)`` observed normalised speeds, or ``None`` to sample them.
        latent_dim: ``K``, the number of hidden shared resources.

    Returns:
        ``(N,)`` the mean normalised speed of each observation.
    """
    num_jobs, num_features = features.shape
    # Sensitivity (index 0) and demand (index 1) share sites: fewer sites make each SVI step
    # cheaper.
    weight = pyro.sample(
        "weight", dist.Normal(0.0, 1.0).expand([2, num_features, latent_dim]).to_event(3)
    )
    bias = pyro.sample("bias", dist.Normal(-1.0, 1.0).expand([2, latent_dim]).to_event(2))
    tau = pyro.sample("tau", dist.HalfNormal(1.0).expand([2]).to_event(1))
    sigma = pyro.sample("sigma", dist.HalfNormal(0.2))
    lengthscale = pyro.sample(
        "lengthscale", dist.LogNormal(0.5, 1.0).expand([num_features]).to_event(1)
    )
    nugget = pyro.sample("nugget", dist.Beta(1.0, 2.0))
    chol = torch.linalg.cholesky(residual_covariance(features, lengthscale, nugget))
    # The residuals themselves are the latent site (not whitened draws): a measured job pins its
    # own residual down, which a mean-field guide then captures well.
    by_channel = pyro.sample(
        "residual",
        dist.MultivariateNormal(torch.zeros(num_jobs), scale_tril=chol)
        .expand([2, latent_dim])
        .to_event(2),
    )
    residual = by_channel.permute(2, 0, 1)  # (J, 2, K)
    # Some jobs' speeds scatter more than others' (e.g. on a faster GPU): the noise scale varies
    # with the target's features, bounded to (0, 2 sigma).
    noise_weight = pyro.sample(
        "noise_weight", dist.Normal(0.0, 0.5).expand([num_features]).to_event(1)
    )
    offset = pyro.sample("speed_offset", dist.Normal(0.0, 0.2))
    sensitivity, demand = latent_loads(features, weight, bias, tau, residual)
    mean = torch.exp(offset - (sensitivity[target] * demand[other]).sum(-1))
    scale = noise_scale(sigma, noise_weight, features[target])
    with pyro.plate("observations", target.shape[0]):
        pyro.sample("speed", dist.Normal(mean, scale), obs=speed)
    return mean


def noise_scale(sigma: torch.Tensor, noise_weight: torch.Tensor, features: torch.Tensor
                ) -> torch.Tensor:
    """Noise scale ``(..., N)`` of observations whose targets have standardised features
    ``(N, P)``, from (batched) ``sigma`` ``(...)`` and ``noise_weight`` ``(..., P)``: ``sigma``
    times a factor in (0, 2), 1 at the mean features."""
    return sigma[..., None] * 2.0 * torch.sigmoid(noise_weight @ features.transpose(-1, -2))


def colocation_observations(pairs: pd.DataFrame) -> pd.DataFrame:
    """Long observations (``target``, ``other``, ``speed``) of a checked pairs table.

    As :func:`.tables.pair_observations`, except for a job sharing with a copy of itself. Its
    two speeds are two measurements where they differ, and two observations. Where they are
    equal they are one: Gavel's profiler records a job paired with a copy of itself as the mean
    of the two copies' throughputs in both slots (``measure_throughput.py``'s done callback
    halves each copy's rate and adds it to both), so every self-pair of its tables carries one
    number twice, and counting it twice would halve its noise.
    """
    own = (pairs["job_a"] == pairs["job_b"]).to_numpy()
    rest = pair_observations(pairs[~own]) if (~own).any() else pd.DataFrame(
        {"target": [], "other": [], "speed": []})
    copies = pairs[own]
    second = copies[copies["speed_a"].to_numpy() != copies["speed_b"].to_numpy()]
    itself = pd.DataFrame({
        "target": np.concatenate([copies["job_a"], second["job_a"]]),
        "other": np.concatenate([copies["job_b"], second["job_b"]]),
        "speed": np.concatenate([copies["speed_a"], second["speed_b"]]),
    })
    return pd.concat([rest, itself], ignore_index=True)


def latent_loads(
    features: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    tau: torch.Tensor,
    residual: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sensitivity and demand ``(..., J, K)`` from features ``(J, P)`` and (batched) parameters:
    weight ``(..., 2, P, K)``, bias ``(..., 2, K)``, tau ``(..., 2)``, residual
    ``(..., J, 2, K)``."""
    linear = torch.einsum("jp,...apk->...jak", features, weight)
    latent = softplus(linear + bias.unsqueeze(-3) + tau[..., None, :, None] * residual)
    return latent[..., 0, :], latent[..., 1, :]


def conditional_residuals(
    fitted_features: torch.Tensor,
    fitted_residual: torch.Tensor,
    new_features: torch.Tensor,
    lengthscale: torch.Tensor,
    nugget: torch.Tensor,
    noise: torch.Tensor,
) -> torch.Tensor:
    """Draws of the residuals of jobs never co-located, given the fitted jobs' residual draws.

    Args:
        fitted_features: ``(J, P)``; fitted_residual: ``(S, J, 2, K)`` posterior draws.
        new_features: ``(M, P)``; lengthscale ``(S, P)``, nugget ``(S,)`` posterior draws.
        noise: ``(S, M, 2, K)`` standard normal draws.

    Returns:
        ``(S, M, 2, K)`` draws from the Gaussian conditional of the residual prior.
    """
    k_fitted = residual_covariance(fitted_features, lengthscale, nugget)
    k_cross = (1.0 - nugget[:, None, None]) * feature_kernel(
        new_features, fitted_features, lengthscale
    )
    k_new = residual_covariance(new_features, lengthscale, nugget)
    chol = torch.linalg.cholesky(k_fitted)
    solved = torch.cholesky_solve(k_cross.transpose(-1, -2), chol)  # (S, J, M)
    mean = torch.einsum("sjm,sjak->smak", solved, fitted_residual)
    covariance = k_new - k_cross @ solved
    covariance = 0.5 * (covariance + covariance.transpose(-1, -2))
    spread = torch.linalg.cholesky(covariance + JITTER * torch.eye(new_features.shape[0]))
    return mean + torch.einsum("smn,snak->smak", spread, noise)


@dataclass(frozen=True)
class FitConfig:
    """SVI settings. ``num_samples`` posterior draws are kept for prediction."""

    latent_dim: int = 3
    #: 2,000: on Gavel's pairs the 1,000-step schedule ends with its gradient above the
    #: convergence rule's tolerance (perfmodel.convergence); the 2,000-step one meets it.
    num_steps: int = 2000
    learning_rate: float = 0.05
    final_learning_rate: float = 0.005
    num_samples: int = 300
    seed: int = 0


@dataclass(frozen=True)
class SpeedPrediction:
    """Predictive draws of normalised speed: ``samples`` has shape ``(S, N)``; ``cold_start``
    ``(N,)``
    is True where the target job had no measured co-location."""

    samples: np.ndarray
    cold_start: np.ndarray

    def __post_init__(self) -> None:
        # Normalised speeds live in (0, MAX_SPEED]: draws outside are noise, not predictions.
        np.clip(self.samples, np.finfo(float).tiny, MAX_SPEED, out=self.samples)

    @property
    def median(self) -> np.ndarray:
        return np.median(self.samples, axis=0)

    def interval(self, level: float = 0.9) -> tuple[np.ndarray, np.ndarray]:
        """Central ``level`` predictive interval, each ``(N,)``."""
        tail = (1.0 - level) / 2.0
        low, high = np.quantile(self.samples, [tail, 1.0 - tail], axis=0)
        return low, high


def colocation_table(jobs: Sequence[str], prediction: SpeedPrediction, level: float = 0.9
                     ) -> pd.DataFrame:
    """One row per job of a candidate co-location from ``prediction`` (one column per job):
    its median speed, central ``level`` interval, median slowdown and cold-start flag."""
    low, high = prediction.interval(level)
    median = prediction.median
    return pd.DataFrame(
        {
            "job": list(jobs),
            "speed_median": median,
            f"speed_lower_{100 * level:g}": low,
            f"speed_upper_{100 * level:g}": high,
            "slowdown_median": 1.0 / np.clip(median, 1e-3, None),
            "cold_start": prediction.cold_start,
        }
    )


class InterferenceModel:
    """A fitted interference model; build it with :meth:`fit`."""

    def __init__(
        self,
        config: FitConfig,
        solo_features: pd.DataFrame,
        fitted_jobs: pd.Index,
        feature_mean: np.ndarray,
        feature_scale: np.ndarray,
        draws: dict[str, torch.Tensor],
        elbo_losses: list[float],
        num_observations: int,
        convergence: Convergence,
    ) -> None:
        self.config = config
        self.solo_features = solo_features
        self.fitted_jobs = fitted_jobs
        self.feature_mean = feature_mean
        self.feature_scale = feature_scale
        self.draws = draws
        self.elbo_losses = elbo_losses
        self.num_observations = num_observations
        self.convergence = convergence

    @property
    def converged(self) -> bool:
        """Whether SVI converged by the project's rule (:mod:`perfmodel.convergence`)."""
        return self.convergence.converged

    def require_converged(self) -> None:
        """Raise :class:`InterferenceFitError` (one line: what is wrong, what to try) if the fit
        did not converge."""
        message = self.convergence.message()
        if message is not None:
            raise InterferenceFitError(message)

    @classmethod
    def fit(
        cls, pairs: pd.DataFrame, solo_features: pd.DataFrame, config: FitConfig | None = None,
        feature_columns: Sequence[str] | None = None, cache: FitCache | None = None,
    ) -> InterferenceModel:
        """Fit to a pairs table and a solo-features table (formats in :mod:`.tables`).

        Every job in ``pairs`` needs a row in ``solo_features``; jobs with features but no pairs are
        kept for cold-start prediction. ``feature_columns`` picks the features (other columns,
        text ones included, are ignored); by default every column but ``job`` is one. With a
        ``cache``, a saved fit of the same tables, settings and package version is reused, and a
        new fit is saved (:mod:`perfmodel.saved_fits`).
        """
        if feature_columns is not None:
            solo_features = select_feature_columns(solo_features, feature_columns)
        config = config or FitConfig()
        observations = colocation_observations(check_pairs(pairs))
        if cache is None:
            return cls.fit_observations(observations, solo_features, config)
        solo_features = check_solo_features(solo_features)
        data = {f"observations.{c}": observations[c].to_numpy() for c in observations.columns}
        data |= {"solo.job": solo_features.index.to_numpy().astype(str),
                 "solo.columns": np.asarray(solo_features.columns, dtype=str),
                 "solo.values": solo_features.to_numpy(float)}
        key = fit_key("interference", data, asdict(config))
        saved = cache.read("interference", "model", key,
                           lambda idata: cls.from_inference_data(idata, solo_features))
        if saved is not None:
            return saved
        model = cls.fit_observations(observations, solo_features, config)
        cache.save("interference", "model", key, model.to_inference_data())
        return model

    def to_inference_data(self) -> InferenceData:
        """The fit as ArviZ InferenceData: every latent site's draws in ``posterior`` (one chain),
        the feature standardisation, fitted jobs and ELBO trace in ``constant_data``, the settings
        as a JSON attribute. :meth:`from_inference_data` reads it back."""
        import xarray as xr

        posterior = xr.Dataset({
            name: (("chain", "draw", *(f"{name}_dim_{i}" for i in range(draws.dim() - 1))),
                   draws.numpy()[None])
            for name, draws in self.draws.items()})
        constant = xr.Dataset({
            "feature_mean": ("feature", np.asarray(self.feature_mean, float)),
            "feature_scale": ("feature", np.asarray(self.feature_scale, float)),
            "fitted_job": ("job", self.fitted_jobs.to_numpy().astype(str)),
            "elbo_loss": ("step", np.asarray(self.elbo_losses, float)),
        })
        with quiet_arviz() as az:
            idata = az.InferenceData(posterior=posterior, constant_data=constant)
        idata.attrs.update({"config": json.dumps(asdict(self.config)),
                            "num_observations": int(self.num_observations),
                            "convergence": json.dumps(self.convergence.as_dict())})
        return idata

    @classmethod
    def from_inference_data(cls, idata: InferenceData, solo_features: pd.DataFrame
                            ) -> InterferenceModel:
        """A fit saved by :meth:`to_inference_data`, with the solo-features table it was fitted
        with."""
        draws = {str(name): torch.as_tensor(np.asarray(values)[0])
                 for name, values in idata["posterior"].data_vars.items()}
        constant = idata["constant_data"]
        return cls(FitConfig(**json.loads(idata.attrs["config"])),
                   check_solo_features(solo_features),
                   pd.Index([str(j) for j in constant["fitted_job"].values]),
                   np.asarray(constant["feature_mean"].values, float),
                   np.asarray(constant["feature_scale"].values, float), draws,
                   [float(v) for v in constant["elbo_loss"].values],
                   int(idata.attrs["num_observations"]),
                   Convergence.from_dict(json.loads(idata.attrs["convergence"])))

    @classmethod
    @private_param_store
    def fit_observations(
        cls,
        observations: pd.DataFrame,
        solo_features: pd.DataFrame,
        config: FitConfig | None = None,
    ) -> InterferenceModel:
        """Fit to long observations (``target``, ``other``, ``speed``; see
        :func:`pair_observations`)."""
        config = config or FitConfig()
        solo_features = check_solo_features(solo_features)
        if len(observations) == 0:
            raise InterferenceInputError("no measured co-locations to learn from")
        jobs = pd.Index(sorted(set(observations["target"]) | set(observations["other"])))
        unknown = jobs.difference(solo_features.index)
        if len(unknown):
            raise InterferenceInputError(
                f"pairs table: job {unknown[0]!r} has no row in the solo-features table"
            )
        raw = solo_features.loc[jobs].to_numpy(float)
        feature_mean = raw.mean(axis=0)
        # Constant features (e.g. a GPU flag when all jobs share a GPU) must not blow up.
        feature_scale = np.where(raw.std(axis=0) > 1e-9, raw.std(axis=0), 1.0)
        features = torch.tensor((raw - feature_mean) / feature_scale, dtype=torch.float32)
        target = torch.tensor(jobs.get_indexer(observations["target"]), dtype=torch.long)
        other = torch.tensor(jobs.get_indexer(observations["other"]), dtype=torch.long)
        speed = torch.tensor(observations["speed"].to_numpy(), dtype=torch.float32)

        def model(features: torch.Tensor, target: torch.Tensor, other: torch.Tensor,
                  speed: torch.Tensor | None = None) -> torch.Tensor:
            return interference_model(features, target, other, speed,
                                      latent_dim=config.latent_dim)

        pyro.set_rng_seed(config.seed)
        guide = AutoNormal(model, init_scale=0.05)
        decay = (config.final_learning_rate / config.learning_rate) ** (
            1.0 / max(config.num_steps, 1)
        )
        optimiser = ClippedAdam({"lr": config.learning_rate, "lrd": decay})
        monitor = FitMonitor("interference", config.num_steps, len(observations))
        try:
            losses = svi_fit(model, guide, optimiser, Trace_ELBO(),
                             (features, target, other, speed), monitor)
        except FitError as error:
            raise InterferenceFitError(str(error)) from None
        draws = _draw_posterior(guide, config.num_samples, features, target, other, speed)
        draws["residual"] = draws["residual"].permute(0, 3, 1, 2)  # (S, J, 2, K)
        convergence = monitor.verdict()
        if (message := convergence.message()) is not None:
            warnings.warn(message, UnreliableFitWarning, stacklevel=3)
        return cls(config, solo_features, jobs, feature_mean, feature_scale, draws, losses,
                   len(observations), convergence)

    def predict_speed(
        self,
        target: Sequence[str],
        others: Sequence[Sequence[str]] | Sequence[str],
        solo_features: pd.DataFrame | None = None,
        seed: int | None = None,
    ) -> SpeedPrediction:
        """Predictive normalised speed of each ``target[i]`` sharing with ``others[i]``.

        ``others[i]`` is one job name or a list of them (more than two jobs sharing: the pressure of
        the neighbours adds up). Jobs not seen in the fit need a row in ``solo_features`` (default:
        the table given to :meth:`fit`) and are predicted from it (cold start).
        """
        table = self.solo_features if solo_features is None else check_solo_features(
            select_feature_columns(solo_features, list(self.solo_features.columns)))
        groups = [[o] if isinstance(o, str) else list(o) for o in others]
        if len(groups) != len(target):
            raise InterferenceInputError("target and others must have the same length")
        names = pd.Index(sorted(set(target) | {j for g in groups for j in g}))
        sensitivity, demand, x = self._latents(names, table, seed)
        index = {name: i for i, name in enumerate(names)}
        load = torch.zeros(sensitivity.shape[0], len(target))
        for column, (job, group) in enumerate(zip(target, groups, strict=True)):
            for neighbour in group:
                load[:, column] += (sensitivity[:, index[job]] * demand[:, index[neighbour]]).sum(
                    -1
                )
        generator = torch.Generator().manual_seed(self.config.seed if seed is None else seed)
        standard = torch.randn(load.shape, generator=generator)
        target_x = x[torch.tensor(names.get_indexer(list(target)))]
        scale = noise_scale(self.draws["sigma"], self.draws["noise_weight"], target_x)
        noise = standard * scale
        offset = self.draws["speed_offset"][:, None]
        samples = (torch.exp(offset - load) + noise).numpy()
        cold = ~np.isin(np.asarray(target), self.fitted_jobs)
        return SpeedPrediction(samples=samples, cold_start=cold)

    def predict_colocation(self, jobs: Sequence[str], level: float = 0.9) -> pd.DataFrame:
        """One row per job of a candidate co-location: its median speed, interval and slowdown."""
        others = [[o for k, o in enumerate(jobs) if k != i] for i in range(len(jobs))]
        return colocation_table(jobs, self.predict_speed(list(jobs), others), level)

    def _latents(
        self, names: pd.Index, table: pd.DataFrame, seed: int | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sensitivity and demand draws ``(S, len(names), K)`` and standardised features
        ``(len(names), P)``; unseen jobs' residuals come from the
        prior conditioned on the fitted jobs' residuals."""
        missing = names.difference(table.index)
        if len(missing):
            raise InterferenceInputError(
                f"job {missing[0]!r} has no solo features; cannot predict a job never seen"
            )
        columns = list(table.columns)
        if len(columns) != len(self.feature_mean):
            raise InterferenceInputError(
                f"solo-features table has {len(columns)} features; the model was fit with "
                f"{len(self.feature_mean)}"
            )
        raw = table.loc[names].to_numpy(float)
        x = torch.tensor((raw - self.feature_mean) / self.feature_scale, dtype=torch.float32)
        d = self.draws
        num_samples, _, latent_dim = d["bias"].shape
        generator = torch.Generator().manual_seed(
            self.config.seed + 1 if seed is None else seed + 1
        )
        position = self.fitted_jobs.get_indexer(names)
        residual = torch.zeros(num_samples, len(names), 2, latent_dim)
        seen = torch.tensor(position >= 0)
        residual[:, seen] = d["residual"][:, torch.tensor(position)[seen]]
        if not seen.all():
            fitted_raw = self.solo_features.loc[self.fitted_jobs].to_numpy(float)
            fitted_x = torch.tensor(
                (fitted_raw - self.feature_mean) / self.feature_scale, dtype=torch.float32
            )
            noise = torch.randn(
                num_samples, int((~seen).sum()), 2, latent_dim, generator=generator
            )
            residual[:, ~seen] = conditional_residuals(
                fitted_x, d["residual"], x[~seen], d["lengthscale"], d["nugget"], noise
            )
        return (*latent_loads(x, d["weight"], d["bias"], d["tau"], residual), x)


def _draw_posterior(
    guide: AutoNormal, num_samples: int, *args: torch.Tensor
) -> dict[str, torch.Tensor]:
    """``num_samples`` joint draws of every latent site from the fitted guide, stacked on dim 0."""
    draws: dict[str, list[torch.Tensor]] = {}
    with torch.no_grad():
        for _ in range(num_samples):
            trace = poutine.trace(guide).get_trace(*args)
            for name, site in trace.nodes.items():
                if site["type"] == "sample":
                    draws.setdefault(name, []).append(cast(torch.Tensor, site["value"]).detach())
    return {name: torch.stack(values) for name, values in draws.items()}
