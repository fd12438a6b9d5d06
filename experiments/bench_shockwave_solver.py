"""Shockwave's planner: seconds per plan with each open MIP solver on the same cluster states.

The tacc_32gpus setting (120-job trace, 32 V100, 120 s rounds) runs under ``shockwave`` with
HiGHS; at sampled rounds, a copy of the policy re-plans the same state with each solver (a full
plan: the 20-round MILP, and when its fairness constraints are infeasible the relaxed MILP and the
round ranking), and the wall and CPU time of that decision and the most branch-and-bound nodes of
its programs are recorded. Shockwave used Gurobi with a 15 s cap; the issue's target is a median
<= 2 s at 32 GPUs with an open solver. CLARABEL (cvxpy's default conic solver) solves no integer
programs and is not a candidate.

    python experiments/bench_shockwave_solver.py [--rounds 10 20 30 40 50 60] [--solvers HIGHS SCIP]

Measured figures (each run's command, commit, date and load): docs/results/bench_shockwave_solver.md.
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from experiments.results_record import add_record_flag, record_results  # noqa: E402


def main() -> None:
    import cvxpy as cp
    import numpy as np

    from bayes_sched.cluster_spec import load_cluster_spec
    from bayes_sched.estimates import Estimates
    from bayes_sched.estimation.choose import choose_estimators
    from bayes_sched.policies import make_policy
    from bayes_sched.policies.shockwave import ShockwavePolicy
    from bayes_sched.sim.oracles import world_oracles
    from bayes_sched.sim.shockwave_cluster import ShockwaveCluster
    from bayes_sched.sim.shockwave_jobs import read_shockwave_trace, shipped_shockwave_trace
    from bayes_sched.sim.table_cluster import TableCluster
    from bayes_sched.sim.table_run import run_table_simulation
    from bayes_sched.tables import print_table
    from bayes_sched.throughputs import load_shockwave_throughputs

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, nargs="+", default=[10, 20, 30, 40, 50, 60])
    parser.add_argument("--solvers", nargs="+", default=["HIGHS", "SCIP"])
    add_record_flag(parser)
    args = parser.parse_args()
    solvers = [s for s in args.solvers if s in cp.installed_solvers()]
    for missing in sorted(set(args.solvers) - set(solvers)):
        print(f"{missing}: skipped, not installed (pip install pyscipopt for SCIP)")
    spec = replace(load_cluster_spec("v100:32"), round_interval=120.0)
    policy = make_policy("shockwave")
    assert isinstance(policy, ShockwavePolicy)
    # What every round of the run publishes for it (its defaults: the tacc table, Dirichlet's
    # predictor; neither learns), for the trial plans.
    table = load_shockwave_throughputs()
    estimates = Estimates(entry for estimator in choose_estimators(
        policy.needs, None, policy.default_estimators, world_oracles(table))
        for entry in estimator.published())
    seconds: dict[str, list[float]] = {s: [] for s in solvers}
    cpu_seconds: dict[str, list[float]] = {s: [] for s in solvers}
    rows = []

    def sample(cluster: TableCluster) -> None:
        index = len(cluster.timeline_time)
        if index not in args.rounds:
            return
        views, state = cluster.job_views(), cluster.state
        row: dict[str, object] = {"round": index, "active_jobs": len(views)}
        for solver in solvers:
            trial = copy.deepcopy(policy, {id(table): table})  # table shared
            trial.solver = solver
            trial._names = frozenset()  # a changed job set: a full re-plan
            start, cpu = time.perf_counter(), time.process_time()
            trial.decide(state, views, estimates)
            took = time.perf_counter() - start
            seconds[solver].append(took)
            cpu_seconds[solver].append(time.process_time() - cpu)
            row[f"{solver}_s"] = round(took, 3)
            row[f"{solver}_cpu_s"] = round(cpu_seconds[solver][-1], 3)
            row[f"{solver}_nodes"] = max(trial.solve_nodes, default=0)
            row[f"{solver}_failed"] = int(trial.stats()["solver_failures"])
        rows.append(row)
        print(" ".join(f"{k}={v}" for k, v in row.items()), flush=True)

    run_table_simulation(read_shockwave_trace(shipped_shockwave_trace("tacc_120")), policy, spec,
                         table=table, cluster_type=ShockwaveCluster,
                         max_time=120.0 * max(args.rounds), on_round=sample)
    print_table(rows, title="Shockwave plan on tacc_120 states: seconds per solver")
    summary = [{"solver": s, "plans": len(v), "median_s": round(float(np.median(v)), 3),
                "max_s": round(float(np.max(v)), 3),
                "median_cpu_s": round(float(np.median(cpu_seconds[s])), 3)}
               for s, v in seconds.items() if v]
    print_table(summary, title=f"Seconds per plan (32 GPUs, 20 future rounds, {policy.max_nodes} "
                               "nodes at most, gap 1e-3)")
    if args.record:
        record_results(__file__, {"per sampled round": rows, "per solver": summary})


if __name__ == "__main__":
    main()
