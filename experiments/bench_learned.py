"""Benchmark of the learned and BO schedulers of issue 37 against the heuristics and policies of
their worlds: average JCT, makespan and decision time over held-out episodes, with ratios to a
reference policy, all in one run.

    python experiments/bench_learned.py --seeds 20001 20002 20003 [--jobs 8] [--json]

Worlds (each the environment's episode recipe, :mod:`bayes_sched.gym.worlds`, run through the
world's own loop, not the environment; seeds never used in training or its evaluation):

* ``pollux``: 8 jobs (``--jobs``) within an hour on 4x4 T4s, the artifact's 0.25 interference between
  distributed jobs sharing a node, 5-minute rounds: harmony, metis, pollux, tiresias, fifo, and
  the two heuristics Harmony compares (bin packing, load balancing); reference: bin packing;
* ``contention``: the same under the hidden contention law: banerjee, harmony, tiresias and the
  heuristics; reference: bin packing;
* ``gavel``: 12 Gavel jobs (steps x 0.02) within an hour on 4 each of V100, P100, K80, 6-minute
  rounds: harmony, max_min_fairness_perf, gavel_fifo, bin packing; reference: bin packing.

Training cost is read from the weights' sidecars. Harmony's paper claims 25% lower average JCT
than representative schedulers on a 6-server Kubernetes testbed; this prints what we measure.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bayes_sched.cluster import Allocations, ClusterState
from bayes_sched.cluster_spec import load_cluster_spec
from bayes_sched.estimates import Estimates
from bayes_sched.gym.train import heuristic_action
from bayes_sched.gym.worlds import gavel_jobs, pollux_jobs
from bayes_sched.jobs import JobSettings, JobSpec, JobView
from bayes_sched.mechanisms.placement_steps import PLACEMENT_MODES, RoundBuilder, type_modes
from bayes_sched.policies import POLICIES
from bayes_sched.policies.base import Policy
from bayes_sched.policies.learned import DATA_DIR
from bayes_sched.sim.laws import make_hidden
from bayes_sched.worlds import GAVEL, POLLUX

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from experiments.results_record import add_record_flag, record_results  # noqa: E402


class HeuristicPolicy:
    """Bin packing or load balancing (:func:`~bayes_sched.gym.train.heuristic_action`) every
    round, over the same steps as the learned policies."""

    needs: tuple[str, ...] = ()

    def __init__(self, binpack: bool, typed: bool) -> None:
        self.name = "binpack" if binpack else "loadbalance"
        self.binpack, self.typed = binpack, typed

    def stats(self) -> Mapping[str, float]:
        return {}

    def job_settings(self, spec: JobSpec) -> JobSettings:
        return JobSettings(batch_size=spec.batch_size, max_replicas=spec.num_replicas)

    def decide(self, cluster: ClusterState, jobs: Sequence[JobView],
               estimates: Estimates) -> Allocations:
        modes = type_modes(cluster.spec.types) if self.typed else PLACEMENT_MODES
        builder = RoundBuilder(cluster, jobs, 8, modes)
        while builder.can_place():
            action = heuristic_action(builder, self.binpack)
            if action == builder.stop:
                break
            builder.place(action)
        return builder.allocations


def _policy(name: str, typed: bool, world: str) -> Policy:
    if name in ("binpack", "loadbalance"):
        return HeuristicPolicy(name == "binpack", typed)
    if name == "harmony":
        return POLICIES.make("harmony", weights=str(DATA_DIR / f"harmony-{world}.pt"))
    return POLICIES.make(name)


WORLD_POLICIES = {
    "pollux": ("harmony", "metis", "pollux", "tiresias", "fifo", "binpack", "loadbalance"),
    "contention": ("banerjee", "harmony", "tiresias", "binpack", "loadbalance"),
    "gavel": ("harmony", "max_min_fairness_perf", "gavel_fifo", "binpack"),
}


def run_one(world: str, policy_name: str, seed: int, jobs: int = 8) -> dict[str, Any]:
    """One held-out episode of ``world`` under ``policy_name`` (``jobs``: the Pollux worlds'
    episode size)."""
    start = time.process_time()
    if world == "gavel":
        spec = GAVEL.cluster(load_cluster_spec("v100:4,p100:4,k80:4"))
        table_jobs = gavel_jobs(seed, 12, 1.0, 0.02, spec)
        result = GAVEL.run(table_jobs, _policy(policy_name, True, world), spec, seed=seed,
                           measurement_noise=0.0)
    else:
        spec = POLLUX.cluster(load_cluster_spec("4x4:t4"), 300.0)
        workload = pollux_jobs(seed, jobs, 1.0, spec)
        law = (make_hidden("contention", cluster=spec, seed=seed)
               if world == "contention" else None)
        weights_world = "pollux" if policy_name == "harmony" else world
        result = POLLUX.run(workload.jobs, _policy(policy_name, False, weights_world), spec,
                            seed=seed, interference=0.0 if law else 0.25, hidden=law)
    summary = result.summary
    return {"world": world, "policy": policy_name, "seed": seed,
            "avg_jct_h": float(summary["avg_jct"]) / 3600.0,
            "makespan_h": float(summary["makespan"]) / 3600.0,
            "finished": int(summary["finished"]),
            "decision_ms": 1e3 * float(np.mean(result.decision_seconds))
            if len(result.decision_seconds) else 0.0,
            "cpu_s": time.process_time() - start}


def training_costs() -> dict[str, float]:
    """CPU seconds each shipped weights file took to train (its sidecar)."""
    costs = {}
    for sidecar in sorted(DATA_DIR.glob("*.json")):
        costs[sidecar.stem] = float(json.loads(sidecar.read_text())["cpu_seconds"])
    return costs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[20001, 20002, 20003])
    parser.add_argument("--worlds", nargs="+", choices=tuple(WORLD_POLICIES),
                        default=list(WORLD_POLICIES))
    parser.add_argument("--jobs", type=int, default=8,
                        help="jobs per Pollux-world episode (training used 8; more is a load "
                             "the policies were not trained on)")
    parser.add_argument("--json", action="store_true")
    add_record_flag(parser)
    args = parser.parse_args(argv)
    if not 1 <= len(args.seeds) <= 20:
        print(f"--seeds: {len(args.seeds)} given; expected 1 to 20", file=sys.stderr)
        return 2
    if not 1 <= args.jobs <= 200:
        print(f"--jobs {args.jobs}: expected 1 to 200", file=sys.stderr)
        return 2
    rows = [run_one(world, name, seed, args.jobs) for world in args.worlds
            for name in WORLD_POLICIES[world] for seed in args.seeds]
    table = []
    for world in args.worlds:
        reference = np.mean([r["avg_jct_h"] for r in rows
                             if r["world"] == world and r["policy"] == "binpack"])
        for name in WORLD_POLICIES[world]:
            mine = [r for r in rows if r["world"] == world and r["policy"] == name]
            jct = np.array([r["avg_jct_h"] for r in mine])
            table.append({"world": world, "policy": name, "avg_jct_h": float(jct.mean()),
                          "avg_jct_sd": float(jct.std()),
                          "jct_vs_binpack": float(jct.mean() / reference),
                          "makespan_h": float(np.mean([r["makespan_h"] for r in mine])),
                          "decision_ms": float(np.mean([r["decision_ms"] for r in mine])),
                          "finished": int(sum(r["finished"] for r in mine))})
    if args.record:
        record_results(__file__, {"per policy over the seeds": table, "per run": rows})
    if args.json:
        print(json.dumps({"rows": rows, "table": table, "training_cpu_s": training_costs()},
                         indent=1))
        return 0
    print(f"{'world':<11}{'policy':<23}{'avg JCT h':>10}{'sd':>7}{'/binpack':>9}"
          f"{'makespan h':>11}{'decide ms':>10}{'done':>6}")
    for row in table:
        print(f"{row['world']:<11}{row['policy']:<23}{row['avg_jct_h']:>10.2f}"
              f"{row['avg_jct_sd']:>7.2f}{row['jct_vs_binpack']:>9.2f}{row['makespan_h']:>11.2f}"
              f"{row['decision_ms']:>10.1f}{row['finished']:>6}")
    print("training CPU s (sidecars):", training_costs())
    print("Harmony's claim: 25% lower avg JCT than representative schedulers (6-server testbed);"
          " compare harmony's /binpack above.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
