"""Benchmark: trials to find a configuration within 5% of the true best goodput, per real model.

For each of the six profiled models and each seed (the seed draws where in training the job is, so
its gradient noise, and the trials' measurement noise), on an 8-node x 4-GPU cluster:

* ``bo``: :func:`bayes_sched.search.search_configuration` (GP with perfmodel prior, LogEI), run
  without its stopping rule to count trials, and again with it to report where it stops;
* ``random``: candidates in a random order;
* ``grid``: a coarse grid (nodes 1/2/4/8 x GPUs per node 1/2/4 x smallest/middle/largest
  micro-batch, no accumulation) in a random order; ``inf`` when the grid holds no configuration
  within 5%;
* ``model``: the model's choice with no trial (0 trials if within 5%, else ``inf``).

"Reached" means the best *measured* configuration so far is truly within 5% of the best (truth:
the simulator physics' noise-free goodput). Usage::

    PYTHONPATH=. python experiments/bench_config_search.py [--seeds 5] [--cost-weight 0] [--json]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

from bayes_sched.search import search_configuration
from bayes_sched.search.prior import model_prior
from bayes_sched.sim.physics import APPLICATION_NAMES
from bayes_sched.sim.trials import PhysicsTrialRunner, profiled_goodput_model

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from experiments.results_record import add_record_flag, record_results  # noqa: E402

WITHIN = 0.95


def trials_to_reach(true: np.ndarray, measured: list[float], order: list[int], target: float
                    ) -> float:
    """First trial count at which the best measured candidate's true value reaches ``target``."""
    best, best_measured = -np.inf, -np.inf
    for k, (i, m) in enumerate(zip(order, measured, strict=True), start=1):
        if m > best_measured:
            best_measured, best = m, true[i]
        if best >= target:
            return float(k)
    return math.inf


def run_model(app: str, seed: int, cost_weight: float, max_trials: int) -> dict[str, float]:
    rng = np.random.default_rng(1000 + seed)
    fraction = float(rng.uniform(0.05, 0.95))
    runner = PhysicsTrialRunner(app, epoch_fraction=fraction, seed=seed)
    cands = runner.candidates()
    gpus = cands.column("num_gpus")
    true_goodput = np.array([runner.true_goodput(c) for c in cands.configs])
    true = np.log(true_goodput) - cost_weight * np.log(gpus)
    target = true.max() + math.log(WITHIN)
    prior = model_prior(cands, profiled_goodput_model(app, runner.epoch))
    index = {c: i for i, c in enumerate(cands.configs)}

    def noisy(i: int) -> float:
        return true[i] + 0.02 * rng.standard_normal()

    start = time.perf_counter()
    result = search_configuration(cands, prior, runner, max_trials=max_trials, min_trials=1,
                                  stop_improvement=1e-12, cost_weight=cost_weight, seed=seed)
    bo_seconds = time.perf_counter() - start
    order = [index[t.config] for t in result.trials]
    bo = trials_to_reach(true, [result.utility(t) for t in result.trials], order, target)
    stopped = search_configuration(cands, prior, PhysicsTrialRunner(app, epoch_fraction=fraction,
                                                                    seed=seed),
                                   max_trials=max_trials, cost_weight=cost_weight, seed=seed)
    stop_ratio = math.exp(true[index[stopped.best]] - true.max())
    perm = list(rng.permutation(len(cands)))
    random = trials_to_reach(true, [noisy(i) for i in perm], perm, target)
    micro = cands.column("local_bsz")
    levels = np.unique(micro)
    coarse = {int(levels[0]), int(levels[len(levels) // 2]), int(levels[-1])}
    grid = [i for i, c in enumerate(cands.configs) if c.num_nodes in (1, 2, 4, 8)
            and c.gpus_per_node in (1, 2, 4) and c.local_bsz in coarse and c.accum_steps == 0]
    grid = list(rng.permutation(grid))
    grid_trials = trials_to_reach(true, [noisy(i) for i in grid], grid, target) if grid else math.inf
    model_choice = int(np.argmax(prior - cost_weight * np.log(gpus)))
    model_ratio = math.exp(true[model_choice] - true.max())
    return {"bo": bo, "random": random, "grid": grid_trials,
            "model": 0.0 if model_ratio >= WITHIN else math.inf, "model_ratio": model_ratio,
            "bo_stop_trials": len(stopped.trials), "bo_stop_ratio": stop_ratio,
            "bo_seconds": bo_seconds, "candidates": len(cands), "grid_size": len(grid)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--cost-weight", type=float, default=0.0)
    parser.add_argument("--max-trials", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    add_record_flag(parser)
    args = parser.parse_args()
    rows = []
    for app in APPLICATION_NAMES:
        runs = [run_model(app, seed, args.cost_weight, args.max_trials)
                for seed in range(args.seeds)]
        row: dict[str, object] = {"model": app, "candidates": runs[0]["candidates"]}
        for key in ("bo", "random", "grid", "model"):
            values = np.array([r[key] for r in runs])
            row[f"{key}_median"] = float(np.median(values))
            row[f"{key}_worst"] = float(values.max())
        row["model_only_ratio_median"] = float(np.median([r["model_ratio"] for r in runs]))
        row["bo_stop_trials_median"] = float(np.median([r["bo_stop_trials"] for r in runs]))
        row["bo_stop_ratio_min"] = float(min(r["bo_stop_ratio"] for r in runs))
        row["bo_seconds_per_search"] = float(np.mean([r["bo_seconds"] for r in runs]))
        rows.append(row)
        print(json.dumps(row) if args.json else _format(row), flush=True)
    bo = np.array([r["bo_median"] for r in rows])
    rnd = np.array([r["random_median"] for r in rows])
    print(f"overall: BO median of medians {np.median(bo):g} trials; random {np.median(rnd):g}; "
          f"random/BO = {np.median(rnd) / max(np.median(bo), 1):.2f}x; BO worst "
          f"{max(r['bo_worst'] for r in rows):g}")
    if args.record:
        record_results(__file__, {"trials to within 5 % of the best goodput": rows})


def _format(row: dict[str, object]) -> str:
    return (f"{row['model']:<12} C={row['candidates']:<4} "
            f"BO med/worst {row['bo_median']:g}/{row['bo_worst']:g}  "
            f"random {row['random_median']:g}/{row['random_worst']:g}  "
            f"grid {row['grid_median']:g}/{row['grid_worst']:g}  "
            f"model-only {row['model_median']:g} (ratio {row['model_only_ratio_median']:.3f})  "
            f"BO stops at {row['bo_stop_trials_median']:g} trials (worst ratio "
            f"{row['bo_stop_ratio_min']:.3f})  {row['bo_seconds_per_search']:.1f}s/search")


if __name__ == "__main__":
    main()
