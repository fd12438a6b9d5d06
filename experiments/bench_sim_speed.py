"""Speed of the simulator and of the policies' decisions.

1. Wall time of one full workload (160 jobs, 64 GPUs) per policy, and the Pollux policy's
   per-round decision time (median, p95) in that run. The artifact's own simulator needs over 20
   minutes per workload under Pollux (about 2 s per round).
2. Scale: a synthetic 1,024-GPU cluster (256 nodes x 4) with 2,000 active jobs; per-round decision
   time of each policy over a few rounds (the first Pollux round builds every job's speedup table;
   later rounds reuse them). Target: <= 2 s per Pollux round.
3. (``--gavel-runs``) A continuous Gavel run per throughput-table policy: Gavel's multi-GPU
   generator at 2.6 jobs/h, seed 0, on 36 V100 + 36 P100 + 36 K80 in 360 s rounds, arrivals
   continuing until jobs 0 .. N-1 (``--gavel-jobs``, default 6,000) have finished, or with
   ``--gavel-arrivals stop`` exactly N jobs (Gavel's ``num_total_jobs``); the process's
   CPU time (not wall: the machine is shared), one BLAS thread, and the window's average JCT
   once all its jobs have finished, with the 99th percentile and the worst of their slowdowns
   (JCT over the time alone on their GPUs: finish-time fairness ``rho`` without a contention
   factor, :func:`~bayes_sched.sim.fairness.ftf_rho`, since a continuous run has no static
   one), the window's restarts per job and the cluster's utilisation over the rounds with
   jobs (:func:`~bayes_sched.sim.metrics.utilization_summary`), which show what a faster
   setting, such as POP's ``--policy-opt partitions=K``, costs in quality. Target (issue
   15): <= 5 min of CPU per policy. A run that passes
   ``--gavel-cpu-budget`` seconds of CPU is stopped; its row then gives the jobs of the window
   finished by then, ``cpu_all_s`` ">N" (the CPU it used: a true lower bound of the whole run;
   no projection, as the rounds left and their cost depend on how the policy's queue grows)
   and ``late_ms_per_round``, the CPU per round over the last quarter of the rounds run (the
   first rounds, with few jobs active, are the cheapest).
4. (``--solver-floor``) Part 3 with every solve of the policy timed against the other open
   solvers (``--no-compare``: its own solves only): how much of a run's CPU the solver alone
   takes, the floor that no change to the rest of the policy can go below.

    python experiments/bench_sim_speed.py                    # parts 1 and 2, workload-1
    python experiments/bench_sim_speed.py --from-report sim-report   # part 1 from a compare run
    python experiments/bench_sim_speed.py --skip-workload   # part 2 only
    python experiments/bench_sim_speed.py --skip-workload --skip-scale --gavel-runs \
        [--gavel-policies max_min_fairness ...] [--gavel-jobs 6000] [--gavel-cpu-budget 300]
        [--gavel-arrivals continue|stop] [--gavel-watch ROUNDS]

Measured figures (each run's command, commit, date and load): docs/results/bench_sim_speed.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from threadpoolctl import threadpool_limits  # noqa: E402

from bayes_sched.agent import JobAgent  # noqa: E402
from bayes_sched.cluster import ClusterState  # noqa: E402
from bayes_sched.estimation import estimate_round  # noqa: E402
from bayes_sched.estimation.choose import policy_estimators  # noqa: E402
from bayes_sched.jobs import JobView  # noqa: E402
from bayes_sched.policies import POLICIES, make_policy  # noqa: E402
from bayes_sched.sim import read_workload, run_simulation  # noqa: E402
from bayes_sched.sim.physics import APPLICATION_NAMES, get_application  # noqa: E402
from bayes_sched.tables import print_table  # noqa: E402
from experiments.results_record import add_record_flag, record_results  # noqa: E402

if TYPE_CHECKING:
    from bayes_sched.sim.table_cluster import TableCluster


def workload_rows(workload: str, policies: list[str]) -> list[dict[str, object]]:
    rows = []
    for name in policies:
        result = run_simulation(workload, name)
        d = result.decision_seconds * 1e3
        rows.append({"policy": name, "workload": workload, "wall_s": result.wall_seconds,
                     "rounds": int(d.size), "decision_median_ms": float(np.median(d)),
                     "decision_p95_ms": float(np.percentile(d, 95)),
                     "estimate_s": result.estimate_seconds,
                     "avg_jct_s": result.summary["avg_jct"]})
    return rows


def _template_agents() -> dict[str, JobAgent]:
    """One agent per application, measured on 1, 2, 4 GPUs and 2 x 4 GPUs at two micro-batches."""
    agents = {}
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
        agents[app_name] = agent
    return agents


def scale_rows(num_jobs: int, num_nodes: int, gpus: int, rounds: int, seed: int,
               policies: list[str]) -> list[dict[str, object]]:
    rng = np.random.default_rng(seed)
    templates = _template_agents()
    specs = read_workload("workload-1").jobs
    rows = []
    for name in policies:
        policy = make_policy(name)
        jobs = []
        for i in range(num_jobs):
            spec = specs[i % len(specs)]
            app = get_application(spec.application)
            settings = policy.job_settings(spec)
            # Every job of an application reports the template's measurements (and its fit, where
            # the job tunes its own batch).
            report = templates[spec.application].report_fields()
            if settings.batch_size is not None:
                report.update(fit=None, fit_version=0)
            jobs.append(dict(name=f"job{i}", application=spec.application,
                             submit_time=float(-rng.integers(0, 36000)),
                             attained_service=float(rng.integers(0, 100000)),
                             requested_replicas=spec.num_replicas,
                             requested_batch_size=spec.batch_size, settings=settings,
                             limits=app.limits, target_epochs=app.max_epochs,
                             examples_per_epoch=app.examples_per_epoch, **report))
        allocation = {job["name"]: np.zeros(num_nodes, dtype=np.int64) for job in jobs}
        times, estimate = [], []
        estimators = policy_estimators(policy)
        for r in range(rounds):
            now = 60.0 * r
            cluster = ClusterState(num_nodes, gpus, now)
            views = [JobView(age=now - job["submit_time"], allocation=allocation[job["name"]],
                             num_restarts=0, **job) for job in jobs]  # type: ignore[arg-type]
            start = time.perf_counter()
            views, estimates = estimate_round(estimators, cluster, views)
            estimate.append(time.perf_counter() - start)
            start = time.perf_counter()
            decision = policy.decide(cluster, views, estimates)
            times.append(time.perf_counter() - start)
            allocation = {job["name"]: decision.get(job["name"], np.zeros(num_nodes, np.int64))
                          for job in jobs}
        used = sum(int(a.sum()) for a in allocation.values())
        rows.append({"policy": name, "gpus": num_nodes * gpus, "jobs": num_jobs,
                     "first_round_s": times[0], "later_rounds_median_s": float(np.median(times[1:])),
                     "later_rounds_max_s": float(np.max(times[1:])),
                     "estimate_median_s": float(np.median(estimate)), "gpus_allocated": used})
    return rows


class _OverBudget(Exception):
    """Raised from a round's callback to stop a run that used up its CPU budget."""


