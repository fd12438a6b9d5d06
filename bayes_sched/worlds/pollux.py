"""The Pollux worlds: adaptive jobs whose speed follows measured profiles, in one-minute rounds.

* ``pollux``: Pollux's artifact (Qiao et al., OSDI 2021): workloads of its six models (CSV, or the
  shipped ``workload-1`` ... ``workload-8`` and the load sets), step times and gradient noise from
  the models' measured profiles, 30 s lost per restart, on 16 nodes of 4 T4 GPUs.
* ``typed_pollux``: the same jobs on a cluster of several GPU types (K80, P100, V100, T4), with the
  profiles derived per type (:mod:`bayes_sched.sim.typed_profiles`), or measured per type where
  given (``profiles=``, a :class:`~bayes_sched.sim.typed_profiles.TypeProfiles`; then on any
  type): where Sia (SOSP 2023) runs against Pollux; 16 GPUs of each of V100, P100 and K80 by
  default.

A run's settings besides the cluster (interference between distributed jobs, a hidden law, the
horizon, the refit rule) are the simulator's :class:`~bayes_sched.sim.simulator.SimConfig`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bayes_sched.errors import InputError
from bayes_sched.worlds.base import World

if TYPE_CHECKING:
    from bayes_sched.cluster import Cluster
    from bayes_sched.cluster_spec import ClusterSpec
    from bayes_sched.policies.base import Policy
    from bayes_sched.sim.result import RunResult

#: Every policy the Pollux world runs; on a typed cluster Pollux, Tiresias, Optimus, FIFO and BO
#: are type-agnostic, sia_adaptive is Sia; the learned placements Harmony and Banerjee's, and
#: Metis's per-job BO; pollux_tenants is Pollux with a fitness weighing tenants.
POLLUX_WORLD_POLICIES: tuple[str, ...] = ("pollux", "tiresias", "optimus", "fifo", "bo",
                                          "sia_adaptive", "harmony", "banerjee", "metis",
                                          "pollux_tenants", "astraea")


@dataclass(frozen=True)
class PolluxWorld(World):
    """A Pollux world (see the module)."""

    def accepts(self, source: str) -> bool:
        """A CSV file whose header holds the workload columns, or a shipped workload's name
        (``workload-1``, ``workloads-2.0/workload-3``)."""
        from bayes_sched.sim.workload import WORKLOAD_COLUMNS, resolve_workload

        path = Path(source)
        if path.is_file():
            try:
                with open(path, encoding="utf-8", errors="replace") as handle:
                    header = handle.readline(1 << 20).strip().split(",")  # a header, not a file
            except OSError:
                return False
            return set(WORKLOAD_COLUMNS) <= {h.strip() for h in header}
        if path.exists():
            return False
        try:
            resolve_workload(source)
        except InputError:
            return False
        return True

    def read_jobs(self, source: str, max_jobs: int | None = None) -> tuple[str, Any]:
        """The workload (:class:`~bayes_sched.sim.workload.Workload`, its first ``max_jobs``)."""
        from bayes_sched.sim.workload import read_workload

        workload = read_workload(source, max_jobs=max_jobs)
        workload = workload.head(max_jobs) if max_jobs else workload
        return workload.name, workload

    def run(self, jobs: Sequence[Any], policy: Policy, spec: ClusterSpec | None = None, *,
            name: str = "", seed: int = 0, on_round: Callable[[Cluster], None] | None = None,
            clock: Callable[[], float] = time.perf_counter, **options: Any) -> RunResult:
        """Run in this world (:meth:`World.run`): ``jobs`` a
        :class:`~bayes_sched.sim.workload.Workload` (or its jobs); ``options``: the other
        :class:`~bayes_sched.sim.simulator.SimConfig` settings (``interference``, ``hidden``,
        ``max_time``, ``min_refit_interval``, ...), or ``config=`` a whole SimConfig (its
        cluster then wins over ``spec``); ``estimators=``: the user's choices of estimators
        (:mod:`bayes_sched.estimation.choose`; this world supplies no oracle)."""
        from bayes_sched.sim.run import run_simulation
        from bayes_sched.sim.simulator import SimConfig
        from bayes_sched.sim.workload import Workload

        estimators = options.pop("estimators", None)
        config = options.pop("config", None)
        if config is None:
            config = SimConfig(cluster=self.cluster() if spec is None else spec, seed=seed,
                                 **options)
        elif options:
            raise TypeError(f"config given with {', '.join(options)}: expected one or the "
                            "other")
        workload = jobs if isinstance(jobs, Workload) else Workload(name or "jobs", tuple(jobs))
        return run_simulation(workload, policy, config, on_round=on_round, clock=clock,
                              estimators=estimators)


POLLUX = PolluxWorld(
    name="pollux",
    description="Pollux's world: adaptive jobs of its six models on measured profiles, "
                "1-minute rounds, 16 nodes of 4 T4s",
    default_cluster="16x4:t4", round_seconds=60.0, policies=POLLUX_WORLD_POLICIES,
    default_policy="pollux")

TYPED_POLLUX = PolluxWorld(
    name="typed_pollux",
    description="the Pollux world on several GPU types, profiles measured per type where given, "
                "else derived (where Sia runs against Pollux)",
    default_cluster="v100:16,p100:16,k80:16", round_seconds=60.0,
    policies=POLLUX_WORLD_POLICIES, default_policy="sia_adaptive")


__all__ = ["POLLUX", "POLLUX_WORLD_POLICIES", "TYPED_POLLUX", "PolluxWorld"]
