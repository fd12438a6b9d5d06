"""``bayes-sched demo``: the main job on shipped data, end to end.

Fits every shipped model (throughput posterior, efficiency) and writes their report, then
simulates a shipped Pollux workload with the Pollux and Tiresias policies (or those given with
``--policies``) and writes the comparison: tables, timelines and plots.
"""

from __future__ import annotations

import argparse

from bayes_sched.cli._common import fit_cache, progress_bar, stderr
from bayes_sched.cli.options import (
    OUT_DIR_RULE,
    add_cache_options,
    check_cache_dir,
    check_out_dir,
    positive_int,
    seed,
)
from bayes_sched.cli.report import prepare_out_dir, resolve_sources, write_fit_reports
from bayes_sched.cli.simulate import check_horizon, report_unfinished
from bayes_sched.policies import POLICIES
from bayes_sched.tables import print_table
from perfmodel.datasets import POLLUX_MODELS

DEMO_POLICIES = ("pollux", "tiresias")


def _demo(args: argparse.Namespace) -> int:
    from bayes_sched.sim import SimConfig, read_workload, run_simulation, write_report
    from bayes_sched.sim.report import summary_rows

    # Every input is read and checked before the six fits (minutes): a bad workload fails now.
    check_out_dir(args.out)
    check_cache_dir(args)
    workload = read_workload(args.workload)
    if args.max_jobs:
        workload = workload.head(args.max_jobs)
    check_horizon(workload, SimConfig())
    sources = resolve_sources(list(POLLUX_MODELS))
    out = prepare_out_dir(args.out)
    stderr.print(f"[1/2] fitting the {len(POLLUX_MODELS)} shipped Pollux models")
    write_fit_reports(sources, out / "models", seed=args.seed, cache=fit_cache(args),
                      fallback=args.fallback)

    stderr.print(f"[2/2] simulating {workload.name} ({len(workload)} jobs, 64 GPUs) with "
                 f"{' and '.join(args.policies)}")
    results = []
    with progress_bar() as progress:
        for policy in args.policies:
            task = progress.add_task(f"{policy}: jobs finished", total=len(workload))

            def on_round(cluster, task=task) -> None:  # noqa: ANN001
                done = sum(1 for job in cluster.jobs.values() if not job.active)
                progress.update(task, completed=done)

            results.append(run_simulation(workload, policy, on_round=on_round))
    report = write_report(results, out / "simulation")
    keep = ("policy", "workload", "finished", "avg_jct", "median_jct", "p99_jct", "makespan",
            "utilization")
    print_table([{k: row[k] for k in keep} for row in summary_rows(results)],
                title=f"{workload.name}: {' vs '.join(args.policies)} (JCT in seconds)",
                as_json=args.json)
    stderr.print(f"reports: {out / 'models' / 'index.md'} and {report}")
    return report_unfinished(results)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "demo", help="run the end-to-end demo on the shipped data and write a report",
        description="Fit every shipped model's throughput posterior and efficiency (report under "
        "OUT/models; saved fits are reused, --refit to fit again), then simulate a shipped "
        "workload with the Pollux and Tiresias policies (report under OUT/simulation).")
    parser.add_argument("--out", default="report",
                        help=f"report folder (default: report); {OUT_DIR_RULE}")
    parser.add_argument("--workload", default="workload-6",
                        help="shipped workload or CSV to simulate (default: workload-6)")
    parser.add_argument("--max-jobs", type=positive_int, default=None,
                        help="simulate only the first N jobs (a quicker demo)")
    parser.add_argument("--policies", nargs="+", default=list(DEMO_POLICIES),
                        choices=list(POLICIES), metavar="POLICY",
                        help=f"policies to simulate, of {', '.join(POLICIES)} (default: "
                             f"{' '.join(DEMO_POLICIES)})")
    parser.add_argument("--seed", type=seed, default=0, help="random seed (default 0)")
    # The demo is the first thing a new user runs: minutes, not the half hour that NUTS
    # fallbacks of its six fits take on 2 cores. Its pages still mark unreliable intervals.
    parser.add_argument("--fallback", action="store_true",
                        help="refit with NUTS a model whose SVI fit has PSIS k-hat above 0.7 "
                        "(as 'report' does by default; minutes per model); without it the "
                        "pages mark such intervals unreliable")
    parser.add_argument("--json", action="store_true", help="print the comparison as JSON")
    add_cache_options(parser)
    parser.set_defaults(handler=_demo)