#: Part 4: the policy module whose ``solve_program`` is timed, per policy name.
SOLVER_MODULES = {
    "min_total_duration": "bayes_sched.policies.gavel.min_total_duration",
    "min_total_duration_packed": "bayes_sched.policies.gavel.min_total_duration",
    "finish_time_fairness": "bayes_sched.policies.gavel.finish_time_fairness",
    "finish_time_fairness_perf": "bayes_sched.policies.gavel.finish_time_fairness",
    "finish_time_fairness_packed": "bayes_sched.policies.gavel.finish_time_fairness",
}


class _SolverClock:
    """Part 4: times every program a policy module hands to ``solve_program`` and solves it
    again with every other open solver that takes it (HiGHS for linear programs, CLARABEL for
    both; ``compare=False``: none); :attr:`charged` is the comparison solves' CPU, kept off the
    run's budget."""

    def __init__(self, module_name: str, compare: bool = True) -> None:
        import importlib

        from bayes_sched.mechanisms import time_fraction_lp

        self.module = importlib.import_module(module_name)
        self.solve_program = time_fraction_lp.solve_program
        self.own: list[float] = []
        self.fastest: list[float] = []
        self.charged = 0.0
        self.compare = compare

    def _seconds(self, program: Any, solver: str) -> float:
        start = time.process_time()
        try:
            answer = self.solve_program(program, solver)
        except Exception:  # noqa: BLE001 - a solver that cannot take the program sets no floor
            return float("inf")
        return time.process_time() - start if answer is not None else float("inf")

    def solve(self, program: Any, solver: str) -> np.ndarray | None:
        start = time.process_time()
        answer = self.solve_program(program, solver)
        own = time.process_time() - start
        side = time.process_time()
        others = (() if not self.compare else ("HIGHS", "CLARABEL") if program.product is None
                  else ("CLARABEL",))
        fastest = min([own, *(self._seconds(program, o) for o in others if o != solver)])
        self.charged += time.process_time() - side
        self.own.append(own)
        self.fastest.append(fastest)
        return answer

    def __enter__(self) -> _SolverClock:
        setattr(self.module, "solve_program", self.solve)  # noqa: B010 - a module's global
        return self

    def __exit__(self, *exc: object) -> None:
        setattr(self.module, "solve_program", self.solve_program)  # noqa: B010

    def columns(self) -> dict[str, object]:
        fastest = float(np.sum(self.fastest))
        return {"programs": len(self.own), "own_solver_s": round(float(np.sum(self.own)), 1),
                "own_median_ms": round(1e3 * float(np.median(self.own)), 1) if self.own else 0,
                "fastest_solver_s": round(fastest, 1), "floor_over_5_min": fastest > 300.0}


