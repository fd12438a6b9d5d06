"""Harmony (Bao et al., INFOCOM 2019): deep-RL job placement that avoids co-location
interference, as a policy reading trained weights.

Each round, running jobs keep their GPUs (placement is non-preemptive) and the actor-critic's
actor places waiting jobs one at a time, with their users' GPU counts, by bin packing or load
balancing (or on one GPU type, in a throughput-table world), taking its most likely possible
action until it stops or nothing fits (:mod:`bayes_sched.mechanisms.placement_steps`). The weights
are trained by :mod:`bayes_sched.gym.train` with Harmony's job-aware heuristic exploration,
experience replay and auxiliary reward model (``experiments/train_learned.py``); the shipped ones
(``bayes_sched/data/learned/harmony-*.pt``, with a JSON sidecar of the seed, data and command that
made them) are read at construction. A missing, corrupt or mismatched weights file is one line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from bayes_sched.cluster import Allocations, ClusterState
from bayes_sched.estimates import Estimates
from bayes_sched.jobs import JobSettings, JobSpec, JobView
from bayes_sched.mechanisms.placement_steps import RoundBuilder
from bayes_sched.policies.learned import (
    DATA_DIR,
    check_fits,
    greedy_round,
    load_weights,
    modes_of,
    state_features,
    state_of,
)


class LearnedPlacementPolicy:
    """A placement policy reading a weights file of ``kind`` (see the module)."""

    name = "learned"
    kind = "learned"
    needs: tuple[str, ...] = ()

    def __init__(self, weights: str = "") -> None:
        self.path = weights or str(DATA_DIR / f"{self.kind}-pollux.pt")
        self._blob, self._net = load_weights(self.path, self.kind)
        self._modes = modes_of(self._blob)
        self._max_jobs = int(self._blob["max_jobs"])
        self._counter_nodes = int(self._blob.get("counter_nodes", 0))
        self.state = state_of(self._blob)
        self._checked = False
        self._rounds = 0

    def stats(self) -> Mapping[str, float]:
        return {"rounds": float(self._rounds)}

    def job_settings(self, spec: JobSpec) -> JobSettings:
        return JobSettings(batch_size=spec.batch_size, max_replicas=spec.num_replicas)

    def decide(self, cluster: ClusterState, jobs: Sequence[JobView],
               estimates: Estimates) -> Allocations:
        self._rounds += 1
        builder = RoundBuilder(cluster, jobs, self._max_jobs, self._modes)
        if not builder.can_place():  # nothing to decide: no features to compute
            return builder.allocations
        extra = state_features(self.state, cluster.counters, self._counter_nodes, estimates,
                               where=f"policy {self.name}", cluster_nodes=cluster.num_nodes)
        if extra is not None:
            builder.extra = extra
        if not self._checked:
            check_fits(self._blob, builder, self.path, cluster.spec.types)
            self._checked = True
        return greedy_round(self._net, builder).allocations


class HarmonyPolicy(LearnedPlacementPolicy):
    """Harmony's trained actor placing jobs (see the module); ``weights``: a weights file
    (default: the shipped Pollux-world one)."""

    name = "harmony"
    kind = "harmony"


__all__ = ["HarmonyPolicy", "LearnedPlacementPolicy"]
