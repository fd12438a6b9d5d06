"""The Ray launcher's costs on a local Ray cluster (``ray.cluster_utils``, logical GPUs).

1. Start/stop latency of one job, by part: placement groups ready, actors up, processes
   started (the launcher's own timings), the process running (its first file written, seen from
   the scheduler's side), and stop (SIGTERM, the process exits, actors and groups released).
2. Scheduler-side overhead per round, the launcher's part, with ``--jobs`` submitted jobs on a
   ``--nodes`` x ``--gpus-per-node`` cluster: the jobs that fit (first come, sizes 1, 2 or 4
   GPUs drawn with a seed) run; each round reads the cluster spec and polls every running job,
   then restarts ``--restarts`` of them on other GPUs (stop with a SIGTERM grace, start anew).
   Target: <= 1 s per round beyond the policy's decision. A round's starts (and the first fill)
   go in one :meth:`RayLauncher.start_many` call, as the scheduler makes them; ``--one-by-one``
   starts them one :meth:`RayLauncher.start` at a time instead, for comparison.

The replicas are tiny Python processes that write one file and sleep (the training client is
not part of this measurement).

    python experiments/bench_ray_backend.py                       # 8 nodes x 8 GPUs, 200 jobs
    python experiments/bench_ray_backend.py --nodes 2 --gpus-per-node 4 --jobs 20 --rounds 2
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# Ray reads these when imported: no usage reports, everything on loopback.
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT),
                                                          os.environ.get("PYTHONPATH")]))

import numpy as np  # noqa: E402
import ray  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402

from bayes_sched.backends.launcher import LaunchSpec  # noqa: E402
from bayes_sched.backends.ray_launcher import RayJobProcesses, RayLauncher  # noqa: E402
from bayes_sched.tables import print_table  # noqa: E402
from experiments.results_record import add_record_flag, record_results  # noqa: E402

REPLICA = """\
import os, signal, sys, time
from pathlib import Path
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
job = Path(os.environ["BAYES_SCHED_JOB_DIR"])
(job / f"up-{os.environ['BAYES_SCHED_ATTEMPT']}-{os.environ['RANK']}").write_text("")
while True:
    time.sleep(0.2)
