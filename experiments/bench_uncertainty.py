"""Scheduling under uncertainty: time-sharing policies reading learned throughputs vs the table.

Settings (issue 20):

* ``gavel-2.0``, ``gavel-2.6``: Gavel's continuous multi-GPU jobs (scale factors from the Philly
  mix) at 2.0 / 2.6 jobs/h on 36 V100 + 36 P100 + 36 K80, 360 s rounds; the jobs of ``--window``
  are measured (Gavel: 4000-4999) and the run ends when they finish.
* ``shockwave``: Shockwave's 120-job trace (dynamic batch sizes) on 32 V100, 120 s rounds.

Sources, per policy (``--policies``, ``--shockwave-policies``):

* ``table``: the measured table the jobs run at (the oracle, the upper bound; the ``oracle``
  learner through the estimation stage gives the same runs, pinned by the tests);
* ``agnostic``: no estimation: the policy's heterogeneity-agnostic variant (max-min fairness ->
  Gavel's LAS, FTF -> FTF with every type at the V100 rate); for a policy without one (max sum
  throughput, min total duration) the ``uniform`` learner (every cell at Gavel's default 1
  steps/s, nothing packed);
* every other name of :data:`bayes_sched.estimation.learners.LEARNERS` (``per_cell``: independent
  log-normal posteriors deciding on Thompson draws; the learners of the ``learn`` branch once
  merged), each learning from the jobs' noisy reports (``--noise``, log-scale sd).

Per run: average JCT (h), makespan (h, first submission to last completion of the measured jobs),
worst finish-time fairness rho and the unfair fraction (rho > 1.05) of the measured jobs,
exploration GPU-hours: ``profiling_gpu_h`` (rounds in the cells a learner had a new job profiled
in) and ``new_cell_gpu_h`` (rounds in cells no job had reported from before: where a policy
deciding on posterior draws explores; every run visits new cells, so compare it with the
``oracle`` source's, which runs exactly as the table; NaN for the table, which has no estimation
stage), decision time per round with the estimation stage included (ms). Then per source
its ratio to the table over the seeds (mean and range, min..max), and its decision time over the
table run's.

    python experiments/bench_uncertainty.py [--settings gavel-2.0 gavel-2.6 shockwave]
        [--window 0 100] [--seeds 0 1 2] [--sources table agnostic per_cell]
        [--policies max_min_fairness_perf] [--shockwave-policies max_sum_throughput_perf]
        [--noise 0.05] [--max-hours 2000] [--cpu-time]
        [--exploration thompson|value_of_information|none] [--refit-growth F] [--json]

``--cpu-time``: the decision and estimation times are this process's CPU seconds
(``time.process_time``) instead of wall seconds: on a shared machine wall time counts the other
processes' work, CPU time only ours (torch and BLAS run on one thread in these runs).

Measured figures, with the command, commit, date and load of each run: docs/results/bench_uncertainty.md
(``--record`` appends a run's).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from experiments.results_record import add_record_flag, record_results  # noqa: E402

SETTINGS = ("gavel-2.0", "gavel-2.6", "shockwave")

#: The heterogeneity-agnostic variant of each aware policy ("no estimation").
AGNOSTIC = {"max_min_fairness_perf": "max_min_fairness",
            "max_min_fairness_packed": "max_min_fairness",
            "finish_time_fairness_perf": "finish_time_fairness",
            "finish_time_fairness_packed": "finish_time_fairness"}


def _policy(policy: str, source: str, seed: int, throughputs: str,
            exploration: str | None = None, refit_growth: float | None = None
            ) -> tuple[Any, str, dict[str, Any] | None]:
    """A fresh policy for ``source``, the name it runs under and the estimators it reads
    (choices for the run driver; ``None``: the policy's default, the world's oracle).
    ``exploration``: the packed policy's option of that name, where given (``"none"``: decide
    on the posterior mean and try nothing); ``refit_growth``: the learner's option of that
    name, where given. ``source`` ``"oracle"`` is the oracle's table behind the learning stage
    (``oracle_stage``). A policy that still builds its own estimators (its ``source`` option)
    takes ``source`` and ``throughputs`` as options."""
    from bayes_sched.policies import POLICIES, make_policy

    options: dict[str, Any] = {"seed": seed}
    own = "source" in POLICIES.options(policy)
    if own:
        options["throughputs"] = throughputs
    if source == "table":
        return make_policy(policy, **options), policy, None
    learner = "oracle_stage" if source == "oracle" and not own else source
    if source == "agnostic":
        if policy in AGNOSTIC:
            return make_policy(AGNOSTIC[policy], **options), AGNOSTIC[policy], None
        learner = "uniform"
    estimator: dict[str, Any] = {}
    if exploration == "none" and "exploration" not in POLICIES.options(policy):
        options["thompson" if own else "acquisition"] = False if own else "mean"
    elif exploration is not None:
        options["exploration"] = exploration
    if refit_growth is not None:
        (options if own else estimator)["refit_growth"] = refit_growth
    ran = f"{policy} (uniform)" if source == "agnostic" else policy
    if own:
        return make_policy(policy, source=learner, **options), ran, None
    return make_policy(policy, **options), ran, {"throughput": {"name": learner, **estimator}}


def run_one(setting: str, policy_name: str, source: str, seed: int, window: tuple[int, int],
            noise: float, max_hours: float, exploration: str | None = None,
            clock: Callable[[], float] = time.perf_counter,
            timeline: WindowTimeline | None = None, refit_growth: float | None = None
            ) -> dict[str, Any]:
    """One run; ``clock`` times the loop's estimation and decisions (``time.process_time``:
    this process's CPU seconds); ``timeline`` records a Gavel run's active jobs per round;
    ``exploration``, ``refit_growth``: see :func:`_policy`."""
    from bayes_sched.sim.gavel_jobs import generate_continuous_jobs
    from bayes_sched.sim.shockwave_cluster import ShockwaveCluster
    from bayes_sched.sim.shockwave_jobs import read_shockwave_trace, shipped_shockwave_trace
    from bayes_sched.sim.table_run import run_table_simulation
    from bayes_sched.throughputs import load_shockwave_throughputs
    from bayes_sched.worlds import GAVEL, SHOCKWAVE

    steady: dict[str, float] = {}
    if setting == "shockwave":
        spec = SHOCKWAVE.cluster()
        policy, ran, estimators = _policy(policy_name, source, seed, "tacc", exploration,
                                          refit_growth)
        start = time.perf_counter()
        result = run_table_simulation(
            read_shockwave_trace(shipped_shockwave_trace("tacc_120")), policy, spec,
            table=load_shockwave_throughputs(), cluster_type=ShockwaveCluster,
            measurement_noise=noise, noise_seed=seed, max_time=max_hours * 3600.0, clock=clock,
            estimators=estimators, estimator_seed=seed)
        jobs = result.jobs
    else:
        rate = float(setting.split("-")[1])
        spec = GAVEL.cluster()
        policy, ran, estimators = _policy(policy_name, source, seed, "simulation", exploration,
                                          refit_growth)
        names = [str(i) for i in range(*window)]
        timeline = WindowTimeline() if timeline is None else timeline
        start = time.perf_counter()
        result = run_table_simulation(generate_continuous_jobs(rate, seed, True), policy, spec,
                                      jobs_to_complete=names, measurement_noise=noise,
                                      noise_seed=seed, max_time=max_hours * 3600.0,
                                      clock=clock, on_round=timeline.record,
                                      estimators=estimators, estimator_seed=seed)
        jobs = result.jobs.set_index("job").loc[names].reset_index()
        steady = timeline.summary(window[0])
    wall = time.perf_counter() - start
    finished = jobs["jct"].notna()
    rho = jobs["ftf"].to_numpy()
    summary = result.summary
    per_round = result.decision_seconds + (result.estimate_seconds
                                           if len(result.estimate_seconds) else 0.0)
    return {
        "setting": setting, "policy": policy_name, "source": source, "ran_as": ran,
        "seed": seed, "jobs": len(jobs), "finished": int(finished.sum()),
        "avg_jct_h": float(jobs["jct"].mean() / 3600.0),
        "makespan_h": float((jobs["completion_time"].max() - jobs["submit_time"].min())
                            / 3600.0),
        "worst_ftf": float(np.nanmax(rho)) if finished.any() else float("nan"),
        "unfair_frac": float(np.mean(rho[finished.to_numpy()] > 1.05)) if finished.any()
        else float("nan"),
        "profiling_gpu_h": float(summary.get("profiling_gpu_hours", 0.0)),
        "new_cell_gpu_h": float(summary.get("first_visit_gpu_hours", float("nan"))),
        "failed_launch_gpu_h": float(summary.get("failed_launch_gpu_hours", 0.0)),
        "decision_ms": float(1000 * np.mean(per_round)) if len(per_round) else 0.0,
        "fit_ms": float(1000 * summary.get("fit_seconds", 0.0)
                        / max(summary.get("fits", 0.0), 1.0)),
        "rounds": int(summary["rounds"]), "lp_solves": int(summary.get("allocation_updates", 0)),
        "wall_s": round(wall, 1), **steady,
    }


class WindowTimeline:
    """Per round of a Gavel-setting run: jobs arrived so far, jobs active, and this process's
    CPU seconds (what tells when the cluster reaches a steady state, and whether a round costs
    more as jobs accumulate)."""

    def __init__(self) -> None:
        self.arrived: list[int] = []
        self.active: list[int] = []
        self.cpu_seconds: list[float] = []

    def record(self, cluster: Any) -> None:
        self.arrived.append(len(cluster.jobs))
        self.active.append(cluster.timeline_active[-1])
        self.cpu_seconds.append(time.process_time())

    def summary(self, first: int) -> dict[str, float]:
        """``active_at_window``: active jobs in the round job ``first`` arrived;
        ``active_window_mean``: mean active jobs from then to the run's end;
        ``cpu_ms_per_round_before`` / ``_window``: CPU ms per round before that round and from
        it on (NaN where a phase has no rounds)."""
        arrived = np.array(self.arrived)
        if not len(arrived):
            return {}
        at = int(np.searchsorted(arrived, first + 1))  # first round with job ``first`` in
        cpu = np.diff(np.array([self.cpu_seconds[0], *self.cpu_seconds]))

        def per_round(part: np.ndarray) -> float:
            return float(1000 * part.mean()) if len(part) else float("nan")

        return {"active_at_window": float(self.active[min(at, len(arrived) - 1)]),
                "active_window_mean": (float(np.mean(self.active[at:])) if at < len(arrived)
                                       else float("nan")),
                "cpu_ms_per_round_before": per_round(cpu[1:at]),
                "cpu_ms_per_round_window": per_round(cpu[max(at, 1):])}

    def curve(self, every: int) -> list[dict[str, float]]:
        """Active jobs and CPU ms per round at every ``every``-th arrival (mean over the rounds
        since the last row)."""
        rows: list[dict[str, float]] = []
        last = 0
        for i, n in enumerate(self.arrived):
            if n >= (len(rows) + 1) * every:
                span = self.cpu_seconds[i] - self.cpu_seconds[last]
                rows.append({"jobs_arrived": n, "active": self.active[i],
                             "cpu_ms_per_round": 1000 * span / max(i - last, 1)})
                last = i
        return rows


def ratios(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (setting, policy, source): the source's ratio to the table run of the same seed on
    every metric, mean and range over the seeds; decision time over the table's."""
    base = {(r["setting"], r["policy"], r["seed"]): r for r in rows if r["source"] == "table"}
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for row in rows:
        if row["source"] != "table" and (row["setting"], row["policy"], row["seed"]) in base:
            groups.setdefault((row["setting"], row["policy"], row["source"]), []).append(row)
    out = []
    for (setting, policy, source), group in groups.items():
        entry: dict[str, Any] = {"setting": setting, "policy": policy, "source": source,
                                 "seeds": len(group)}
        for metric in ("avg_jct_h", "makespan_h", "worst_ftf", "decision_ms"):
            values = np.array([row[metric] / base[(setting, policy, row["seed"])][metric]
                               for row in group])
            entry[metric.removesuffix("_h").removesuffix("_ms") + "_ratio"] = (
                f"{values.mean():.3f} ({values.min():.3f}..{values.max():.3f})")
        unfair = np.array([row["unfair_frac"] - base[(setting, policy, row["seed"])][
            "unfair_frac"] for row in group])
        entry["unfair_diff"] = f"{unfair.mean():+.3f} ({unfair.min():+.3f}..{unfair.max():+.3f})"
        for metric in ("profiling_gpu_h", "new_cell_gpu_h", "failed_launch_gpu_h"):
            entry[metric] = round(float(np.mean([r[metric] for r in group])), 1)
        out.append(entry)
    return out


