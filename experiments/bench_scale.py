"""Scale: decision time at 64 to 4,096 GPUs, a 960-job 48-hour trace, the 8 x 4 comparison, and
peak memory, each measured on two source trees in one run (a base commit's and this one), so the
ratios are taken under the same load.

Cases (``--cases``, each run once per tree in a fresh process, trees interleaved):

* ``scale-64``, ``scale-1024``, ``scale-4096``: a synthetic cluster of nodes of 4 GPUs with 160,
  2,000 or 8,000 active jobs (the jobs of workload-1, repeated), as
  ``experiments/bench_sim_speed.py --skip-workload`` builds it; per-round decision time of each
  policy of ``--policies`` over ``--rounds`` rounds (the first builds every speedup table) and
  the process's peak RSS. Every job reports its application's template fit (fixed-batch jobs
  too, which spares the base tree thousands of identical refits in its first estimation; the
  job models, so the decisions, are the same), so ``estimate_s`` here is not the estimation
  stage's cost on a fresh cluster.
* ``workload``: workload-1 (160 jobs, 64 GPUs) simulated whole under each policy: wall time
  and decision median.
* ``trace``: the 960-job, 48-hour trace (``experiments/generate_workload.py --jobs 960 --hours
  48 --seed 0``) under Pollux; ``--trace-hours`` cuts it short; RSS is sampled as it runs, and
  every job's allocation changes are digested (``decisions``) to check both trees decide alike.
* ``compare``: ``bayes-sched compare`` (8 workloads x 4 policies) on ``--processes`` processes.

Every row carries the 1-minute load average before and after it (``/proc/loadavg``): the machine
may be shared, and only ratios taken side by side mean much.

    git worktree add /tmp/base 4aa44f2
    python experiments/bench_scale.py --base /tmp/base --cases scale-1024 --policies pollux bo
    python experiments/bench_scale.py --base /tmp/base --cases scale-64 scale-1024 scale-4096 trace
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from experiments.results_record import add_record_flag, record_results  # noqa: E402

HERE = Path(__file__).resolve().parents[1]
CASES = ("scale-64", "scale-1024", "scale-4096", "workload", "trace", "compare")
SCALE = {"scale-64": (16, 160), "scale-1024": (256, 2000), "scale-4096": (1024, 8000)}


def load_average() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def current_rss_mib() -> float:
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


# --- workers: run inside the tree under test (its bayes_sched first on the path) ---------------

def scale_worker(case: str, policies: list[str], rounds: int, seed: int) -> list[dict[str, object]]:
    import numpy as np
    from threadpoolctl import threadpool_limits

    from bayes_sched.agent import JobAgent
    from bayes_sched.cluster import ClusterState
    from bayes_sched.estimation import estimate_round
    from bayes_sched.estimation.choose import policy_estimators
    from bayes_sched.jobs import JobView
    from bayes_sched.policies import make_policy
    from bayes_sched.sim import read_workload
    from bayes_sched.sim.physics import APPLICATION_NAMES, get_application

    num_nodes, num_jobs = SCALE[case]
    templates = {}
    # As bench_sim_speed's _template_agents, written out: importing that script would put this
    # tree's sources first on the path, and the worker must run against the tree under test.
    for app_name in APPLICATION_NAMES:
        app = get_application(app_name)
        agent = JobAgent(app_name, app.limits)
        lo = app.limits.min_local_bsz
        hi = min(app.limits.max_local_bsz, 4 * lo)
        for placement in ((1,), (2,), (4,), (4, 4)):
            for m in (lo, hi):
                step, sync = app.step_time(placement, m)
                agent.record(len(placement), sum(placement), m, step, sync,
                             *app.grad_stats(app.limits.init_batch_size, 1))
        agent.refresh(0.0)
        templates[app_name] = agent.report_fields()
    specs = read_workload("workload-1").jobs
    rows = []
    with threadpool_limits(1):
        for name in policies:
            rng = np.random.default_rng(seed)
            policy = make_policy(name)
            jobs = []
            for i in range(num_jobs):
                spec = specs[i % len(specs)]
                app = get_application(spec.application)
                jobs.append(dict(name=f"job{i}", application=spec.application,
                                 submit_time=float(-rng.integers(0, 36000)),
                                 attained_service=float(rng.integers(0, 100000)),
                                 requested_replicas=spec.num_replicas,
                                 requested_batch_size=spec.batch_size,
                                 settings=policy.job_settings(spec), limits=app.limits,
                                 target_epochs=app.max_epochs,
                                 examples_per_epoch=app.examples_per_epoch,
                                 **templates[spec.application]))
            allocation = {job["name"]: np.zeros(num_nodes, dtype=np.int64) for job in jobs}
            estimators = policy_estimators(policy)
            times, cpu, estimate, digest = [], [], [], hashlib.sha256()
            for r in range(rounds):
                now = 60.0 * r
                cluster = ClusterState(num_nodes, 4, now)
                views = [JobView(age=now - job["submit_time"],  # type: ignore[operator]
                                 allocation=allocation[job["name"]],
                                 num_restarts=0, **job)  # type: ignore[arg-type]
                         for job in jobs]
                start = time.perf_counter()
                views, estimates = estimate_round(estimators, cluster, views)
                estimate.append(time.perf_counter() - start)
                start, start_cpu = time.perf_counter(), time.process_time()
                decision = policy.decide(cluster, views, estimates)
                times.append(time.perf_counter() - start)
                cpu.append(time.process_time() - start_cpu)
                allocation = {job["name"]: decision.get(job["name"],  # type: ignore[call-overload]
                                                        np.zeros(num_nodes, np.int64))
                              for job in jobs}
                # A digest of the decisions, to check both trees decide the same.
                for key in sorted(decision):
                    digest.update(key.encode() + decision[key].astype(np.int64).tobytes())
            rows.append({"case": case, "policy": name, "gpus": 4 * num_nodes, "jobs": num_jobs,
                         "first_round_s": times[0],
                         "later_median_s": float(np.median(times[1:])) if rounds > 1 else None,
                         # CPU time of the decisions: on a shared machine, the wall times above
                         # count the other processes' time slices too.
                         "first_round_cpu_s": cpu[0],
                         "later_median_cpu_s": (float(np.median(cpu[1:])) if rounds > 1
                                                else None),
                         "estimate_median_s": float(np.median(estimate)),
                         "decisions": digest.hexdigest()[:10]})
    for row in rows:
        row["peak_rss_mib"] = peak_rss_mib()  # the process's, over every policy run so far
    return rows


def workload_worker(policies: list[str]) -> list[dict[str, object]]:
    import numpy as np

    from bayes_sched.sim import run_simulation

    rows = []
    for name in policies:
        start = time.process_time()
        result = run_simulation("workload-1", name)
        rows.append({"case": "workload", "policy": name, "gpus": 64, "jobs": 160,
                     "wall_s": result.wall_seconds, "run_cpu_s": time.process_time() - start,
                     "decision_median_ms": float(np.median(result.decision_seconds) * 1e3),
                     "avg_jct": result.summary["avg_jct"], "peak_rss_mib": peak_rss_mib()})
    return rows


def trace_worker(trace: Path, hours: float | None) -> list[dict[str, object]]:
    import numpy as np

    from bayes_sched.sim import run_simulation
    from bayes_sched.sim.simulator import SimConfig, SimulatedCluster

    config = SimConfig() if hours is None else SimConfig(max_time=hours * 3600.0)
    samples: list[tuple[float, float]] = []
    simulated: list[SimulatedCluster] = []

    def sample(cluster: SimulatedCluster) -> None:
        if not simulated:
            simulated.append(cluster)
        if len(cluster.timeline_time) % 120 == 0:  # every 2 simulated hours
            samples.append((cluster.timeline_time[-1] / 3600.0, current_rss_mib()))

    result = run_simulation(trace, "pollux", config, on_round=sample)
    d = result.decision_seconds
    # A digest of the decisions, to check both trees decide the same: every job's allocation
    # changes (time and GPUs per node), read once at the end.
    digest = hashlib.sha256()
    for name, job in sorted(simulated[0].jobs.items()):
        digest.update(f"{name}:{job.allocation_history}".encode())
    return [{"case": "trace", "policy": "pollux", "gpus": 64, "jobs": len(result.jobs),
             "wall_s": result.wall_seconds, "finished": result.summary["finished"],
             "decision_median_ms": float(np.median(d) * 1e3),
             "decision_p95_ms": float(np.percentile(d, 95) * 1e3),
             "decision_s": float(np.sum(d)), "estimate_s": float(np.sum(result.estimate_seconds)),
             "avg_jct": result.summary["avg_jct"], "decisions": digest.hexdigest()[:10],
             "rss_mib_by_hour": " ".join(f"{h:.0f}h:{m:.0f}" for h, m in samples),
             "peak_rss_mib": peak_rss_mib()}]


# --- driver ------------------------------------------------------------------------------------

def run_case(tree: Path, label: str, case: str, args: argparse.Namespace) -> list[dict[str, object]]:
    """Run ``case`` in a fresh process on ``tree``'s sources; its rows, labelled."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    before = load_average()
    start = time.perf_counter()
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    if case == "compare":
        with tempfile.TemporaryDirectory() as out:
            subprocess.run([sys.executable, "-m", "bayes_sched", "compare", "--out",
                            f"{out}/report", "--processes", str(args.processes)],
                           env=env, cwd=tree, check=True, stdout=subprocess.DEVNULL)
        rows: list[dict[str, object]] = [{"case": "compare", "policy": "4 policies",
                                          "wall_s": time.perf_counter() - start}]
    else:
        command = [sys.executable, str(Path(__file__).resolve()), "--worker", case, "--tree",
                   str(tree), "--policies", *args.policies, "--rounds", str(args.rounds),
                   "--seed", str(args.seed), "--trace", str(args.trace)]
        if args.trace_hours is not None:
            command += ["--trace-hours", str(args.trace_hours)]
        done = subprocess.run(command, env=env, cwd=tree, check=True, capture_output=True,
                              text=True)
        rows = json.loads(done.stdout.strip().splitlines()[-1])
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    # CPU seconds of the case's processes (user + system, every child): less load-sensitive than
    # wall time on a shared machine.
    cpu = (used.ru_utime - children.ru_utime) + (used.ru_stime - children.ru_stime)
    for row in rows:
        row.update(tree=label, cpu_s=cpu, load_before=before, load_after=load_average())
    return rows


