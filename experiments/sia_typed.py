"""Sia against Pollux and the other Pollux-world policies on a typed cluster (issue 15).

Setting: a shipped Pollux trace (``--workload``, default ``workload-1``; ``--max-jobs`` keeps its
first jobs) on a typed cluster (``--cluster``, default ``v100:16,p100:16,k80:16``) whose K80, P100
and V100 step times are derived from the T4 profiles (:mod:`bayes_sched.sim.typed_profiles`; the
table of derived profiles is printed first). Adaptive jobs (Pollux's settings), 60 s rounds, 30 s
restarts; policies run with seeds ``--seeds`` (each policy's own random stream: Pollux's genetic
search, Sia's solver seed).

    python experiments/sia_typed.py [--workload workload-1] [--max-jobs 20]
        [--cluster v100:16,p100:16,k80:16] [--policies sia_adaptive pollux tiresias optimus]
        [--seeds 0 1 2] [--processes 2] [--json] [--type-profiles DIR]
        [--skip-profiling-within 0.1]

``--type-profiles DIR``: step times measured per GPU type, used where present (the table of
profiles then says which type is measured and which derived). ``--skip-profiling-within X``
adds the policy ``sia_adaptive+skip``: sia_adaptive that skips a profiling round where its
estimate of the job's throughput ratio is already sure within ``X``
(:class:`~bayes_sched.policies.sia_adaptive.SiaAdaptivePolicy`); each row's ``profiling_gpu_h``
is the GPU-hours profiling took and ``profiling_skipped`` the rounds skipped.

Prints one row per policy and seed (finished jobs, average and median JCT and makespan in s, the
finish-time-fairness worst and median, the unfair fraction, per-type utilisation, wall time), then
the mean over seeds with each policy's average JCT over the first policy's.

Sia's paper (SOSP 2023) reports 30-50 % lower average JCT than Pollux on heterogeneous clusters, on
its own traces and per-type profiles (not shipped).

Sia profiles every new job on one GPU of each type before its program places it
(:class:`~bayes_sched.policies.sia_adaptive.SiaAdaptivePolicy`; the rounds are real, so their cost
is in the JCTs, and the ``profiling_gpu_s`` column counts their GPU-seconds).

Measured figures (each run's command, commit, date and load): docs/results/sia_typed.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bayes_sched.tables import print_table  # noqa: E402
from experiments.results_record import add_record_flag, record_results  # noqa: E402

#: The variant of sia_adaptive that skips profiling where it is sure (--skip-profiling-within).
SKIP_VARIANT = "sia_adaptive+skip"


def run_one(task: tuple[str, int, str, int, str, str | None, float]) -> dict[str, object]:
    workload_name, max_jobs, policy, seed, cluster, type_profiles, within = task
    from bayes_sched.cluster_spec import parse_cluster_spec
    from bayes_sched.policies import make_policy
    from bayes_sched.sim.run import run_simulation
    from bayes_sched.sim.simulator import SimConfig
    from bayes_sched.sim.typed_profiles import NO_TYPE_PROFILES, TypeProfiles
    from bayes_sched.sim.workload import read_workload

    workload = read_workload(workload_name).head(max_jobs)
    if policy == SKIP_VARIANT:
        made = make_policy("sia_adaptive", skip_profiling_within=within,
                           **_seed_option("sia_adaptive", seed))
    else:
        made = make_policy(policy, **_seed_option(policy, seed))
    profiles = NO_TYPE_PROFILES if type_profiles is None else TypeProfiles.read(type_profiles)
    result = run_simulation(workload, made, SimConfig(cluster=parse_cluster_spec(cluster),
                                                      seed=seed, profiles=profiles))
    s = result.summary
    row: dict[str, object] = {"policy": policy, "seed": seed, "finished": s["finished"],
                              "avg_jct": s["avg_jct"], "median_jct": s["median_jct"],
                              "makespan": s["makespan"], "ftf_worst": s["ftf_worst"],
                              "ftf_p50": s["ftf_p50"], "unfair_fraction": s["unfair_fraction"]}
    row.update({k: v for k, v in s.items() if k.startswith("utilization_")})
    # Sia's profiling of new jobs (one GPU of every type): GPU-seconds it took, inside the run.
    row["profiling_gpu_s"] = float(getattr(made, "profiling_gpu_seconds", 0.0))
    row["profiling_gpu_h"] = row["profiling_gpu_s"] / 3600.0  # type: ignore[operator]
    row["profiling_skipped"] = int(getattr(made, "profiling_skipped", 0))
    row["profiles"] = result.setting.get("profiles", "")
    row["wall_s"] = result.wall_seconds
    return row


def _seed_option(policy: str, seed: int) -> dict[str, object]:
    from bayes_sched.policies import POLICIES

    options = POLICIES.options(policy)
    if "seed" in options:
        return {"seed": seed}
    if "ga" in options:  # Pollux: its genetic search's seed
        from bayes_sched.mechanisms.genetic_allocation.search import GAConfig

        return {"ga": GAConfig(seed=seed)}
    return {}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", default="workload-1")
    parser.add_argument("--max-jobs", type=int, default=20)
    parser.add_argument("--cluster", default="v100:16,p100:16,k80:16")
    parser.add_argument("--policies", nargs="+",
                        default=["sia_adaptive", "pollux", "tiresias", "optimus"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--type-profiles", metavar="DIR", default=None)
    parser.add_argument("--skip-profiling-within", type=float, default=None, metavar="X")
    add_record_flag(parser)
    args = parser.parse_args(argv)

    from bayes_sched.cluster_spec import parse_cluster_spec
    from bayes_sched.sim.typed_profiles import NO_TYPE_PROFILES, TypeProfiles, derivation_table

    types = parse_cluster_spec(args.cluster).types
    profiles = (NO_TYPE_PROFILES if args.type_profiles is None
                else TypeProfiles.read(args.type_profiles))
    if not args.json:
        print_table(derivation_table(types, profiles=profiles),
                    title="profiles per GPU type (compute factor vs T4)")
    policies = list(args.policies)
    if args.skip_profiling_within is not None and SKIP_VARIANT not in policies:
        policies.append(SKIP_VARIANT)
    args.policies = policies
    within = args.skip_profiling_within or 0.0
    tasks = [(args.workload, args.max_jobs, p, s, args.cluster, args.type_profiles, within)
             for p in policies for s in args.seeds]
    with ProcessPoolExecutor(max_workers=args.processes) as pool:
        rows = list(pool.map(run_one, tasks))
    means = []
    first = float(np.mean([r["avg_jct"] for r in rows if r["policy"] == args.policies[0]]))
    for policy in args.policies:
        mine = [r for r in rows if r["policy"] == policy]
        jct = [float(r["avg_jct"]) for r in mine]  # type: ignore[arg-type]
        means.append({"policy": policy, "seeds": len(mine), "avg_jct_mean": np.mean(jct),
                      "avg_jct_min": np.min(jct), "avg_jct_max": np.max(jct),
                      f"jct_vs_{args.policies[0]}": np.mean(jct) / first,
                      "ftf_worst_mean": np.mean([float(r["ftf_worst"]) for r in mine]),  # type: ignore[arg-type]
                      "profiling_gpu_h_mean": np.mean([float(r["profiling_gpu_h"])  # type: ignore[arg-type]
                                                       for r in mine]),
                      "unfair_fraction_mean": np.mean([float(r["unfair_fraction"])  # type: ignore[arg-type]
                                                       for r in mine])})
    if args.record:
        record_results(__file__, {"runs": rows, "mean over seeds": means})
    if args.json:
        print(json.dumps({"runs": rows, "means": means}, default=float))
    else:
        print_table(rows, title=f"{args.workload} (first {args.max_jobs}) on {args.cluster}")
        print_table(means, title="mean over seeds")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
