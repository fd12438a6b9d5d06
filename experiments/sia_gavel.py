"""Sia beside Gavel's max-min fairness (perf) and LAS on Gavel's continuous multi-GPU setting.

Setting (Gavel, OSDI 2020, figure 9; :mod:`experiments.gavel_fidelity`): jobs from Gavel's generator
with scale factors from the Philly mix (:func:`bayes_sched.sim.gavel_jobs.generate_continuous_jobs`,
``multi_gpu=True``) arriving at ``--rate`` jobs/h on 36 V100 + 36 P100 + 36 K80, 360 s rounds,
seed 0; the run ends when the jobs of ``--window`` have finished. Sia (:mod:`bayes_sched.policies.sia`)
chooses a GPU type per job every round by its ILP; Gavel and LAS time-share by their LPs.

    python experiments/sia_gavel.py [--policies sia max_min_fairness_perf max_min_fairness]
        [--rate 2.0] [--seed 0] [--window 4000 5000] [--out DIR] [--json]

Prints one row per policy: the window's average and median JCT (hours), the completion time of
its last job (the run's makespan, hours), restarts per job, per-type utilisation, the rounds, and
the decision time per round (median and p95, ms; the loop's timing of ``decide``). With ``--out``
each policy's per-job outcomes are written to ``DIR/<policy>.csv`` (and every 1000 rounds to
``DIR/<policy>.partial.csv``) so other windows can be averaged from the same run:
``--summarize DIR --window A B`` prints the same columns (without the run's rounds and decision
times) from those files, refusing a window with unfinished jobs.

Sia's paper reports gains over Gavel on its own traces and its own clusters (not shipped); this
script measures Sia in Gavel's setting, where jobs are rigid (fixed GPU count and batch), so Sia's
only choice is the GPU type and whether a job runs this round.

Measured figures (each run's command, commit, date and load): docs/results/sia_gavel.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bayes_sched.worlds import GAVEL

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from experiments.results_record import add_record_flag, record_results  # noqa: E402


def run_one(policy_name: str, rate: float, seed: int, window: tuple[int, int],
            out: Path | None) -> dict[str, object]:
    import numpy as np

    from bayes_sched.policies import make_policy
    from bayes_sched.sim.gavel_jobs import generate_continuous_jobs
    from bayes_sched.sim.table_cluster import TableCluster
    from bayes_sched.sim.table_run import run_table_simulation, table_job_rows

    spec = GAVEL.cluster()
    policy = make_policy(policy_name, seed=seed)
    names = [str(i) for i in range(*window)]
    rounds = [0]

    def report(cluster: TableCluster) -> None:
        """Progress on stderr every 1000 rounds; with ``out``, the per-job outcomes so far (a
        window whose jobs have all finished can be averaged from them if the run is cut)."""
        rounds[0] += 1
        if rounds[0] % 1000 == 0:
            done = sum(1 for job in cluster.jobs.values() if not job.active)
            print(f"{policy_name}: round {rounds[0]}, {done} jobs finished", file=sys.stderr,
                  flush=True)
            if out is not None:
                out.mkdir(parents=True, exist_ok=True)
                table_job_rows(cluster).to_csv(out / f"{policy_name}.partial.csv", index=False)

    result = run_table_simulation(generate_continuous_jobs(rate, seed, multi_gpu=True), policy,
                                  spec, jobs_to_complete=names, on_round=report)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        result.jobs.to_csv(out / f"{policy_name}.csv", index=False)
    jobs = result.jobs.set_index("job").loc[names]
    decisions = np.asarray(result.decision_seconds) * 1000.0
    summary = result.summary
    return {
        "policy": policy_name, "rate_jobs_per_h": rate, "seed": seed,
        "window": f"{window[0]}-{window[1] - 1}",
        "avg_jct_h": round(float(jobs["jct"].mean() / 3600.0), 2),
        "median_jct_h": round(float(jobs["jct"].median() / 3600.0), 2),
        "makespan_h": round(float(jobs["completion_time"].max() / 3600.0), 1),
        "restarts_per_job": round(float(jobs["restarts"].mean()), 2),
        **{k: round(v, 3) for k, v in summary.items() if k.startswith("utilization_")},
        "rounds": int(summary["rounds"]),
        "decision_median_ms": round(float(np.median(decisions)), 2) if decisions.size else None,
        "decision_p95_ms": round(float(np.percentile(decisions, 95)), 2) if decisions.size
        else None,
        "solver_failures": int(summary.get("solver_failures", 0)),
        "wall_s": round(result.wall_seconds, 1),
    }


def summarize(directory: Path, policies: list[str], window: tuple[int, int]
              ) -> list[dict[str, object]]:
    """The window's outcomes from the per-job CSVs a run wrote (the final file, else the
    partial one)."""
    import pandas as pd

    rows: list[dict[str, object]] = []
    for policy in policies:
        path = directory / f"{policy}.csv"
        if not path.exists():
            path = directory / f"{policy}.partial.csv"
        frame = pd.read_csv(path, dtype={"job": str}).set_index("job")
        names = [str(i) for i in range(*window)]
        missing = [n for n in names if n not in frame.index
                   or pd.isna(frame.loc[n, "completion_time"])]
        if missing:
            raise SystemExit(f"{path}: {len(missing)} jobs of the window unfinished "
                             f"(first {missing[0]})")
        jobs = frame.loc[names]
        rows.append({"policy": policy, "source": path.name,
                     "window": f"{window[0]}-{window[1] - 1}",
                     "avg_jct_h": round(float(jobs["jct"].mean() / 3600.0), 2),
                     "median_jct_h": round(float(jobs["jct"].median() / 3600.0), 2),
                     "makespan_h": round(float(jobs["completion_time"].max() / 3600.0), 1),
                     "restarts_per_job": round(float(jobs["restarts"].mean()), 2)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--policies", nargs="+",
                        default=["sia", "max_min_fairness_perf", "max_min_fairness"])
    parser.add_argument("--rate", type=float, default=2.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--window", type=int, nargs=2, default=[4000, 5000])
    parser.add_argument("--out", type=Path, help="write each policy's per-job CSV here")
    parser.add_argument("--summarize", type=Path, metavar="DIR",
                        help="summarise the window from the per-job CSVs in DIR (no run)")
    parser.add_argument("--json", action="store_true")
    add_record_flag(parser)
    args = parser.parse_args()
    from bayes_sched.tables import print_table

    window = (args.window[0], args.window[1])
    if args.summarize is not None:
        rows = summarize(args.summarize, args.policies, window)
        print_table(rows, title=f"from {args.summarize}", as_json=args.json)
        if args.record:
            record_results(__file__, {f"jobs {window[0]}-{window[1] - 1}, from saved runs": rows})
        return
    rows = [run_one(policy, args.rate, args.seed, window, args.out) for policy in args.policies]
    print_table(rows, title=f"Gavel continuous multi-GPU jobs, {GAVEL.default_cluster}, {args.rate} jobs/h, "
                            f"jobs {window[0]}-{window[1] - 1}", as_json=args.json)
    if args.record:
        record_results(__file__, {f"{args.rate} jobs/h, jobs {window[0]}-{window[1] - 1}": rows})


if __name__ == "__main__":
    main()
