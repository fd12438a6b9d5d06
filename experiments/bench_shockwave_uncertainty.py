"""Scheduling under uncertainty in Shockwave's world: learned throughputs x remaining-work predictors.

Setting (issue 20): Shockwave's 120-job trace (``tacc_120``, dynamic batch sizes) on 32 V100
(8 nodes x 4), 120 s rounds, Shockwave's tacc throughputs; jobs report the steps/s they ran at with
seeded multiplicative noise (``--noise``, log-scale sd; the seed is the measurement-noise seed,
the trace is fixed).

Grid, per policy:

* throughput source (``--sources``): ``table`` (the oracle: the measured table the jobs run at),
  ``bayes`` (ours), ``gavel``, ``sia`` (learners of :data:`bayes_sched.estimation.learners.
  LEARNERS`, learning from the reports), ``agnostic`` (no estimation: for ``shockwave`` the
  ``uniform`` learner, every batch size at one step/s; for ``max_min_fairness_perf`` Gavel's
  heterogeneity-agnostic ``max_min_fairness``);
* remaining-work predictor (``--predictors``; ``shockwave`` only, the other policies do not
  predict remaining work): ``oracle`` (the simulator's true remaining seconds, supplied by this
  benchmark through the policy's swappable ``predictor``: the upper bound, never a policy
  default), ``dirichlet`` (Shockwave's), ``noise_scale`` (ours, planning on its upper quantile).

The reference of every ratio is the oracle (``table`` with the ``oracle`` predictor) of the same
policy and seed. Per run: average JCT (s), makespan (s), worst finish-time fairness rho, unfair
fraction (rho > 1.05), profiling GPU-hours (rounds in the cells of a learner's profiling plans;
in this one-type world no round is forced: a job's plan is its own cell), decision time per round
with estimation (ms), median plan (s). Then per (policy, source, predictor): ratio to the oracle,
mean and range (min..max) over seeds; unfair fraction as a difference.

Runs whose source reads no reports (``table``, ``agnostic``) are the same for every noise seed and
run once (seed 0), reused for every seed. ``--out FILE`` appends each finished run as one JSON
line (and ``--resume`` skips the runs already there), so a long grid can be stopped and resumed.

    python experiments/bench_shockwave_uncertainty.py [--policies shockwave max_min_fairness_perf]
        [--sources table bayes gavel sia agnostic] [--predictors oracle dirichlet noise_scale]
        [--seeds 0 1 2] [--noise 0.05] [--workers 2] [--out runs.jsonl [--resume]] [--json]

Measured figures (each run's command, commit, date and load): docs/results/bench_shockwave_uncertainty.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from bayes_sched.worlds import SHOCKWAVE

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from experiments.results_record import add_record_flag, record_results  # noqa: E402

POLICIES = ("shockwave", "max_min_fairness_perf")
SOURCES = ("table", "bayes", "gavel", "sia", "agnostic")
PREDICTORS = ("oracle", "dirichlet", "noise_scale")
#: Sources whose runs do not depend on the measurement-noise seed (they read no reports).
SEED_FREE = ("table", "agnostic")
#: Gavel's heterogeneity-agnostic variant of a time-sharing policy.
AGNOSTIC = {"max_min_fairness_perf": "max_min_fairness"}
METRICS = ("avg_jct_s", "makespan_s", "worst_ftf")


def run_one(policy_name: str, source: str, predictor: str, seed: int, noise: float
            ) -> dict[str, Any]:
    from bayes_sched.policies import make_policy
    from bayes_sched.sim.shockwave_cluster import ShockwaveCluster
    from bayes_sched.sim.shockwave_jobs import read_shockwave_trace, shipped_shockwave_trace
    from bayes_sched.sim.table_run import run_table_simulation
    from bayes_sched.throughputs import load_shockwave_throughputs

    spec = SHOCKWAVE.cluster()
    options: dict[str, Any] = {}
    estimators: dict[str, Any] = {}  # empty: the policy's defaults (the world's oracle, tacc)
    name = policy_name
    learner = "uniform" if source == "agnostic" else source
    if policy_name == "shockwave":
        options = {"seed": seed}
        # The true remaining work is the world's oracle estimator (Shockwave's world knows it).
        # Ours draws with seed 0 whatever the run's seed, as its figures were measured.
        estimators["remaining_work"] = (
            "oracle_remaining_work" if predictor == "oracle" else
            {"name": predictor, "seed": 0} if predictor == "noise_scale" else predictor)
        if source != "table":
            estimators["throughput"] = learner
    elif source == "agnostic" and policy_name in AGNOSTIC:
        name = AGNOSTIC[policy_name]
    elif source != "table":
        options["seed"] = seed
        estimators = {"throughput": "oracle_stage" if learner == "oracle" else learner}
    policy = make_policy(name, **options)
    start = time.perf_counter()
    result = run_table_simulation(
        read_shockwave_trace(shipped_shockwave_trace("tacc_120")), policy, spec,
        table=load_shockwave_throughputs(), cluster_type=ShockwaveCluster,
        measurement_noise=noise, noise_seed=seed, estimators=estimators or None,
        estimator_seed=seed)
    summary = result.summary
    per_round = result.decision_seconds + (result.estimate_seconds
                                           if len(result.estimate_seconds) else 0.0)
    stats = result.policy_stats
    return {
        "policy": policy_name, "source": source,
        "predictor": predictor if policy_name == "shockwave" else "-", "ran_as": name,
        "seed": seed, "finished": int(summary["finished"]),
        "avg_jct_s": float(summary["avg_jct"]), "makespan_s": float(summary["makespan"]),
        "worst_ftf": float(summary["ftf_worst"]), "unfair_frac": float(summary["unfair_fraction"]),
        "profiling_gpu_h": float(summary.get("profiling_gpu_hours", 0.0)),
        "decision_ms": float(1000 * np.mean(per_round)) if len(per_round) else 0.0,
        "plan_median_s": float(stats.get("solve_median_seconds", float("nan"))),
        "fits": int(summary.get("fits", 0)),
        "solver_failures": int(summary.get("solver_failures", 0)),
        "node_limit_hits": int(stats.get("node_limit_hits", 0)),
        "wall_s": round(time.perf_counter() - start, 1),
    }


def grid(policies: list[str], sources: list[str], predictors: list[str], seeds: list[int],
         cells: list[str] | None = None) -> Iterator[tuple[str, str, str, int]]:
    """The runs to make, seeds outermost: seed-free sources once (seed 0); with ``cells``
    (``source:predictor``) only those, in that order."""
    pairs = ([tuple(c.split(":", 1)) for c in cells] if cells else
             [(s, p) for s in sources for p in predictors])
    for seed in seeds:
        for policy in policies:
            for source, predictor in pairs:
                if policy != "shockwave":
                    if predictor != pairs[0][1] and cells is None:
                        continue
                    predictor = "-"
                if source in SEED_FREE and seed != seeds[0]:
                    continue
                yield policy, source, predictor, 0 if source in SEED_FREE else seed


def ratios(rows: list[dict[str, Any]], seeds: list[int]) -> list[dict[str, Any]]:
    """Per (policy, source, predictor): ratio to the oracle run of the same policy and seed
    (``table`` and, for shockwave, the ``oracle`` predictor), mean (min..max) over seeds."""

    def find(policy: str, source: str, predictor: str, seed: int) -> dict[str, Any] | None:
        seed = 0 if source in SEED_FREE else seed
        for row in rows:
            if (row["policy"], row["source"], row["predictor"], row["seed"]) == (
                    policy, source, predictor, seed):
                return row
        return None

    out = []
    keys = dict.fromkeys((r["policy"], r["source"], r["predictor"]) for r in rows)
    for policy, source, predictor in keys:
        reference = "oracle" if policy == "shockwave" else "-"
        found = [(find(policy, source, predictor, s), find(policy, "table", reference, s))
                 for s in seeds]
        pairs = [(a, b) for a, b in found if a is not None and b is not None]
        if not pairs:
            continue
        entry: dict[str, Any] = {"policy": policy, "source": source, "predictor": predictor,
                                 "seeds": len({a["seed"] for a, _ in pairs})}
        for metric in METRICS:
            values = np.array([a[metric] / b[metric] for a, b in pairs])
            entry[metric.removesuffix("_s") + "_ratio"] = (
                f"{values.mean():.3f} ({values.min():.3f}..{values.max():.3f})")
        diff = np.array([a["unfair_frac"] - b["unfair_frac"] for a, b in pairs])
        entry["unfair_diff"] = f"{diff.mean():+.3f} ({diff.min():+.3f}..{diff.max():+.3f})"
        decision = np.array([a["decision_ms"] / b["decision_ms"] for a, b in pairs])
        entry["decision_ratio"] = f"{decision.mean():.2f}"
        entry["profiling_gpu_h"] = round(float(np.mean([a["profiling_gpu_h"] for a, _ in pairs])),
                                         1)
        out.append(entry)
    return out


def _run(args: tuple[str, str, str, int, float]) -> dict[str, Any]:
    return run_one(*args)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--policies", nargs="+", default=list(POLICIES), choices=POLICIES)
    parser.add_argument("--sources", nargs="+", default=list(SOURCES), choices=SOURCES)
    parser.add_argument("--predictors", nargs="+", default=list(PREDICTORS), choices=PREDICTORS)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--cells", nargs="+", default=None, metavar="SOURCE:PREDICTOR",
                        help="only these (source, predictor) runs, in this order")
    parser.add_argument("--noise", type=float, default=0.05,
                        help="log-scale sd of the noise on reported steps/s")
    parser.add_argument("--workers", type=int, default=1, help="runs in parallel (processes)")
    parser.add_argument("--out", type=Path, default=None,
                        help="append each finished run to this file as a JSON line")
    parser.add_argument("--resume", action="store_true",
                        help="skip the runs already in --out")
    parser.add_argument("--json", action="store_true")
    add_record_flag(parser)
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    if args.resume and args.out is not None and args.out.exists():
        rows = [json.loads(line) for line in args.out.read_text().splitlines() if line.strip()]
    done = {(r["policy"], r["source"], r["predictor"], r["seed"]) for r in rows}
    keys = dict.fromkeys(grid(args.policies, args.sources, args.predictors, args.seeds,
                              args.cells))
    todo = [(*key, args.noise) for key in keys if key not in done]
    with ProcessPoolExecutor(max_workers=max(args.workers, 1)) as pool:
        for row in pool.map(_run, todo):
            rows.append(row)
            if args.out is not None:
                with open(args.out, "a", encoding="utf-8") as handle:
                    handle.write(json.dumps(row) + "\n")
            if not args.json:
                print(" ".join(f"{k}={round(v, 3) if isinstance(v, float) else v}"
                               for k, v in row.items()), flush=True)
    summary = ratios(rows, args.seeds)
    if args.record:
        record_results(__file__, {"runs": rows, "ratio to the oracle": summary})
    if args.json:
        print(json.dumps({"runs": rows, "ratios_to_oracle": summary}))
        return
    from bayes_sched.tables import print_table

    print_table(rows, title=f"Shockwave tacc_120 on {SHOCKWAVE.default_cluster} (noise {args.noise})")
    print_table(summary, title="ratio to the oracle (table + true remaining work): mean "
                               "(min..max) over seeds; unfair fraction: difference")


if __name__ == "__main__":
    main()
