"""The fit's entry point (:func:`fit_throughput_posterior`): SVI, checked by PSIS and replaced by
NUTS where it is not usable, or NUTS alone; saved fits reused and written through
:class:`~perfmodel.saved_fits.FitCache`."""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import asdict, replace

import numpy as np
import pyro
import torch

from perfmodel.errors import UnreliableFitWarning
from perfmodel.profiles import StepTimeProfile
from perfmodel.saved_fits import FitCache, fit_key
from perfmodel.throughput import (
    GAMMA_BOUNDS,
    SHIFT_NAMES,
    ThroughputParams,
    fit_throughput,
    identifiable,
    single_thread,
)
from perfmodel.throughput_bayes.diagnostics import PARETO_K_USABLE, FitDiagnostics
from perfmodel.throughput_bayes.model import NOISE_NAMES, StepTimeData
from perfmodel.throughput_bayes.nuts import (
    FALLBACK_SAMPLES,
    FALLBACK_WARMUP,
    sample_nuts,
    sample_nuts_whitened,
)
from perfmodel.throughput_bayes.posterior import ThroughputPosterior
from perfmodel.throughput_bayes.prior import StepTimePrior
from perfmodel.throughput_bayes.svi import fit_svi


def fit_throughput_posterior(profile: StepTimeProfile, method: str = "svi",
                             num_steps: int = 500, num_samples: int = 1000, seed: int = 0,
                             prior: StepTimePrior | None = None,
                             check: bool = True, placement_effects: bool = False,
                             fallback: bool = True, cache: FitCache | None = None,
                             fallback_warmup: int = FALLBACK_WARMUP,
                             fallback_samples: int = FALLBACK_SAMPLES) -> ThroughputPosterior:
    """Posterior of the step-time model given a profile.

    Args:
        profile: measured step times.
        method: ``"svi"`` (full-rank Student-t guide with spline marginals, Adam) or ``"nuts"``.
        num_steps: SVI steps, or NUTS warm-up steps.
        num_samples: posterior draws kept.
        seed: seeds Pyro and torch, so fits reproduce.
        prior: defaults to :meth:`StepTimePrior.for_profile`.
        check: adapt the SVI guide as an importance proposal, compute its PSIS k-hat on
            :data:`PSIS_DRAWS` fresh draws and resample those by their PSIS weights (else the
            guide's own draws, unchecked).
        placement_effects: model a deviation shared by the rows of a placement. It makes
            parameter intervals honest about correlated errors and fits measured placements
            closely, but on the Pollux profiles it predicted held-out placements less accurately
            than independent rows (experiments/bench_perfmodel.py), hence off by default.
        fallback: when SVI's k-hat (``check``) is above :data:`PARETO_K_USABLE`, replace its
            draws by NUTS (``fallback_warmup`` warm-up steps, ``fallback_samples`` draws, one
            chain) in coordinates whitened by the guide (:func:`sample_nuts_whitened`); the
            diagnostics record it. NUTS rather than PSIS reweighting of the guide's draws: a
            k-hat above 0.7 is exactly the case where the importance weights' tail is too heavy
            for reweighting to be reliable (Vehtari et al.), so reweighting would keep the
            problem it was meant to fix.
        cache: reuse a saved fit of the same data, settings and package version, and save a
            new one (:mod:`perfmodel.saved_fits`). The fallback settings are part of the key only
            of a fit the fallback replaced: a fit that did not need it is saved once, and read
            back whether ``fallback`` is on or off.

    Warns :class:`~perfmodel.errors.UnreliableFitWarning` (one line, :meth:`FitDiagnostics.warning`)
    when the intervals are not to be trusted, a saved fit's included; raises
    :class:`~perfmodel.errors.FitError` when SVI's loss or parameters go non-finite.
    """
    prior = prior or StepTimePrior.for_profile(profile)
    settings = {"method": method, "num_steps": num_steps, "num_samples": num_samples,
                "seed": seed, "prior": asdict(prior), "check": check,
                "placement_effects": placement_effects}
    fallback_settings = {"fallback": fallback, "fallback_warmup": fallback_warmup,
                         "fallback_samples": fallback_samples}
    # A fit the fallback did not replace is the same fit whatever the fallback settings: it is
    # saved under the key of the other settings alone, and the full key names a fallback's fit.
    keys = {ran: fit_key("throughput", profile_arrays(profile),
                         {**settings, **fallback_settings} if ran else settings)
            for ran in (False, True)}
    posterior = None if cache is None else _read_saved(cache, profile, keys, fallback)
    if posterior is None:
        with single_thread():
            posterior = _fit(profile, method, num_steps, num_samples, seed, prior, check,
                             placement_effects, (fallback_warmup, fallback_samples) if fallback
                             else None)
        if cache is not None:
            ran = posterior.diagnostics.fallback_from is not None
            cache.save("throughput", profile.model, keys[ran], posterior.to_inference_data())
    if (warning := posterior.diagnostics.warning(profile.model)) is not None:
        warnings.warn(warning, UnreliableFitWarning, stacklevel=2)
    return posterior


