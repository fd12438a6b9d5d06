"""Gavel's LP policies: solve time per open-source solver (HiGHS vs CLARABEL), same LPs.

For each job count, random single- and multi-GPU jobs of Gavel's types on 36 V100 + 36 P100 +
36 K80 (seeded); each policy's allocation is computed ``--repeats`` times per solver (the LP is
rebuilt each time, as when the job set changes). Prints the median and p95 milliseconds per
allocation and the largest difference between the solvers' fractions.

    python experiments/bench_gavel_lp.py [--jobs 100 500] [--repeats 7]
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def main() -> None:
    from bayes_sched.cli._common import print_table
    from bayes_sched.cluster import ClusterState
    from bayes_sched.cluster_spec import load_cluster_spec
    from bayes_sched.policies import make_policy
    from bayes_sched.policies.time_sharing import cluster_types, measured_throughputs
    from bayes_sched.throughputs import gavel_job_types, load_gavel_throughputs

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, nargs="+", default=[100, 500])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--cluster", default="v100:36,p100:36,k80:36")
    args = parser.parse_args()
    table = load_gavel_throughputs()
    spec = load_cluster_spec(args.cluster)
    cluster = ClusterState(spec=spec, now=360.0)
    types = cluster_types(cluster)
    capacity = np.array([cluster.gpus_of_type(t) for t in types], dtype=float)
    rows = []
    for num_jobs in args.jobs:
        rng = np.random.default_rng(num_jobs)
        kinds = gavel_job_types()

        class View:  # the two fields measured_throughputs reads
            def __init__(self, job_type: str, scale: int) -> None:
                self.application, self.requested_replicas = job_type, scale

        views = []
        for _ in range(num_jobs):
            job_type, distributed = kinds[int(rng.integers(len(kinds)))]
            views.append(View(job_type, int(rng.choice([1, 1, 1, 2, 4])) if distributed else 1))
        rates = measured_throughputs(views, types, cluster, table)  # type: ignore[arg-type]
        sizes = np.array([float(v.requested_replicas) for v in views])
        for name in ("max_min_fairness", "max_min_fairness_perf", "max_sum_throughput_perf"):
            answers = {}
            for solver in ("HIGHS", "CLARABEL"):
                policy = make_policy(name, solver=solver)
                times = []
                for _ in range(args.repeats):
                    start = time.perf_counter()
                    answers[solver] = policy.allocate(rates, sizes, capacity)
                    times.append(time.perf_counter() - start)
                rows.append({"policy": name, "jobs": num_jobs, "solver": solver,
                             "median_ms": 1000 * float(np.median(times)),
                             "p95_ms": 1000 * float(np.percentile(times, 95))})
            # Each LP's own objective at both solvers' answers (relative gap).
            used = rates if name != "max_min_fairness" else np.ones_like(rates)
            share = used @ (capacity / capacity.sum())
            objective = {}
            for solver, x in answers.items():
                if x is None:
                    continue
                per_job = (used * x).sum(axis=1)
                objective[solver] = (float(np.min(per_job * sizes / share))
                                     if name.startswith("max_min") else float(per_job.sum()))
            if len(objective) == 2:
                gap = abs(objective["HIGHS"] - objective["CLARABEL"]) / abs(objective["HIGHS"])
                rows[-1]["objective_gap"] = rows[-2]["objective_gap"] = gap
    print_table(rows, title=f"LP solve time per allocation, {args.cluster}")


if __name__ == "__main__":
    main()
