"""``bayes-sched simulate`` and ``bayes-sched compare``: run the trace-driven cluster simulator."""

from __future__ import annotations

import argparse
import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import replace

from bayes_sched.cli._common import fail, print_table, progress_bar
from bayes_sched.cli.options import (
    OUT_DIR_RULE,
    check_out_dir,
    finite_float,
    int_in_range,
    positive_int,
)
from bayes_sched.errors import InputError
from bayes_sched.policies import POLICIES, make_policy
from bayes_sched.sim import SimConfig, read_workload, run_simulation, write_report
from bayes_sched.sim.hidden import make_hidden
from bayes_sched.sim.report import policy_rows, summary_rows
from bayes_sched.sim.run import SimulationResult
from bayes_sched.sim.workload import Workload

#: Exit status of a simulation that ran but left jobs unfinished at its horizon.
EXIT_UNFINISHED = 3

#: Bounds of the simulated cluster's shape and of its times (seconds).
MAX_NODES = 10_000
MAX_GPUS_PER_NODE = 1024
DAY = 86_400.0

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
    simulate.add_argument("--out", help="write the report (tables, timeline, plots) here; "
                          f"{OUT_DIR_RULE}")
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
    compare.add_argument("--out", default="sim-report",
                         help=f"report folder (default: sim-report); {OUT_DIR_RULE}")
    compare.add_argument("--processes", type=int_in_range(1, 256),
                         default=min(os.cpu_count() or 1, 8),
                         help="parallel simulations (default: CPU count, at most 8)")
    compare.set_defaults(handler=_compare)


def _cluster_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nodes", type=int_in_range(1, MAX_NODES), default=16,
                        help="nodes (default 16)")
    parser.add_argument("--gpus-per-node", type=int_in_range(1, MAX_GPUS_PER_NODE), default=4,
                        help="GPUs per node (default 4)")
    parser.add_argument("--interval", type=finite_float(1.0, DAY, unit="seconds"), default=60.0,
                        help="seconds per scheduling round, in [1, 86400] (default 60)")
    parser.add_argument("--restart-delay", type=finite_float(0.0, DAY, unit="seconds"),
                        default=30.0, help="seconds lost per restart, in [0, 86400] (default 30)")
    parser.add_argument("--interference", type=finite_float(0.0, 1.0, max_open=True),
                        default=0.0,
                        help="slowdown of distributed jobs sharing a node, in [0, 1) (default 0)")
    parser.add_argument("--hidden", choices=("none", "contention", "gavel"), default="none",
                        help="hidden interference no policy sees: the contention generator's "
                             "max-min law (emits counters) or one built from Gavel's measured "
                             "pairs (default none)")
    parser.add_argument("--max-jobs", type=positive_int,
                        help="only the first N jobs of each workload")
    parser.add_argument("--no-avoid-interference", action="store_true",
                        help="Pollux may put several distributed jobs on one node")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def _config(args: argparse.Namespace) -> SimConfig:
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


def check_horizon(workload: Workload, config: SimConfig) -> None:
    """Refuse, before simulating, a job submitted at or after the horizon: it could never run."""
    for job in workload.jobs:
        if job.submit_time >= config.max_time:
            raise InputError(f"job '{job.name}' is submitted at {job.submit_time:g} s, at or after the "
                             f"simulation horizon ({config.max_time:g} s): expected earlier "
                             "submission times", workload.source or workload.name, column="time")


def report_unfinished(results: list[SimulationResult]) -> int:
    """0 when every job of every run finished; else one line naming them and
    :data:`EXIT_UNFINISHED` (the summaries' JCT statistics then cover the finished jobs only)."""
    lines = []
    for result in results:
        unfinished = result.jobs.loc[result.jobs["completion_time"].isna(), "job"].astype(str)
        if len(unfinished):
            names = ", ".join(unfinished.iloc[:5]) + (", ..." if len(unfinished) > 5 else "")
            lines.append(f"{result.policy} on {result.workload}: {len(unfinished)} of "
                         f"{len(result.jobs)} jobs unfinished ({names})")
    if not lines:
        return 0
    horizon = results[0].config.max_time
    return fail(f"jobs did not finish within the simulation horizon ({horizon:g} s): "
                f"{'; '.join(lines)}", status=EXIT_UNFINISHED)


def _simulate(args: argparse.Namespace) -> int:
    config = _config(args)
    if args.out:
        check_out_dir(args.out)
    workload = read_workload(args.workload)
    if args.max_jobs:
        workload = workload.head(args.max_jobs)
    check_horizon(workload, config)
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
    return report_unfinished([result])


def _run_one(task: tuple[str, str, SimConfig, int | None, bool]) -> SimulationResult:
    workload_name, policy_name, config, max_jobs, avoid = task
    workload = read_workload(workload_name)
    if max_jobs:
        workload = workload.head(max_jobs)
    return run_simulation(workload, _policy(policy_name, avoid, config.restart_delay), config)


def _compare(args: argparse.Namespace) -> int:
    config = _config(args)
    check_out_dir(args.out)
    for name in args.workloads:  # fail fast, before any process starts
        workload = read_workload(name)
        check_horizon(workload.head(args.max_jobs) if args.max_jobs else workload, config)
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
    order = {(p, w): i for i, (p, w) in enumerate(
        (p, w) for p in args.policies for w in args.workloads)}
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
    return report_unfinished(results)


def _print(rows: list[dict[str, object]], as_json: bool, title: str) -> None:
    print_table([{k: row[k] for k in _TABLE_COLUMNS} for row in rows], title=title,
                as_json=as_json)
