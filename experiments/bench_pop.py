"""POP for the table world's programs: decision time, objective gap and average JCT, each against
the exact solve in the same run (:mod:`bayes_sched.mechanisms.pop`).

Parts (``--parts``):

* ``decision``: one decision that recomputes the allocation (as
  ``experiments/bench_gavel_decisions.py``: Gavel's multi-GPU generator, seed 0, every job
  active, age 1 h, a fresh policy per decision, each policy's first decision on a small problem
  untimed) on clusters of ``--sizes`` GPUs (nodes of 8,
  a third of each type; ``round(0.93 * GPUs)`` jobs, 1,900 at 2,048 as there); CPU seconds of
  the exact decision (``partitions=1``) and of POP's (``--partitions``, default ``auto``), the
  sub-problems POP used, the ratio, and ``pop_critical_s``: POP's decision less every
  sub-problem's solve but the longest (POP's harness reports the split plus the longest
  sub-problem, the sub-problems solved in parallel; not measured for Sia). Each decision's
  wall seconds too (``*_wall_s``). ``--workers N``: POP's decisions solve their sub-problems
  ``N`` at once (the policies' ``partition_workers``; the workers are started before the
  clocks, their start printed to stderr); the CPU columns then add the workers' CPU to this
  process's, and ``pop_critical_s`` is left out (the solves' clocks overlap).
  ``--exact-max-gpus`` skips exact decisions above a size. ``--baseline-opt KEY=VALUE``
  (repeatable): each policy that takes the option decides again, exact and POP, with it (the
  columns ``exact_base_cpu_s`` and ``pop_base_cpu_s``, and ``speedup``: base over default
  POP), so a change and its baseline are timed in one run (e.g. ``horizon_solver=CLARABEL``:
  packed min total duration's shortest horizon by CLARABEL, as before HiGHS took it).
  ``--profile N``: POP's decision (the ``pop`` column) runs under cProfile and its ``N``
  functions of most own CPU time are printed to stderr (where the decision's time goes: the
  solvers' calls, the programs' construction, the round mechanism).
* ``gap``: ``--snapshots`` states (default 20) per policy on ``--gap-gpus`` GPUs: snapshot ``s``
  is the generator's first ``--gap-load`` x GPUs jobs of seed ``s``, each with a random age
  (0-2 h: a fresh policy has no isolated time to set against a long age) and a random fraction
  of its steps done (0-0.9), drawn from seed ``s``; the program's objective at the exact
  allocation and at POP's (``--gap-partitions`` sub-problems, split by seed ``s``), evaluated on
  the whole problem: the least normalised throughput (max-min), the summed steps/s (max sum),
  the largest finish-time ratio (FTF, with the whole problem's isolated shares), the shortest
  horizon (min total duration: the largest of the sub-problems' for POP), Sia's summed utility.
  The gap is the relative loss (positive: POP worse). For FTF also the median job's ratio
  under each (``median_ratio_exact``, ``median_ratio_pop``, averaged over the snapshots): the
  program pins only the largest ratio, and the rest of the jobs get whatever point of the
  optimal face the solver returns.
* ``jct``: the Gavel continuous run (multi-GPU jobs, ``--jct-rate`` jobs/h, 36 V100 + 36 P100 +
  36 K80, 360 s rounds) until the jobs of ``--jct-window`` (30 jobs) finished, per seed of
  ``--jct-seeds``, exact and with ``--jct-partitions`` sub-problems; the window's average JCT
  and POP's over exact, per seed and over the seeds whose window finished in both arms (the
  means' ratio, ``ratio``; and the per-seed ratios' mean, ``mean_seed_ratio``, with its 90%
  Student-t interval, ``lower_90`` and ``upper_90``, paired by seed: an interval that holds
  1 finds no difference; a run stops after ``--jct-max-hours`` simulated hours, its window's unfinished
  jobs counted in ``unfinished``: min total duration, whose objective is the makespan, can
  leave nearly finished jobs without GPUs while its queue grows). ``--jct-exact-opt``
  gives the exact arm options: with ``--jct-partitions 1`` and ``solver=HIGHS`` the part
  compares two exact solves of the same program (HiGHS's vertex against CLARABEL's interior
  point), which shows how far apart two optimal answers' JCTs lie; ``--jct-pop-opt`` gives the
  POP arm options (Sia's ``partition_groups=redrawn`` measures the split drawn anew each round
  against its default, groups a job keeps for its life).

Every row carries the 1-minute load average (``/proc/loadavg``): the machine may be shared, so
CPU seconds (``time.process_time``) are the figures, not wall time; one BLAS thread.

    python experiments/bench_pop.py --parts decision --sizes 256 512 1024 2048
    python experiments/bench_pop.py --parts decision --sizes 2048 --policies \
        min_total_duration_packed --baseline-opt horizon_solver=CLARABEL
    python experiments/bench_pop.py --parts decision --sizes 2048 --policies \
        finish_time_fairness_packed min_total_duration_packed --exact-max-gpus 0 --profile 12
    python experiments/bench_pop.py --parts decision --sizes 1024 2048 --exact-max-gpus 0 \
        --policies finish_time_fairness_packed min_total_duration_packed --workers 2
    python experiments/bench_pop.py --parts gap --snapshots 20 --gap-gpus 512 --gap-partitions 4
    python experiments/bench_pop.py --parts jct --jct-window 200 230 --jct-seeds 0 1 2 \
        --jct-partitions 4 --json
    python experiments/bench_pop.py --parts jct --jct-window 200 230 --jct-partitions 1 \
        --jct-exact-opt solver=HIGHS --policies max_min_fairness max_min_fairness_packed

Measured figures (each run's command, commit, date and load): docs/results/bench_pop.md.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import json
import pstats
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from experiments.results_record import add_record_flag, record_results  # noqa: E402

LP_POLICIES = ("max_min_fairness", "max_min_fairness_perf", "max_min_fairness_packed",
               "max_sum_throughput_perf", "finish_time_fairness", "finish_time_fairness_perf",
               "finish_time_fairness_packed", "min_total_duration", "min_total_duration_packed")
POLICIES = (*LP_POLICIES, "sia")
HOUR = 3600.0


def load_average() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def cluster_of(gpus: int) -> str:
    """Nodes of 8 GPUs, a third of the nodes of each type (V100 first): the 2,048-GPU cluster
    of ``bench_gavel_decisions.py``."""
    nodes = max(3, gpus // 8)
    third = nodes // 3
    return f"v100:{nodes - 2 * third}x8,p100:{third}x8,k80:{third}x8"


def snapshot(gpus: int, num_jobs: int, seed: int, random_state: bool) -> tuple[Any, list[Any]]:
    """``(ClusterState, job views)``: the generator's first ``num_jobs`` multi-GPU jobs of
    ``seed``, all active; with ``random_state`` each has a random age and steps done."""
    from bayes_sched.cluster import ClusterState
    from bayes_sched.cluster_spec import load_cluster_spec
    from bayes_sched.sim.gavel_jobs import generate_continuous_jobs
    from bayes_sched.sim.table_cluster import TableCluster
    from bayes_sched.throughputs import load_gavel_throughputs

    spec = replace(load_cluster_spec(cluster_of(gpus)), round_interval=360.0)
    jobs = [replace(job, submit_time=0.0) for job in
            islice(generate_continuous_jobs(1.0, seed, True), num_jobs)]
    views = TableCluster(jobs, spec, load_gavel_throughputs()).job_views()
    rng = np.random.default_rng(seed)
    if random_state:
        views = [replace(v, age=float(rng.uniform(0.0, 2 * HOUR)),
                         progress=float(rng.uniform(0.0, 0.9) * (v.target_steps or 0.0)))
                 for v in views]
    else:
        views = [replace(v, age=HOUR) for v in views]
    return ClusterState(spec=spec, now=float(max(v.age for v in views))), views


def jobs_for(gpus: int) -> int:
    return round(0.93 * gpus)


# --- decision time ------------------------------------------------------------------------------

def baseline_options(name: str, baseline: Sequence[str], flag: str = "--baseline-opt"
                     ) -> dict[str, Any] | None:
    """The ``KEY=VALUE`` options of ``baseline`` (given by ``flag``) that policy ``name`` takes
    (parsed), or ``None`` when it takes none of them."""
    from bayes_sched.policies import POLICIES

    known = POLICIES.options(name)
    taken = [item for item in baseline if item.partition("=")[0].strip() in known]
    return POLICIES.parse(name, taken, flag) if taken else None


def start_workers(workers: int) -> float:
    """Wall seconds to start this process's ``workers`` solver processes (each has run a
    task), so that no decision's clock counts their start."""
    from bayes_sched.mechanisms.solver_pool import map_concurrently, run_solver

    start = time.perf_counter()
    map_concurrently([functools.partial(run_solver, int, 0)] * (4 * workers), workers)
    return time.perf_counter() - start