def needs_fallback(pareto_k: float) -> bool:
    """Whether NUTS replaces an SVI fit whose guide has PSIS k-hat ``pareto_k`` (above
    :data:`~perfmodel.throughput_bayes.diagnostics.PARETO_K_USABLE`; NaN, not computed, never)."""
    return pareto_k > PARETO_K_USABLE


def _read_saved(cache: FitCache, profile: StepTimeProfile, keys: dict[bool, str],
                fallback: bool) -> ThroughputPosterior | None:
    """The saved fit for these settings: with ``fallback``, the fallback's fit (``keys[True]``),
    else the fit without it (``keys[False]``) where its k-hat would not have called the
    fallback; without ``fallback``, the fit without it. None where there is none."""
    def read(key: str) -> ThroughputPosterior | None:
        return cache.read("throughput", profile.model, key,
                          lambda idata: ThroughputPosterior.from_inference_data(idata, profile))

    if fallback and (replaced := read(keys[True])) is not None:
        return replaced
    posterior = read(keys[False])
    if posterior is not None and fallback and needs_fallback(posterior.diagnostics.pareto_k):
        return None
    return posterior


def profile_arrays(profile: StepTimeProfile) -> dict[str, np.ndarray]:
    """Every array of ``profile`` a fit reads, by name (what a saved fit's key covers)."""
    return {"num_nodes": profile.num_nodes, "num_replicas": profile.num_replicas,
            "local_bsz": profile.local_bsz, "accum_steps": profile.accum_steps,
            "step_time": profile.step_time, "sync_time": profile.sync_time,
            "placement": profile.placement.astype(str)}


def _fit(profile: StepTimeProfile, method: str, num_steps: int, num_samples: int, seed: int,
         prior: StepTimePrior, check: bool, placement_effects: bool,
         fallback: tuple[int, int] | None) -> ThroughputPosterior:
    started = time.perf_counter()
    pyro.set_rng_seed(seed)
    point = fit_throughput(profile)
    data = StepTimeData.from_profile(profile, placement_effects)
    init = _initial_values(profile, point, prior)
    if method == "nuts":
        samples, nuts = sample_nuts(data, prior, init, num_steps, num_samples)
        diagnostics = FitDiagnostics("nuts", num_steps, float("nan"), float("nan"),
                                     time.perf_counter() - started, **nuts)
        return ThroughputPosterior(samples, data, diagnostics, point)
    if method != "svi":
        raise ValueError(f"method must be 'svi' or 'nuts', not {method!r}")
    svi = fit_svi(data, prior, init, num_steps, num_samples, check)
    samples = svi.samples
    diagnostics = FitDiagnostics("svi", num_steps, svi.loss / len(profile), svi.pareto_k,
                                 time.perf_counter() - started,
                                 convergence=svi.convergence.as_dict())
    if fallback is not None and needs_fallback(svi.pareto_k):
        warmup, draws = fallback
        samples, nuts = sample_nuts_whitened(svi, warmup, draws)
        diagnostics = replace(diagnostics, method="nuts", fallback_from="svi", num_steps=warmup,
                              seconds=time.perf_counter() - started, **nuts)
    return ThroughputPosterior(samples, data, diagnostics, point)


def _initial_values(profile: StepTimeProfile, point: ThroughputParams, prior: StepTimePrior
                    ) -> dict[str, torch.Tensor]:
    # Start from the point fit where the data inform a parameter, from the prior median where
    # they cannot (the point fit pins those at its lower bound, which a log-normal prior puts
    # far in its tail).
    start = point.as_dict()
    ok = identifiable(profile)
    uninformed = set()
    if not ok["across"]:
        uninformed |= {"alpha_n", "beta_n"}
    if not ok["within"]:
        uninformed |= {"alpha_r", "beta_r"}
    if not ok["retrogression"]:
        uninformed |= {"beta_n", "beta_r"}
    for name in uninformed:
        start[name] = math.exp(prior.loc[name])
    values = {name: torch.tensor(max(v, 1e-6) if name != "gamma" else
                                 min(max(v, GAMMA_BOUNDS[0] + 0.05), GAMMA_BOUNDS[1] - 0.05),
                                 dtype=torch.float64)
              for name, v in start.items()}
    for name in NOISE_NAMES:  # sites the model leaves out are ignored
        values[name] = torch.tensor(0.1 if name.startswith(("sigma", "tau")) else
                                    10.0 if name == "nu" else 1.0, dtype=torch.float64)
    for name in SHIFT_NAMES:
        values[name] = torch.tensor(prior.shift_loc[name], dtype=torch.float64)
    return values