def gavel_run_rows(policies: list[str], num_jobs: int, rate: float, seed: int,
                   cpu_budget: float, solver_floor: bool = False, options: Sequence[str] = (),
                   compare: bool = True, arrivals_stop: bool = False, watch: int = 0
                   ) -> list[dict[str, object]]:
    """Part 3: one continuous Gavel run per policy until jobs ``0 .. num_jobs - 1`` finish (or
    ``cpu_budget`` seconds of CPU pass); CPU seconds of the whole run, rounds, and whether it
    meets the issue's 5 minutes. With ``solver_floor`` (part 4), the policies of
    :data:`SOLVER_MODULES` only, with their solves timed (:class:`_SolverClock`). ``options``:
    ``KEY=VALUE`` policy options for every policy (``--policy-opt``); ``compare=False``: time
    the policy's own solves only (``--no-compare``); ``arrivals_stop``: exactly ``num_jobs``
    jobs arrive, then the cluster drains (Gavel's ``num_total_jobs``; ``--gavel-arrivals
    stop``); ``watch``: every ``watch`` rounds, a line on stderr (:func:`watch_line`)."""
    return [gavel_run_row(name, num_jobs, rate, seed, cpu_budget,
                          _SolverClock(SOLVER_MODULES[name], compare) if solver_floor else None,
                          options, arrivals_stop, watch)
            for name in policies if not solver_floor or name in SOLVER_MODULES]