def workers_cpu() -> float:
    """CPU seconds (user and system) of this process's living children: the solver workers."""
    import psutil

    total = 0.0
    for child in psutil.Process().children():
        try:
            times = child.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


def decision_rows(policies: Sequence[str], sizes: Sequence[int], partitions: str | int,
                  exact_max_gpus: int, baseline: Sequence[str] = (), profile: int = 0,
                  workers: int = 1) -> list[dict[str, object]]:
    from bayes_sched.sim.oracles import oracle_estimates
    from bayes_sched.throughputs import load_gavel_throughputs

    TABLE_ESTIMATES = oracle_estimates(load_gavel_throughputs())  # the world's oracle
    from bayes_sched.policies import POLICIES as REGISTRY
    from bayes_sched.policies import make_policy

    rows: list[dict[str, object]] = []
    small, few = snapshot(24, 20, 0, random_state=False)
    for name in policies:  # imports and solvers' first use off the clock
        make_policy(name).decide(small, few, TABLE_ESTIMATES)
    if workers > 1:
        print(f"{workers} solver workers started in {start_workers(workers):.2f} s (wall)",
              file=sys.stderr)
    for gpus in sizes:
        state, views = snapshot(gpus, jobs_for(gpus), 0, random_state=False)
        for name in policies:
            row: dict[str, object] = {"policy": name, "gpus": gpus, "jobs": len(views),
                                      "load": load_average()}
            base = baseline_options(name, baseline)
            runs: list[tuple[str, int | str, dict[str, Any]]] = [("exact", 1, {}),
                                                                ("pop", partitions, {})]
            if base is not None:
                runs += [("exact_base", 1, base), ("pop_base", partitions, base)]
            elif baseline:  # one set of columns for the table
                row.update(exact_base_cpu_s=None, pop_base_cpu_s=None)
            for label, setting, options in runs:
                if label.startswith("exact") and gpus > exact_max_gpus:
                    row[f"{label}_cpu_s"] = None
                    continue
                side_by_side = (workers > 1 and not label.startswith("exact")
                                and "partition_workers" in REGISTRY.options(name))
                if side_by_side:
                    options = {**options, "partition_workers": workers}
                policy: Any = make_policy(name, partitions=setting, **options)
                solves = timed(policy)
                profiler = cProfile.Profile() if profile and label == "pop" else None
                start, wall, children = time.process_time(), time.perf_counter(), workers_cpu()
                if profiler is not None:
                    profiler.enable()
                policy.decide(state, views, TABLE_ESTIMATES)
                row[f"{label}_cpu_s"] = round(time.process_time() - start
                                              + workers_cpu() - children, 3)
                row[f"{label}_wall_s"] = round(time.perf_counter() - wall, 3)
                if profiler is not None:
                    profiler.disable()
                    print(f"--- {name}, {gpus} GPUs, POP: the {profile} functions of most own "
                          "CPU time", file=sys.stderr)
                    pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(
                        profile)
                if label == "pop":
                    row["k"] = policy.partitioner.last_count
                    # POP's own measure (its harness: the split, then the longest of the
                    # sub-problems, solved in parallel): the decision less all solves but the
                    # longest one.
                    whole = float(row["pop_cpu_s"])  # type: ignore[arg-type]
                    # (Not where the sub-problems ran side by side: the solves' clocks then
                    # overlap.)
                    split_up = side_by_side and policy.partitioner.last_count > 1
                    row["pop_critical_s"] = (None if split_up else round(
                        whole - sum(solves) + max(solves, default=0.0), 3))
                    row["workers"] = workers if split_up else 1
                    row["pairs_in_force"] = len(getattr(policy, "pair_fractions", dict)())
            exact, pop = row.get("exact_cpu_s"), row["pop_cpu_s"]
            row["ratio"] = (round(float(exact) / max(float(pop), 1e-9), 2)  # type: ignore[arg-type]
                            if exact is not None else None)
            if baseline:
                row["speedup"] = None if base is None else round(float(row["pop_base_cpu_s"])  # type: ignore[arg-type]
                                       / max(float(pop), 1e-9), 2)  # type: ignore[arg-type]
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def timed(policy: Any) -> list[float]:
    """CPU seconds of each of ``policy``'s solves (its ``allocate_combinations`` calls, one per
    sub-problem; Sia's :func:`~bayes_sched.policies.sia_program.solve_assignment` calls are not
    wrapped: empty for Sia)."""
    seconds: list[float] = []
    solve = getattr(policy, "allocate_combinations", None)
    if solve is None:
        return seconds

    def clocked(inputs: Any) -> Any:
        start = time.process_time()
        try:
            return solve(inputs)
        finally:
            seconds.append(time.process_time() - start)

    policy.allocate_combinations = clocked
    return seconds


