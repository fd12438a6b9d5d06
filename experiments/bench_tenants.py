"""Tenant fairness on tenant workloads: ASTRAEA against FIFO, Tiresias, Gavel's finish-time
fairness, Themis's auction between tenants (``themis``), Gandiva-fair (job- and tenant-level), Sia
without and with per-tenant weights (``sia:tenant_weights``), and FIFO / Tiresias behind the quota
stage, in the throughput-table world.

Workload (:mod:`bayes_sched.sim.tenant_workload`): one ``large`` tenant submitting long 4- and 8-GPU
jobs and two ``small`` tenants submitting short 1- and 2-GPU jobs, with Venus's early exits
(27.9 % cancelled, 19.9 % failed), on 9 nodes of 4 V100s (36 GPUs) with 6-minute rounds
(Gavel's) and a quota of 12 GPUs per tenant, lending and borrowing allowed. Per policy, over the
seeds: mean and 90 % interval of avg and p99 JCT (h), the LTGF spread between tenants
(``max - min``; 0 is fair) and the worst tenant's LTGF, the worst tenant's GPU-time against what
its quota alone would have given it, mean and median bounded slowdown, and jobs that waited over
a day; then, per seed and in one run, each
baseline's LTGF spread and avg JCT over ASTRAEA's (intervals over seeds).

Early exits and declared durations: finish-time fairness reads each job's declared steps, which
overstate the work of a job that will be cancelled or fail; ``finish_time_fairness@oracle`` runs
it on the same jobs declaring their true length (an oracle no scheduler has), so the gap between
the two rows is what trusting declarations costs it here (Tiresias is the policy that ignores
them: least attained service).

    python experiments/bench_tenants.py [--jobs 200] [--seeds 0 1 2] [--json]

Pollux world (``--pollux-world WORKLOAD``, e.g. ``workload-1``): Pollux against ``pollux_tenants``
(Pollux's fitness as a weighted power mean over tenants), and FIFO, Tiresias and ASTRAEA
(``--policies``; ASTRAEA runs here through the simulator although the Pollux world's command line
does not list it: its jobs keep the GPUs they requested), on a shipped Pollux workload whose jobs
are split into a ``large`` tenant (the long, well-scaling imagenet, deepspeech2, bert and yolov3
jobs) and a ``small`` one (cifar10 and ncf), of weights ``--large-weight`` and 1, on Pollux's 16
nodes of 4 T4s, no quotas. Each run's per-tenant report is the table world's
(:mod:`bayes_sched.sim.tenant_metrics`, a job's demand its requested GPUs); per policy, mean and
90 % interval over the seeds (the policy's search seed; the workload is fixed) of avg and p99 JCT
(h) overall and per tenant, the LTGF spread and worst LTGF, the weight share (``large``'s weight
over the summed weights), each tenant's share of the GPU-time received in the rounds where both
had unfinished jobs and the worst tenant's such share over its weight share (elastic jobs take
what speeds them up: a tenant whose jobs cannot use more GPUs gets less than its weight's part
without unfairness), mean bounded slowdown and jobs starved over a day.

    python experiments/bench_tenants.py --pollux-world workload-1 --large-weight 3 --seeds 0

Measured figures (each run's command, commit, date and load): docs/results/bench_tenants.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from experiments.results_record import add_record_flag, record_results  # noqa: E402

POLICIES = ("astraea", "fifo", "fifo+quota", "tiresias", "tiresias+quota",
            "finish_time_fairness", "finish_time_fairness@oracle", "gandiva_fair",
            "gandiva_fair_tenant", "themis", "sia", "sia:tenant_weights")
#: The policies of the Pollux-world part (default: the first two).
POLLUX_POLICIES = ("pollux", "pollux_tenants", "fifo", "tiresias", "astraea")
#: Per-run figures of the Pollux-world part.
POLLUX_METRICS = ("avg_jct_h", "p99_jct_h", "large_avg_jct_h", "small_avg_jct_h", "ltgf_spread",
                  "ltgf_min", "weight_share", "large_share_both_active",
                  "small_share_both_active", "worst_contended_share_vs_quota", "slowdown_mean",
                  "starved_jobs")
METRICS = ("avg_jct_h", "p99_jct_h", "ltgf_spread", "ltgf_min", "worst_share_vs_quota",
           "slowdown_mean", "slowdown_median", "starved_jobs")


def cluster() -> Any:
    from bayes_sched.cluster_spec import ClusterSpec
    from bayes_sched.tenants import TenantSpec

    base = ClusterSpec.homogeneous(9, 4, "v100", round_interval=360.0)
    return dataclasses.replace(base, tenants=tuple(
        TenantSpec(name, {"*": 12}) for name in ("large", "small-a", "small-b")))


def one_run(policy_name: str, jobs: Any, spec: Any) -> dict[str, float]:
    from bayes_sched.policies import make_policy
    from bayes_sched.sim.tenant_run import run_tenant_simulation
    from bayes_sched.tenancy.quotas import with_quotas

    policy_name, _, oracle = policy_name.partition("@")
    if oracle:  # every job declares the steps it will really run
        jobs = [dataclasses.replace(job, declared_steps=job.total_steps) for job in jobs]
    base, _, quota = policy_name.partition("+")
    base, _, options = base.partition(":")  # e.g. sia:tenant_weights or themis:f=0.5,leftover=all
    policy: Any = make_policy(base, **dict(_option(o) for o in options.split(",") if o))
    if quota:
        policy = with_quotas(policy)
    start = time.process_time()
    result, _ = run_tenant_simulation(jobs, policy, spec, measurement_noise=0.0)
    jct = result.jobs["jct"].dropna().to_numpy()
    summary = result.summary
    return {"avg_jct_h": float(jct.mean()) / 3600, "p99_jct_h": float(np.percentile(jct, 99)) / 3600,
            "finished": float(jct.size), "cpu_s": time.process_time() - start,
            **{k: float(summary[k]) for k in METRICS if k in summary}}


def _option(text: str) -> tuple[str, Any]:
    """``key`` (true) or ``key=value`` (a number where it reads as one)."""
    key, equals, value = text.partition("=")
    if not equals:
        return key, True
    try:
        return key, float(value)
    except ValueError:
        return key, value


#: The Pollux-world workloads' applications given to the ``large`` tenant (the rest: ``small``).
LARGE_APPLICATIONS = ("imagenet", "deepspeech2", "bert", "yolov3")


def pollux_world(workload: str, large_weight: float, policies: list[str], seeds: list[int]
                 ) -> dict[str, list[dict[str, float]]]:
    """The Pollux-world part (module docstring): per policy, its figures per seed."""
    from bayes_sched.cluster_spec import ClusterSpec
    from bayes_sched.policies import POLICIES, make_policy
    from bayes_sched.sim.run import run_simulation
    from bayes_sched.sim.seeds import with_seed
    from bayes_sched.sim.simulator import SimConfig
    from bayes_sched.sim.workload import read_workload
    from bayes_sched.tenants import TenantSpec

    read = read_workload(workload)
    read = dataclasses.replace(read, jobs=tuple(dataclasses.replace(
        job, tenant="large" if job.application in LARGE_APPLICATIONS else "small")
        for job in read.jobs))
    spec = dataclasses.replace(ClusterSpec.homogeneous(16, 4, "t4"), tenants=(
        TenantSpec("large", weight=large_weight), TenantSpec("small")))
    out: dict[str, list[dict[str, float]]] = {name: [] for name in policies}
    for name in policies:
        for seed in seeds:
            start = time.process_time()
            policy = make_policy(name, **POLICIES.check(
                name, with_seed(POLICIES.options(name), {}, seed), "bench_tenants"))
            result = run_simulation(read, policy, SimConfig(cluster=spec, seed=seed))
            assert result.tenants is not None  # a cluster with tenants
            tenants = result.tenants.tenants.set_index("tenant")
            jct = result.jobs["jct"].dropna().to_numpy()
            out[name].append({
                "avg_jct_h": float(jct.mean()) / 3600,
                "p99_jct_h": float(np.percentile(jct, 99)) / 3600,
                **{f"{t}_avg_jct_h": float(tenants.loc[t, "avg_jct"]) / 3600
                   for t in ("large", "small")},
                **{f"{t}_share_both_active": float(tenants.loc[t, "contended_share"])
                   for t in ("large", "small")},
                "weight_share": float(tenants.loc["large", "quota_fraction"]),
                **{k: float(result.summary[k]) for k in POLLUX_METRICS if k in result.summary},
                "finished": float(result.summary["finished"]),
                "cpu_s": time.process_time() - start})
            print(f"{name} seed {seed}: " + json.dumps(out[name][-1]), file=sys.stderr,
                  flush=True)  # each run as it ends (a long benchmark's progress)
    return out


def print_table(title: str, runs: dict[str, list[dict[str, float]]], metrics: tuple[str, ...]
                ) -> None:
    """Per policy, each metric's mean and 90 % interval over its runs, and their CPU seconds."""
    from bayes_sched.sim.seeds import interval_text, mean_interval

    print(title)
    print(f"{'policy':28s} " + " ".join(f"{m:>26s}" for m in metrics) + "  cpu_s")
    for name, rows in runs.items():
        cells = [interval_text(*mean_interval([r[m] for r in rows]), fmt="{:.3g}")
                 for m in metrics]
        print(f"{name:28s} " + " ".join(f"{c:>26s}" for c in cells)
              + f"  {sum(r['cpu_s'] for r in rows):.0f}")


