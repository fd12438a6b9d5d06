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

Measured (session 12, seed 0, every held-out type, load 14-18 on 2 shared cores; ``own`` scope:
the cells the learner did not profile; MAE in steps/s; coverage of the 90% interval; Gavel's and
Sia's are point estimates):

    table       cells            learner      plan     n     MAE    mean rel  coverage90
    simulation  alone (multi)    ours         one-gpu   168   5.32  0.099     0.911
                                 Sia's        one-gpu   168  11.77  0.219     -
                                 ours         own         2   0.13  0.031     1.000
                                 ours, prior  none      246  12.16  0.445     0.846
    simulation  paired           ours         own      3691   1.38  0.137     0.906
                                 Gavel's PMF  own      3470   1.89  0.197     -
                                 Sia's        own      3691   1.75  0.198     -
    tacc        alone            ours         own        70   3.57  0.062     0.857
                                 Sia's        own       165   7.59  0.138     -

Before the (family, scale, GPU) batch slope (main at 52dee37): simulation alone, ours' own plan
(which then profiled 1 GPU on one type): 55 cells, MAE 9.13, coverage 0.836; with the one-gpu
plan 168 cells, MAE 8.27, coverage 0.857; paired MAE 1.47, coverage 0.902; tacc MAE 4.14,
coverage 0.942. Ours' plan now profiles a multi-GPU job at its own scale on every GPU type, so
the own-plan alone comparison has 2 cells left; ``--plan one-gpu`` scores every learner on the
same 168.

Seeds 1 and 2 (session 13; the plan is the same, the seed moves the posterior draws and Gavel's
PMF): ``--seeds 1 2 --json`` at 62e8ba9 (load ~27) and ``--tables simulation --learners bayes sia
--plan one-gpu --seeds 1 2 --json`` at e9f933a (ours' fixed priors, load ~13); seed 1 / seed 2:

    table       cells            learner      plan     n     MAE          coverage90
    simulation  alone (multi)    ours         one-gpu   168   5.33 / 5.33  0.887 / 0.899
                                 Sia's        one-gpu   168  11.77 / 11.77 -
    simulation  paired           ours         own      3691   1.38 / 1.38  0.902 / 0.902
                                 Gavel's PMF  own      3466   1.53 / 1.76  -
                                 Sia's        own      3691   1.75 / 1.75  -
    tacc        alone            ours         own        70   3.57 / 3.57  0.871 / 0.871
                                 Sia's        own       165   7.59 / 7.59  -

Every one of ours' coverages over seeds 0-2 is inside 85-95%; ours' MAE is the lowest on every
row and seed.

Session 15: ours' plan now reads the exact posterior covariance (it took 512 draws' sample
covariance, whose noise chose among near-equal variances): a job's own scale on every GPU type
has a little more variance than one GPU of a type, so the plan measures every alone cell a job
needs on both tables, and the ``own`` alone rows are empty (simulation: 2 cells before, tacc:
70). ``--learners bayes --plan own --seeds 0`` (load ~3): paired, n 3691, MAE 1.38, coverage
0.906, as before; the ``one-gpu`` rows do not read ours' plan and are unchanged. The alone
comparison at equal cost is ``--plan one-gpu``.

Session 18: many draws of a few cells come from their ``(N, N)`` covariance's root (not through
every effect), so the intervals' Monte Carlo endpoints moved; the means did not.
``--learners bayes --plan one-gpu --seeds S`` (load ~2), seeds 0 / 1 / 2, before (12212fd) and
after: simulation alone (168 cells, MAE 5.33 both) coverage 0.911 / 0.887 / 0.899 before,
0.893 / 0.881 / 0.911 after; paired (3691, MAE 1.38) 0.906 / 0.902 / 0.902 before, 0.906 /
0.901 / 0.903 after; tacc alone at seed 0 (165 cells, MAE 3.62) 0.830 before, 0.824 after (this
plan on tacc was under 85% before too; ours' own plan profiles every alone cell there).
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from functools import partial

import numpy as np


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