# --- objective gap ------------------------------------------------------------------------------

def captured_inputs(name: str, state: Any, views: list[Any]) -> Any:
    """The whole problem's ``AllocationInputs`` as policy ``name`` builds them in a decision."""
    from bayes_sched.sim.oracles import oracle_estimates
    from bayes_sched.throughputs import load_gavel_throughputs

    TABLE_ESTIMATES = oracle_estimates(load_gavel_throughputs())  # the world's oracle
    from bayes_sched.policies import make_policy

    seen: list[Any] = []
    policy: Any = make_policy(name, partitions=1)  # one call: the whole problem
    solve = policy.allocate_combinations

    def capture(inputs: Any) -> Any:
        seen.append(inputs)
        return solve(inputs)

    policy.allocate_combinations = capture
    policy.decide(state, views, TABLE_ESTIMATES)
    return seen[0]


def lp_objective(name: str, inputs: Any, x: np.ndarray) -> float:
    """The program's objective of the max-min or max-sum policy ``name`` at allocation ``x``
    ``(J + P, T)`` over the whole problem ``inputs`` (finish-time fairness's, the largest
    ratio, is the largest of :func:`finish_time_ratios`)."""
    from bayes_sched.mechanisms.time_fraction_lp import effective_rates

    thr, s = inputs.throughputs, inputs.scale_factors
    share = inputs.capacities / inputs.capacities.sum()
    if name == "max_min_fairness":
        return float((s * x[:inputs.num_jobs].sum(axis=1)).min())
    if name == "max_min_fairness_perf":
        return float(((thr * x[:inputs.num_jobs]).sum(axis=1) * s
                      / np.maximum(thr @ share, 1e-12)).min())
    effective = effective_rates(x, thr, inputs.pairs, inputs.pair_throughputs)
    if name == "max_min_fairness_packed":
        return float((effective * s / np.maximum(thr.sum(axis=1), 1e-12)).min())
    if name == "max_sum_throughput_perf":
        return float(effective.sum())
    raise ValueError(name)


