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
   CPU time (not wall: the machine is shared), one BLAS thread. Target (issue 15): <= 5 min of
   CPU per policy. A run that passes ``--gavel-cpu-budget`` seconds of CPU is stopped; its row
   then gives the jobs of the window finished by then, ``cpu_all_s`` ">N" (the CPU it used: a
   true lower bound of the whole run; no projection, as the rounds left and their cost depend
   on how the policy's queue grows) and ``late_ms_per_round``, the CPU per round over the last
   quarter of the rounds run (the first rounds, with few jobs active, are the cheapest).

    python experiments/bench_sim_speed.py                    # parts 1 and 2, workload-1
    python experiments/bench_sim_speed.py --from-report sim-report   # part 1 from a compare run
    python experiments/bench_sim_speed.py --skip-workload   # part 2 only
    python experiments/bench_sim_speed.py --skip-workload --skip-scale --gavel-runs \
        [--gavel-policies max_min_fairness ...] [--gavel-jobs 6000] [--gavel-cpu-budget 300]
        [--gavel-arrivals continue|stop] [--gavel-watch ROUNDS]

Measured (session 12, part 3's setting, seed 0; CPU seconds, one process, load 6-19 on the
shared 2-core machine). Whole runs until jobs 0-5999 finished (``--gavel-cpu-budget`` large)::

    policy                       code           rounds   jobs arrived   CPU s    <= 5 min
    max_min_fairness (LAS)       base 52dee37   55,450   14,328         419.5    no
    max_min_fairness (LAS)       this commit    55,450   14,328         254.8    yes
    max_min_fairness_perf        session 10     37,411                  177      yes
    max_min_fairness_packed      this commit    37,303    9,638         239.4    yes
    finish_time_fairness         this commit    40,757   10,546         203.0    yes

(every JCT of the 14,328 jobs identical to base's; base ran at load 15-19, this code at 4-8.)
The first 300 h of the same run back to back: base 8.5 s, this code 5.4 s (1.57x). Runs of
exactly 6,000 jobs (arrivals stop at job 5999, then the cluster drains) are lighter: LAS base
132.9 s, 27,893 rounds.

Every other table-world policy with ``--gavel-cpu-budget 10`` (session 12, stopped after 10 s;
then a linear projection, CPU x 6000 / jobs of 0-5999 finished, since dropped: it was 2.5-4x
below the whole runs, e.g. LAS 63 s against 254.8 s)::

    policy                       finished  rounds  ms/round  projection
    max_sum_throughput_perf      1,104     4,434   2.26      >=54
    finish_time_fairness_perf    860       3,461   2.89      >=70
    finish_time_fairness_packed  360       1,561   6.42      >=167
    min_total_duration           721       3,071   3.26      >=83
    min_total_duration_packed    228       1,076   9.30      >=263
    gavel_fifo                   847       3,898   2.57      >=71
    fifo_perf                    1,106     4,683   2.14      >=54
    fifo_packed                  773       3,378   2.96      >=78
    allox                        1,297     5,139   1.95      >=46
    gandiva                      849       3,384   2.96      >=71
    gandiva_fair                 1,131     4,538   2.20      >=53
    elas                         1,807     7,209   1.39      >=33
    sia                          277       1,208   8.29      >=217

Session 13, whole runs of the three likeliest misses (code 62e8ba9, ``--gavel-cpu-budget
600``, the three at once at load 4-27): none finished; each stopped at 600 s of CPU::

    policy                       CPU s   rounds   window finished / arrived   ms/round   <= 5 min
    min_total_duration_packed    602.7    3,871     762 / 1,016               155.7      no
    finish_time_fairness_packed  601.2   11,520   2,758 / 2,998                52.2      no
    sia                          600.2    9,196   2,364 / 2,419                65.3      no

(every whole run needs at least ~23,000 rounds: job 5999 arrives near 2,300 h.) The per-round
cost grows with the queue: packed min total duration ran its first 120 h at 8.8 ms per round
and averaged 155.7 over 387 h (cProfile of its first 150 h, 46.6 s: CLARABEL's setup and
solves 9.0, the round mechanism of ``time_sharing.py`` ~18.7, the simulator ~8).

Sia's integer program now goes to HiGHS without cvxpy's compile (``sia.assignment_highs_data``,
the same numbers): back to back against 62e8ba9, the first 100 h 16.0 vs 10.0 s CPU (cProfile
on), the first 300 h 114.8 vs 104.2 s (HiGHS's own solve dominates as the queue grows), every
JCT identical (808 jobs). The other rows above are still unmeasured whole.

Session 16, the ten policies never run whole (code dbdb835, after the mechanism's speed-up
below; ``--gavel-policies P ... --gavel-cpu-budget 330 --json``, two processes of five
policies each, load 2-5 with a CI run beside them for the first 13 minutes)::

    policy                     run       rounds    window finished / arrived   CPU s   <= 5 min
    allox                      complete   31,038   6,000 / 8,101                38.1   yes
    gandiva_fair               complete   30,592   6,000 / 7,975                36.6   yes
    fifo_perf                  complete   26,374   6,000 / 6,952                54.4   yes
    finish_time_fairness_perf  complete   38,374   6,000 / 9,919                87.5   yes
    gandiva                    complete   42,335   6,000 / 10,916               95.6   yes
    fifo_packed                complete   26,320   6,000 / 6,933               214.8   yes
    gavel_fifo                 complete   37,866   6,000 / 9,791               244.8   yes
    min_total_duration         stopped    45,933   5,914 / 11,867             >330     no
    max_sum_throughput_perf    stopped   110,736   5,996 / 28,817             >330     no
    elas                       stopped   167,595   5,919 / 43,494             >330     no

The three misses are long runs, not slow rounds (7.2, 3.0 and 2.0 ms a round): max sum
throughput and E-LAS leave a few of jobs 0-5999 waiting while arrivals go on (4 and 81 of them
after 11,074 and 16,760 simulated hours), so their runs last as long as those jobs starve.
(E-LAS's 81 included jobs held for ever on GPUs they cannot run on: fixed in session 17, below.)

Part 4, the solver floor (session 16, code 7415335, ``--gavel-policies P --solver-floor
--gavel-cpu-budget 600 --json``, the two at once beside a third benchmark and a CI run, load 4-6;
CPU seconds, comparison solves off the budget)::

    policy                       rounds  sim h   finished/arrived  programs  own solver       fastest
    finish_time_fairness_packed  12,577  1,257.7  3,008 / 3,286     2,072     CLARABEL 377.4   377.4
    min_total_duration_packed     4,450    445.0    967 / 1,163     1,442     CLARABEL 406.7    54.4

Packed FTF's programs are cone programs (``(rates . v)(r d - e) >= R`` per job), which HiGHS
cannot take: CLARABEL alone spent 377.4 s (median 114.9 ms a program, 6,134 variables) on the
programs of the first half of the run (3,008 of the 6,000 jobs finished), so its whole run
cannot meet 5 min with an open solver whatever the rest costs (ECOS and CLARABEL were measured
alike, 67-92 ms a program at 108 GPUs, on the lp15 branch). Packed min total duration is
linear: HiGHS solves the same programs in 54.4 s against CLARABEL's 406.7 (7.5x), so its solver
is no floor; the rest of its run (194 s of CPU for 445 of its ~2,300+ simulated hours, growing
with its queue) is. Its ``solver="HIGHS"`` option stays off by default: the lp15 branch saw
HiGHS end one horizon LP in 329 6.6 % long, its objective (1/T, about 1e-6 per second) inside
HiGHS's tolerances. (These two runs used this part's first form, a script of its own with the
same timing code.)

Packed min total duration with HiGHS as its solver, the whole run (``--gavel-policies
min_total_duration_packed --solver-floor --no-compare --policy-opt solver=HIGHS
--gavel-cpu-budget 1200``, load 3-5): complete, 30,350 rounds (3,035 simulated hours, 7,914
jobs arrived), **504.2 s CPU, of which HiGHS's solves 332.7 s** (9,910 programs, median 22.2
ms). Each recompute needs both of its LPs for Gavel's allocation (the shortest horizon, then the
allocation at the horizon Gavel's bisection settles on; Gavel itself solves one LP per bisection
step), so the fastest open solver's time alone is over 5 min: this row cannot meet it either.

Session 16 (issue 15, Sia at 7415335; HiGHS's own ``run`` timed by a wrapper around
``sia._solve_highs``; load 0-7)::

    --gavel-cpu-budget   rounds   window finished / arrived   CPU s    HiGHS CPU s   jobs/round
    600                  17,048   4,406 / 4,451               600.1    565.4 (94%)   48 (max 72)
    1800                 34,908   5,989 / 9,041               1800.0   1722.3 (96%)  65 (max 121)

Neither finished (11 jobs of 0-5999 left at 1,800 s): the whole run takes over 1,800 s, not
<= 5 min. HiGHS's MIP solve is the floor: 34,032 of the 34,908 rounds reach it (the others: every
job's best configuration fits), 50.6 ms CPU per solve on average (17.8 over the first 300 h, 35.0
over the first 17,048 rounds; the largest 3.3 s) on programs of 192 columns on average (one per
job and GPU type with room), solved at the root node in the first 300 h (perf: feasibility jump
~30% of HiGHS's time, then cuts and a restart); the first 17,048 rounds' solves alone take 565 s.
Everything else (simulator, configurations, ``_place``, building the data, cvxpy's HiGHS
interface) is 4-6%. Exact shortcuts checked on the first 300 h (3,000 programs, 2,124 solved): no
program equals the previous round's (1,798 have the same jobs and configurations, but the restart
factor ``T / (T + delta)`` moves with every job's age ``T``), so reusing a solution never applies;
highspy called directly, with or without ``output_flag=False``, gives bitwise the same solutions
and 17.4-17.5 vs 17.8 ms per solve (2%, noise). Options that change HiGHS's path change
decisions: without feasibility jump 13.9 ms per solve, but 295 of the 2,124 chosen sets differ
(212 exact ties, the rest within the 1e-4 gap); were it 22% faster throughout, the first 17,048
rounds' solves would still take ~440 s.

Session 16, packed min total duration's round mechanism (``time_sharing.py``). A cProfile of
its rounds 270-310 h (230-280 jobs active, ~16,000 job pairs in force) at 658e27d: besides
CLARABEL, the greedy assignment (each round three ``np.array`` reads of a dict of arrays per
combination, then a Python pass over each type's ranking), the time reset (a Python loop over
every combination admitted), the scan for a departed job's combinations and the loop naming
the allocation's pairs. Now the per-combination state is rows of arrays
(``time_sharing.ComboStore``: the reset and the priorities vectorised, a departed job's
combinations found through its members, the pairs in force read once per allocation), the
greedy scans its ranking in numpy windows for the first combination that fits with no busy
member, and the table's pair rates are read once per class pair. The first 330 h (3,300
rounds) of the same run, base and this code at once (load ~3; CPU s, ms per round incl.
the solves)::

    code        CPU s   0-100 h   200-250 h   250-300 h   300-330 h
    658e27d     168.1     4.4       26.0       102.7       241.8
    f35dd13     121.7     4.0       19.2        66.2       178.2

