"""A policy option judged over seeds: whole continuous Gavel runs with and without it, paired.

A faster implementation may decide differently (another optimum of the same program, another
search path); the project judges such a change by its outcomes over seeds, paired, with
intervals, not by old digests. Per seed, one whole run of ``--policy`` with its defaults and one
with ``--baseline-opt`` (the setting the change replaced) on Gavel's continuous multi-GPU setting
(:func:`experiments.bench_sim_speed.gavel_run_row`: Gavel's generator at ``--rate`` jobs/h, that
seed, exactly ``--jobs`` jobs, then the cluster drains; 36 V100 + 36 P100 + 36 K80, 360 s
rounds, one BLAS thread). The seed is also the policy's seed (its solver's or search's), the
same in both runs of a pair.

Prints per seed the average JCT (hours) and the CPU seconds of both runs and their ratios
(default over baseline), both runs' cluster utilisation and restarts per job (how the rounds
carried the allocations out), then each ratio's mean over seeds with its 90% Student-t interval
(:func:`bayes_sched.sim.seeds.mean_interval`). A JCT interval that holds 1 finds no difference.

    python experiments/paired_gavel_runs.py --policy sia --baseline-opt mip_heuristics=true \
        [--seeds 0 1 2 3 4] [--jobs 600] [--rate 2.6] [--policy-opt KEY=VALUE] [--json] [--record]

Measured figures (each run's command, commit, date and load): docs/results/paired_gavel_runs.md.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from experiments.bench_sim_speed import gavel_run_row  # noqa: E402
from experiments.results_record import add_record_flag, record_results  # noqa: E402

#: The most jobs a run may take (Gavel's longest runs: 6,000), and the most seeds.
MAX_JOBS = 6000
MAX_SEEDS = 100


def paired_rows(policy: str, baseline: list[str], options: list[str], seeds: list[int],
                jobs: int, rate: float) -> list[dict[str, object]]:
    """One row per seed: both runs' average JCT and CPU seconds, and their ratios."""
    rows = []
    for seed in seeds:
        runs = [gavel_run_row(policy, jobs, rate, seed, math.inf, options=[*options, *extra],
                              arrivals_stop=True) for extra in ([], baseline)]
        new, old = runs
        rows.append({"seed": seed, "avg_jct_h": new["avg_jct_h"],
                     "baseline_avg_jct_h": old["avg_jct_h"],
                     "jct_ratio": _ratio(new["avg_jct_h"], old["avg_jct_h"]),
                     "cpu_s": new["cpu_s"], "baseline_cpu_s": old["cpu_s"],
                     "cpu_ratio": _ratio(new["cpu_s"], old["cpu_s"]),
                     "utilization": new["utilization"],
                     "baseline_utilization": old["utilization"],
                     "restarts_per_job": new["restarts_per_job"],
                     "baseline_restarts_per_job": old["restarts_per_job"]})
    return rows


def _ratio(new: object, old: object) -> float | None:
    """``new / old`` to 4 decimals; None where either is not a number (a run given up as
    stalled has no average JCT: "-") or ``old`` is 0 (a CPU time rounded to 0 s)."""
    if not (isinstance(new, int | float) and isinstance(old, int | float)) or old == 0:
        return None
    return round(float(new) / float(old), 4)


def summary_rows(rows: list[dict[str, object]]) -> list[dict[str, object]]:
    """Each ratio's mean over the seeds and its 90% interval."""
    from bayes_sched.sim.seeds import mean_interval

    out = []
    for name in ("jct_ratio", "cpu_ratio"):
        values = [math.nan if row[name] is None else float(row[name])  # type: ignore[arg-type]
                  for row in rows]
        mean, low, high = mean_interval(values)
        bounds = {"lower_90": low, "upper_90": high}  # None: one seed gives no interval
        out.append({"ratio": name, "seeds": len(rows),
                    **{key: None if math.isnan(value) else round(value, 4)
                       for key, value in {"mean": mean, **bounds}.items()}})
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--policy", required=True)
    parser.add_argument("--baseline-opt", action="append", default=[], metavar="KEY=VALUE",
                        required=True, help="the baseline's setting (repeatable)")
    parser.add_argument("--policy-opt", action="append", default=[], metavar="KEY=VALUE",
                        help="a setting of both runs (repeatable)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--jobs", type=int, default=600)
    parser.add_argument("--rate", type=float, default=2.6, help="jobs per hour")
    parser.add_argument("--json", action="store_true")
    add_record_flag(parser)
    args = parser.parse_args()
    from threadpoolctl import threadpool_limits

    from bayes_sched.errors import InputError
    from bayes_sched.policies import POLICIES
    from bayes_sched.tables import print_table
    from bayes_sched.worlds import TABLE_WORLD_POLICIES

    if args.policy not in TABLE_WORLD_POLICIES:
        parser.error(f"--policy: {args.policy!r} is not a throughput-table policy; expected one "
                     f"of {', '.join(TABLE_WORLD_POLICIES)}")
    if not 1 <= args.jobs <= MAX_JOBS:
        parser.error(f"--jobs: {args.jobs} is not a count from 1 to {MAX_JOBS}")
    if not 1 <= len(args.seeds) <= MAX_SEEDS:
        parser.error(f"--seeds: {len(args.seeds)} seeds; expected 1 to {MAX_SEEDS}")
    if not (math.isfinite(args.rate) and args.rate > 0):
        parser.error(f"--rate: {args.rate} is not a positive number of jobs per hour")
    for flag, values in (("--policy-opt", args.policy_opt),
                         ("--baseline-opt", [*args.policy_opt, *args.baseline_opt])):
        try:  # bad options fail here, in one line, before any run
            POLICIES.parse(args.policy, values, flag)
        except InputError as error:
            parser.error(str(error))
    with threadpool_limits(1):
        rows = paired_rows(args.policy, args.baseline_opt, args.policy_opt, args.seeds,
                           args.jobs, args.rate)
    summary = summary_rows(rows)
    title = (f"{args.policy}, {args.jobs} jobs at {args.rate:g}/h: defaults"
             f"{' + ' + ' '.join(args.policy_opt) if args.policy_opt else ''} over "
             f"{' '.join(args.baseline_opt)}")
    tables = {f"{title}, per seed": rows, f"{title}, ratios over seeds": summary}
    if args.json:  # one document
        print(json.dumps({"per_seed": rows, "summary": summary}, indent=1))
    else:
        for name, table in tables.items():
            print_table(table, title=name)
    if args.record:
        record_results(__file__, tables)
    return 0


if __name__ == "__main__":
    sys.exit(main())
