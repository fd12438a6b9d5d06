"""Job models from job reports: the throughput fit (point, or posterior draws) per GPU type.

A job that tunes its own batch fits its throughput model itself (its agent,
:mod:`bayes_sched.agent`) and reports the fit, as Pollux's agents report theirs; the estimator
takes that fit as it is, so the model a policy reads is the one the job tunes by. For a job that
reports no fit (a fixed-batch job has no use for one), the estimator fits the reported step times
itself, with the same refit rule (:class:`ThroughputFitter`). With :class:`PosteriorSettings`, it
also draws from perfmodel's throughput posterior (:func:`perfmodel.throughput_bayes.fit.
fit_throughput_posterior`) on the reported step times, refitted when the fit's version changes:
the step-time parameters with the multi-GPU compute shifts the posterior learns
(:data:`perfmodel.throughput.DRAW_NAMES`), so a policy's goodput reads the same step times as
perfmodel's predictive distribution.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Annotated, Any

import numpy as np

from bayes_sched.cluster import ClusterState
from bayes_sched.cluster_spec import ClusterSpec
from bayes_sched.estimates import Estimate
from bayes_sched.estimation.posteriors import JOB_GOODPUT
from bayes_sched.jobs import JobModel, JobView, Observation
from bayes_sched.registry import SEED, Range
from perfmodel.profiles import StepTimeProfile
from perfmodel.throughput import (
    ThroughputParams,
    fit_throughput,
    identifiable,
    rmsle,
    step_time_terms,
)

if TYPE_CHECKING:
    from perfmodel.throughput_bayes.prior import StepTimePrior


def profile_of(name: str, observations: Sequence[Observation]) -> StepTimeProfile:
    """Measurements as a perfmodel profile (one row per observation)."""
    obs = list(observations)
    nodes = np.array([o.num_nodes for o in obs], dtype=np.int64)
    replicas = np.array([o.num_replicas for o in obs], dtype=np.int64)
    return StepTimeProfile(
        name, nodes, replicas,
        np.array([o.local_bsz for o in obs], dtype=np.int64),
        np.array([o.accum_steps for o in obs], dtype=np.int64),
        np.array([o.step_time for o in obs]), np.array([o.sync_time for o in obs]),
        np.array([f"n{n}r{r}" for n, r in zip(nodes, replicas, strict=True)], dtype=object),
    )


#: Most fits :func:`fit_measurements` remembers (least recently used go first).
FIT_MEMO_SIZE = 4096
_FIT_MEMO: OrderedDict[tuple[tuple[int, int, int, int, float, float], ...], ThroughputParams] = \
    OrderedDict()


def fit_measurements(name: str, observations: Sequence[Observation]) -> ThroughputParams:
    """Pollux's point fit (one start: :func:`perfmodel.throughput.fit_throughput`) of
    ``observations``, in order.

    The fit is a deterministic function of the measurements, and jobs of one application measured
    at the same configurations report the same step times, so equal measurements share one fit
    (remembered in a bounded table): the same parameters, at a lookup's cost instead of an L-BFGS
    run's.
    """
    key = tuple((o.num_nodes, o.num_replicas, o.local_bsz, o.accum_steps, o.step_time,
                 o.sync_time) for o in observations)
    params = _FIT_MEMO.get(key)
    if params is None:
        # One start, Pollux's own: the fit Pollux's agent makes (it pins what the measurements
        # cannot inform at the lower bound, perfmodel.throughput.pinned_parameters).
        params = fit_throughput(profile_of(name, observations), starts=1)
        _FIT_MEMO[key] = params
        if len(_FIT_MEMO) > FIT_MEMO_SIZE:
            _FIT_MEMO.popitem(last=False)
    else:
        _FIT_MEMO.move_to_end(key)
    return params


class ThroughputFitter:
    """Refits a job's throughput model when its measurements say something new.

    A measurement is new when its ``(nodes, replicas)`` shape was not fitted, or its micro-batch
    was not while fewer than two were fitted (or any new micro-batch with
    ``refit_on_new_bsz``). With ``skip_within_noise``, new measurements still leave the fit as it
    is when they say nothing the fit does not already know: every parameter group they inform was
    informed before (:func:`perfmodel.throughput.identifiable` unchanged, so no parameter leaves
    its pin), and each new row's log compute time and log step time lie within the fit's own
    noise, the RMSLE of compute and of step time over the rows it was fitted to (the two terms of
    Pollux's objective): a row predicted no worse than the fitted rows are moves the fit little.
    They join the fitted rows, so the next refit (on a measurement that says something new)
    includes them. Once a fit exists, a refit also waits ``min_refit_interval`` seconds since the
    last one (each L-BFGS fit costs milliseconds).

    Args:
        name: the job's name (labels the profile).
        min_refit_interval: seconds between refits once a fit exists.
        refit_on_new_bsz: refit on every new micro-batch.
        skip_within_noise: keep the fit when the new measurements lie within its noise.
    """

    def __init__(self, name: str, min_refit_interval: float = 0.0,
                 refit_on_new_bsz: bool = False, skip_within_noise: bool = True) -> None:
        self.name = name
        self.min_refit_interval = min_refit_interval
        self.refit_on_new_bsz = refit_on_new_bsz
        self.skip_within_noise = skip_within_noise
        self.params: ThroughputParams | None = None
        self.num_refits = 0
        self.num_skipped = 0
        self._fitted_shapes: set[tuple[int, int]] = set()
        self._fitted_bsz: set[int] = set()
        self._fitted_keys: set[tuple[int, int, int]] = set()
        self._noted: set[tuple[int, int, int]] = set()
        self._stale = False
        self._last_fit_time = -np.inf
        # The fit's RMSLE of compute and step time on its rows, and what those rows inform.
        self._noise = (0.0, 0.0)
        self._informs: dict[str, bool] = {}

    def note(self, key: tuple[int, int, int]) -> None:
        """A measurement of ``(nodes, replicas, local_bsz)`` arrived."""
        self._noted.add(key)
        num_nodes, num_replicas, local_bsz = key
        new_shape = (num_nodes, num_replicas) not in self._fitted_shapes
        new_slope = ((self.refit_on_new_bsz or len(self._fitted_bsz) < 2)
                     and local_bsz not in self._fitted_bsz)
        if new_shape or new_slope:
            self._stale = True

    def refresh(self, observations: Mapping[tuple[int, int, int], Observation],
                now: float) -> bool:
        """Refit on ``observations`` if they say something new and the rate limit allows; returns
        whether a refit happened. ``now``: seconds (the job's or the cluster's clock)."""
        for key in observations.keys() - self._noted:
            self.note(key)
        if not self._stale or not observations:
            return False
        if self.params is not None and now - self._last_fit_time < self.min_refit_interval:
            return False
        profile = profile_of(self.name, list(observations.values()))
        informs = identifiable(profile)
        if self._within_noise(observations, informs):
            self.num_skipped += 1
            self._stale = False
            self._mark_fitted(observations)
            return False
        self.params = fit_measurements(self.name, list(observations.values()))
        self.num_refits += 1
        self._last_fit_time = now
        self._stale = False
        self._mark_fitted(observations)
        t_c, t_o = step_time_terms(self.params.as_array(), profile.num_nodes.astype(float),
                                   profile.num_replicas.astype(float),
                                   profile.local_bsz.astype(float))
        self._noise = (rmsle(t_c, profile.compute_time), rmsle(t_o, profile.step_time))
        self._informs = informs
        return True

    def _mark_fitted(self, observations: Mapping[tuple[int, int, int], Observation]) -> None:
        self._fitted_keys = set(observations)
        self._fitted_shapes = {(k[0], k[1]) for k in observations}
        self._fitted_bsz = {k[2] for k in observations}

    def _within_noise(self, observations: Mapping[tuple[int, int, int], Observation],
                      informs: dict[str, bool]) -> bool:
        """Whether the measurements not yet fitted say nothing new (the class's rule)."""
        if not self.skip_within_noise or self.params is None or informs != self._informs:
            return False
        new = [obs for key, obs in observations.items() if key not in self._fitted_keys]
        if not new:
            return False
        t_c, t_o = step_time_terms(
            self.params.as_array(), np.array([o.num_nodes for o in new], dtype=np.float64),
            np.array([o.num_replicas for o in new], dtype=np.float64),
            np.array([o.local_bsz for o in new], dtype=np.float64))
        step = np.array([o.step_time for o in new])
        compute = step - np.array([o.sync_time for o in new])
        noise_c, noise_o = self._noise
        return bool(np.all(np.abs(np.log(t_c) - np.log(compute)) <= noise_c)
                    and np.all(np.abs(np.log(t_o) - np.log(step)) <= noise_o))


@dataclass(frozen=True)
class RefitRule:
    """When a throughput model is refitted (:class:`ThroughputFitter`): no sooner than
    ``min_refit_interval`` seconds after the last fit, on every new micro-batch only with
    ``refit_on_new_bsz``, and not for measurements within the fit's noise with
    ``skip_within_noise``. The default refits as soon as a measurement says something new."""

    min_refit_interval: float = 0.0
    refit_on_new_bsz: bool = False
    skip_within_noise: bool = True


@dataclass(frozen=True)
class PosteriorSettings:
    """How the estimator draws from the throughput posterior: SVI steps, draws kept, seed, and
    whether the network terms' prior comes from physics (:func:`sync_prior_of`)."""

    num_steps: Annotated[int, Range(1, 100_000)] = 150
    num_samples: Annotated[int, Range(1, 10_000)] = 64
    seed: Annotated[int, SEED] = 0
    physics_prior: bool = False


def sync_prior_of(profile: StepTimeProfile, job: JobView, gpu_type: str, spec: ClusterSpec
                  ) -> StepTimePrior | None:
    """The prior of ``job``'s step-time model on ``gpu_type`` with its network terms from physics
    (:func:`perfmodel.sync_prior.physics_prior`, the wide default slowdown): a ring all-reduce of
    the gradient bytes the job reported over the links of the cluster's nodes of that type
    (:meth:`~bayes_sched.cluster_spec.ClusterSpec.links_of`: built-in or declared type, the
    node's NIC). ``None`` (the default prior) where the job reported no gradient bytes, the
    cluster has no node of the type (a cluster of one type labels its measurements with the
    default type), or the type's peer link is unknown."""
    from perfmodel.sync_prior import physics_prior

    if job.gradient_bytes is None:
        return None
    if gpu_type not in spec.types and len(spec.types) == 1:
        gpu_type = spec.types[0]
    if gpu_type not in spec.types or not math.isfinite(spec.gpu_type_of(gpu_type).link_bandwidth):
        return None
    return physics_prior(profile, job.gradient_bytes, spec.links_of(gpu_type))


class JobModelEstimator:
    """Attaches each job's fitted :class:`JobModel` (per GPU type) to its view.

    Args:
        refit: the refit rule for jobs that report no fit (the loop sets the cluster's:
            :func:`bayes_sched.loop.run_loop`'s ``refit``).
        posterior: draw from the throughput posterior too (``None``: the point fit only).
        name: the label of what it publishes.

    Attributes:
        refits: throughput refits the estimator made (for jobs that report no fit).
        posterior_fits: throughput posteriors drawn (with ``posterior``).

    Publishes ``job_goodput`` (:data:`~bayes_sched.estimation.posteriors.JOB_GOODPUT`): the
    models of the last round's jobs that have one.
    """

    def __init__(self, refit: RefitRule = RefitRule(),
                 posterior: PosteriorSettings | None = None, name: str = "job_models") -> None:
        self.name = name
        self.refit = refit
        self.posterior = posterior
        self.refits = 0
        self._fitters: dict[tuple[str, str], ThroughputFitter] = {}
        # (job, GPU type) -> (params, version, posterior draws or None)
        self._fits: dict[tuple[str, str], tuple[ThroughputParams, int, np.ndarray | None]] = {}
        # (job, GPU type) -> (the last model built, the draws it was built from)
        self._models: dict[tuple[str, str], tuple[JobModel, np.ndarray | None]] = {}
        self.posterior_fits = 0
        self.physics_priors = 0
        self._published: tuple[Estimate[Any], ...] = ()

    def estimate(self, cluster: ClusterState, jobs: Sequence[JobView]) -> list[JobView]:
        self.forget({job.name for job in jobs})
        views = [self._with_models(job, cluster) for job in jobs]
        models = {job.name: job.models for job in views if job.models}
        self._published = (Estimate(JOB_GOODPUT, self.name, models),)
        return views

    def published(self) -> Sequence[Estimate[Any]]:
        return self._published

    def stats(self) -> Mapping[str, float]:
        stats = {"job_model_refits": int(self.refits),
                 "posterior_fits": int(self.posterior_fits)}
        if self.posterior is not None and self.posterior.physics_prior:
            stats["physics_priors"] = int(self.physics_priors)
        return stats

    def _with_models(self, job: JobView, cluster: ClusterState) -> JobView:
        now = cluster.now
        if job.gradient is None or not job.observations:
            return job
        by_type: dict[str, dict[tuple[int, int, int], Observation]] = {}
        for key, obs in job.observations.items():
            by_type.setdefault(obs.gpu_type, {})[key] = obs
        models = {}
        for gpu_type, observations in by_type.items():
            if job.fit is not None and len(by_type) == 1:
                params: ThroughputParams | None = job.fit
            else:
                fitter = self._fitters.get((job.name, gpu_type))
                if fitter is None:
                    fitter = self._fitters[job.name, gpu_type] = ThroughputFitter(
                        job.name, self.refit.min_refit_interval, self.refit.refit_on_new_bsz,
                        self.refit.skip_within_noise)
                self.refits += fitter.refresh(observations, now)
                params = fitter.params
            if params is None:
                continue
            models[gpu_type] = self._model(job, gpu_type, params, observations, cluster.spec)
        # JobView.updated: the view as it is, with its models (dataclasses.replace re-runs
        # construction's checks, for thousands of jobs a round).
        return job.updated(models=MappingProxyType(models)) if models else job

    def _model(self, job: JobView, gpu_type: str, params: ThroughputParams,
               observations: Mapping[tuple[int, int, int], Observation], spec: ClusterSpec
               ) -> JobModel:
        key = (job.name, gpu_type)
        cached = self._fits.get(key)
        if cached is not None and cached[0] == params:
            _, version, draws = cached
        else:
            version = cached[1] + 1 if cached is not None else 1
            draws = None
            if self.posterior is not None:
                draws = self._draws(job, gpu_type, observations, spec)
            self._fits[key] = (params, version, draws)
        assert job.gradient is not None
        # A job model is read-only: the last round's serves again while nothing it holds changed
        # (building one costs tens of microseconds, thousands of times a round at scale).
        last = self._models.get(key)
        if last is not None:
            model, built_from = last
            if (model.version == version and model.params == params and built_from is draws
                    and model.gradient == job.gradient and model.limits == job.limits):
                return model
        model = JobModel(gpu_type, version, params, job.gradient, job.limits, draws)
        self._models[key] = (model, draws)
        return model

    def _draws(self, job: JobView, gpu_type: str,
               observations: Mapping[tuple[int, int, int], Observation], spec: ClusterSpec
               ) -> np.ndarray:
        # Imported here: Pyro loads only where a policy asks for the posterior.
        from perfmodel.throughput_bayes.fit import fit_throughput_posterior

        settings = self.posterior
        assert settings is not None
        profile = profile_of(job.name, list(observations.values()))
        prior = sync_prior_of(profile, job, gpu_type, spec) if settings.physics_prior else None
        if prior is not None:
            self.physics_priors += 1
        posterior = fit_throughput_posterior(profile, num_steps=settings.num_steps,
                                             num_samples=settings.num_samples,
                                             seed=settings.seed, check=False, prior=prior)
        self.posterior_fits += 1
        # With the compute shifts: multi-GPU steps as the posterior predicts them, not as one
        # GPU's compute time would make them.
        return posterior.draws

    def forget(self, names: set[str]) -> None:
        """Drop the state of jobs no longer active."""
        for key in [k for k in self._fits if k[0] not in names]:
            del self._fits[key]
        for key in [k for k in self._fitters if k[0] not in names]:
            del self._fitters[key]
        for key in [k for k in self._models if k[0] not in names]:
            del self._models[key]


def point_job_models() -> JobModelEstimator:
    """Each job's throughput fit per GPU type, the point fit only (Pollux's)."""
    return JobModelEstimator()


def posterior_job_models(num_steps: Annotated[int, Range(1, 100_000)] = 150,
                         num_samples: Annotated[int, Range(1, 10_000)] = 64,
                         seed: Annotated[int, SEED] = 0,
                         physics_prior: bool = False) -> JobModelEstimator:
    """Each job's throughput fit per GPU type with ``num_samples`` draws from perfmodel's
    throughput posterior (``num_steps`` SVI steps, ``seed``), for a policy that reads goodput
    quantiles; with ``physics_prior``, the network terms' prior of each type's fit from the
    job's reported gradient bytes and that type's links (:func:`sync_prior_of`)."""
    return JobModelEstimator(
        posterior=PosteriorSettings(num_steps, num_samples, seed, physics_prior),
        name="job_posterior")