Every JCT of the 607 jobs finished, the rounds and the active jobs every 50 rounds identical
(each step of f35dd13's three commits checked alike). Part 4 at 803dd7d (the greedy's last
step not in; ``--gavel-policies min_total_duration_packed --solver-floor
--gavel-cpu-budget 600 --json``, load 2-4)::

    rounds  sim h  finished/arrived  programs  CLARABEL s  HiGHS s  rest s  ms/round (late)
     5,494  549.4   1,248 / 1,444     1,784     525.5       63.2     74.9   109.3 (141.3)

against 4,450 rounds, 445 h, 406.7 s CLARABEL and 193.3 s rest at 7415335: the rest of the
run fell from 193 s over 445 h to 75 s over 549 h. CLARABEL alone (525.5 s for the first
quarter of the run's hours) keeps the whole run far above 5 minutes.

HiGHS on rescaled horizon programs (120 fastest-finish programs, every 4th of the first
300 h, 7-234 jobs; a script of its own, not this file): HiGHS on the program as stated
ends up to 6.6 % long (593,804 vs 632,982 s) and changes Gavel's bisection horizon
(``min_total_duration.gavel_horizon``) on one; with the remaining steps in units of the longest
job's standalone seconds (so ``s`` <= 1, the same program) HiGHS and CLARABEL on it agree
within 3.0e-9 relative on all 120, and with CLARABEL on the program as stated within 4.2e-6
(the 4 over 1e-6 are CLARABEL's own imprecision on the unscaled program, on 7-17 jobs), the
bisection horizon identical on all 120; 2.6 s of HiGHS against 7.2 s of CLARABEL. Not wired
in: the default solver stays CLARABEL for both programs.

Session 17: the rescaled horizon program is wired in (754c7ba, ``min_total_duration.
standalone_seconds``) for both solvers: on every recompute of packed min total duration's first
150 h (244 programs) HiGHS and CLARABEL agree within 3.5e-9 and on every bisection horizon
(unscaled HiGHS: 6.6 % off on one, the horizon moved); CLARABEL's JCTs over 300 h are identical
to before for both min total duration policies, and so is the Shockwave fidelity row.

Session 17, **runs of exactly 6,000 jobs** (``--gavel-arrivals stop``: jobs 0-5999 arrive, then
the cluster drains; Gavel's own meaning of an N-job run, its simulator's ``num_total_jobs``,
which stops generating jobs at N and ends when N have completed). Code 7f3da5f (E-LAS's fix
below; the rest as 58aab6d), ``--gavel-policies P ... --gavel-cpu-budget 330 --gavel-arrivals
stop --json``, two or three processes on 2 cores (load 1-3); CPU seconds::

    policy                       rounds   sim h     CPU s   <= 5 min
    allox                        24,808   2,480.8    25.2   yes
    gandiva_fair                 24,492   2,449.2    27.6   yes
    max_min_fairness_perf        25,459   2,545.9    29.9   yes
    max_sum_throughput_perf      24,659   2,465.9    32.8   yes
    max_min_fairness (LAS)       27,893   2,789.3    37.6   yes
    gandiva                      25,409   2,540.9    41.8   yes
    finish_time_fairness_perf    25,110   2,511.0    41.9   yes
    fifo_perf                    26,368   2,636.8    45.9   yes
    finish_time_fairness         27,534   2,753.4    51.0   yes
    max_min_fairness_packed      25,296   2,529.6    53.9   yes
    gavel_fifo                   40,441   4,044.1    83.7   yes
    min_total_duration           24,110   2,411.0   119.6   yes
    fifo_packed                  26,312   2,631.2   158.7   yes
    elas                         38,547   3,854.7    18.4   yes (before the fix: stopped
                                                             at 330 s, 198,784 h, 10 jobs left)
    min_total_duration_packed    24,124   2,412.4   332.8   no (``solver=HIGHS``, HiGHS 260.4 s)
    finish_time_fairness_packed  (not rerun)                no: CLARABEL's solves alone 377.4 s
    sia                          (not rerun)                no: HiGHS's MIP solves alone 565.4 s

A run of 6,000 jobs is the run with arrivals continuing until its 6,000th arrival, so every
figure about its first 2,300 simulated hours carries over from the rows above: packed
finish-time fairness's 377.4 s of CLARABEL came in its first 1,257.7 h (3,286 jobs arrived)
and Sia's 565.4 s of HiGHS in its first 1,704.8 h (4,451 arrived). Packed min total duration
with its default CLARABEL spent 525.5 s in its first 549 h; with ``--policy-opt solver=HIGHS``
its whole run took 284.3 s before the horizon program was rescaled (HiGHS 209.5 s, 7,728
programs) and 332.8 s after (HiGHS 260.4 s, 7,712 programs, median 18.9 ms: the scaled
programs' tail is slower); the HiGHS runs are also another policy in effect: the second,
constant-objective LP's answer is a vertex under HiGHS and an interior point under CLARABEL
(and under Gavel's ECOS), and the first 300 h finish 719 jobs with HiGHS against 569. Two
ways to keep CLARABEL's answers faster, measured on the default run's first hours: HiGHS for
the horizon LP only (its value agrees to 3.5e-9, so the decisions would not move) removes less
than half of CLARABEL's time (first 350 h: CLARABEL 69.0 s on the 565 horizon LPs, 81.1 s on
the 565 feasibility LPs; HiGHS 16.1 and 12.7); HiGHS's interior-point method without crossover
on the feasibility LP is slower than CLARABEL (first 200 h, 327 programs: 6.2 s against 4.7)
and ends elsewhere (median L1 distance to CLARABEL's entries 0.46 of their sum; the simplex's
1.20).

E-LAS's fix (7f3da5f): E-LAS placed each job on the GPU type with the most free GPUs, and a job
that cannot run there (ResNet-50 at batch 128 on 2-8 K80s: Gavel's table has 0) kept those
GPUs for ever: it held them, so it stayed admitted; it gained no service, so its priority never
fell. Its failed launches are reported (out of memory), and E-LAS now reads them.

**Arrivals continuing until jobs 0-5999 finish** (the default, the rows of session 16): three
policies starve a few jobs of that window while the queue grows, so the run lasts as long as
the policy starves them, whatever a round costs (``--gavel-watch 2000``: every 2,000 rounds the
active jobs, and each unfinished window job's fraction of its steps done):

* max sum throughput (Gavel's objective is the summed steps/s, so slow jobs wait): jobs 2012,
  2250, 3701 and 5022 at 0.448, 0.176, 0.458 and 0.108 of their steps from 11,400 h to 11,800 h
  with no GPU; active jobs 60-170 over the first 3,000 h, 414-444 at 11,400-11,800 h; 1.3 ms a
  round at first, 2.5 late.
* min total duration (every job gets the time to finish by the common horizon, which new
  arrivals push back): 86 window jobs left from 3,600 h to 4,800 h, job 541 at 0.979 of its
  steps from 4,000 h on; active jobs 710-744 at 4,600-4,800 h.
* E-LAS with the fix: 31 window jobs left at 21,393 h (330 s of CPU), 580 jobs active, 55,402
  arrived; a job with service and little progress waits while new jobs (priority 0) arrive.
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

        from bayes_sched.policies import time_fraction_lp

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
    from bayes_sched.sim.gavel_jobs import generate_continuous_jobs
    from bayes_sched.sim.table_run import run_table_simulation

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
    rounds = len(at_round)
    late = at_round[-(rounds // 4 + 1):]  # the last quarter's rounds
    return {"policy": name, "jobs": num_jobs, "finished": finished,
            "arrived": len(cluster.jobs),
            "active": sum(1 for job in cluster.jobs.values() if job.active),
            "rounds": rounds,
            "sim_hours": round(cluster.state.now / 3600.0, 1), "cpu_s": round(cpu, 1),
            "ms_per_round": round(1000 * cpu / max(rounds, 1), 2),
            "late_ms_per_round": round(1000 * (late[-1] - late[0]) / max(len(late) - 1, 1), 2),
            "run": "complete" if complete else "stopped",
            "cpu_all_s": round(cpu, 1) if complete else f">{cpu:.0f}",
            "meets_5_min": (cpu <= 300.0) if complete else ("no" if cpu > 300.0 else "unknown"),
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
    args = parser.parse_args()
    if not args.skip_workload:
        if args.from_report:
            rows = json.loads((args.from_report / "summary.json").read_text())
            keep = ("policy", "workload", "wall_s", "decision_median_ms", "decision_p95_ms",
                    "avg_jct")
            rows = [{k: row[k] for k in keep} for row in rows]
            total = sum(row["wall_s"] for row in rows)
            print_table(rows, title=f"wall time per run (sum {total:.0f} s of CPU)",
                        as_json=args.json)
        else:
            print_table(workload_rows(args.workload, args.policies),
                        title=f"one full workload ({args.workload}, 64 GPUs)", as_json=args.json)
    if not args.skip_scale:
        with threadpool_limits(1):
            rows = scale_rows(args.scale_jobs, args.scale_nodes, 4, args.rounds, args.seed,
                              args.policies)
        print_table(rows, title="scale: decision time per round", as_json=args.json)
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