def finish_time_ratios(name: str, inputs: Any, *allocations: np.ndarray) -> list[np.ndarray]:
    """Each job's finish-time ratio ``(J,)`` under each of ``allocations`` (``(J + P, T)``
    each) of the finish-time-fairness policy ``name`` over the whole problem ``inputs`` (its
    isolated shares, computed once): the program minimises their largest."""
    from bayes_sched.mechanisms.time_fraction_lp import effective_rates
    from bayes_sched.policies import make_policy

    policy: Any = make_policy(name)
    rates = policy._rates(inputs)
    elapsed, remaining, denominator = policy._ratio_terms(inputs, rates)
    out = []
    for x in allocations:
        if name == "finish_time_fairness_packed":
            effective = effective_rates(x, inputs.throughputs, inputs.pairs,
                                        inputs.pair_throughputs)
        else:
            effective = (rates * x[:inputs.num_jobs]).sum(axis=1)
        with np.errstate(divide="ignore"):
            out.append(np.asarray((elapsed + remaining / effective) / denominator))
    return out


def horizon(name: str, inputs: Any, parts: Sequence[Any] | None) -> float:
    """Min total duration's shortest horizon (s): the whole program's, or the largest of the
    sub-problems' of ``parts``."""
    from bayes_sched.mechanisms.pop import pairs_by_partition, restrict
    from bayes_sched.policies import make_policy

    def shortest(problem: Any) -> float:
        policy: Any = make_policy(name)
        return float(policy.shortest_horizon(problem))

    if parts is None:
        return shortest(inputs)
    return max(shortest(restrict(inputs, part, rows))
               for part, rows in zip(parts, pairs_by_partition(inputs, parts), strict=True))


