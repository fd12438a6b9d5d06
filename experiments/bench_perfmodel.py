"""Benchmark of the throughput models on the six shipped Pollux profiles.

Prints three tables:

1. accuracy: RMSLE of step time for the point fit and the posterior median, in-sample and on
   held-out placements (K folds over whole placements: every row of a placement is left out
   together);
2. calibration: fraction of held-out measured step times inside the 50% and 90% predictive
   intervals, for the K-fold split and for fitting on single-GPU placements only and predicting
   every multi-GPU one (with the default prior, and with a population prior learned from the
   other five models);
3. cost: fit time per model (point, Bayesian) and batch-tuning time for 10,000 allocations.

Run: ``python experiments/bench_perfmodel.py [--folds 5] [--models cifar10 ...] [--json]``
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from perfmodel.datasets import POLLUX_MODELS
from perfmodel.efficiency import EfficiencyModel
from perfmodel.goodput import GoodputModel
from perfmodel.profiles import StepTimeProfile, load_pollux_gradients, load_pollux_profile
from perfmodel.throughput import fit_throughput, predict_step_time, rmsle
from perfmodel.throughput_bayes import StepTimePrior, fit_throughput_posterior


def placement_folds(profile: StepTimeProfile, folds: int, seed: int) -> list[np.ndarray]:
    """Boolean test masks, shape (N,), splitting whole placements into ``folds`` groups."""
    labels = np.unique(profile.placement.astype(str))
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(labels))
    groups = np.array_split(labels[order], folds)
    return [np.isin(profile.placement.astype(str), g) for g in groups]


#: Whether the Bayesian fits model placement effects (set from the command line).
PLACEMENT_EFFECTS = False


def held_out(train: StepTimeProfile, test: StepTimeProfile, seed: int,
             prior: StepTimePrior | None = None) -> dict[str, np.ndarray]:
    """Point and posterior predictions for ``test`` from fits on ``train``."""
    point = fit_throughput(train)
    posterior = fit_throughput_posterior(train, seed=seed, check=False, prior=prior,
                                         placement_effects=PLACEMENT_EFFECTS)
    pred = posterior.predict_step_time(test.num_nodes, test.num_replicas, test.local_bsz,
                                       test.accum_steps, (0.05, 0.25, 0.75, 0.95),
                                       placement=test.placement)
    pred["point"] = predict_step_time(point, test.num_nodes, test.num_replicas, test.local_bsz,
                                      test.accum_steps)
    return pred


def inside(values: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
    return (values >= lower) & (values <= upper)


def evaluate_model(model: str, folds: int, seed: int) -> tuple[dict, dict]:
    profile = load_pollux_profile(model)
    started = time.perf_counter()
    point = fit_throughput(profile)
    point_seconds = time.perf_counter() - started
    posterior = fit_throughput_posterior(profile, seed=seed, placement_effects=PLACEMENT_EFFECTS)
    in_pred = posterior.predict_step_time(profile.num_nodes, profile.num_replicas,
                                          profile.local_bsz, placement=profile.placement)
    in_point = predict_step_time(point, profile.num_nodes, profile.num_replicas,
                                 profile.local_bsz)

    log_point, log_post, in50, in90, measured = [], [], [], [], []
    for mask in placement_folds(profile, folds, seed):
        pred = held_out(profile.subset(~mask), profile.subset(mask), seed)
        truth = profile.step_time[mask]
        measured.append(truth)
        log_point.append(pred["point"])
        log_post.append(pred["median"])
        in50.append(inside(truth, pred["q0.25"], pred["q0.75"]))
        in90.append(inside(truth, pred["q0.05"], pred["q0.95"]))
    truth = np.concatenate(measured)

    single = profile.num_replicas == 1
    pred_multi = held_out(profile.subset(single), profile.subset(~single), seed)
    multi = profile.step_time[~single]
    # The same cold start with a prior learned from the other five models (leave-one-out).
    others = [load_pollux_profile(o) for o in POLLUX_MODELS if o != model]
    population = StepTimePrior.from_population(
        profile.subset(single), [(o, fit_throughput(o)) for o in others])
    pred_pop = held_out(profile.subset(single), profile.subset(~single), seed, population)

    accuracy = {
        "model": model,
        "rmsle_point_in": rmsle(in_point, profile.step_time),
        "rmsle_bayes_in": rmsle(in_pred["median"], profile.step_time),
        "rmsle_point_heldout": rmsle(np.concatenate(log_point), truth),
        "rmsle_bayes_heldout": rmsle(np.concatenate(log_post), truth),
        "rmsle_point_1gpu_to_multi": rmsle(pred_multi["point"], multi),
        "rmsle_bayes_1gpu_to_multi": rmsle(pred_multi["median"], multi),
        "rmsle_popprior_1gpu_to_multi": rmsle(pred_pop["median"], multi),
    }
    calibration = {
        "model": model,
        "cover50_heldout": float(np.concatenate(in50).mean()),
        "cover90_heldout": float(np.concatenate(in90).mean()),
        "cover50_1gpu_to_multi": float(inside(multi, pred_multi["q0.25"],
                                              pred_multi["q0.75"]).mean()),
        "cover90_1gpu_to_multi": float(inside(multi, pred_multi["q0.05"],
                                              pred_multi["q0.95"]).mean()),
        "cover50_popprior": float(inside(multi, pred_pop["q0.25"], pred_pop["q0.75"]).mean()),
        "cover90_popprior": float(inside(multi, pred_pop["q0.05"], pred_pop["q0.95"]).mean()),
        "pareto_k": posterior.diagnostics.pareto_k,
        "point_fit_s": point_seconds,
        "bayes_fit_s": posterior.diagnostics.seconds,
    }
    return accuracy, calibration


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


def print_rows(title: str, rows: list[dict], as_json: bool) -> None:
    if as_json:
        print(json.dumps({"table": title, "rows": rows}, default=float))
        return
    print(f"\n{title}")
    columns = list(rows[0])
    widths = [max(len(c), 10) for c in columns]
    print("  ".join(c.rjust(w) for c, w in zip(columns, widths, strict=True)))
    for row in rows:
        cells = [f"{v:.4g}" if isinstance(v, float) else str(v) for v in row.values()]
        print("  ".join(c.rjust(w) for c, w in zip(cells, widths, strict=True)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=list(POLLUX_MODELS))
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--placement-effects", action="store_true",
                        help="model a deviation shared by the rows of each placement")
    parser.add_argument("--skip-cost", action="store_true", help="leave out the tuning-cost table")
    args = parser.parse_args()
    global PLACEMENT_EFFECTS
    PLACEMENT_EFFECTS = args.placement_effects
    accuracy, calibration, cost = [], [], []
    for model in args.models:
        a, c = evaluate_model(model, args.folds, args.seed)
        accuracy.append(a)
        calibration.append(c)
        if not args.skip_cost:
            cost.append(tuning_cost(model))
    print_rows("Accuracy: RMSLE of step time (in-sample; held-out placements, "
               f"{args.folds} folds; fit on 1-GPU rows, predict multi-GPU)", accuracy, args.json)
    print_rows("Calibration of held-out predictive intervals (nominal 0.5 and 0.9) and fit cost",
               calibration, args.json)
    if cost:
        print_rows("Batch tuning: 10,000 allocations (mean goodput, point fit; 10% quantile over 32 "
                   "posterior draws)", cost, args.json)


if __name__ == "__main__":
    main()
