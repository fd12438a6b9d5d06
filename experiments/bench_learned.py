"""Benchmark of the learned and BO schedulers of issue 37 against the heuristics and policies of
their worlds: average JCT, makespan and decision time over held-out episodes, with ratios to a
reference policy, all in one run.

    python experiments/bench_learned.py --seeds 20001 20002 20003 [--jobs 8] [--json]
    python experiments/bench_learned.py --interference --seeds 0 1 2

``--interference`` measures, instead, how often co-location interference occurs in the Pollux
worlds' episodes (training seeds ``seed * 100003 + episode``: seeds 0 1 2 are the first three
training episodes of seed 0) under bin packing, load balancing and harmony: the share of
GPU-holding job-rounds slowed by the interference rule or hidden law, and their mean slowdown.

Worlds (each the environment's episode recipe, :mod:`bayes_sched.gym.worlds`, run through the
world's own loop, not the environment; seeds never used in training or its evaluation):

* ``pollux``: 8 jobs (``--jobs``) within an hour on 4x4 T4s, the artifact's 0.25 interference between
  distributed jobs sharing a node, 5-minute rounds: harmony, metis, pollux, tiresias, fifo, and
  the two heuristics Harmony compares (bin packing, load balancing); reference: bin packing;
* ``contention``: the same under the hidden contention law: banerjee on the contention network's
  posterior (the paper's method) and ``banerjee_counters`` on the raw counters (its ablation),
  harmony, tiresias and the heuristics; reference: bin packing;
* ``pollux-pairs``: where co-location interference occurs (``--interference`` measures how
  often): 24 jobs within an hour on the same cluster, the artifact's 0.25 rule and Gavel's
  measured pairs for any node sharing (the hidden ``gavel`` law): harmony trained there
  (``harmony-pollux-pairs.pt``), ``harmony_8jobs`` (the Pollux-world weights), pollux, tiresias
  and the heuristics; reference: bin packing;
* ``gavel``: 12 Gavel jobs (steps x 0.02) within an hour on 4 each of V100, P100, K80, 6-minute
  rounds: harmony, max_min_fairness_perf, gavel_fifo, bin packing; reference: bin packing.

Ratios to the reference are paired per seed (same episode); the table gives their mean and a
95% Student-t interval over the seeds. Training cost is read from the weights' sidecars.
Harmony's paper claims 25% lower average JCT than representative schedulers on a 6-server
Kubernetes testbed; this prints what we measure.
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
from bayes_sched.sim.laws import HIDDEN_LAWS, make_hidden
from bayes_sched.sim.seeds import with_seed
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
    if name == "harmony_8jobs":
        return POLICIES.make("harmony", weights=str(DATA_DIR / "harmony-pollux.pt"))
    if name == "banerjee_counters":
        return POLICIES.make("banerjee", state="counters")
    return POLICIES.make(name)


WORLD_POLICIES = {
    "pollux": ("harmony", "metis", "pollux", "tiresias", "fifo", "binpack", "loadbalance"),
    "contention": ("banerjee", "banerjee_counters", "harmony", "tiresias", "binpack",
                   "loadbalance"),
    "pollux-pairs": ("harmony", "harmony_8jobs", "pollux", "tiresias", "binpack",
                     "loadbalance"),
    "gavel": ("harmony", "max_min_fairness_perf", "gavel_fifo", "binpack"),
}
#: The Pollux worlds' episodes: jobs (``--jobs`` overrides), hidden law, artifact interference.
POLLUX_EPISODES: dict[str, tuple[int, str, float]] = {
    "pollux": (8, "none", 0.25), "contention": (8, "contention", 0.0),
    "pollux-pairs": (24, "gavel", 0.25)}


def run_one(world: str, policy_name: str, seed: int, jobs: int | None = None
            ) -> dict[str, Any]:
    """One held-out episode of ``world`` under ``policy_name`` (``jobs``: the Pollux worlds'
    episode size, default :data:`POLLUX_EPISODES`'s)."""
    start = time.process_time()
    if world == "gavel":
        spec = GAVEL.cluster(load_cluster_spec("v100:4,p100:4,k80:4"))
        table_jobs = gavel_jobs(seed, 12, 1.0, 0.02, spec)
        result = GAVEL.run(table_jobs, _policy(policy_name, True, world), spec, seed=seed,
                           measurement_noise=0.0)
    else:
        spec = POLLUX.cluster(load_cluster_spec("4x4:t4"), 300.0)
        size, hidden, interference = POLLUX_EPISODES[world]
        workload = pollux_jobs(seed, jobs or size, 1.0, spec)
        law = (None if hidden == "none" else
               make_hidden(hidden, cluster=spec,
                           **with_seed(HIDDEN_LAWS.options(hidden), {}, seed)))
        weights_world = ("pollux" if policy_name == "harmony" and world == "contention"
                         else world)
        result = POLLUX.run(workload.jobs, _policy(policy_name, False, weights_world), spec,
                            seed=seed, interference=interference, hidden=law)
    summary = result.summary
    return {"world": world, "policy": policy_name, "seed": seed,
            "avg_jct_h": float(summary["avg_jct"]) / 3600.0,
            "makespan_h": float(summary["makespan"]) / 3600.0,
            "finished": int(summary["finished"]),
            "decision_ms": 1e3 * float(np.mean(result.decision_seconds))
            if len(result.decision_seconds) else 0.0,
            "cpu_s": time.process_time() - start}


def ratio_interval(ratios: np.ndarray) -> tuple[float, float]:
    """95% Student-t interval of the mean of per-seed ratios (the mean itself for one seed)."""
    from scipy import stats

    mean = float(np.mean(ratios))
    if ratios.size < 2:
        return mean, mean
    half = float(stats.t.ppf(0.975, ratios.size - 1) * np.std(ratios, ddof=1)
                 / np.sqrt(ratios.size))
    return mean - half, mean + half


def interference_share(world: str, policy: str, seeds: Sequence[int]) -> dict[str, float]:
    """How often co-location interference occurs in ``world``'s training episodes (a Pollux
    world of :data:`POLLUX_EPISODES`, through its environment) under ``policy`` (``binpack``,
    ``loadbalance`` or ``harmony``, greedy on ``harmony-{world}.pt``): the share of job-rounds
    holding GPUs that run slowed, their mean slowdown, and the share of rounds with any."""
    import torch

    from bayes_sched.gym import make_env
    from bayes_sched.policies.learned import load_weights

    size, hidden, interference = POLLUX_EPISODES[world]
    env = make_env("pollux", num_jobs=size, hidden=hidden, interference=interference)
    counts = {"job_rounds": 0, "slowed": 0, "rounds": 0, "rounds_slowed": 0}
    slowdowns: list[float] = []
    make = env._make_cluster

    def watched(rng: np.random.Generator) -> Any:
        # The environment's own cluster, its slowdowns read before each round passes (the
        # simulator's, private: a measurement, not something a policy sees).
        cluster = make(rng)
        advance = cluster.advance

        def counted(seconds: float) -> None:
            slow = cluster._slowdowns()  # type: ignore[attr-defined]
            holding = [n for n, c in cluster.allocations().items() if np.any(c)]
            counts["job_rounds"] += len(holding)
            counts["slowed"] += sum(slow.get(n, 0.0) > 0 for n in holding)
            counts["rounds"] += 1
            counts["rounds_slowed"] += any(slow.get(n, 0.0) > 0 for n in holding)
            slowdowns.extend(slow[n] for n in holding if slow.get(n, 0.0) > 0)
            advance(seconds)

        cluster.advance = counted  # type: ignore[method-assign]
        return cluster

    env._make_cluster = watched
    net = (load_weights(DATA_DIR / f"harmony-{world}.pt", "harmony")[1]
           if policy == "harmony" else None)
    for seed in seeds:
        obs, _ = env.reset(seed=seed)
        done = False
        while not done:
            if net is not None:
                with torch.no_grad():
                    logits = net(torch.as_tensor(obs)[None])[0, :-1].numpy()
                action = int(np.argmax(np.where(env.action_masks(), logits, -np.inf)))
            else:
                assert env._builder is not None
                action = heuristic_action(env._builder, policy == "binpack")
            obs, _, term, trunc, _ = env.step(action)
            done = term or trunc
    return {"slowed_job_rounds": counts["slowed"] / max(counts["job_rounds"], 1),
            "mean_slowdown": float(np.mean(slowdowns)) if slowdowns else 0.0,
            "rounds_with_interference": counts["rounds_slowed"] / max(counts["rounds"], 1)}


def _print_interference(seeds: Sequence[int]) -> int:
    print(f"{'world':<14}{'policy':<13}{'slowed job-rounds':>18}{'mean slowdown':>14}"
          f"{'rounds with any':>16}")
    for world in ("pollux", "pollux-pairs"):
        for policy in ("binpack", "loadbalance", "harmony"):
            share = interference_share(world, policy, seeds)
            print(f"{world:<14}{policy:<13}{share['slowed_job_rounds']:>18.3f}"
                  f"{share['mean_slowdown']:>14.3f}{share['rounds_with_interference']:>16.3f}")
    return 0


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
    parser.add_argument("--jobs", type=int, default=None,
                        help="jobs per Pollux-world episode (default: the training episodes' "
                             "8, or 24 for pollux-pairs; more is a load the policies were not "
                             "trained on)")
    parser.add_argument("--interference", action="store_true",
                        help="measure how often co-location interference occurs instead")
    parser.add_argument("--json", action="store_true")
    add_record_flag(parser)
    args = parser.parse_args(argv)
    if not 1 <= len(args.seeds) <= 20:
        print(f"--seeds: {len(args.seeds)} given; expected 1 to 20", file=sys.stderr)
        return 2
    if args.jobs is not None and not 1 <= args.jobs <= 200:
        print(f"--jobs {args.jobs}: expected 1 to 200", file=sys.stderr)
        return 2
    if args.interference:
        return _print_interference(args.seeds)
    rows = [run_one(world, name, seed, args.jobs) for world in args.worlds
            for name in WORLD_POLICIES[world] for seed in args.seeds]
    table = []
    for world in args.worlds:
        reference = np.array([r["avg_jct_h"] for r in rows
                              if r["world"] == world and r["policy"] == "binpack"])
        for name in WORLD_POLICIES[world]:
            mine = [r for r in rows if r["world"] == world and r["policy"] == name]
            jct = np.array([r["avg_jct_h"] for r in mine])
            low, high = ratio_interval(jct / reference)
            table.append({"world": world, "policy": name, "avg_jct_h": float(jct.mean()),
                          "avg_jct_sd": float(jct.std()),
                          "jct_vs_binpack": float(np.mean(jct / reference)),
                          "jct_vs_binpack_95": [low, high],
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
          f"{'95% interval':>15}{'makespan h':>11}{'decide ms':>10}{'done':>6}")
    for row in table:
        low, high = row["jct_vs_binpack_95"]
        print(f"{row['world']:<11}{row['policy']:<23}{row['avg_jct_h']:>10.2f}"
              f"{row['avg_jct_sd']:>7.2f}{row['jct_vs_binpack']:>9.2f}"
              f"{f'[{low:.2f}, {high:.2f}]':>15}{row['makespan_h']:>11.2f}"
              f"{row['decision_ms']:>10.1f}{row['finished']:>6}")
    print("training CPU s (sidecars):", training_costs())
    print("Harmony's claim: 25% lower avg JCT than representative schedulers (6-server testbed);"
          " compare harmony's /binpack above.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
