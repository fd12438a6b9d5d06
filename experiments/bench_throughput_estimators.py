"""Held-out throughput prediction for job types never seen: ours vs Gavel's PMF vs Sia's bootstrap.

Leave one job type out (:mod:`bayes_sched.estimation.throughput.held_out`) on Gavel's simulation
table (alone and paired cells) and Shockwave's tacc table (alone only): each learner is fit to the
other types, measures the held-out type in its own profiling cells, and predicts every cell a job
of that type needs at each of its scale factors. Printed per table, seed, learner and kind: mean
absolute error (steps/s), mean and median relative error and 90% interval coverage (target
85-95%; a point estimator covers only what it gets exactly right) on the cells the learner did not
profile (``own``) and on those no learner profiled (``common``); then each learner's mean fit and
refit seconds and profiled cells per job.

Learners: ``bayes`` (ours, uncertainty-driven plan of one cell per GPU type), ``bayes-prior``
(ours, no profiling: submission-time features only), ``gavel`` (16 reference types, 20% of pairs,
rank 10), ``sia`` (one GPU of every type).

    python experiments/bench_throughput_estimators.py [--tables simulation tacc] [--seeds 0]
        [--every 1] [--draws 200] [--plan own|one-gpu] [--json]

Measured figures (each run's command, commit, date and load): docs/results/bench_throughput_estimators.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from experiments.results_record import add_record_flag, record_results  # noqa: E402


def main() -> None:
    from bayes_sched.estimation.throughput import (
        BayesianThroughputLearner,
        GavelMatrixCompletionLearner,
        SiaBootstrapLearner,
    )
    from bayes_sched.estimation.throughput.held_out import (
        leave_one_type_out,
        one_gpu_plan,
        summarise,
    )
    from bayes_sched.estimation.throughput_cells import ThroughputLearner
    from bayes_sched.tables import print_json, print_table
    from bayes_sched.throughputs import load_throughputs

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tables", nargs="+", default=["simulation", "tacc"],
                        choices=["simulation", "physical", "tacc"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--every", type=int, default=1,
                        help="hold out every n-th job type only (1: all)")
    parser.add_argument("--draws", type=int, default=200)
    parser.add_argument("--learners", nargs="+", default=["bayes", "bayes-prior", "gavel", "sia"],
                        choices=["bayes", "bayes-prior", "gavel", "sia"])
    parser.add_argument("--timing", action="store_true",
                        help="also time ours online: cold fit, warm refit and conditioning on the "
                             "whole simulation table, predictions for 100 active jobs")
    parser.add_argument("--plan", choices=["own", "one-gpu"], default="own",
                        help="profiling: each learner's own plan, or Sia's (one GPU of every "
                             "type) for all, scoring every learner on the same cells")
    parser.add_argument("--json", action="store_true")
    add_record_flag(parser)
    args = parser.parse_args()
    if args.every < 1 or args.draws < 2:
        parser.error("--every must be >= 1 and --draws >= 2")

    rows: list[dict[str, object]] = []
    timing: list[dict[str, object]] = []
    started = time.perf_counter()
    for table_name in args.tables:
        table = load_throughputs(table_name)
        held_out = list(table.job_types)[::args.every]
        for seed in args.seeds:
            factories: dict[str, Callable[[], ThroughputLearner]] = {
                "bayes": BayesianThroughputLearner,
                "bayes-prior": partial(BayesianThroughputLearner, profiling_budget=0),
                "gavel": partial(GavelMatrixCompletionLearner, seed=seed),
                "sia": SiaBootstrapLearner,
            }
            result = leave_one_type_out(table, {n: factories[n] for n in args.learners},
                                        held_out, num_draws=args.draws, seed=seed,
                                        plan=one_gpu_plan if args.plan == "one-gpu" else None)
            for row in summarise(result.records):
                rows.append({"table": table_name, "seed": seed, **row})
            for name in args.learners:
                timing.append({
                    "table": table_name, "seed": seed, "learner": name,
                    "fit_s_mean": float(np.mean(result.fit_seconds[name])),
                    "fit_s_max": float(np.max(result.fit_seconds[name])),
                    "refit_s_mean": float(np.mean(result.refit_seconds[name])),
                    "profiled_cells_per_job": float(np.mean(result.profiled_cells[name]))})
    online = _online_timing(args.draws) if args.timing else []
    load = os.getloadavg()[0]
    title = (f"held-out job types ({', '.join(args.tables)}; plan {args.plan}; every "
             f"{args.every}; seeds "
             f"{args.seeds}; {time.perf_counter() - started:.0f} s; load {load:.1f})")
    if args.record:
        tables = {"held-out errors": rows, "fit seconds and profiling per learner": timing,
                  "ours online, Gavel's simulation table": online}
        record_results(__file__, {title: found for title, found in tables.items() if found})
    if args.json:
        print_json({"errors": rows, "timing": timing, "online": online, "load_average": load})
        return
    print_table(rows, title=title)
    print_table(timing, title="fit seconds and profiling per learner")
    if online:
        print_table(online, title=f"ours online, Gavel's simulation table (load {load:.1f})")


def _online_timing(num_draws: int) -> list[dict[str, object]]:
    """Ours as an online estimation stage would run it, on every cell of Gavel's simulation
    table (the most an online fit can see: 2,130 positive cells): a cold fit, a warm refit after
    one more round of reports (every cell again, rates perturbed by 5%), conditioning only, and
    one prediction of the cells 100 active jobs need (alone on every GPU type and beside each
    other) with ``num_draws`` joint draws. Wall and CPU seconds (one BLAS thread: CPU seconds
    are what the step costs on an idle core)."""
    from bayes_sched.cells import Cell, CellObservation
    from bayes_sched.estimation.throughput import BayesianThroughputLearner, table_observations
    from bayes_sched.throughputs import load_throughputs

    table = load_throughputs("simulation")
    reports = table_observations(table)
    rng = np.random.default_rng(0)
    again = [CellObservation(o.cell, o.steps_per_second * float(np.exp(rng.normal(0, 0.05))),
                             o.seconds, 720.0) for o in reports]
    learner = BayesianThroughputLearner()
    rows = []
    for what, run in (("cold fit", lambda: learner.fit(reports)),
                      ("warm refit, one more round", lambda: learner.fit([*reports, *again])),
                      ("conditioning only",
                       lambda: learner.conditioning_only().fit([*reports, *again]))):
        start, cpu = time.perf_counter(), time.process_time()
        belief = run()
        rows.append({"step": what, "seconds": time.perf_counter() - start,
                     "cpu_seconds": time.process_time() - cpu,
                     "iterations": belief.iterations, "cells": belief.num_cells})
    types = [t for t, sf in table.solo if sf == 1]
    jobs = [types[int(i)] for i in rng.integers(len(types), size=100)]
    gpus = table.gpu_types()
    cells = [Cell(j, 1, g) for j in jobs for g in gpus]
    cells += [Cell(a, 1, g, b) for i, a in enumerate(jobs) for k, b in enumerate(jobs) if i != k
              for g in gpus]
    start, cpu = time.perf_counter(), time.process_time()
    belief.predict(cells, num_draws=num_draws, seed=0)
    rows.append({"step": f"predict 100 jobs, {num_draws} draws",
                 "seconds": time.perf_counter() - start,
                 "cpu_seconds": time.process_time() - cpu, "iterations": 0, "cells": len(cells)})
    return rows


if __name__ == "__main__":
    main()
