"""``bayes-sched simulate`` and ``bayes-sched compare``: run the trace-driven cluster simulator."""

from __future__ import annotations

import argparse
import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import replace
from typing import TYPE_CHECKING

from bayes_sched.cli._common import print_table, progress_bar
from bayes_sched.errors import InputError
from bayes_sched.policies import POLICIES, make_policy

# The simulator (numpy, pandas, torch through the policies) is imported by the handlers, so
# ``--help`` stays instant.
if TYPE_CHECKING:
    from bayes_sched.sim import SimConfig
    from bayes_sched.sim.run import SimulationResult

_TABLE_COLUMNS = ("policy", "workload", "finished", "avg_jct", "median_jct", "p99_jct", "makespan",
                  "utilization", "ftf_mean", "restarts_per_job", "decision_median_ms",
                  "decision_p95_ms", "wall_s")


def register(subparsers: argparse._SubParsersAction) -> None:
    simulate = subparsers.add_parser(
        "simulate", help="simulate one workload under one policy",
        description="Simulate a workload (a CSV or a shipped name such as workload-6 or "
                    "workloads-2.0/workload-3) under a policy and print its summary.")
    simulate.add_argument("--workload", required=True, help="workload CSV or shipped name")
    simulate.add_argument("--policy", default="pollux", choices=sorted(POLICIES))
    _cluster_options(simulate)
    simulate.add_argument("--out", help="write the report (tables, timeline, plots) here")
    simulate.set_defaults(handler=_simulate)

    compare = subparsers.add_parser(
        "compare", help="simulate policies x workloads and write one report",
        description="Run every policy on every workload (in parallel processes) and write one "
                    "report: summary tables, per-job outcomes, timelines and plots.")
    compare.add_argument("--policies", nargs="+", default=["pollux", "tiresias", "optimus", "fifo"],
                         choices=sorted(POLICIES), metavar="POLICY")
    compare.add_argument("--workloads", nargs="+",
                         default=[f"workload-{i}" for i in range(1, 9)], metavar="WORKLOAD")
    _cluster_options(compare)
    compare.add_argument("--out", default="sim-report", help="report folder (default: sim-report)")
    compare.add_argument("--processes", type=int, default=min(os.cpu_count() or 1, 8),
                         help="parallel simulations (default: CPU count, at most 8)")
    compare.set_defaults(handler=_compare)


def _cluster_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nodes", type=int, default=16, help="nodes (default 16)")
    parser.add_argument("--gpus-per-node", type=int, default=4, help="GPUs per node (default 4)")
    parser.add_argument("--interval", type=float, default=60.0,
                        help="seconds per scheduling round (default 60)")
    parser.add_argument("--restart-delay", type=float, default=30.0,
                        help="seconds lost per restart (default 30)")
    parser.add_argument("--interference", type=float, default=0.0,
                        help="slowdown of distributed jobs sharing a node, in [0, 1) (default 0)")
    parser.add_argument("--hidden", choices=("none", "contention", "gavel"), default="none",
                        help="hidden interference no policy sees: the contention generator's "
                             "max-min law (emits counters) or one built from Gavel's measured "
                             "pairs (default none)")
    parser.add_argument("--max-jobs", type=int, help="only the first N jobs of each workload")
    parser.add_argument("--no-avoid-interference", action="store_true",
                        help="Pollux may put several distributed jobs on one node")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def _config(args: argparse.Namespace) -> SimConfig:
    from bayes_sched.sim import SimConfig
    from bayes_sched.sim.hidden import make_hidden

    if args.max_jobs is not None and args.max_jobs < 1:
        raise InputError(f"--max-jobs is {args.max_jobs}: expected at least 1")
    return SimConfig(num_nodes=args.nodes, gpus_per_node=args.gpus_per_node,
                     interval=args.interval, restart_delay=args.restart_delay,
                     interference=args.interference, hidden=make_hidden(args.hidden))


def _policy(name: str, avoid_interference: bool, restart_delay: float):  # noqa: ANN202
    policy = make_policy(name)
    if hasattr(policy, "avoid_interference"):
        policy.avoid_interference = avoid_interference
    if hasattr(policy, "restart_delay"):
        policy.restart_delay = restart_delay
    return policy


def _simulate(args: argparse.Namespace) -> int:
    from bayes_sched.sim import read_workload, run_simulation, write_report
    from bayes_sched.sim.report import summary_rows

    config = _config(args)
    workload = read_workload(args.workload)
    if args.max_jobs:
        workload = workload.head(args.max_jobs)
    policy = _policy(args.policy, not args.no_avoid_interference, config.restart_delay)
    with progress_bar(enabled=not args.no_progress and not args.json) as progress:
        task = progress.add_task(f"{policy.name} on {workload.name}: jobs finished",
                                 total=len(workload))

        def on_round(cluster) -> None:  # noqa: ANN001
            done = sum(1 for job in cluster.jobs.values() if not job.active)
            progress.update(task, completed=done)

        result = run_simulation(workload, policy, config, on_round=on_round)
    _print(summary_rows([result]), args.json, f"{policy.name} on {workload.name}")
    if args.out:
        write_report([result], args.out)
    return 0


def _run_one(task: tuple[str, str, SimConfig, int | None, bool]) -> SimulationResult:
    from bayes_sched.sim import read_workload, run_simulation

    workload_name, policy_name, config, max_jobs, avoid = task
    workload = read_workload(workload_name)
    if max_jobs:
        workload = workload.head(max_jobs)
    return run_simulation(workload, _policy(policy_name, avoid, config.restart_delay), config)


def _compare(args: argparse.Namespace) -> int:
    from bayes_sched.sim import read_workload, write_report
    from bayes_sched.sim.report import policy_rows, summary_rows

    config = _config(args)
    for name in args.workloads:  # fail fast, before any process starts
        read_workload(name)
    tasks = [(w, p, replace(config), args.max_jobs, not args.no_avoid_interference)
             for p in args.policies for w in args.workloads]
    # Longest first (Pollux), so the pool's tail is short.
    tasks.sort(key=lambda t: t[1] != "pollux")
    results: list[SimulationResult] = []
    with progress_bar(enabled=not args.no_progress and not args.json) as progress:
        bar = progress.add_task("simulations", total=len(tasks))
        if args.processes <= 1:
            for task in tasks:
                results.append(_run_one(task))
                progress.advance(bar)
        else:
            with ProcessPoolExecutor(max_workers=args.processes) as pool:
                futures = [pool.submit(_run_one, task) for task in tasks]
                for future in as_completed(futures):
                    results.append(future.result())
                    progress.advance(bar)
    order = {(p, w): i for i, (w, p, *_rest) in enumerate(
        (w, p) for p in args.policies for w in args.workloads)}
    results.sort(key=lambda r: order.get((r.policy, r.workload.split("-first")[0]), 0))
    report = write_report(results, args.out)
    rows = summary_rows(results)
    _print(rows, args.json, "runs")
    if not args.json:
        keep = ("policy", "workloads", "avg_jct", "median_jct", "p99_jct", "makespan",
                "utilization", "ftf_mean", "decision_median_ms", "wall_s")
        print_table([{k: row[k] for k in keep} for row in policy_rows(rows)],
                    title="mean over workloads")
        print(f"report: {report}")
    return 0


def _print(rows: list[dict[str, object]], as_json: bool, title: str) -> None:
    print_table([{k: row[k] for k in _TABLE_COLUMNS} for row in rows], title=title,
                as_json=as_json)
