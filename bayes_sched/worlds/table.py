"""The throughput-table worlds: jobs progress at measured steps/s per GPU type, in rounds.

* ``gavel``: Gavel's artifact (Narayanan et al., OSDI 2020): fixed jobs of its 26 job types
  (``.trace`` files of 10 columns), its simulation table of steps/s alone and paired on K80, P100
  and V100, 6-minute rounds; its simulated cluster (36 GPUs of each type) by default.
* ``shockwave``: Shockwave's artifact (Zheng et al., NSDI 2023): jobs whose batch size changes
  over epochs (12-column traces; shipped: ``tacc_120``), its V100 re-measured ``tacc`` table,
  2-minute rounds, 32 V100s; the Gavel baselines run there with Shockwave's settings (1000 s
  between allocation recomputes, AlloX's alpha 0.2, Gandiva-fair's equal time per job, FTF's
  isolated share capped at one: its ``scheduler/utils.py`` ``get_policy`` and trace driver).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bayes_sched.errors import InputError
from bayes_sched.worlds.base import World

if TYPE_CHECKING:
    from bayes_sched.cluster import Cluster
    from bayes_sched.cluster_spec import ClusterSpec
    from bayes_sched.estimation.registry import EstimatorRegistry
    from bayes_sched.policies.base import Policy
    from bayes_sched.sim.result import RunResult
    from bayes_sched.throughputs import ThroughputTable

#: Traces shipped from Gavel's artifact (``bayes_sched/data/gavel/traces``).
GAVEL_TRACES = ("small_test", "medium_test", "max_min_fairness")

#: Policies of the throughput-table world (Gavel's time-sharing family, on its round mechanism),
#: then E-LAS, Sia and ASTRAEA (each places a job on GPUs of one type, as the world requires).
TIME_SHARING_POLICIES: tuple[str, ...] = (
    "max_min_fairness", "max_min_fairness_perf", "max_min_fairness_packed",
    "max_sum_throughput_perf", "finish_time_fairness", "finish_time_fairness_perf",
    "finish_time_fairness_packed", "min_total_duration", "min_total_duration_packed",
    "gavel_fifo", "fifo_perf", "fifo_packed", "allox", "gandiva", "gandiva_fair",
    "gandiva_fair_tenant", "themis")
TABLE_WORLD_POLICIES: tuple[str, ...] = (*TIME_SHARING_POLICIES, "elas", "sia", "astraea",
                                         "harmony")


@dataclass(frozen=True)
class TableWorld(World):
    """A throughput-table world (see the module).

    Attributes:
        table: the measured table jobs progress by (:func:`~bayes_sched.throughputs.
            load_throughputs`: ``"simulation"`` or ``"tacc"``).
        dynamic_batches: whether jobs change batch size (Shockwave's jobs and cluster) or not
            (Gavel's).
    """

    table: str = "simulation"
    dynamic_batches: bool = False

    def truth(self) -> ThroughputTable:
        """The measured steps/s jobs progress by here."""
        from bayes_sched.throughputs import load_throughputs

        return load_throughputs(self.table)

    def accepts(self, source: str) -> bool:
        from bayes_sched.sim.shockwave_jobs import is_shockwave_trace, shipped_shockwave_traces

        path = Path(source)
        if path.is_file():
            return is_shockwave_trace(path) == self.dynamic_batches
        if self.dynamic_batches:
            return source in shipped_shockwave_traces()
        return source in GAVEL_TRACES or path.suffix == ".trace"

    def trace_path(self, source: str) -> Path:
        """The trace file ``source`` names (a path, or a shipped trace's name)."""
        if self.dynamic_batches:
            from bayes_sched.sim.shockwave_jobs import shipped_shockwave_trace

            path = Path(source)
            return path if path.exists() else shipped_shockwave_trace(source)
        from bayes_sched.sim.gavel_jobs import resolve_gavel_trace

        return resolve_gavel_trace(source)

    def read_jobs(self, source: str, max_jobs: int | None = None) -> tuple[str, Any]:
        path = self.trace_path(source)
        if self.dynamic_batches:
            from bayes_sched.sim.shockwave_jobs import read_shockwave_trace

            return path.stem, read_shockwave_trace(path, max_jobs=max_jobs)
        from bayes_sched.sim.gavel_jobs import read_gavel_trace

        if not path.is_file():
            raise InputError(f"no such trace file {source!r}: expected a Gavel .trace file or "
                             f"one of {', '.join(GAVEL_TRACES)}")
        return path.stem, read_gavel_trace(path, max_jobs=max_jobs)

    def run(self, jobs: Sequence[Any], policy: Policy, spec: ClusterSpec | None = None, *,
            name: str = "", seed: int = 0, on_round: Callable[[Cluster], None] | None = None,
            clock: Callable[[], float] = time.perf_counter, **options: Any) -> RunResult:
        """Run in this world (:meth:`World.run`). ``options``: ``measurement_noise`` (log-scale
        SD of the noise on the steps/s jobs report, default the simulator's; seeded by
        ``seed``), ``jobs_to_complete``, ``max_time`` (s), ``stall_limit`` (s), ``estimators``
        (the user's choices, :mod:`bayes_sched.estimation.choose`; the world's oracles are
        :meth:`oracles`; ``seed`` seeds those that take one)."""
        from bayes_sched.sim.shockwave_cluster import ShockwaveCluster
        from bayes_sched.sim.table_cluster import TableCluster
        from bayes_sched.sim.table_run import run_table_simulation

        return run_table_simulation(
            jobs, policy, self.cluster() if spec is None else spec, table=self.truth(),
            source=name, on_round=on_round,
            cluster_type=ShockwaveCluster if self.dynamic_batches else TableCluster,
            noise_seed=seed, clock=clock, world=self.name, seed=seed,
            estimator_seed=seed, **options)

    def oracles(self) -> EstimatorRegistry:
        """The truth this world supplies to the estimation stage, as estimators labelled
        ``oracle`` (:func:`~bayes_sched.sim.oracles.world_oracles` of :meth:`truth`)."""
        from bayes_sched.sim.oracles import world_oracles

        return world_oracles(self.truth())


GAVEL = TableWorld(
    name="gavel",
    description="Gavel's throughput-table world: fixed jobs at measured steps/s per GPU type "
                "(K80, P100, V100), 6-minute rounds",
    default_cluster="v100:36,p100:36,k80:36", round_seconds=360.0,
    policies=TABLE_WORLD_POLICIES, default_policy="max_min_fairness_perf",
    table="simulation")

#: Shockwave's setting for every policy that has the option (its ``Scheduler``'s
#: ``minimum_time_between_allocation_resets``, which its trace driver keeps; Gavel's is 1920 s),
#: and its baselines' own (``scheduler/utils.py`` ``get_policy``: AlloX's alpha 0.2 where
#: Gavel's is 1.0; ``gandiva_fair_proportional.py``: equal time per job; FTF's
#: ``IsolatedPolicy`` capping each row at 1).
_SHOCKWAVE_SETTING: Mapping[str, object] = {"throughputs": "tacc", "min_reset_interval": 1000.0}
_SHOCKWAVE_BASELINES: Mapping[str, Mapping[str, object]] = {
    "allox": {"alpha": 0.2},
    "gandiva_fair": {"split": "time"},
    **{name: {"isolated_share": "shockwave"}
       for name in ("finish_time_fairness", "finish_time_fairness_perf",
                    "finish_time_fairness_packed")},
}

SHOCKWAVE = TableWorld(
    name="shockwave",
    description="Shockwave's world: jobs whose batch size changes, its V100 tacc table, "
                "2-minute rounds on 32 V100s",
    default_cluster="v100:32", round_seconds=120.0,
    policies=(*TABLE_WORLD_POLICIES, "shockwave"), default_policy="shockwave",
    table="tacc", dynamic_batches=True,
    policy_defaults={name: {**_SHOCKWAVE_SETTING, **_SHOCKWAVE_BASELINES.get(name, {})}
                     for name in (*TABLE_WORLD_POLICIES, "shockwave")})


__all__ = ["GAVEL", "GAVEL_TRACES", "SHOCKWAVE", "TABLE_WORLD_POLICIES", "TIME_SHARING_POLICIES",
           "TableWorld"]
