"""Uncertainty in decisions: Pollux allocating by a lower quantile of goodput vs by the point fit.

With ``risk = q`` every job's model carries draws from perfmodel's throughput posterior (fitted on
the step times the job reported, in the loop's estimation stage), and Pollux's speedup tables use
the ``q``-quantile of goodput over them, so allocations whose gain rests on scaling never measured
count for less. This prints, per workload, the average JCT of the point-fit Pollux and of each risk
level, their ratio, and the estimation and decision time per round. No target: the figures are what
they are.

    python experiments/bench_risk.py                                 # workloads 1-8, 30 jobs each
    python experiments/bench_risk.py --workloads workload-1 --max-jobs 160 --risks 0.1 0.3

Measured figures (each run's command, commit, date and load): docs/results/bench_risk.md.
"""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bayes_sched.policies import PolluxPolicy  # noqa: E402
from bayes_sched.sim import SimConfig, run_simulation  # noqa: E402
from bayes_sched.tables import print_table  # noqa: E402
from experiments.results_record import add_record_flag, record_results  # noqa: E402

WORKLOADS = [f"workload-{i}" for i in range(1, 9)]


def _run(task: tuple[str, float | None, int, int, int]) -> dict[str, object]:
    workload, risk, max_jobs, svi_steps, draws = task
    policy = PolluxPolicy(risk=risk)
    # With a risk, the job models draw from the throughput posterior (the ``job_posterior``
    # estimator, Pollux's default then) with these settings.
    posterior = {"name": "job_posterior", "num_steps": svi_steps, "num_samples": draws, "seed": 0}
    result = run_simulation(workload, policy, SimConfig(), max_jobs=max_jobs,
                            estimators={"job_goodput": posterior} if risk else None)
    return {"workload": workload, "risk": risk or 0.0, "avg_jct_s": result.summary["avg_jct"],
            "p99_jct_s": result.summary.get("p99_jct", float("nan")),
            "estimate_s_per_round": result.estimate_seconds / max(len(result.decision_seconds), 1),
            "decide_s_median": float(np.median(result.decision_seconds)),
            "posterior_fits": int(result.estimator_stats["posterior_fits"])}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", nargs="+", default=WORKLOADS)
    parser.add_argument("--risks", nargs="+", type=float, default=[0.1])
    parser.add_argument("--max-jobs", type=int, default=30,
                        help="the first jobs of each workload (160: the whole workload)")
    parser.add_argument("--svi-steps", type=int, default=150)
    parser.add_argument("--draws", type=int, default=64)
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    add_record_flag(parser)
    args = parser.parse_args()
    tasks = [(w, r, args.max_jobs, args.svi_steps, args.draws)
             for w in args.workloads for r in [None, *args.risks]]
    with ProcessPoolExecutor(args.processes) as pool:
        results = list(pool.map(_run, tasks))
    point = {r["workload"]: r["avg_jct_s"] for r in results if r["risk"] == 0.0}
    rows = [{**r, "vs_point": float(r["avg_jct_s"]) / float(point[r["workload"]])}  # type: ignore[arg-type]
            for r in results]
    for risk in args.risks:
        mine = [r for r in rows if r["risk"] == risk]
        mean = {key: float("nan") for key in rows[0]}
        mean.update(workload="MEAN", risk=risk,  # type: ignore[arg-type]
                    vs_point=float(np.mean([r["vs_point"] for r in mine])))
        rows.append(mean)
    print_table(rows, title=f"Pollux by goodput quantile vs point fit (first {args.max_jobs} jobs)",
                as_json=args.json)
    if args.record:
        record_results(__file__, {f"goodput quantile vs point fit, first {args.max_jobs} jobs": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
