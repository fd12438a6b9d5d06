"""Gavel's continuous-arrival results reproduced: average JCT (hours) of jobs 4000-4999.

Setting (Gavel, OSDI 2020, figure 8 / the repository's ``continuous_jobs*.ipynb``): single-GPU jobs
from Gavel's generator (:func:`bayes_sched.sim.gavel_jobs.generate_continuous_jobs`) arriving at a
rate in jobs/hour on 36 V100 + 36 P100 + 36 K80, 360 s rounds, seed 0; the run ends when jobs
4000-4999 have finished, and their mean JCT is reported beside the published value.

    python experiments/gavel_fidelity.py [--rates 0.4 4.0 5.6] [--policies max_min_fairness
        max_min_fairness_perf] [--seeds 0] [--window 4000 5000] [--multi-gpu]
        [--policy-opt KEY=VALUE] [--json]

``--multi-gpu`` draws scale factors from the Philly mix (Gavel's multi-GPU rows, 2.0 / 2.6
jobs/h). Prints one row per (policy, rate, seed): ours, published, ratio, rounds, wall seconds,
ms per round, LP solves and failures; with several ``--seeds``, also their spread per (policy,
rate).

Measured figures (each run's command, commit, date and load) and what was learnt of Gavel's code
about the rows that miss: docs/results/gavel_fidelity.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from bayes_sched.worlds import GAVEL

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from experiments.results_record import add_record_flag, record_results  # noqa: E402

#: Published average JCT (hours) of jobs 4000-4999, seed 0: single-GPU continuous jobs.
PUBLISHED_HOURS: dict[tuple[str, float], float] = {
    ("max_min_fairness", 0.4): 23.26, ("max_min_fairness", 4.0): 23.49,
    ("max_min_fairness", 5.6): 95.99,
    ("max_min_fairness_perf", 0.4): 17.58, ("max_min_fairness_perf", 4.0): 16.82,
    ("max_min_fairness_perf", 5.6): 28.96,
    ("max_min_fairness_packed", 0.4): 18.42, ("max_min_fairness_packed", 4.0): 16.96,
    ("max_min_fairness_packed", 5.6): 19.64,
    ("gandiva", 5.6): 42.54, ("allox", 5.6): 25.32,
    ("gavel_fifo", 4.8): 99.19, ("fifo_perf", 4.8): 22.24,
}

#: The same with multi-GPU jobs (scale factors from the Philly mix).
PUBLISHED_MULTI_GPU_HOURS: dict[tuple[str, float], float] = {
    ("max_min_fairness", 2.0): 28.91, ("max_min_fairness", 2.6): 70.54,
    ("max_min_fairness_perf", 2.0): 21.90, ("max_min_fairness_perf", 2.6): 36.44,
    ("max_min_fairness_packed", 2.0): 20.85, ("max_min_fairness_packed", 2.6): 30.51,
    ("finish_time_fairness", 2.0): 28.87, ("finish_time_fairness", 2.6): 64.38,
    ("finish_time_fairness_perf", 2.0): 21.80, ("finish_time_fairness_perf", 2.6): 33.90,
}



def run_one(policy_name: str, rate: float, seed: int, window: tuple[int, int],
            solver: str, multi_gpu: bool = False, options: Sequence[str] = ()
            ) -> dict[str, object]:
    from bayes_sched.policies import POLICIES, make_policy
    from bayes_sched.sim.gavel_jobs import generate_continuous_jobs
    from bayes_sched.sim.table_run import run_table_simulation

    spec = GAVEL.cluster()
    policy = make_policy(policy_name, seed=seed, solver=solver,
                         **POLICIES.parse(policy_name, list(options), "--policy-opt"))
    names = [str(i) for i in range(*window)]
    start = time.perf_counter()
    result = run_table_simulation(generate_continuous_jobs(rate, seed, multi_gpu), policy, spec,
                                  jobs_to_complete=names)
    wall = time.perf_counter() - start
    jobs = result.jobs.set_index("job").loc[names]
    ours = float(jobs["jct"].mean() / 3600.0)
    published = (PUBLISHED_MULTI_GPU_HOURS if multi_gpu else PUBLISHED_HOURS).get(
        (policy_name, rate))
    rounds = int(result.summary["rounds"])
    return {
        "policy": policy_name + "".join(f" {o}" for o in options),
        "jobs": "multi-GPU" if multi_gpu else "single-GPU",
        "rate_jobs_per_h": rate, "seed": seed, "solver": _solver_used(policy, solver),
        "avg_jct_h": round(ours, 2),
        "published_h": published,
        "ratio": None if published is None else round(ours / published, 3),
        "jobs_arrived": int(result.summary["jobs"]), "rounds": rounds,
        "wall_s": round(wall, 1), "ms_per_round": round(1000 * wall / max(rounds, 1), 2),
        "lp_solves": int(result.summary.get("allocation_updates", 0)),
        "lp_failures": int(result.summary.get("solver_failures", 0)),
        "lp_inaccurate": int(result.policy_stats.get("lp_inaccurate", 0)),
        "decision_median_ms": round(1000 * float(
            sorted(result.decision_seconds)[len(result.decision_seconds) // 2]), 2),
    }


def _solver_used(policy: object, solver: str) -> str:
    """The solver a row's LPs went to: FTF with Gavel's statement always uses ECOS."""
    from bayes_sched.policies.gavel.finish_time_fairness import FinishTimeFairnessPolicy

    statement = isinstance(policy, FinishTimeFairnessPolicy) and policy.gavel_statement
    return "ECOS" if statement else solver


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", type=float, nargs="+", default=[0.4, 4.0, 5.6])
    parser.add_argument("--policies", nargs="+",
                        default=["max_min_fairness", "max_min_fairness_perf"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--window", type=int, nargs=2, default=[4000, 5000])
    parser.add_argument("--solver", default="CLARABEL", choices=["CLARABEL", "HIGHS"],
                        help="LP solver (default CLARABEL, the policies' default)")
    parser.add_argument("--multi-gpu", action="store_true",
                        help="scale factors from the Philly mix (Gavel's multi-GPU rows)")
    parser.add_argument("--policy-opt", action="append", default=[], metavar="KEY=VALUE",
                        help="a policy option for every policy run (repeatable), e.g. "
                             "gavel_statement=true for max_min_fairness_packed")
    parser.add_argument("--json", action="store_true")
    add_record_flag(parser)
    args = parser.parse_args()
    from bayes_sched.errors import InputError
    from bayes_sched.policies import POLICIES

    for policy in args.policies:  # bad options fail here, in one line, before any run
        try:
            POLICIES.parse(policy, args.policy_opt, "--policy-opt")
        except InputError as error:
            parser.error(str(error))
    rows = []
    for policy in args.policies:
        for rate in args.rates:
            for seed in args.seeds:
                row = run_one(policy, rate, seed, (args.window[0], args.window[1]), args.solver,
                              args.multi_gpu, args.policy_opt)
                rows.append(row)
                if not args.json:
                    print(" ".join(f"{k}={v}" for k, v in row.items()), flush=True)
    if args.record:
        tables = {"runs": rows}
        if len(args.seeds) > 1:
            tables["spread over seeds"] = seed_spread(rows)
        record_results(__file__, tables)
    if args.json:
        print(json.dumps(rows))
        return
    from bayes_sched.tables import print_table

    print_table(rows, title=f"Gavel continuous jobs, {GAVEL.default_cluster}, jobs {args.window[0]}-"
                            f"{args.window[1] - 1}, average JCT in hours")
    if len(args.seeds) > 1:
        print_table(seed_spread(rows), title="spread over seeds (published: seed 0)")


def seed_spread(rows: list[dict[str, object]]) -> list[dict[str, object]]:
    """Per (policy, rate): the seeds' average JCTs (hours), their mean, min, max and the range
    relative to the mean."""
    groups: dict[tuple[object, object], list[float]] = {}
    for row in rows:
        groups.setdefault((row["policy"], row["rate_jobs_per_h"]), []).append(
            float(row["avg_jct_h"]))  # type: ignore[arg-type]
    out: list[dict[str, object]] = []
    for (policy, rate), values in groups.items():
        mean = sum(values) / len(values)
        out.append({"policy": policy, "rate_jobs_per_h": rate, "seeds": len(values),
                    "mean_h": round(mean, 2), "min_h": min(values), "max_h": max(values),
                    "range_over_mean": round((max(values) - min(values)) / mean, 3)})
    return out


if __name__ == "__main__":
    main()