def print_ratios(runs: dict[str, list[dict[str, float]]], baseline: str) -> None:
    """Per policy and seed, its LTGF spread and avg JCT over ``baseline``'s in the same seed
    (mean and 90 % interval over seeds): a spread ratio below 1 is fairer than the baseline."""
    from bayes_sched.sim.seeds import interval_text, mean_interval

    if baseline not in runs:
        return
    print(f"\nper seed, policy / {baseline} (LTGF spread: <1 fairer; avg JCT: <1 faster)")
    for name, rows in runs.items():
        if name == baseline:
            continue
        pairs = list(zip(rows, runs[baseline], strict=True))
        spread = [r["ltgf_spread"] / max(b["ltgf_spread"], 1e-9) for r, b in pairs]
        jct = [r["avg_jct_h"] / b["avg_jct_h"] for r, b in pairs]
        print(f"{name:28s} spread x {interval_text(*mean_interval(spread), fmt='{:.3g}'):>24s}"
              f"   avg JCT x {interval_text(*mean_interval(jct), fmt='{:.3g}'):>24s}")


def main() -> None:
    from bayes_sched.sim.seeds import interval_text, mean_interval
    from bayes_sched.sim.tenant_workload import generate_tenant_jobs

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--policies", nargs="+", default=list(POLICIES))
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--pollux-world", metavar="WORKLOAD",
                        help="run the Pollux-world part on this shipped workload instead")
    parser.add_argument("--large-weight", type=float, default=1.0)
    add_record_flag(parser)
    args = parser.parse_args()
    if args.pollux_world:
        chosen = [p for p in args.policies if p in POLLUX_POLICIES] or list(POLLUX_POLICIES[:2])
        figures = pollux_world(args.pollux_world, args.large_weight, chosen, args.seeds)
        if args.record:
            record_results(__file__, {"pollux world": [
                {"policy": name, "seed": seed, "large_weight": args.large_weight, **row}
                for name, rows in figures.items()
                for seed, row in zip(args.seeds, rows, strict=True)]})
        if args.json:
            print(json.dumps(figures, indent=1))
            return
        print_table(f"{args.pollux_world}, large tenant's weight {args.large_weight:g}, seeds "
                    f"{args.seeds}; mean [90% interval] over seeds", figures, POLLUX_METRICS)
        print_ratios(figures, "pollux")
        return
    spec = cluster()
    runs: dict[str, list[dict[str, float]]] = {p: [] for p in args.policies}
    for seed in args.seeds:
        jobs = generate_tenant_jobs(args.jobs, seed=seed)
        for name in args.policies:
            runs[name].append(one_run(name, jobs, spec))
    if args.record:
        record_results(__file__, {"per run": [{"policy": name, "seed": seed, **row}
                                              for name, rows in runs.items()
                                              for seed, row in zip(args.seeds, rows,
                                                                   strict=True)]})
    if args.json:
        print(json.dumps(runs, indent=1))
        return
    print_table(f"{args.jobs} jobs x seeds {args.seeds}; mean [90% interval] over seeds", runs,
                METRICS)
    if "astraea" in runs:
        print("\nper seed, baseline / ASTRAEA (LTGF spread: >1 means ASTRAEA is fairer; avg JCT: "
              ">1 means ASTRAEA is faster)")
        ours = runs["astraea"]
        for name, rows in runs.items():
            if name == "astraea":
                continue
            spread = [r["ltgf_spread"] / max(a["ltgf_spread"], 1e-9)
                      for r, a in zip(rows, ours, strict=True)]
            jct = [r["avg_jct_h"] / a["avg_jct_h"] for r, a in zip(rows, ours, strict=True)]
            print(f"{name:28s} spread x {interval_text(*mean_interval(spread), fmt='{:.3g}'):>24s}"
                  f"   avg JCT x {interval_text(*mean_interval(jct), fmt='{:.3g}'):>24s}")


if __name__ == "__main__":
    main()