def fresh(name: str) -> Any:
    """A new policy ``name`` (no state carried between the solves compared)."""
    from bayes_sched.policies import make_policy

    return make_policy(name)


def gap_rows(policies: Sequence[str], gpus: int, snapshots: int, k: int, load: float
             ) -> list[dict[str, object]]:
    from bayes_sched.mechanisms.pop import solve_partitioned, split

    rows: list[dict[str, object]] = []
    for name in policies:
        gaps, exact_cpu, pop_cpu = [], 0.0, 0.0
        medians: list[tuple[float, float]] = []  # FTF: the median job's ratio, exact and POP
        for seed in range(snapshots):
            state, views = snapshot(gpus, round(load * gpus), seed, random_state=True)
            if name == "sia":
                (exact, pop), (a, b) = sia_values(state, views, k, seed)
                maximise = True
            else:
                inputs = captured_inputs(name, state, views)
                parts = split(inputs.num_jobs, inputs.capacities.round().astype(int), k,
                              np.random.default_rng(seed), inputs.job_classes)
                start = time.process_time()
                if name.startswith("min_total_duration"):
                    exact = horizon(name, inputs, None)
                    a = time.process_time() - start
                    pop = horizon(name, inputs, parts)
                    b = time.process_time() - start - a
                else:
                    x = fresh(name).allocate_combinations(inputs)
                    a = time.process_time() - start
                    y = solve_partitioned(inputs, parts, fresh(name).allocate_combinations)
                    b = time.process_time() - start - a  # the solves only, not their scoring
                    assert x is not None and y is not None, (name, seed)
                    if name.startswith("finish_time_fairness"):
                        ratios = finish_time_ratios(name, inputs, x, y)
                        exact, pop = (float(r.max()) for r in ratios)
                        medians.append((float(np.median(ratios[0])),
                                        float(np.median(ratios[1]))))
                    else:
                        exact, pop = lp_objective(name, inputs, x), lp_objective(name, inputs, y)
                maximise = name.startswith("max_")
            exact_cpu += a
            pop_cpu += b
            gaps.append((exact - pop) / abs(exact) if maximise else (pop - exact) / abs(exact))
        row = {"policy": name, "gpus": gpus, "jobs": round(load * gpus), "k": k,
               "snapshots": snapshots, "gap_mean_pct": round(100 * float(np.mean(gaps)), 3),
               "gap_max_pct": round(100 * float(np.max(gaps)), 3),
               "gap_min_pct": round(100 * float(np.min(gaps)), 3),
               "within_1.5pct": int(np.sum(np.array(gaps) <= 0.015)),
               "exact_solve_cpu_s": round(exact_cpu / snapshots, 3),
               "pop_solve_cpu_s": round(pop_cpu / snapshots, 3),
               **({"median_ratio_exact": round(float(np.mean([m[0] for m in medians])), 3),
                   "median_ratio_pop": round(float(np.mean([m[1] for m in medians])), 3)}
                  if medians else {"median_ratio_exact": "-", "median_ratio_pop": "-"}),
               "load": load_average()}
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def sia_values(state: Any, views: list[Any], k: int, seed: int
               ) -> tuple[tuple[float, float], tuple[float, float]]:
    """Sia's summed utility, exact and POP, and the CPU seconds of each solve."""
    from bayes_sched.mechanisms.pop import class_index, split
    from bayes_sched.mechanisms.rounds import cluster_types
    from bayes_sched.policies.sia import SiaPolicy, config_utilities, normalized_goodputs
    from bayes_sched.policies.sia_program import partitioned_assignment, solve_assignment
    from bayes_sched.sim.oracles import oracle_estimates
    from bayes_sched.throughputs import load_gavel_throughputs

    sia = SiaPolicy()
    sia.read_throughputs(oracle_estimates(load_gavel_throughputs()))  # the world's oracle
    types = cluster_types(state)
    capacities = np.array([state.gpus_of_type(t) for t in types], dtype=np.int64)
    configs = sia.configurations(state, views, types, capacities)
    utility = config_utilities(normalized_goodputs(configs, len(views)), sia.p, sia.lambda_n)
    options = sia._solver_options()
    start = time.process_time()
    exact = solve_assignment(utility, configs, capacities, len(views), sia.solver, options)
    a = time.process_time() - start
    parts = split(len(views), capacities, k, np.random.default_rng(seed),
                  class_index([(v.application, v.requested_replicas) for v in views]))
    pop = partitioned_assignment(utility, configs, parts, sia.solver, options)
    b = time.process_time() - start - a
    assert exact is not None and pop is not None
    return ((float(utility[exact[exact >= 0]].sum()), float(utility[pop[pop >= 0]].sum())),
            (a, b))


