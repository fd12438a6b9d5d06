"""Benchmark of the throughput models on the six shipped Pollux profiles.

Prints three tables:

1. fits: per model, the objective (Pollux's: RMSLE of compute and step time plus its penalties)
   of our point fit next to a re-implementation of the reference fit (adaptdl's
   ``goodput.fit_perf_params``: one L-BFGS-B run from its start), both scored by the reference's
   objective, and PSIS k-hat of the Bayesian fit on all rows;
2. quality per configuration class (1 GPU, within a node, across nodes): RMSLE of step time (point
   fit and posterior median) and the fraction of measured step times inside the 50% and 90%
   predictive intervals, *warm* (K folds over whole placements: every row of a placement is left
   out together) and *cold* (fit on single-GPU placements only, predict every multi-GPU one), with
   the median 90% interval width (log units) and the cold/warm width ratio; cold four times: with
   the default prior (``cold``), with the prior learned from the other shipped models on the same
   cluster (``cold-fleet``: :meth:`StepTimePrior.from_population` over their point fits and
   measured compute shifts, the target model left out), and with the physics prior of the network
   terms (:mod:`perfmodel.sync_prior`: ring all-reduce of the model's published parameter count
   over the testbed's links), its slowdown against line rate learned from the other five models
   (``cold-physics``, the rest of the prior as ``cold-fleet``) or the wide default slowdown with
   the default prior elsewhere (``cold-physics0``: no other model seen); ``cold-physics-noise``
   is ``cold-physics`` with the step-time noise of each multi-GPU class learned from the other
   five models (:meth:`StepTimePrior.with_fleet_noise`), ``cold-physics-robust`` that with the
   fleet's ``gamma`` by median and MAD (``from_population(robust_gamma=True)``), and
   ``cold-physics-unfloored`` that with the slowdowns' spread as measured on the five, without
   :meth:`LinkSlowdown.from_fleet`'s floor: :func:`perfmodel.sync_prior.fleet_physics_prior`,
   the cold-start prior for a cluster where other jobs were fitted (``cold-physics-unfloored-mean``:
   the same with the fleet's ``gamma`` by mean and standard deviation);
3. cost: batch-tuning time for 10,000 allocations (``--skip-cost`` leaves it out).

Run: ``python experiments/bench_perfmodel.py [--folds 5] [--steps 500] [--models cifar10 ...]
[--jobs 6] [--khat-seeds 0 1 2] [--parts fits warm cold] [--cold-priors cold-physics ...]``
(``--jobs``: fits run in parallel processes; ``--parts``: a quicker subset, e.g. ``--parts warm
cold`` for the quality table alone, whose cold/warm width ratios need the warm folds;
``--cold-priors``: which cold starts; ``--parts latents`` adds a fourth table, where each
model's own fit on all its rows lies in each cold start's prior: :func:`prior_latents`).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import functools
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import scipy.optimize
import torch

from perfmodel.allreduce import NETWORK_TERMS, POLLUX_LINKS, gradient_bytes
from perfmodel.datasets import POLLUX_MODELS, POLLUX_PARAMETERS
from perfmodel.efficiency import EfficiencyModel
from perfmodel.goodput import GoodputModel
from perfmodel.profiles import StepTimeProfile, load_pollux_gradients, load_pollux_profile
from perfmodel.sync_prior import LinkSlowdown, fleet_physics_prior, physics_prior
from perfmodel.throughput import (
    CONFIGURATION_CLASSES,
    ThroughputParams,
    configuration_class,
    fit_throughput,
    predict_step_time,
    profile_tensors,
    rmsle,
)
from perfmodel.throughput_bayes.fit import fit_throughput_posterior
from perfmodel.throughput_bayes.prior import StepTimePrior

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from experiments.results_record import add_record_flag, record_results  # noqa: E402
from experiments.tables import print_rows  # noqa: E402

# --- a re-implementation of Pollux's fit (adaptdl's goodput.fit_perf_params), for comparison --

def _reference_predict(theta: torch.Tensor, nodes: torch.Tensor, replicas: torch.Tensor,
                       local_bsz: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    # As the reference writes it: the slowest link's constant, 1e-8 for one replica, and the
    # retrogression slope times max(K - 2, 1e-8).
    alpha_c, beta_c, alpha_n, beta_n, alpha_r, beta_r, gamma = theta
    t_c = alpha_c + beta_c * local_bsz
    tiny = torch.full_like(nodes, 1e-8)
    across, within = nodes > 1, replicas > 1
    constant = torch.where(across, alpha_n, torch.where(within, alpha_r, tiny))
    slope = torch.where(across, beta_n, torch.where(within, beta_r, tiny))
    t_n = constant + slope * torch.clamp(replicas - 2, min=1e-8)
    return t_c, torch.log(t_c**gamma + t_n**gamma) / gamma


def reference_objective(theta: torch.Tensor, profile: StepTimeProfile) -> torch.Tensor:
    """The reference's objective: RMSLE of compute and step time, ``1e-3 (gamma - 1)^2`` and
    ``1e-2 ((beta_n / alpha_n)^2 + (beta_r / alpha_r)^2)``."""
    data = profile_tensors(profile)
    t_c, log_t_o = _reference_predict(theta, data["nodes"], data["replicas"], data["m"])
    err_c = torch.sqrt(torch.mean((torch.log(t_c) - data["log_tc"]) ** 2))
    err_o = torch.sqrt(torch.mean((log_t_o - data["log_to"]) ** 2))
    return (err_c + err_o + 1e-3 * (theta[6] - 1) ** 2
            + 1e-2 * ((theta[3] / theta[2]) ** 2 + (theta[5] / theta[4]) ** 2))


def reference_fit(profile: StepTimeProfile) -> ThroughputParams:
    """Pollux's point fit: start ``[0.1, 0.01] * 3 + [1.001]``, bounds ``[1e-8, inf)`` and gamma
    in ``[1, 10]``; with one micro-batch size only ``alpha_c`` is pinned (at half the mean compute
    time); network terms without data are pinned at 1e-8; one L-BFGS-B run; without multi-node
    data ``alpha_n, beta_n`` are raised to 1.1 times ``alpha_r, beta_r``."""
    start = np.array([1e-1, 1e-2] * 3 + [1.0 + 1e-3])
    lower = np.array([1e-8] * 6 + [1.0])
    upper = np.array([np.inf] * 6 + [10.0])
    nodes, replicas = profile.num_nodes, profile.num_replicas
    if len(np.unique(profile.local_bsz)) == 1:
        start[0] = lower[0] = upper[0] = np.mean(profile.compute_time) / 2
    if not np.any(nodes > 1):
        start[[2, 3]] = upper[[2, 3]] = lower[[2, 3]]
    if not np.any((nodes == 1) & (replicas > 1)):
        start[[4, 5]] = upper[[4, 5]] = lower[[4, 5]]
    if not np.any(replicas > 2):
        start[[3, 5]] = upper[[3, 5]] = lower[[3, 5]]

    def objective(x: np.ndarray) -> tuple[float, np.ndarray]:
        theta = torch.as_tensor(x, dtype=torch.float64).requires_grad_(True)
        loss = reference_objective(theta, profile)
        (grad,) = torch.autograd.grad(loss, theta)
        return float(loss.detach()), grad.numpy()

    bounds = scipy.optimize.Bounds(lower, upper, keep_feasible=True)
    theta = scipy.optimize.minimize(objective, start, jac=True, method="L-BFGS-B",
                                    bounds=bounds).x
    if not np.any(nodes > 1):
        theta[2] = max(theta[2], theta[4] * 1.1)
        theta[3] = max(theta[3], theta[5] * 1.1)
    return ThroughputParams.from_array(theta)


def placement_folds(profile: StepTimeProfile, folds: int, seed: int) -> list[np.ndarray]:
    """Boolean test masks, shape (N,), splitting whole placements into ``folds`` groups."""
    labels = np.unique(profile.placement.astype(str))
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(labels))
    groups = np.array_split(labels[order], folds)
    return [np.isin(profile.placement.astype(str), g) for g in groups]


def held_out(train: StepTimeProfile, test: StepTimeProfile, seed: int, num_steps: int,
             prior: StepTimePrior | None = None) -> dict[str, np.ndarray]:
    """Point and posterior predictions for ``test`` from fits on ``train``."""
    point = fit_throughput(train)
    posterior = fit_throughput_posterior(train, seed=seed, check=False, num_steps=num_steps,
                                         prior=prior)
    pred = posterior.predict_step_time(test.num_nodes, test.num_replicas, test.local_bsz,
                                       test.accum_steps, (0.05, 0.25, 0.75, 0.95),
                                       placement=test.placement)
    pred["point"] = predict_step_time(point, test.num_nodes, test.num_replicas, test.local_bsz,
                                      test.accum_steps)
    return pred


def inside(values: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
    return (values >= lower) & (values <= upper)


def class_rows(model: str, setting: str, test: StepTimeProfile, pred: dict[str, np.ndarray]
               ) -> list[dict]:
    """One row per configuration class present in ``test``, then one (class ``multi``) over all
    its multi-GPU rows where it has rows of both multi-GPU classes."""
    classes = configuration_class(test.num_nodes, test.num_replicas)
    width = np.log(pred["q0.95"] / pred["q0.05"])
    groups = [(name, classes == index) for index, name in enumerate(CONFIGURATION_CLASSES)]
    if (classes == 1).any() and (classes == 2).any():
        groups.append(("multi", classes > 0))
    rows = []
    for name, rows_of in groups:
        if not rows_of.any():
            continue
        truth = test.step_time[rows_of]
        rows.append({
            "model": model, "setting": setting, "class": name, "rows": int(rows_of.sum()),
            "rmsle_point": rmsle(pred["point"][rows_of], truth),
            "rmsle_bayes": rmsle(pred["median"][rows_of], truth),
            "cover50": float(inside(truth, pred["q0.25"][rows_of], pred["q0.75"][rows_of]).mean()),
            "cover90": float(inside(truth, pred["q0.05"][rows_of], pred["q0.95"][rows_of]).mean()),
            "width90": float(np.median(width[rows_of])),
        })
    return rows


def objective_of(params: ThroughputParams, profile: StepTimeProfile) -> float:
    return float(reference_objective(torch.as_tensor(params.as_array()), profile))


def fit_summary(model: str, seed: int, num_steps: int) -> dict:
    """Our point fit's objective next to the reference fit's, and the PSIS k-hat of the SVI guide
    on every row (no NUTS fallback, which would not change it)."""
    profile = load_pollux_profile(model)
    posterior = fit_throughput_posterior(profile, seed=seed, num_steps=num_steps, fallback=False)
    return {"model": model, "rows": len(profile),
            "objective_ours": objective_of(fit_throughput(profile), profile),
            "objective_reference": objective_of(reference_fit(profile), profile),
            "pareto_k": posterior.diagnostics.pareto_k,
            "bayes_fit_s": posterior.diagnostics.seconds}


def pareto_k(model: str, seed: int, num_steps: int) -> float:
    """PSIS k-hat of the SVI guide fitted with ``seed`` on every row of ``model``."""
    return fit_throughput_posterior(load_pollux_profile(model), seed=seed, num_steps=num_steps,
                                    fallback=False).diagnostics.pareto_k


def warm_fold(model: str, folds: int, fold: int, seed: int, num_steps: int
              ) -> dict[str, np.ndarray]:
    """Predictions for the rows of fold ``fold`` (whole placements) from a fit on the others."""
    profile = load_pollux_profile(model)
    mask = placement_folds(profile, folds, seed)[fold]
    return held_out(profile.subset(~mask), profile.subset(mask), seed, num_steps)


#: Priors of the cold starts, in the order of their rows.
COLD_PRIORS = ("cold", "cold-fleet", "cold-physics", "cold-physics0", "cold-physics-noise",
               "cold-physics-robust", "cold-physics-unfloored", "cold-physics-unfloored-mean")


#: Cold starts whose prior learns the multi-GPU step noise from the fleet, and ``gamma`` by median
#: and MAD.
FLEET_NOISE = ("cold-physics-noise", "cold-physics-robust")
ROBUST_GAMMA = ("cold-physics-robust",)


def cold_prior(model: str, kind: str, train: StepTimeProfile, slowdown_scale: float = 1.0
               ) -> StepTimePrior | None:
    """The prior of cold start ``kind`` (:data:`COLD_PRIORS`) for ``model`` fitted on ``train``,
    the scale of its network terms' slowdown times ``slowdown_scale`` (the physics priors; a
    calibration check, never a default); the fleet is the other shipped models' point fits (the
    target model left out)."""
    prior = _cold_prior(model, kind, train)
    if slowdown_scale == 1.0:
        return prior
    if prior is None or not has_slowdown(kind):
        raise ValueError(f"{kind}: only a physics prior's slowdown can be scaled")
    return replace(prior, scale={name: value * slowdown_scale if name in NETWORK_TERMS else value
                                 for name, value in prior.scale.items()})


def _cold_prior(model: str, kind: str, train: StepTimeProfile) -> StepTimePrior | None:
    if kind == "cold":
        return None
    grad_bytes = gradient_bytes(POLLUX_PARAMETERS[model])
    if kind == "cold-physics0":
        return physics_prior(train, grad_bytes, POLLUX_LINKS)
    others = [name for name in POLLUX_MODELS if name != model]
    if kind == "cold-physics-unfloored":
        return fleet_physics_prior(train, grad_bytes, POLLUX_LINKS, [
            (load_pollux_profile(name), fleet_fit(name), gradient_bytes(POLLUX_PARAMETERS[name]))
            for name in others])
    reference = [(load_pollux_profile(name), fleet_fit(name)) for name in others]
    if kind == "cold-physics-unfloored-mean":
        fleet = StepTimePrior.from_population(train, reference).with_fleet_noise(reference)
        slowdown = LinkSlowdown.from_fleet(
            [(fleet_fit(name), gradient_bytes(POLLUX_PARAMETERS[name])) for name in others],
            POLLUX_LINKS, min_scale=0.0)
        return physics_prior(train, grad_bytes, POLLUX_LINKS, slowdown, base=fleet)
    fleet = StepTimePrior.from_population(train, reference,
                                          robust_gamma=kind in ROBUST_GAMMA)
    if kind == "cold-fleet":
        return fleet
    if kind in FLEET_NOISE:
        fleet = fleet.with_fleet_noise(reference)
    slowdown = LinkSlowdown.from_fleet(
        [(fleet_fit(name), gradient_bytes(POLLUX_PARAMETERS[name])) for name in others],
        POLLUX_LINKS)
    return physics_prior(train, grad_bytes, POLLUX_LINKS, slowdown, base=fleet)


def cold_start(model: str, kind: str, seed: int, num_steps: int, slowdown_scale: float = 1.0
               ) -> dict[str, np.ndarray]:
    """Predictions for every multi-GPU row from a fit on the 1-GPU rows, with the prior of
    ``kind`` (:func:`cold_prior`, its slowdown scale times ``slowdown_scale``)."""
    profile = load_pollux_profile(model)
    single = profile.num_replicas == 1
    train, test = profile.subset(single), profile.subset(~single)
    return held_out(train, test, seed, num_steps,
                    cold_prior(model, kind, train, slowdown_scale))


def has_slowdown(kind: str) -> bool:
    """Whether cold start ``kind`` has a physics prior, whose slowdown :func:`cold_prior` can
    scale."""
    return kind.startswith("cold-physics")


def cold_settings(cold_priors: Sequence[str], slowdown_scales: Sequence[float] = (1.0,)
                  ) -> list[tuple[str, str, float]]:
    """``(row label, prior kind, slowdown scale)`` of each cold start: every prior at scale 1,
    each physics prior also at the other ``slowdown_scales`` (labelled ``KIND xS``)."""
    scales = list(dict.fromkeys(float(scale) for scale in slowdown_scales))
    if 1.0 not in scales:
        scales.insert(0, 1.0)
    return [(kind if scale == 1.0 else f"{kind} x{scale:g}", kind, scale)
            for kind in cold_priors for scale in scales
            if scale == 1.0 or has_slowdown(kind)]


def _call(task: Callable[[], Any]) -> Any:
    return task()


#: Parts of a model's evaluation that ``--parts`` selects: the fits row (objective, k-hat), the
#: warm folds, the cold starts, and where the model's own fit lies in each cold start's prior
#: (:func:`prior_latents`: point fits only, no Bayesian fit).
PARTS = ("fits", "warm", "cold", "latents")


def model_tasks(model: str, folds: int, seed: int, num_steps: int,
                khat_seeds: Sequence[int] = (), parts: Sequence[str] = PARTS,
                cold_priors: Sequence[str] = COLD_PRIORS,
                slowdown_scales: Sequence[float] = (1.0,)) -> list[Callable[[], Any]]:
    """The independent fits of ``model``'s evaluation, for :func:`evaluate_model`, in order: the
    fits row, the warm folds, the cold starts, the extra k-hat seeds (each where ``parts`` has
    it; the k-hat seeds go with ``"fits"``)."""
    tasks: list[Callable[[], Any]] = []
    if "fits" in parts:
        tasks.append(functools.partial(fit_summary, model, seed, num_steps))
    if "warm" in parts:
        tasks += [functools.partial(warm_fold, model, folds, i, seed, num_steps)
                  for i in range(folds)]
    if "cold" in parts:
        tasks += [functools.partial(cold_start, model, kind, seed, num_steps, scale)
                  for _, kind, scale in cold_settings(cold_priors, slowdown_scales)]
    if "fits" in parts:
        tasks += [functools.partial(pareto_k, model, k, num_steps) for k in khat_seeds
                  if k != seed]
    return tasks


def evaluate_model(model: str, folds: int, seed: int, num_steps: int,
                   khat_seeds: Sequence[int] = (), results: Sequence[Any] | None = None,
                   parts: Sequence[str] = PARTS, cold_priors: Sequence[str] = COLD_PRIORS,
                   slowdown_scales: Sequence[float] = (1.0,)) -> tuple[dict, list[dict]]:
    """The fits row and the quality rows of ``model``, from the results of :func:`model_tasks`
    (run here, one after another, where not given); parts left out give an empty fits row or no
    quality rows of theirs."""
    if results is None:
        results = [task() for task in model_tasks(model, folds, seed, num_steps, khat_seeds,
                                                  parts, cold_priors, slowdown_scales)]
    settings = cold_settings(cold_priors, slowdown_scales) if "cold" in parts else []
    pending = list(results)
    fits: dict = dict(pending.pop(0)) if "fits" in parts else {"model": model}
    parts_ = [pending.pop(0) for _ in range(folds)] if "warm" in parts else []
    colds = [pending.pop(0) for _ in settings]
    if "fits" in parts:
        for k, value in zip([k for k in khat_seeds if k != seed], pending, strict=True):
            fits[f"pareto_k_seed{k}"] = value

    profile = load_pollux_profile(model)
    warm: list[dict] = []
    if parts_:
        masks = placement_folds(profile, folds, seed)
        order = np.concatenate([np.flatnonzero(mask) for mask in masks])
        warm_pred = {key: np.concatenate([part[key] for part in parts_]) for key in parts_[0]}
        # The folds partition the rows: put the predictions back in the profile's row order.
        warm = class_rows(model, "warm", profile,
                          {k: v[np.argsort(order)] for k, v in warm_pred.items()})
    test = profile.subset(profile.num_replicas != 1)
    cold = [row for (label, _, _), pred in zip(settings, colds, strict=True)
            for row in class_rows(model, label, test, pred)]
    warm_width = {row["class"]: row["width90"] for row in warm}
    for row in cold:
        row["width_vs_warm"] = row["width90"] / warm_width.get(row["class"], float("nan"))
    for row in warm:
        row["width_vs_warm"] = 1.0
    return fits, warm + cold


def prior_latents(model: str, cold_priors: Sequence[str]) -> list[dict]:
    """Where ``model``'s own point fit on all its rows lies in the prior of each cold start in
    ``cold_priors`` (fitted on its 1-GPU rows, the other models as the fleet): one row per prior,
    the prior's distribution function at each parameter (:meth:`StepTimePrior.quantiles`;
    ``q_<name>``) and the prior's spread of each network term and ``gamma`` (``scale_<name>``:
    log seconds, log-odds for ``gamma``; None under the default uniform ``gamma``).

    Why: a cold start's intervals for one model's rows all rest on the same few parameters its
    1-GPU rows cannot see, so whether they cover that model is decided by where its own values
    of those lie in the prior; this table shows, per model, which parameter its coverage in the
    quality table turns on.
    """
    profile = load_pollux_profile(model)
    train = profile.subset(profile.num_replicas == 1)
    own = fleet_fit(model)
    rows = []
    for kind in cold_priors:
        prior = cold_prior(model, kind, train) or StepTimePrior.for_profile(train)
        row: dict[str, Any] = {"model": model, "setting": kind}
        row.update({f"q_{name}": value for name, value in prior.quantiles(own).items()})
        row.update({f"scale_{name}": prior.scale[name] for name in NETWORK_TERMS})
        row["scale_gamma"] = prior.gamma_scale
        rows.append(row)
    return rows


@functools.cache
def fleet_fit(model: str) -> ThroughputParams:
    """The point fit of a shipped model on all its rows (a member of the fleet prior)."""
    return fit_throughput(load_pollux_profile(model))


def tuning_cost(model: str, num_allocations: int = 10_000, repeats: int = 5) -> dict:
    profile = load_pollux_profile(model)
    params = fit_throughput(profile)
    efficiency = EfficiencyModel.fit(load_pollux_gradients(model))
    phi = float(efficiency.curve().noise_to_signal(0.5))
    rng = np.random.default_rng(0)
    nodes = rng.integers(1, 17, num_allocations)
    gpus = nodes * rng.integers(1, 5, num_allocations)
    m_range = (int(profile.local_bsz.min()), int(profile.local_bsz.max()))
    max_batch = max(efficiency.curves)
    point = GoodputModel.from_noise_to_signal(params, phi, efficiency.init_bsz)
    point.optimize(nodes[:10], gpus[:10], max_batch, m_range)  # warm caches
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        point.optimize(nodes, gpus, max_batch, m_range)
        times.append(time.perf_counter() - started)
    posterior = fit_throughput_posterior(profile, num_samples=32, check=False)
    risky = GoodputModel.from_noise_to_signal(posterior.theta, phi, efficiency.init_bsz)
    started = time.perf_counter()
    risky.optimize(nodes, gpus, max_batch, m_range, quantile=0.1)
    risk_seconds = time.perf_counter() - started
    return {"model": model, "allocations": num_allocations,
            "tune_mean_ms": 1000 * float(np.median(times)),
            "tune_q10_32draws_ms": 1000 * risk_seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=list(POLLUX_MODELS))
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=500, help="SVI steps per Bayesian fit")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--khat-seeds", type=int, nargs="*", default=[],
                        help="also report the full fit's PSIS k-hat for these seeds")
    parser.add_argument("--jobs", type=int, default=1, help="fits run in parallel processes")
    parser.add_argument("--skip-cost", action="store_true", help="leave out the tuning-cost table")
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS),
                        help="which fits to run per model (default all): the fits row with "
                             "k-hat ('fits'), the warm folds, the cold starts, where each model's "
                             "fit lies in the cold starts' priors ('latents')")
    parser.add_argument("--cold-priors", nargs="+", choices=COLD_PRIORS,
                        default=list(COLD_PRIORS), help="which cold starts to run (default all)")
    parser.add_argument("--slowdown-scales", nargs="+", type=float, default=[1.0],
                        help="also run each physics cold start with its slowdown's scale times "
                             "these (rows 'KIND xS'): whether any one spread calibrates every "
                             "model (default: 1 only)")
    add_record_flag(parser)
    args = parser.parse_args()
    if not all(np.isfinite(x) and x > 0 for x in args.slowdown_scales):
        parser.error(f"--slowdown-scales {args.slowdown_scales}: expected numbers > 0")
    fits, quality, cost, latents = [], [], [], []
    # Every fit in its own process (each runs on one thread): models, folds and cold starts are
    # independent.
    tasks = {model: model_tasks(model, args.folds, args.seed, args.steps, args.khat_seeds,
                                args.parts, args.cold_priors, args.slowdown_scales)
             for model in args.models}
    with concurrent.futures.ProcessPoolExecutor(max_workers=args.jobs) as pool:
        flat = pool.map(_call, [task for model in args.models for task in tasks[model]])
        for model in args.models:
            results = [next(flat) for _ in tasks[model]]
            f, q = evaluate_model(model, args.folds, args.seed, args.steps, args.khat_seeds,
                                  results, args.parts, args.cold_priors, args.slowdown_scales)
            # Each model's rows as soon as they are in (stderr), so a long run is never lost.
            print(json.dumps({"fits": f, "quality": q}, default=float), file=sys.stderr,
                  flush=True)
            fits.append(f)
            quality.extend(q)
            if not args.skip_cost:
                cost.append(tuning_cost(model))
            if "latents" in args.parts:
                latents += prior_latents(model, args.cold_priors)
    if "fits" in args.parts:
        print_rows("Fits: the reference's objective at our point fit and at the reference's own "
                   "fit; PSIS k-hat of the Bayesian fit on all rows", fits, args.json)
    if quality:
        print_rows(f"Step-time quality per configuration class: warm ({args.folds} folds over "
                   "placements) and cold (fit on 1-GPU rows); coverage of 50%/90% intervals",
                   quality, args.json)
    if latents:
        print_rows("Cold-start priors: where each model's own fit (all rows) lies in them "
                   "(q_: the prior's distribution function there) and their spreads (scale_)",
                   latents, args.json)
    if cost:
        print_rows("Batch tuning: 10,000 allocations (mean goodput, point fit; 10% quantile over 32 "
                   "posterior draws)", cost, args.json)
    if args.record:
        tables = {"fits": fits, "quality per configuration class": quality, "batch tuning": cost,
                  "where each model's own fit lies in its cold-start prior": latents}
        record_results(__file__, {title: rows for title, rows in tables.items() if rows})


if __name__ == "__main__":
    main()