"""


def start_cluster(nodes: int, gpus_per_node: int, cpus_per_node: int) -> Cluster:
    common = {"num_cpus": cpus_per_node, "num_gpus": gpus_per_node,
              "object_store_memory": 80 * 2**20}
    cluster = Cluster(initialize_head=True, head_node_args={**common, "include_dashboard": False})
    for _ in range(nodes - 1):
        cluster.add_node(**common)
    ray.init(address=cluster.address, log_to_driver=False, logging_level="ERROR")
    return cluster


def _spec(name: str, script: Path, counts: list[int], job_dir: Path,
          attempt: int = 0) -> LaunchSpec:
    job_dir.mkdir(parents=True, exist_ok=True)
    return LaunchSpec(name, (sys.executable, str(script)), tuple(counts), str(job_dir), attempt)


def _wait_up(job_dir: Path, attempt: int, world: int, began: float) -> float:
    while not all((job_dir / f"up-{attempt}-{r}").exists() for r in range(world)):
        time.sleep(0.01)
    return time.perf_counter() - began


def latency_rows(launcher: RayLauncher, script: Path, work: Path, gpus_per_node: int,
                 repeats: int) -> list[dict[str, object]]:
    nodes = launcher.cluster_spec().num_nodes
    shapes = [[1] + [0] * (nodes - 1), [gpus_per_node] + [0] * (nodes - 1)]
    if nodes > 1:
        shapes.append([gpus_per_node, gpus_per_node] + [0] * (nodes - 2))
    rows = []
    for counts in shapes:
        parts: dict[str, list[float]] = {}
        for repeat in range(repeats):
            job_dir = work / f"latency-{sum(counts)}-{repeat}"
            spec = _spec("latency", script, counts, job_dir)
            began = time.perf_counter()
            job = launcher.start(spec)
            running = _wait_up(job_dir, 0, spec.world_size, began)
            job.stop(10.0)
            for key, value in {**job.timings, "running": running}.items():
                parts.setdefault(key, []).append(value)
        rows.append({"placement": spec.placement, "replicas": spec.world_size,
                     **{f"{k}_s": statistics.median(v) for k, v in parts.items()},
                     "repeats": repeats})
    return rows


def round_rows(launcher: RayLauncher, script: Path, work: Path, jobs: int, rounds: int,
               restarts: int, seed: int, one_by_one: bool = False
               ) -> tuple[list[dict[str, object]], dict[str, object]]:
    def start(specs: list[LaunchSpec]) -> list[RayJobProcesses]:
        started = ([launcher.start(one) for one in specs] if one_by_one
                   else launcher.start_many(specs))
        failed = [s for s in started if isinstance(s, Exception)]
        assert not failed, failed
        return [s for s in started if not isinstance(s, Exception)]

    spec = launcher.cluster_spec()
    free = list(spec.capacity())
    rng = np.random.default_rng(seed)
    sizes = rng.choice([1, 2, 4], size=jobs)
    running: dict[str, tuple[RayJobProcesses, list[int]]] = {}
    placed: dict[str, list[int]] = {}
    began = time.perf_counter()
    for index, size in enumerate(sizes):  # first come, first placed on one node
        node = next((i for i, f in enumerate(free) if f >= size), None)
        if node is None:
            continue
        free[node] -= int(size)
        counts = [0] * spec.num_nodes
        counts[node] = int(size)
        placed[f"job-{index}"] = counts
    for (name, counts), job in zip(placed.items(), start(
            [_spec(name, script, counts, work / name) for name, counts in placed.items()]),
            strict=True):
        running[name] = (job, counts)
    fill_seconds = time.perf_counter() - began
    rows = []
    attempt = 0
    for round_index in range(rounds):
        began = time.perf_counter()
        launcher.cluster_spec()
        states = [job.poll() for job, _ in running.values()]
        observe = time.perf_counter() - began
        assert all(state is None for state in states), states
        attempt += 1
        began = time.perf_counter()
        moved = list(running)[round_index * restarts:(round_index + 1) * restarts]
        targets = {}
        for name in moved:  # same size, next node with room (the freed GPUs count)
            job, counts = running[name]
            job.stop(10.0)
            node = counts.index(max(counts))
            free[node] += counts[node]
            order = [(node + k) % spec.num_nodes for k in range(1, spec.num_nodes + 1)]
            target = next(i for i in order if free[i] >= counts[node])
            free[target] -= counts[node]
            targets[name] = [0] * spec.num_nodes
            targets[name][target] = counts[node]
        for (name, new), job in zip(targets.items(), start(
                [_spec(name, script, new, work / name, attempt) for name, new in targets.items()]),
                strict=True):
            running[name] = (job, new)
        restart = time.perf_counter() - began
        rows.append({"round": round_index, "running_jobs": len(running),
                     "replicas": sum(sum(c) for _, c in running.values()),
                     "spec_and_poll_s": observe, "restarted": len(moved),
                     "restarts_s": restart,
                     "per_restart_s": restart / len(moved) if moved else 0.0})
    for job, _ in running.values():  # the GPUs free again for what comes next
        job.stop(5.0)
    setup = {"submitted": jobs, "running_jobs": len(running),
             "gpus_used": int(spec.total_gpus - sum(free)), "gpus": spec.total_gpus,
             "fill_s": fill_seconds}
    return rows, setup


def service_round_rows(launcher: RayLauncher, script: Path, work: Path, jobs: int,
                       rounds: int, interval: float, policy_name: str
                       ) -> list[dict[str, object]]:
    """The scheduler's whole round, as ``serve`` runs it, with ``jobs`` submitted jobs: read
    every job's reports and poll its processes (``advance``), read the nodes, the jobs' views,
    the policy's estimators and decision, carry the decision out (the first round starts the
    jobs that fit), save every record and the round to SQLite. Per round: its wall-clock
    seconds beyond the interval and beyond the policy (estimation and decision): the
    scheduler's own overhead."""
    from bayes_sched.backends.job_spec import RealJobSpec
    from bayes_sched.backends.real_cluster import RealClusterConfig
    from bayes_sched.loop import LoopStats, run_loop
    from bayes_sched.policies import make_policy
    from bayes_sched.service.serve import Service
    from bayes_sched.service.state import StateStore

    store = StateStore(work / "state")
    for index in range(jobs):
        store.submit(RealJobSpec(f"job-{index}", (sys.executable, str(script)), 32, 256, 64, 1))
    service = Service(store, launcher, make_policy(policy_name),
                      RealClusterConfig(poll_interval=interval, stop_grace=5.0))
    rows = []
    try:
        for round_index in range(rounds):
            stats = LoopStats()
            began = time.perf_counter()
            run_loop(service.cluster, service.policy, interval,
                     on_round=service.on_round(stats), max_rounds=1, stats=stats,
                     estimators=service.estimators)
            wall = time.perf_counter() - began
            policy = sum(stats.decision_seconds) + sum(stats.estimate_seconds)
            rows.append({"round": round_index, "jobs": len(service.cluster.records),
                         "running": len(service.cluster.allocations()),
                         "wall_s": wall, "interval_s": interval,
                         "estimate_s": sum(stats.estimate_seconds),
                         "decision_s": sum(stats.decision_seconds),
                         "overhead_s": wall - interval - policy})
    finally:
        logging.getLogger("bayes_sched").setLevel(logging.ERROR)  # not a line per job
        for name in list(service.cluster.records):
            service.cluster.cancel(name)
        store.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--cpus-per-node", type=int, default=1,
                        help="logical CPUs per node: Ray starts at most this many worker "
                             "processes at once on a node (actors start one worker each)")
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--restarts", type=int, default=4, help="jobs restarted per round")
    parser.add_argument("--repeats", type=int, default=3, help="starts per latency shape")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-rounds", action="store_true")
    parser.add_argument("--service-rounds", type=int, default=3,
                        help="whole scheduler rounds timed with --jobs submitted (0: skip)")
    parser.add_argument("--interval", type=float, default=1.0,
                        help="seconds per scheduler round (--service-rounds)")
    parser.add_argument("--policy", default="fifo", help="policy of --service-rounds")
    parser.add_argument("--one-by-one", action="store_true",
                        help="start a round's jobs one start() at a time (not start_many)")
    add_record_flag(parser)
    args = parser.parse_args()
    began = time.perf_counter()
    cluster = start_cluster(args.nodes, args.gpus_per_node, args.cpus_per_node)
    print(f"Ray cluster of {args.nodes} x {args.gpus_per_node} logical GPUs up in "
          f"{time.perf_counter() - began:.1f} s")
    # Generous bounds: on a loaded 2-core machine 64 actors' workers take minutes to start,
    # and the first fill is a one-off, not what a round costs.
    launcher = RayLauncher(cluster.address, placement_timeout_seconds=600.0,
                           actor_timeout_seconds=600.0)
    try:
        with tempfile.TemporaryDirectory(prefix="bench-ray-") as folder:
            work = Path(folder)
            script = work / "replica.py"
            script.write_text(REPLICA)
            tables: dict[str, list[dict[str, Any]]] = {}
            tables["start/stop latency of one job (median seconds)"] = latency_rows(
                launcher, script, work, args.gpus_per_node, args.repeats)
            print_table(tables["start/stop latency of one job (median seconds)"],
                        title="start/stop latency of one job (median seconds)")
            if not args.skip_rounds:
                rows, setup = round_rows(launcher, script, work, args.jobs, args.rounds,
                                         args.restarts, args.seed, args.one_by_one)
                print_table([setup], title="rounds: the jobs that fit, started")
                print_table(rows, title="launcher work per round (seconds)")
                tables["rounds: the jobs that fit, started"] = [setup]
                tables["launcher work per round (seconds)"] = rows
            if args.service_rounds:
                title = (f"whole scheduler rounds, {args.jobs} jobs submitted, policy "
                         f"{args.policy} (seconds; target overhead_s <= 1; round 0 starts the "
                         "jobs that fit)")
                tables[title] = service_round_rows(launcher, script, work, args.jobs,
                                                   args.service_rounds, args.interval,
                                                   args.policy)
                print_table(tables[title], title=title)
            if args.record:
                record_results(__file__, tables)
    finally:
        launcher.close(grace_seconds=5.0)
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    main()
