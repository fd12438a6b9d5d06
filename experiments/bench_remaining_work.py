"""Remaining-work predictors on Shockwave's shipped jobs: Dirichlet (Shockwave's) vs noise scale
(ours).

For every job of a shipped Shockwave trace whose batch size changes (modes ``gns`` and
``accordion``), the profile (batch size and seconds alone on its V100s per epoch, Shockwave's
tacc table) is cut at 25, 50 and 75% of its epochs, and each predictor's remaining seconds are
compared with the profile's true remaining seconds: mean and median absolute relative error, and
the mean signed relative error (positive: over-prediction), and the fraction of jobs whose true
remaining seconds are at most the predictor's 0.9 quantile (what the Shockwave planner plans on;
Dirichlet's quantile is its mean), per mode and progress.

    python experiments/bench_remaining_work.py [--trace tacc_120] [--json]
"""

from __future__ import annotations

import argparse

import numpy as np


def main() -> None:
    from bayes_sched.cli._common import print_table
    from bayes_sched.policies.remaining_work import (
        DirichletRegimePredictor,
        NoiseScaleRegimePredictor,
        RegimeProfile,
        RemainingWorkPredictor,
    )
    from bayes_sched.sim.shockwave_jobs import (
        profile_epoch_seconds,
        read_shockwave_trace,
        shipped_shockwave_trace,
        shipped_shockwave_traces,
    )
    from bayes_sched.throughputs import load_shockwave_throughputs

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", default="tacc_120", choices=list(shipped_shockwave_traces()))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    table = load_shockwave_throughputs()
    jobs = read_shockwave_trace(shipped_shockwave_trace(args.trace), table)
    predictors: dict[str, RemainingWorkPredictor] = {
        "dirichlet": DirichletRegimePredictor(), "noise_scale": NoiseScaleRegimePredictor()}
    errors: dict[tuple[str, str, int], list[float]] = {}
    below: dict[tuple[str, str, int], list[bool]] = {}  # truth <= the 0.9 quantile
    for job in jobs:
        regimes = job.profile()
        if len(set(regimes)) < 2:
            continue
        profile = RegimeProfile(tuple(regimes), tuple(profile_epoch_seconds(job, table)))
        if not np.all(np.isfinite(profile.epoch_seconds)):
            continue
        for percent in (25, 50, 75):
            done = int(round(profile.epochs * percent / 100))
            truth = profile.seconds_done(profile.epochs) - profile.seconds_done(done)
            for name, predictor in predictors.items():
                predicted = predictor.remaining_seconds(profile, done)
                errors.setdefault((job.mode, name, percent), []).append((predicted - truth) / truth)
                below.setdefault((job.mode, name, percent), []).append(
                    truth <= predictor.quantile_seconds(profile, done, 0.9) * (1 + 1e-9))
    rows = [{"mode": mode, "predictor": name, "progress_pct": percent, "jobs": len(e),
             "mean_abs_rel_err": float(np.mean(np.abs(e))),
             "median_abs_rel_err": float(np.median(np.abs(e))),
             "mean_signed_rel_err": float(np.mean(e)),
             "truth_below_q90": float(np.mean(below[(mode, name, percent)]))}
            for (mode, name, percent), e in sorted(errors.items())]
    print_table(rows, title=f"remaining seconds, trace {args.trace} (jobs whose batch changes)",
                as_json=args.json)


if __name__ == "__main__":
    main()