def main() -> None:
    from bayes_sched.estimation.learners import LEARNERS
    from bayes_sched.tables import print_table

    learners = [name for name in LEARNERS if name not in ("oracle", "uniform")]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=SETTINGS)
    parser.add_argument("--window", type=int, nargs=2, default=[4000, 5000],
                        help="jobs measured in the Gavel settings (Gavel: 4000 5000)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--sources", nargs="+", default=["table", "agnostic", *learners],
                        choices=["table", "agnostic", *LEARNERS])
    parser.add_argument("--policies", nargs="+", default=["max_min_fairness_perf"],
                        help="time-sharing policies of the Gavel settings")
    parser.add_argument("--shockwave-policies", nargs="+",
                        default=["max_sum_throughput_perf"],
                        help="time-sharing policies of the Shockwave setting (on one GPU type "
                             "max-min fairness and FTF do not depend on the rates)")
    parser.add_argument("--noise", type=float, default=0.05,
                        help="log-scale sd of the noise on reported steps/s")
    parser.add_argument("--max-hours", type=float, default=5000.0,
                        help="simulated hours after which a run gives up")
    parser.add_argument("--cpu-time", action="store_true",
                        help="decision and estimation times in CPU seconds, not wall")
    parser.add_argument("--exploration", choices=["thompson", "value_of_information", "none"],
                        help="the learner sources' exploration rule (packed max-min; default: "
                             "the policy's; none: decide on the posterior mean, try nothing)")
    parser.add_argument("--refit-growth", type=float, metavar="F",
                        help="the learner sources' refit_growth (default: the policy's; inf: "
                             "refit on new cells and failed launches only)")
    parser.add_argument("--timeline", type=int, default=0, metavar="N",
                        help="Gavel settings: after each run, print its active jobs and CPU ms "
                             "per round at every N-th arrival (where the steady state starts)")
    parser.add_argument("--json", action="store_true")
    add_record_flag(parser)
    args = parser.parse_args()
    if args.window[0] < 0 or args.window[1] <= args.window[0] or args.timeline < 0:
        parser.error("--window A B: expected 0 <= A < B; --timeline: expected N >= 0")
    clock = time.process_time if args.cpu_time else time.perf_counter
    rows = []
    for setting in args.settings:
        policies = args.shockwave_policies if setting == "shockwave" else args.policies
        for policy in policies:
            for seed in args.seeds:
                for source in args.sources:
                    timeline = WindowTimeline()
                    row = run_one(setting, policy, source, seed, tuple(args.window), args.noise,
                                  args.max_hours, args.exploration, clock, timeline,
                                  args.refit_growth)
                    rows.append(row)
                    if not args.json:
                        print(" ".join(f"{k}={round(v, 3) if isinstance(v, float) else v}"
                                       for k, v in row.items()), flush=True)
                        if args.timeline and setting != "shockwave":
                            print_table(timeline.curve(args.timeline),
                                        title=f"{setting} {source} seed {seed}: active jobs")
    summary = ratios(rows)
    if args.record:
        record_results(__file__, {"runs": rows, "ratio to the table": summary})
    if args.json:
        print(json.dumps({"runs": rows, "ratios_to_table": summary}))
        return

    window = (f", Gavel window {args.window[0]}-{args.window[1] - 1}"
              if set(args.settings) - {"shockwave"} else "")
    print_table(rows, title=f"runs (noise {args.noise}{window})")
    print_table(summary, title="ratio to the table (oracle): mean (min..max) over seeds; "
                                  "unfair fraction: difference")


if __name__ == "__main__":
    main()