def ratio_rows(rows: list[dict[str, object]]) -> list[dict[str, object]]:
    """Branch over base for every timing, per case and policy."""
    keys = ("first_round_s", "later_median_s", "first_round_cpu_s", "later_median_cpu_s",
            "wall_s", "cpu_s", "run_cpu_s", "decision_median_ms", "peak_rss_mib")
    out = []
    by = {(r["case"], r["policy"], r["tree"]): r for r in rows}
    for (case, policy, tree), new in by.items():
        old = by.get((case, policy, "base"))
        if tree != "branch" or old is None:
            continue
        row: dict[str, object] = {"case": case, "policy": policy}
        for key in keys:
            if isinstance(new.get(key), float) and isinstance(old.get(key), float) and old[key]:
                row[f"{key} ratio"] = new[key] / old[key]  # type: ignore[operator]
        if "decisions" in new:
            row["same decisions"] = new["decisions"] == old.get("decisions")
        if "avg_jct" in new:
            row["same avg JCT"] = new["avg_jct"] == old.get("avg_jct")
        out.append(row)
    return out


def policy_ratio_rows(rows: list[dict[str, object]], policy: str = "bo",
                      reference: str = "pollux") -> list[dict[str, object]]:
    """``policy``'s decision times over ``reference``'s, per case and tree (the same process)."""
    keys = ("first_round_s", "later_median_s", "first_round_cpu_s", "later_median_cpu_s")
    by = {(r["case"], r["policy"], r["tree"]): r for r in rows}
    out = []
    for (case, name, tree), new in by.items():
        old = by.get((case, reference, tree))
        if name != policy or old is None:
            continue
        row: dict[str, object] = {"case": case, "tree": tree}
        for key in keys:
            if isinstance(new.get(key), float) and isinstance(old.get(key), float) and old[key]:
                row[f"{key} ratio"] = new[key] / old[key]  # type: ignore[operator]
        out.append(row)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", type=Path, help="a checkout of the base commit to compare with")
    parser.add_argument("--cases", nargs="+", choices=CASES, default=["scale-64", "scale-1024"])
    parser.add_argument("--policies", nargs="+", default=["pollux", "bo"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--trace", type=Path, default=Path("trace-960.csv"),
                        help="the 960-job trace (generated here if missing)")
    parser.add_argument("--trace-hours", type=float, help="simulate only this many hours")
    parser.add_argument("--processes", type=int, default=2, help="for compare")
    parser.add_argument("--skip-branch", action="store_true", help="run the base tree only")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--worker", choices=CASES, help=argparse.SUPPRESS)
    parser.add_argument("--tree", type=Path, help=argparse.SUPPRESS)
    add_record_flag(parser)
    args = parser.parse_args()
    if args.worker:
        # The tree under test comes first; this file's own tree must not shadow it.
        sys.path[:] = [str(args.tree)] + [p for p in sys.path
                                          if Path(p or ".").resolve() != HERE / "experiments"]
        if args.worker.startswith("scale"):
            found = scale_worker(args.worker, args.policies, args.rounds, args.seed)
        elif args.worker == "workload":
            found = workload_worker(args.policies)
        else:
            found = trace_worker(args.trace.resolve(), args.trace_hours)
        print(json.dumps(found))
        return 0

    sys.path.insert(0, str(HERE))
    from bayes_sched.sim.workload import generate_workload, write_workload
    from bayes_sched.tables import print_table

    if "trace" in args.cases and not args.trace.exists():
        write_workload(generate_workload(960, 48, seed=0), args.trace)
    args.trace = args.trace.resolve()
    trees = [] if args.base is None else [(args.base.resolve(), "base")]
    if not args.skip_branch:
        trees.append((HERE, "branch"))
    rows: list[dict[str, object]] = []
    for case in args.cases:
        for tree, label in trees:  # interleaved: base then branch, case by case
            rows += run_case(tree, label, case, args)
            print(f"# {case} on {label}: done (load {load_average():.2f})", file=sys.stderr,
                  flush=True)
    print_table(rows, title="runs (one process per case and tree; load: 1-min average)",
                as_json=args.json)
    if args.base is not None and not args.skip_branch:
        print_table(ratio_rows(rows), title="branch / base (lower is faster)", as_json=args.json)
    if "bo" in args.policies and "pollux" in args.policies:
        print_table(policy_ratio_rows(rows), title="bo / pollux decision time (target <= 1.5)",
                    as_json=args.json)
    if args.record:
        tables = {"runs": rows}
        if args.base is not None and not args.skip_branch:
            tables["branch / base"] = ratio_rows(rows)
        if "bo" in args.policies and "pollux" in args.policies:
            tables["bo / pollux decision time"] = policy_ratio_rows(rows)
        record_results(__file__, tables)
    return 0


if __name__ == "__main__":
    sys.exit(main())
