"""Decision time of the table world's policies: one round that recomputes the allocation.

Jobs from Gavel's continuous generator (seed 0; ``--multi-gpu`` for the Philly scale factors),
all active at once, on 36 V100 + 36 P100 + 36 K80; each policy decides ``--repeats`` times from a
fresh start (so every decision solves its LP, or runs its matching or grouping, then the round
mechanism; Sia solves its integer program). Prints the median and p95 milliseconds per decision,
the LP size (pairs the packing policies consider) and the solver failures; the issue's targets are
a median <= 50 ms at ~100 jobs for the LPs and <= 100 ms at 64 GPUs for Sia's ILP. ``cpu_ms`` is
the process's CPU time per decision (less sensitive to a loaded machine than the wall-clock
median).

    python experiments/bench_gavel_decisions.py [--jobs 100] [--repeats 5] [--policies ...]

Measured figures (each run's command, commit, date and load): docs/results/bench_gavel_decisions.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from itertools import islice
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from experiments.results_record import add_record_flag, record_results  # noqa: E402


def main() -> None:
    from bayes_sched.cluster import ClusterState
    from bayes_sched.cluster_spec import load_cluster_spec
    from bayes_sched.estimation import estimate_round
    from bayes_sched.estimation.choose import policy_estimators
    from bayes_sched.policies import make_policy
    from bayes_sched.sim.gavel_jobs import generate_continuous_jobs
    from bayes_sched.sim.oracles import world_oracles
    from bayes_sched.sim.table_cluster import TableCluster
    from bayes_sched.tables import print_table
    from bayes_sched.throughputs import load_gavel_throughputs
    from bayes_sched.worlds import TABLE_WORLD_POLICIES, TIME_SHARING_POLICIES

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, nargs="+", default=[100])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--cluster", default="v100:36,p100:36,k80:36")
    parser.add_argument("--multi-gpu", action="store_true")
    parser.add_argument("--policies", nargs="+", default=list(TIME_SHARING_POLICIES),
                        choices=list(TABLE_WORLD_POLICIES))
    parser.add_argument("--pair-split", choices=["even", "intervals"], default="even",
                        help="max_min_fairness_packed's pair_split")
    add_record_flag(parser)
    args = parser.parse_args()
    spec = replace(load_cluster_spec(args.cluster), round_interval=360.0)
    table = load_gavel_throughputs()
    oracles = world_oracles(table)  # the policies' default estimates: the table, as Gavel reads it
    rows = []
    for num_jobs in args.jobs:
        jobs = [replace(job, submit_time=0.0) for job in
                islice(generate_continuous_jobs(1.0, 0, args.multi_gpu), num_jobs)]
        views = [replace(v, age=3600.0) for v in TableCluster(jobs, spec, table).job_views()]
        state = ClusterState(spec=spec, now=3600.0)
        for name in args.policies:
            options = ({"pair_split": args.pair_split} if name == "max_min_fairness_packed"
                       else {})
            times, cpu = [], []
            for _ in range(args.repeats):
                policy = make_policy(name, **options)
                seen, estimates = estimate_round(policy_estimators(policy, oracles=oracles),
                                                 state, views)
                start, start_cpu = time.perf_counter(), time.process_time()
                policy.decide(state, seen, estimates)
                times.append(time.perf_counter() - start)
                cpu.append(time.process_time() - start_cpu)
            rows.append({"policy": name, "jobs": num_jobs,
                         "median_ms": round(1000 * float(np.median(times)), 1),
                         "p95_ms": round(1000 * float(np.percentile(times, 95)), 1),
                         "cpu_ms": round(1000 * float(np.median(cpu)), 1),
                         "pairs_in_force": (len(policy.pair_fractions())
                                            if hasattr(policy, "pair_fractions") else 0),
                         "failures": int(policy.stats()["solver_failures"])})
            print(" ".join(f"{k}={v}" for k, v in rows[-1].items()), flush=True)
    print_table(rows, title=f"decision time (allocation recomputed), {args.cluster}")
    if args.record:
        record_results(__file__, {f"decision time, {args.cluster}": rows})


if __name__ == "__main__":
    main()