# --- average JCT --------------------------------------------------------------------------------

def jct_rows(policies: Sequence[str], window: tuple[int, int], seeds: Sequence[int],
             rate: float, k: int, exact_opts: Sequence[str] = (),
             max_hours: float = 1000.0, pop_opts: Sequence[str] = ()
             ) -> list[dict[str, object]]:
    from bayes_sched.cluster_spec import load_cluster_spec
    from bayes_sched.policies import make_policy
    from bayes_sched.sim.gavel_jobs import generate_continuous_jobs
    from bayes_sched.sim.seeds import mean_interval
    from bayes_sched.sim.table_run import run_table_simulation

    spec = replace(load_cluster_spec("v100:36,p100:36,k80:36"), round_interval=360.0)
    names = [str(i) for i in range(*window)]
    rows: list[dict[str, object]] = []
    for name in policies:
        means: dict[str, list[float]] = {"exact": [], "pop": []}
        cpu: dict[str, float] = {"exact": 0.0, "pop": 0.0}
        unfinished = 0
        exact_settings = baseline_options(name, exact_opts, "--jct-exact-opt") or {}
        pop_settings = baseline_options(name, pop_opts, "--jct-pop-opt") or {}
        for seed in seeds:
            for label, setting in (("exact", 1), ("pop", k)):
                policy = make_policy(name, seed=seed, partitions=setting,
                                     **(exact_settings if label == "exact" else pop_settings))
                start = time.process_time()
                result = run_table_simulation(generate_continuous_jobs(rate, seed, True), policy,
                                              spec, jobs_to_complete=names,
                                              max_time=max_hours * HOUR)
                cpu[label] += time.process_time() - start
                jobs = result.jobs.set_index("job").reindex(names)
                left = int(jobs["jct"].isna().sum())
                unfinished += left
                means[label].append(float(jobs["jct"].mean() / HOUR) if not left else np.nan)
            print(json.dumps({"policy": name, "seed": seed, "exact_h": means["exact"][-1],
                              "pop_h": means["pop"][-1]}), flush=True)
        pairs = [(e, p) for e, p in zip(means["exact"], means["pop"], strict=True)
                 if np.isfinite(e) and np.isfinite(p)]  # seeds whose window finished in both
        mean_ratio, lower, upper = mean_interval([p / e for e, p in pairs])
        exact = float(np.mean([e for e, _ in pairs])) if pairs else np.nan
        pop = float(np.mean([p for _, p in pairs])) if pairs else np.nan
        row = {"policy": name, "window": f"{window[0]}-{window[1] - 1}", "k": k,
               "exact_opts": _options_text(exact_settings),
               "pop_opts": _options_text(pop_settings),
               "seeds": len(pairs),
               "exact_avg_jct_h": round(exact, 3) if pairs else "-",
               "pop_avg_jct_h": round(pop, 3) if pairs else "-",
               "ratio": round(pop / exact, 4) if pairs else "-",
               "mean_seed_ratio": _rounded(mean_ratio), "lower_90": _rounded(lower),
               "upper_90": _rounded(upper),
               "per_seed_ratio": " ".join(f"{p / e:.3f}" if np.isfinite(e / p) else "-"
                                          for e, p in zip(means["exact"], means["pop"],
                                                          strict=True)),
               "exact_cpu_s": round(cpu["exact"], 1), "pop_cpu_s": round(cpu["pop"], 1),
               "unfinished": unfinished, "load": load_average()}
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def _options_text(settings: dict[str, Any]) -> str:
    """An arm's options as a table cell: ``KEY=VALUE`` items, or a dash for none."""
    return " ".join(f"{key}={value}" for key, value in settings.items()) or "-"


