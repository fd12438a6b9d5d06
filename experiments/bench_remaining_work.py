"""Remaining-work predictors on Shockwave's shipped jobs: Dirichlet (Shockwave's) vs noise scale
(ours).

For every job of a shipped Shockwave trace whose batch size changes (modes ``gns`` and
``accordion``), each predictor is asked for its remaining seconds at 25, 50 and 75 % of the job's
epochs, on the profile its Shockwave policy builds (batch size and seconds alone on its V100s per
epoch, Shockwave's tacc table; ours counts an epoch's whole iterations, see
:class:`~bayes_sched.policies.shockwave.ShockwavePolicy`'s ``whole_epochs``), against two truths:

* ``sim``: the job played alone round by round under :class:`~bayes_sched.sim.shockwave_cluster.
  ShockwaveCluster`'s rules (the truth of a run, and of the benchmark oracle,
  ``true_remaining_seconds``), asked at the first round at or past each progress point;
* ``profile``: the rest of Shockwave's profile (what its predictor is fitted to; its GNS profile
  drops back to the initial batch size in the last epoch, which no run does), asked at exactly
  that epoch.

Per mode, predictor and progress: mean and median absolute relative error, mean signed relative
error (positive: over-prediction) against the run's truth, and the share of jobs whose true
remaining seconds are at most the predictor's 0.9 quantile (what the Shockwave planner plans on;
Dirichlet's quantile is its mean), against either truth.

    python experiments/bench_remaining_work.py [--trace tacc_120] [--json]

Measured figures (each run's command, commit, date and load): docs/results/bench_remaining_work.md.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from experiments.results_record import add_record_flag, record_results  # noqa: E402

PROGRESS_PCT = (25, 50, 75)
QUANTILE = 0.9


def main() -> None:
    from bayes_sched.cluster_spec import load_cluster_spec
    from bayes_sched.estimates import Estimates
    from bayes_sched.estimation.choose import choose_estimators
    from bayes_sched.mechanisms.placement import pack
    from bayes_sched.policies.shockwave import ShockwavePolicy
    from bayes_sched.remaining_work import RemainingWorkPredictor
    from bayes_sched.sim.oracles import world_oracles
    from bayes_sched.sim.shockwave_cluster import ShockwaveCluster
    from bayes_sched.sim.shockwave_jobs import (
        profile_epoch_seconds,
        read_shockwave_trace,
        shipped_shockwave_trace,
        shipped_shockwave_traces,
    )
    from bayes_sched.tables import print_table
    from bayes_sched.throughputs import load_shockwave_throughputs

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", default="tacc_120", choices=list(shipped_shockwave_traces()))
    parser.add_argument("--json", action="store_true")
    add_record_flag(parser)
    args = parser.parse_args()
    table = load_shockwave_throughputs()
    spec = replace(load_cluster_spec("v100:32"), round_interval=120.0)
    jobs = read_shockwave_trace(shipped_shockwave_trace(args.trace), table)
    # Each predictor beside a policy that read the round's estimates as a run of Shockwave's
    # world publishes them (the tacc table; that estimator), so its profiles are the run's.
    policies: dict[str, tuple[ShockwavePolicy, RemainingWorkPredictor]] = {}
    for name in ("dirichlet", "noise_scale"):
        chosen = choose_estimators(ShockwavePolicy.needs, {"remaining_work": name},
                                   ShockwavePolicy.default_estimators, world_oracles(table))
        policy = ShockwavePolicy()
        predictor = policy.read_estimates(
            Estimates(entry for estimator in chosen for entry in estimator.published()))
        policies[name] = (policy, predictor)
    errors: dict[tuple[str, str, int], list[float]] = {}
    below: dict[tuple[str, str, int, str], list[bool]] = {}  # truth <= the 0.9 quantile
    for job in jobs:
        if len(set(job.profile())) < 2:
            continue
        if not np.all(np.isfinite(profile_epoch_seconds(job, table))):
            continue
        cluster = ShockwaveCluster([replace(job, submit_time=0.0)], spec, table,
                                   measurement_noise=0.0)
        marks = list(PROGRESS_PCT)
        while marks and not cluster.done():
            (view,) = cluster.job_views()
            done = ShockwavePolicy._epochs_done(view)
            if done >= view.target_epochs * marks[0] / 100:
                percent = marks.pop(0)
                at = int(round(view.target_epochs * percent / 100))
                truth = cluster.true_remaining_seconds(view.name)
                for name, (policy, predictor) in policies.items():
                    profile = policy.profile(view, "v100")
                    predicted = predictor.remaining_seconds(profile, done)
                    errors.setdefault((job.mode, name, percent), []).append(
                        (predicted - truth) / truth)
                    quantile = predictor.quantile_seconds(profile, done, QUANTILE)
                    below.setdefault((job.mode, name, percent, "sim"), []).append(
                        truth <= quantile * (1 + 1e-9))
                    # Against the profile, at exactly the progress point.
                    left = profile.seconds_done(profile.epochs) - profile.seconds_done(at)
                    below.setdefault((job.mode, name, percent, "profile"), []).append(
                        left <= predictor.quantile_seconds(profile, at, QUANTILE)
                        * (1 + 1e-9))
            counts = pack(view.requested_replicas, cluster.state.capacity())
            assert counts is not None  # alone on the cluster: its GPUs are free
            cluster.apply({view.name: counts})
            cluster.advance(spec.round_interval)
    rows = [{"mode": mode, "predictor": name, "progress_pct": percent, "jobs": len(e),
             "mean_abs_rel_err": float(np.mean(np.abs(e))),
             "median_abs_rel_err": float(np.median(np.abs(e))),
             "mean_signed_rel_err": float(np.mean(e)),
             "sim_truth_below_q90": float(np.mean(below[(mode, name, percent, "sim")])),
             "profile_truth_below_q90": float(np.mean(below[(mode, name, percent, "profile")]))}
            for (mode, name, percent), e in sorted(errors.items())]
    print_table(rows, title=f"remaining seconds, trace {args.trace} (jobs whose batch changes; "
                            "errors against the run's truth)", as_json=args.json)
    if args.record:
        record_results(__file__, {f"remaining seconds, trace {args.trace}": rows})


if __name__ == "__main__":
    main()
