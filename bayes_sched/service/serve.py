"""``bayes-sched serve``: the scheduling loop on a real cluster, its state kept in SQLite.

Each round: take up new submissions and cancel requests from the state file, let the interval
pass (reading the jobs' reports), run the policy's estimators and decision, carry it out
(:class:`~bayes_sched.backends.real_cluster.RealCluster`), and save every job's record with the
round's allocations and predictions in one transaction. Every start or stop of a job's processes
is saved at once too, so a service killed at any moment (SIGKILL included) restarts knowing every
job, reattaches to the processes still running and starts none twice.

Every path handed to a job (its job directory, hence its reports, control file, logs and
checkpoints) is absolute: a job runs in its own directory (or the job file's ``cwd``), so a state
directory given relative to the scheduler's working folder would name nothing there.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from bayes_sched.backends.counters_feed import CountersFeed
from bayes_sched.backends.launcher import Launcher
from bayes_sched.backends.real_cluster import RealCluster, RealClusterConfig
from bayes_sched.cluster import Cluster
from bayes_sched.estimation.choose import policy_estimators
from bayes_sched.loop import LoopStats, run_loop
from bayes_sched.policies.base import Policy
from bayes_sched.service.state import StateStore

LOG = logging.getLogger(__name__)
_DEFAULT_CONFIG = RealClusterConfig()


class Service:
    """The scheduler service over one state directory.

    Args:
        store: the state file (its directory may be relative: it is made absolute here, once).
        launcher: where jobs run.
        policy: the scheduling policy.
        config: the cluster's timeouts and restart rules.
        counters: the nodes' collector stores, read into the cluster state every round.
    """

    def __init__(self, store: StateStore, launcher: Launcher, policy: Policy,
                 config: RealClusterConfig = _DEFAULT_CONFIG,
                 counters: CountersFeed | None = None) -> None:
        store.lock_for_service()
        self.store = store
        self.policy = policy
        self.cluster = RealCluster(launcher, store.jobs_dir.resolve(), config, epoch=store.epoch(),
                                   on_change=self.save, counters=counters)
        self.cluster.on_change = None  # no saves while restoring
        self.reattached = self.cluster.restore(store.records())
        self.cluster.on_change = self.save
        last = store.last_round()
        self.round = 0 if last is None else int(last["round"])
        self.take_up()
        self.save()

    def take_up(self) -> list[str]:
        """Submissions and cancel requests from the state file; returns the names cancelled."""
        epoch = self.cluster.epoch
        for spec, submitted in self.store.new_submissions():
            self.cluster.submit(spec, submit_time=submitted - epoch)
            LOG.info("job %s submitted", spec.name)
        cancelled = []
        for name in self.store.cancel_requests():
            self.cluster.cancel(name)
            cancelled.append(name)
        return cancelled

    def save(self, cancelled: list[str] | None = None,
             round_row: tuple[int, float, Any, Any, float | None] | None = None) -> None:
        self.store.save(self.cluster.snapshot(), cancelled or (), round_row)

    def on_round(self, stats: LoopStats) -> Callable[[Cluster], None]:
        def after_round(cluster: Cluster) -> None:
            self.round += 1
            allocations = {name: counts.tolist()
                           for name, counts in self.cluster.allocations().items()}
            seconds = stats.decision_seconds[-1] if stats.decision_seconds else None
            cancelled = self.take_up()
            self.save(cancelled, (self.round, self.cluster.now, allocations,
                                  self.cluster.predictions(), seconds))
        return after_round

    def run(self, interval: float, max_rounds: int | None = None) -> LoopStats:
        """Run rounds of ``interval`` seconds until the cluster is done (``exit_when_idle``) or
        ``max_rounds``; the state is saved on the way out, also on Ctrl-C (jobs keep running and
        are reattached by the next service)."""
        stats = LoopStats()
        start = time.monotonic()
        # The policy's default estimators: a real cluster supplies no oracle (no truth).
        estimators = policy_estimators(self.policy)
        try:
            result = run_loop(self.cluster, self.policy, interval,
                              on_round=self.on_round(stats), max_rounds=max_rounds,
                              stats=stats, estimators=estimators)
        finally:
            self.save()
        LOG.info("served %d rounds in %.1f s", result.rounds, time.monotonic() - start)
        return result