def _rounded(value: float) -> float | str:
    """``value`` to 4 places for a table; a dash where it is NaN (no seed, or one: no
    interval)."""
    return round(value, 4) if np.isfinite(value) else "-"


def main() -> None:
    from threadpoolctl import threadpool_limits

    from bayes_sched.tables import print_table

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", nargs="+", default=["decision", "gap", "jct"],
                        choices=["decision", "gap", "jct"])
    parser.add_argument("--policies", nargs="+", default=list(POLICIES), choices=list(POLICIES))
    parser.add_argument("--sizes", type=int, nargs="+", default=[256, 512, 1024, 2048])
    parser.add_argument("--partitions", default="auto",
                        help="POP's setting in the decision part: auto or a count")
    parser.add_argument("--workers", type=int, default=1,
                        help="decision part: POP's sub-problems solved this many at once "
                             "(the policies' partition_workers; Sia takes no such option)")
    parser.add_argument("--exact-max-gpus", type=int, default=4096)
    parser.add_argument("--baseline-opt", action="append", default=[], metavar="KEY=VALUE",
                        help="decision part: each policy taking the option decides again "
                             "with it (the baseline of a change), exact and POP")
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="decision part: print POP's decision's N functions of most own "
                             "CPU time (cProfile) to stderr")
    parser.add_argument("--snapshots", type=int, default=20)
    parser.add_argument("--gap-gpus", type=int, default=512)
    parser.add_argument("--gap-partitions", type=int, default=4)
    parser.add_argument("--gap-load", type=float, nargs="+", default=[0.93],
                        help="jobs per GPU in the snapshots (one gap table per value)")
    parser.add_argument("--jct-window", type=int, nargs=2, default=[300, 330])
    parser.add_argument("--jct-seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--jct-rate", type=float, default=2.6)
    parser.add_argument("--jct-partitions", type=int, default=2)
    parser.add_argument("--jct-max-hours", type=float, default=1000.0,
                        help="jct part: simulated hours after which a run stops with the "
                             "window's unfinished jobs counted (column 'unfinished'; that "
                             "seed's ratio is then '-' and the means leave the seed out)")
    parser.add_argument("--jct-exact-opt", action="append", default=[], metavar="KEY=VALUE",
                        help="jct part: options of the exact arm, for each policy taking them "
                             "(with --jct-partitions 1 the part compares two exact solves, "
                             "e.g. solver=HIGHS against the default)")
    parser.add_argument("--jct-pop-opt", action="append", default=[], metavar="KEY=VALUE",
                        help="jct part: options of the POP arm, for each policy taking them "
                             "(e.g. partition_groups=redrawn)")
    parser.add_argument("--json", action="store_true")
    add_record_flag(parser)
    args = parser.parse_args()
    if not all(0 < g <= 16384 for g in args.sizes) or not 0 < args.gap_gpus <= 16384:
        parser.error("--sizes/--gap-gpus: expected GPUs in 1..16384")
    from bayes_sched.mechanisms.solver_pool import MAX_WORKERS

    if not 1 <= args.workers <= MAX_WORKERS:
        parser.error(f"--workers {args.workers}: expected a count of processes in "
                     f"1..{MAX_WORKERS}")
    if not 0 <= args.profile <= 1000:
        parser.error("--profile: expected a number of functions in 0..1000")
    if not 1 <= args.snapshots <= 1000 or not 1 <= args.gap_partitions <= 512 \
            or not 1 <= args.jct_partitions <= 512:
        parser.error("--snapshots 1..1000, --gap-partitions and --jct-partitions 1..512")
    if not all(0 < load <= 64 for load in args.gap_load):
        parser.error("--gap-load: expected jobs per GPU in (0, 64]")
    if not 0 <= args.jct_window[0] < args.jct_window[1] <= 100_000:
        parser.error("--jct-window A B: expected 0 <= A < B <= 100000")
    if not 0 < args.jct_max_hours <= 100_000:
        parser.error(f"--jct-max-hours {args.jct_max_hours}: expected simulated hours in "
                     "(0, 100000]")
    from bayes_sched.errors import InputError

    taken: set[str]
    for flag, items in (("--baseline-opt", args.baseline_opt),
                        ("--jct-exact-opt", args.jct_exact_opt),
                        ("--jct-pop-opt", args.jct_pop_opt)):
        taken = set()
        for name in args.policies:  # a bad option fails here, in one line, before any run
            try:
                taken.update(baseline_options(name, items, flag) or {})
            except InputError as error:
                parser.error(str(error))
        for item in items:
            if item.partition("=")[0].strip() not in taken:
                parser.error(f"{flag} {item!r}: an option of none of the policies "
                             f"{', '.join(args.policies)}")
    from bayes_sched.mechanisms.pop import MAX_PARTITIONS, check_partitions

    try:
        partitions = check_partitions(args.partitions if args.partitions == "auto"
                                      else int(args.partitions))
    except ValueError:
        parser.error(f"--partitions {args.partitions}: expected 'auto' or a count in "
                     f"1..{MAX_PARTITIONS}")
    out: dict[str, list[dict[str, object]]] = {}
    parts: dict[str, Callable[[], list[dict[str, object]]]] = {
        "decision": lambda: decision_rows(args.policies, args.sizes, partitions,
                                          args.exact_max_gpus, args.baseline_opt,
                                          args.profile, args.workers),
        "gap": lambda: [row for load in args.gap_load for row in gap_rows(
            args.policies, args.gap_gpus, args.snapshots, args.gap_partitions, load)],
        "jct": lambda: jct_rows(args.policies, (args.jct_window[0], args.jct_window[1]),
                                args.jct_seeds, args.jct_rate, args.jct_partitions,
                                args.jct_exact_opt, args.jct_max_hours, args.jct_pop_opt)}
    with threadpool_limits(1):
        for part in args.parts:
            out[part] = parts[part]()
    if args.record:
        record_results(__file__, {part: rows for part, rows in out.items() if rows})
    if args.json:
        print(json.dumps(out))
        return
    for part, rows in out.items():
        print_table(rows, title=f"POP vs exact: {part}")


if __name__ == "__main__":
    main()
