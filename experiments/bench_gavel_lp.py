"""Gavel's LP policies: solve time per open-source solver (HiGHS vs CLARABEL), same LPs.

For each job count, random single- and multi-GPU jobs of Gavel's types on 36 V100 + 36 P100 +
36 K80 (seeded); each policy's allocation is computed ``--repeats`` times per solver (the LP is
rebuilt each time, as when the job set changes). Prints the median and p95 milliseconds per
allocation and the largest difference between the solvers' fractions.

    python experiments/bench_gavel_lp.py [--jobs 100 500] [--repeats 7]
    python experiments/bench_gavel_lp.py --packed [--jobs 100] [--repeats 5]

``--packed``: the packed policies' programs over (job, partner class, type) entries on the
decision benchmark's snapshot (``bench_gavel_decisions.py``: Gavel's continuous multi-GPU jobs,
all active, ages 1 h): finish-time fairness's SOCP (CLARABEL, ECOS where installed; HiGHS solves
no cones) and min total duration's two LPs (the shortest-horizon LP, whose value alone is read,
and the feasibility LP at Gavel's horizon, whose answer is the allocation), CPU ms per solve,
the optimum's gap to CLARABEL's, and the L1 distance of the entries from CLARABEL's (where the
optimum is not unique, the solver chooses the allocation).

Measured figures (each run's command, commit, date and load): docs/results/bench_gavel_lp.md.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from experiments.results_record import add_record_flag, record_results  # noqa: E402


def main() -> None:
    from bayes_sched.cluster import ClusterState
    from bayes_sched.cluster_spec import load_cluster_spec
    from bayes_sched.mechanisms.rounds import cluster_types
    from bayes_sched.policies import make_policy
    from bayes_sched.policies.gavel.throughput_reading import measured_throughputs
    from bayes_sched.tables import print_table
    from bayes_sched.throughputs import gavel_job_types, load_gavel_throughputs

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, nargs="+", default=[100, 500])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--cluster", default="v100:36,p100:36,k80:36")
    parser.add_argument("--packed", action="store_true",
                        help="the packed FTF and min-total-duration programs per solver")
    add_record_flag(parser)
    args = parser.parse_args()
    if args.packed:
        rows = packed_rows(args.jobs, args.repeats, args.cluster)
        if args.record:
            record_results(__file__, {f"packed programs per solver, {args.cluster}": rows})
        return
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
    if args.record:
        record_results(__file__, {f"LP solve time per allocation, {args.cluster}": rows})


def _solve_ecos(program) -> np.ndarray | None:  # noqa: ANN001 -- a ConicProgram
    """The program through ECOS's own API (the cones of ``_solve_clarabel``), or ``None``
    where ECOS is not installed or fails."""
    try:
        import ecos
    except ImportError:
        return None
    import scipy.sparse as sp

    num_vars = len(program.cost)
    nonnegative = np.flatnonzero(program.nonnegative)
    rows = [program.upper, sp.csr_matrix((-np.ones(len(nonnegative)), (
        np.arange(len(nonnegative)), nonnegative)), shape=(len(nonnegative), num_vars))]
    bounds = [program.upper_bound, np.zeros(len(nonnegative))]
    cones: list[int] = []
    if program.product is not None:
        total, difference = program.first + program.second, program.first - program.second
        count = len(program.product)
        order = np.arange(3 * count).reshape(3, count).T.ravel()
        rows.append(sp.vstack([-total, -difference, sp.csr_matrix((count, num_vars))]
                              ).tocsr()[order])
        bounds.append(np.stack([-program.first_offset - program.second_offset,
                                program.second_offset - program.first_offset,
                                2.0 * np.sqrt(np.maximum(program.product, 0.0))],
                               axis=1).ravel())
        cones = [3] * count
    matrix = sp.vstack(rows, format="csc")
    dims = {"l": matrix.shape[0] - 3 * len(cones), "q": cones, "e": 0}
    extra = {} if program.equal is None else {
        "A": sp.csc_matrix(program.equal), "b": np.zeros(program.equal.shape[0])}
    answer = ecos.solve(program.cost, matrix, np.concatenate(bounds), dims, verbose=False,
                        **extra)
    return None if answer["info"]["exitFlag"] != 0 else np.asarray(answer["x"])


def packed_rows(job_counts: list[int], repeats: int, cluster_text: str) -> list[dict[str, Any]]:
    from dataclasses import replace
    from itertools import islice

    from bayes_sched.cluster import ClusterState
    from bayes_sched.cluster_spec import load_cluster_spec
    from bayes_sched.estimates import NO_ESTIMATES
    from bayes_sched.mechanisms.time_fraction_lp import (
        fastest_finish_program,
        finish_by_program,
        min_max_ratio_program,
        solve_program,
    )
    from bayes_sched.policies import make_policy
    from bayes_sched.policies.gavel.min_total_duration import gavel_horizon
    from bayes_sched.policies.gavel.packing import packed_layout
    from bayes_sched.policies.gavel.time_sharing import AllocationInputs
    from bayes_sched.sim.gavel_jobs import generate_continuous_jobs
    from bayes_sched.sim.table_cluster import TableCluster
    from bayes_sched.tables import print_table
    from bayes_sched.throughputs import load_gavel_throughputs

    spec = replace(load_cluster_spec(cluster_text), round_interval=360.0)
    rows = []
    for num_jobs in job_counts:
        jobs = [replace(job, submit_time=0.0) for job in
                islice(generate_continuous_jobs(1.0, 0, True), num_jobs)]
        views = [replace(v, age=3600.0) for v in
                 TableCluster(jobs, spec, load_gavel_throughputs()).job_views()]
        policy = make_policy("finish_time_fairness_packed")
        seen: list[AllocationInputs] = []
        policy.allocate_combinations = seen.append  # type: ignore[method-assign,assignment]
        logging.disable(logging.WARNING)  # the captured decision itself keeps no allocation
        policy.decide(ClusterState(spec=spec, now=3600.0), views, NO_ESTIMATES)
        logging.disable(logging.NOTSET)
        inputs = seen[0]
        terms = packed_layout(inputs).terms
        elapsed, remaining, denominator = policy._ratio_terms(inputs, inputs.throughputs)
        shortest = fastest_finish_program(terms, inputs.capacities, remaining)
        reference = solve_program(shortest, "CLARABEL")
        assert reference is not None
        programs = {
            "ftf_socp": (min_max_ratio_program(terms, inputs.capacities, elapsed, remaining,
                                               denominator), ("CLARABEL", "ECOS")),
            "mtd_horizon_lp": (shortest, ("CLARABEL", "HIGHS", "ECOS")),
            "mtd_feasibility_lp": (finish_by_program(
                terms, inputs.capacities, remaining, gavel_horizon(1.0 / reference[-1])),
                ("CLARABEL", "HIGHS"))}
        for name, (program, solvers) in programs.items():
            answers: dict[str, np.ndarray] = {}
            for solver in solvers:
                cpu = []
                for _ in range(repeats):
                    start = time.process_time()
                    answer = (_solve_ecos(program) if solver == "ECOS"
                              else solve_program(program, solver))
                    cpu.append(time.process_time() - start)
                if answer is None:
                    continue
                answers[solver] = answer
                base = answers["CLARABEL"]
                gap = abs(program.cost @ answer - program.cost @ base) / max(
                    abs(program.cost @ base), 1e-300)
                rows.append({"program": name, "jobs": num_jobs,
                             "entries": program.num_entries, "solver": solver,
                             "cpu_ms": round(1000 * float(np.median(cpu)), 1),
                             "objective_gap": float(gap),
                             "entries_l1_from_clarabel": round(float(np.abs(
                                 answer[:program.num_entries]
                                 - base[:program.num_entries]).sum()), 3)})
                print(" ".join(f"{k}={v}" for k, v in rows[-1].items()), flush=True)
    print_table(rows, title=f"packed programs per solver, {cluster_text}")
    return rows


if __name__ == "__main__":
    main()
