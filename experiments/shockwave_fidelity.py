"""Shockwave's simulated tacc_32gpus results reproduced: 120 dynamic-batch jobs on 32 V100.

Setting (Shockwave, NSDI 2023; artifact ``uw-mad-dash/shockwave`` at commit 8a44f4a, config
``scheduler/configurations/tacc_32gpus.json``): the shipped 120-job trace
(``bayes_sched/data/shockwave/traces/tacc_120.trace``), 32 V100 (8 nodes x 4), 120 s rounds,
time-sharing allocations recomputed at most every 1000 s (``--min-reset``; Shockwave's
``Scheduler`` default ``minimum_time_between_allocation_resets=1000``, which its trace driver
``simulate_scheduler_with_trace.py`` keeps; Gavel's scheduler has 1920 s),
Shockwave's tacc throughputs, its simulator's job physics
(:class:`~bayes_sched.sim.shockwave_cluster.ShockwaveCluster`). Each policy runs once (the run is
deterministic) and its average JCT, makespan, worst finish-time fairness and unfair fraction
(rho > 1.05, :mod:`bayes_sched.sim.fairness`) are printed beside the published values.

    python experiments/shockwave_fidelity.py [--policies shockwave max_min_fairness ...]
        [--solver HIGHS] [--json]

Pass bands (issue 15): avg JCT and makespan within 10 %, worst FTF within 20 %, unfair fraction
within 10 points. A policy this checkout does not register is listed and skipped with a line.

Shockwave's baselines run with Shockwave's settings where its code differs from Gavel's:
Gandiva-fair gives every job the same time fraction whatever its GPU count (``split="time"``);
AlloX gives a job of ``s`` GPUs the fraction ``1 / s`` and has ``alpha`` 0.2; FTF's isolated share
caps each row of the 1/n split at 1; the policies that read remaining steps see ``target_steps``
and ``progress`` rescaled at each batch-size change, as Shockwave's scheduler keeps them.
Shockwave's FTF baseline used Gurobi; here CLARABEL, so allocations inside the min-max optimum's
face may differ. Shockwave's planner solves its log utility as a hypograph on one HiGHS thread
under a node limit with a fixed seed and no wall-clock cap, so its plans are deterministic.

Measured figures (each run's command, commit, date and load): docs/results/shockwave_fidelity.md.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

from bayes_sched.worlds import SHOCKWAVE

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from experiments.results_record import add_record_flag, record_results  # noqa: E402

#: Published results, simulated tacc_32gpus rows of the artifact's pickles
#: (``scheduler/reproduce/pickles/tacc_32gpus/<policy>_120_..._simulation.pickle``, summarised in
#: the shared data's ``derived/run_summaries.csv``): policy -> (avg JCT s, makespan s, worst FTF
#: rho, fraction of jobs with rho > 1.05). Shockwave's row is ``shockwave_120_...`` (the artifact
#: also holds ``old_shockwave`` and ``new_orig_hyperparam_shockwave`` variants, not used here).
PUBLISHED: dict[str, tuple[float, float, float, float]] = {
    "shockwave": (9958.486117514658, 24197.42350629904, 1.78379, 0.05),
    "max_min_fairness": (11274.11699328137, 33207.66301239685, 2.94699, 0.25),
    "max_sum_throughput_perf": (9654.699760876134, 31909.030927449847, 4.97576, 0.25),
    "min_total_duration": (19806.727988584385, 24204.81630868378, 7.74147, 0.7416666666666667),
    "finish_time_fairness": (11301.976669591379, 31928.738767753155, 3.43763, 0.225),
    "allox": (9926.30656827876, 32488.621148396294, 4.96351, 0.275),
    "gandiva_fair": (12574.272467530895, 32367.434395330914, 1.85361, 0.5166666666666667),
}

#: Relative bands for JCT and makespan, worst FTF; absolute band for the unfair fraction.
JCT_BAND, FTF_BAND, UNFAIR_BAND = 0.10, 0.20, 0.10


def run_one(policy_name: str, solver: str | None, jobs_out: str | None = None,
            min_reset: float | None = None) -> dict[str, object]:
    import numpy as np

    from bayes_sched.policies import make_policy
    from bayes_sched.sim.shockwave_cluster import ShockwaveCluster
    from bayes_sched.sim.shockwave_jobs import read_shockwave_trace, shipped_shockwave_trace
    from bayes_sched.sim.table_run import run_table_simulation
    from bayes_sched.throughputs import load_shockwave_throughputs
    from bayes_sched.worlds import SHOCKWAVE

    spec = SHOCKWAVE.cluster()
    # Shockwave's tacc table, its 1000 s between recomputes and its baselines' settings (AlloX's
    # alpha 0.2, Gandiva-fair's equal time per job, FTF's isolated share): the world's.
    options = SHOCKWAVE.policy_options(policy_name)
    if min_reset is not None and "min_reset_interval" in options:
        options["min_reset_interval"] = min_reset
    if solver is not None and policy_name == "shockwave":
        options["solver"] = solver
    policy = make_policy(policy_name, **options)
    jobs = read_shockwave_trace(shipped_shockwave_trace("tacc_120"))
    start = time.perf_counter()
    result = run_table_simulation(jobs, policy, spec, table=load_shockwave_throughputs(),
                                  cluster_type=ShockwaveCluster)
    wall = time.perf_counter() - start
    if jobs_out is not None:  # per-job rows, to compare two runs job by job
        result.jobs.to_csv(f"{jobs_out}.{policy_name}.csv", index=False)
    summary = result.summary
    jct, makespan, worst, unfair = PUBLISHED[policy_name]
    ours = (summary["avg_jct"], summary["makespan"], summary["ftf_worst"],
            summary["unfair_fraction"])
    passes = (abs(ours[0] / jct - 1) <= JCT_BAND, abs(ours[1] / makespan - 1) <= JCT_BAND,
              abs(ours[2] / worst - 1) <= FTF_BAND, abs(ours[3] - unfair) <= UNFAIR_BAND)
    stats = result.policy_stats
    return {
        "policy": policy_name,
        "avg_jct_s": round(ours[0]), "published_jct_s": round(jct),
        "jct_ratio": round(ours[0] / jct, 3),
        "makespan_s": round(ours[1]), "published_makespan_s": round(makespan),
        "makespan_ratio": round(ours[1] / makespan, 3),
        "worst_ftf": round(ours[2], 3), "published_worst_ftf": round(worst, 3),
        "ftf_ratio": round(ours[2] / worst, 3),
        "unfair_frac": round(ours[3], 3), "published_unfair_frac": round(unfair, 3),
        "ftf_p50": round(summary["ftf_p50"], 3), "ftf_p90": round(summary["ftf_p90"], 3),
        "within_bands": "yes" if all(passes) else
        "no: " + ", ".join(name for name, ok in zip(("jct", "makespan", "worst_ftf", "unfair"),
                                                       passes, strict=True) if not ok),
        "rounds": int(summary["rounds"]), "wall_s": round(wall, 1),
        "decision_median_ms": round(1000 * float(np.median(result.decision_seconds)), 1),
        "solve_median_s": round(stats.get("solve_median_seconds", math.nan), 3),
        "solver_failures": int(summary.get("solver_failures", 0)),
        "fallbacks": int(stats.get("fallback_allocations", 0)),
        "node_limit_hits": int(stats.get("node_limit_hits", 0)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--policies", nargs="+", default=list(PUBLISHED),
                        choices=list(PUBLISHED))
    parser.add_argument("--solver", default=None, choices=["HIGHS", "SCIP"],
                        help="Shockwave's MIP solver (default: the policy's, HiGHS)")
    parser.add_argument("--jobs-out", default=None, metavar="PREFIX",
                        help="write each policy's per-job rows to PREFIX.<policy>.csv")
    parser.add_argument("--min-reset", type=float, default=None, metavar="SECONDS",
                        help="seconds between allocation recomputes of the time-sharing "
                             "policies (default: Shockwave's scheduler's, 1000)")
    parser.add_argument("--json", action="store_true")
    add_record_flag(parser)
    args = parser.parse_args()
    from bayes_sched.policies import POLICIES

    rows = []
    for name in args.policies:
        if name not in POLICIES:
            print(f"{name}: skipped, not a registered policy in this checkout", flush=True)
            continue
        row = run_one(name, args.solver, args.jobs_out, args.min_reset)
        rows.append(row)
        if not args.json:
            print(" ".join(f"{k}={v}" for k, v in row.items()), flush=True)
    if args.record:
        record_results(__file__, {"ours / published": rows})
    if args.json:
        print(json.dumps(rows))
        return
    from bayes_sched.tables import print_table

    print_table(rows, title=f"Shockwave tacc_32gpus: 120 jobs, {SHOCKWAVE.default_cluster}, "
                            f"{SHOCKWAVE.round_seconds:g} s rounds (ours vs published)")


if __name__ == "__main__":
    main()