def gavel_run_row(name: str, num_jobs: int, rate: float, seed: int, cpu_budget: float,
                  clock: _SolverClock | None = None, options: Sequence[str] = (),
                  arrivals_stop: bool = False, watch: int = 0) -> dict[str, object]:
    """One policy's row of :func:`gavel_run_rows`; ``clock`` times its solves (part 4)."""
    from contextlib import nullcontext
    from dataclasses import replace
    from itertools import islice

    from bayes_sched.cluster_spec import load_cluster_spec
    from bayes_sched.sim.fairness import ftf_rho
    from bayes_sched.sim.gavel_jobs import generate_continuous_jobs
    from bayes_sched.sim.metrics import utilization_summary
    from bayes_sched.sim.table_run import run_table_simulation, table_job_rows, table_timeline

    spec = replace(load_cluster_spec("v100:36,p100:36,k80:36"), round_interval=360.0)
    names = [str(i) for i in range(num_jobs)]
    window = set(names)
    policy = make_policy(name, **({"seed": seed} if "seed" in POLICIES.options(name) else {}),
                         **POLICIES.parse(name, list(options), "--policy-opt"))
    seen: dict[str, TableCluster] = {}
    at_round: list[float] = []  # the process's CPU seconds at the end of each round

    def charged() -> float:
        return 0.0 if clock is None else clock.charged

    def check(cluster: TableCluster) -> None:
        seen["cluster"] = cluster
        at_round.append(time.process_time() - charged())
        if watch and len(at_round) % watch == 0:
            print(watch_line(name, cluster, window, at_round[-1] - start), file=sys.stderr,
                  flush=True)
        if at_round[-1] - start > cpu_budget:
            raise _OverBudget

    start = time.process_time()
    complete = True
    try:
        with clock if clock is not None else nullcontext():
            jobs = generate_continuous_jobs(rate, seed, multi_gpu=True)
            run_table_simulation(islice(jobs, num_jobs) if arrivals_stop else jobs, policy,
                                 spec, jobs_to_complete=names, on_round=check)
    except _OverBudget:
        complete = False
    cpu = time.process_time() - charged() - start
    cluster = seen["cluster"]
    finished = sum(1 for job in cluster.jobs.values()
                   if job.completion_time is not None and job.spec.name in window)
    # Once every window job has finished (before, the finished ones are the short ones): their
    # average JCT and slowdowns (JCT over the time alone on their GPUs: what FTF equalises),
    # their restarts, and the cluster's utilisation over the rounds with jobs (how well the
    # rounds carried the policy's allocations out).
    quality: dict[str, object] = {"avg_jct_h": "-", "slowdown_p99": "-", "slowdown_worst": "-",
                                  "restarts_per_job": "-", "utilization": "-"}
    if complete:
        jobs = table_job_rows(cluster)
        jobs = jobs[jobs["job"].isin(window)]
        jct = jobs["jct"].to_numpy()
        slowdown = ftf_rho(jct, jobs["standalone_time"].to_numpy())
        quality = {"avg_jct_h": round(float(jct.mean()) / 3600.0, 3),
                   "slowdown_p99": round(float(np.quantile(slowdown, 0.99)), 2),
                   "slowdown_worst": round(float(slowdown.max()), 2),
                   "restarts_per_job": round(float(jobs["restarts"].mean()), 1),
                   "utilization": round(utilization_summary(table_timeline(cluster))
                                        ["utilization"], 3)}
    rounds = len(at_round)
    late = at_round[-(rounds // 4 + 1):]  # the last quarter's rounds
    return {"policy": name, "options": " ".join(options) or "-", "jobs": num_jobs,
            "finished": finished,
            "arrived": len(cluster.jobs),
            "active": sum(1 for job in cluster.jobs.values() if job.active),
            "rounds": rounds,
            "sim_hours": round(cluster.state.now / 3600.0, 1), "cpu_s": round(cpu, 1),
            "ms_per_round": round(1000 * cpu / max(rounds, 1), 2),
            "late_ms_per_round": round(1000 * (late[-1] - late[0]) / max(len(late) - 1, 1), 2),
            "run": "complete" if complete else "stopped",
            "cpu_all_s": round(cpu, 1) if complete else f">{cpu:.0f}",
            "meets_5_min": (cpu <= 300.0) if complete else ("no" if cpu > 300.0 else "unknown"),
            **quality,
            **(clock.columns() if clock is not None else {})}


def watch_line(policy: str, cluster: TableCluster, window: set[str], cpu: float, shown: int = 6
               ) -> str:
    """A running Gavel run's state: simulated hours, CPU seconds, jobs arrived and active, the
    jobs of ``window`` not finished, and the first ``shown`` of them as ``name:fraction of its
    steps done:GPUs held``."""
    active = [job for job in cluster.jobs.values() if job.active]
    left = sorted((job for job in active if job.spec.name in window),
                  key=lambda job: int(job.spec.name) if job.spec.name.isdigit() else 0)
    jobs = " ".join(f"{job.spec.name}:{job.steps_done / job.spec.total_steps:.3f}:{job.num_gpus}"
                    for job in left[:shown])
    return (f"{policy}: {cluster.state.now / 3600.0:.0f} h, {cpu:.0f} s CPU, "
            f"{len(cluster.jobs)} arrived, {len(active)} active, {len(left)} of the window "
            f"left {jobs}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", default="workload-1")
    parser.add_argument("--policies", nargs="+", default=list(POLICIES))
    parser.add_argument("--from-report", type=Path, help="a compare report folder to read")
    parser.add_argument("--skip-workload", action="store_true")
    parser.add_argument("--skip-scale", action="store_true")
    parser.add_argument("--scale-jobs", type=int, default=2000)
    parser.add_argument("--scale-nodes", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--gavel-runs", action="store_true",
                        help="part 3: a continuous Gavel run per throughput-table policy")
    parser.add_argument("--gavel-policies", nargs="+", default=None,
                        help="part 3's policies (default: every throughput-table policy)")
    parser.add_argument("--gavel-jobs", type=int, default=6000)
    parser.add_argument("--gavel-rate", type=float, default=2.6, help="jobs per hour")
    parser.add_argument("--gavel-arrivals", choices=("continue", "stop"), default="continue",
                        help="part 3: arrivals go on until jobs 0 .. N-1 finish (continue), or "
                             "exactly N jobs arrive and the cluster drains (stop: Gavel's "
                             "num_total_jobs)")
    parser.add_argument("--gavel-cpu-budget", type=float, default=600.0,
                        help="stop a run after this many CPU seconds")
    parser.add_argument("--gavel-watch", type=int, default=0, metavar="N",
                        help="part 3: every N rounds, the run's state on stderr (jobs active, "
                             "the window's jobs left and their progress)")
    parser.add_argument("--policy-opt", action="append", default=[], metavar="KEY=VALUE",
                        help="part 3/4: a policy option for every policy run (repeatable)")
    parser.add_argument("--solver-floor", action="store_true",
                        help="part 4: part 3 with every solve timed against the other solvers")
    parser.add_argument("--no-compare", action="store_true",
                        help="part 4: time the policy's own solves only, no other solver")
    parser.add_argument("--json", action="store_true")
    add_record_flag(parser)
    args = parser.parse_args()
    tables: dict[str, list[dict[str, Any]]] = {}
    if not args.skip_workload:
        if args.from_report:
            rows = json.loads((args.from_report / "summary.json").read_text())
            keep = ("policy", "workload", "wall_s", "decision_median_ms", "decision_p95_ms",
                    "avg_jct")
            rows = [{k: row[k] for k in keep} for row in rows]
            total = sum(row["wall_s"] for row in rows)
            print_table(rows, title=f"wall time per run (sum {total:.0f} s of CPU)",
                        as_json=args.json)
            tables["wall time per run"] = rows
        else:
            tables[f"one full workload ({args.workload})"] = workload_rows(args.workload,
                                                                         args.policies)
            print_table(tables[f"one full workload ({args.workload})"],
                        title=f"one full workload ({args.workload}, 64 GPUs)", as_json=args.json)
    if not args.skip_scale:
        with threadpool_limits(1):
            rows = scale_rows(args.scale_jobs, args.scale_nodes, 4, args.rounds, args.seed,
                              args.policies)
        print_table(rows, title="scale: decision time per round", as_json=args.json)
        tables["scale: decision time per round"] = rows
    if args.gavel_runs:
        from bayes_sched.errors import InputError
        from bayes_sched.worlds import TABLE_WORLD_POLICIES

        gavel_policies = args.gavel_policies or list(TABLE_WORLD_POLICIES)
        for name in gavel_policies:  # bad options fail here, in one line, before any run
            try:
                POLICIES.parse(name, args.policy_opt, "--policy-opt")
            except InputError as error:
                parser.error(str(error))
        with threadpool_limits(1):
            rows = gavel_run_rows(gavel_policies,
                                  args.gavel_jobs, args.gavel_rate, args.seed,
                                  args.gavel_cpu_budget, args.solver_floor, args.policy_opt,
                                  not args.no_compare, args.gavel_arrivals == "stop",
                                  args.gavel_watch)
        print_table(rows, title=f"continuous Gavel runs (multi-GPU, {args.gavel_rate} jobs/h, "
                                f"jobs 0-{args.gavel_jobs - 1}, arrivals "
                                f"{args.gavel_arrivals}): CPU seconds per policy",
                    as_json=args.json)
        tables["continuous Gavel runs: CPU seconds per policy"] = rows
    if args.record and tables:
        record_results(__file__, tables)
    return 0


if __name__ == "__main__":
    sys.exit(main())
