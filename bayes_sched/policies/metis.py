"""Metis-style resource choice as a cluster policy: Bayesian optimisation of each job's GPU count
with a GP surrogate and expected improvement (the surrogate/acquisition pair Metis found best).

Each job is a black box whose measured speed at a GPU count is the only evidence: its own
reported step times (:attr:`~bayes_sched.jobs.JobView.observations`: examples per second at
``num_replicas`` GPUs, the best of its micro-batches). The utility of ``n`` GPUs is
``log(examples/s) - cost * log(n)`` (``cost`` 0.5: doubling the GPUs pays when it speeds the job
by more than sqrt(2)); candidates are powers of two up to twice the user's ask (and the ask
itself). The GP (:func:`~bayes_sched.search.surrogate.fit_surrogate`, Matern 5/2 over
``log2(n)``, prior mean ``(1 - cost) * log n`` plus a learned constant: linear scaling until
measured otherwise) is refitted to a job's measurements once it has run ``settle_rounds`` rounds
at its current count; log-EI then picks the count tried next, until ``trials`` counts were tried
or the best EI is below ``stop_improvement``, after which the job keeps the count of highest
posterior mean among those tried.

Waiting jobs start in submission order at their users' count where it fits (later ones may
start when an earlier one does not fit); a resize takes GPUs only from the free ones (the job's
own plus unheld). Jobs run with their users' batch size; GPUs are packed on as few nodes as
possible (:func:`~bayes_sched.mechanisms.placement.pack`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated

import numpy as np

from bayes_sched.cluster import Allocations, ClusterState
from bayes_sched.estimates import Estimates
from bayes_sched.jobs import JobSettings, JobSpec, JobView
from bayes_sched.mechanisms.placement import free_gpus, pack
from bayes_sched.registry import Range


@dataclass
class _Search:
    """One job's search: the candidate counts, the count it runs at since ``since``, the counts
    tried, and the count chosen once the search ended (``None`` while it goes on)."""

    candidates: tuple[int, ...]
    current: int = 0
    since: float = 0.0
    tried: list[int] = field(default_factory=list)
    chosen: int | None = None


def speeds(job: JobView) -> dict[int, float]:
    """Best measured examples/s per GPU count from the job's own reports."""
    best: dict[int, float] = {}
    for obs in job.observations.values():
        if obs.step_time > 0:
            rate = obs.num_replicas * obs.local_bsz / obs.step_time
            best[obs.num_replicas] = max(best.get(obs.num_replicas, 0.0), rate)
    return best


class MetisPolicy:
    """GP-EI choice of each job's GPU count (see the module)."""

    name = "metis"
    needs: tuple[str, ...] = ()

    def __init__(self, cost: Annotated[float, Range(0.0, 1.0)] = 0.5,
                 trials: Annotated[int, Range(1, 16)] = 4,
                 settle_rounds: Annotated[int, Range(1, 1000)] = 2,
                 stop_improvement: Annotated[float, Range(0.0, 1.0)] = 0.01) -> None:
        self.cost = float(cost)
        self.trials = int(trials)
        self.settle_rounds = int(settle_rounds)
        self.stop_improvement = float(stop_improvement)
        self._searches: dict[str, _Search] = {}
        self._fits = 0
        self._resizes = 0

    def stats(self) -> Mapping[str, float]:
        return {"gp_fits": float(self._fits), "resizes": float(self._resizes)}

    def job_settings(self, spec: JobSpec) -> JobSettings:
        return JobSettings(batch_size=spec.batch_size)

    def _candidates(self, job: JobView, total: int) -> tuple[int, ...]:
        top = min(2 * job.requested_replicas, total)
        counts = {2 ** k for k in range(int(math.log2(max(top, 1))) + 1)}
        counts.add(min(job.requested_replicas, total))
        return tuple(sorted(c for c in counts if 1 <= c <= top))

    def next_count(self, search: _Search, measured: Mapping[int, float]) -> int:
        """The count to run next: log-EI's pick, or once the search ends the best tried."""
        import torch
        from botorch.acquisition import LogExpectedImprovement

        from bayes_sched.search.surrogate import fit_surrogate

        counts = np.array(search.candidates, float)
        top = max(math.log2(counts.max()), 1.0)
        features = (np.log2(counts) / top)[:, None]
        prior = (1.0 - self.cost) * np.log(counts)
        tried = [c for c in search.tried if c in measured]
        index = np.array([search.candidates.index(c) for c in tried])
        y = np.array([math.log(measured[c]) - self.cost * math.log(c) for c in tried])
        model, _ = fit_surrogate(features[index], y, features, prior, noise=0.05)
        self._fits += 1
        x_all = torch.as_tensor(features, dtype=torch.float64).unsqueeze(1)
        with torch.no_grad():
            log_ei = LogExpectedImprovement(model, best_f=float(y.max()))(x_all).numpy()
            means = model.posterior(x_all.squeeze(1)).mean.squeeze(-1).numpy()
        open_ = np.array([c not in search.tried for c in search.candidates])
        scores = np.where(open_, log_ei, -np.inf)
        if (len(search.tried) >= self.trials or not open_.any()
                or scores.max() < math.log(self.stop_improvement)):
            best = max(tried, key=lambda c: means[search.candidates.index(c)])
            search.chosen = best
            return best
        return search.candidates[int(np.argmax(scores))]

    def decide(self, cluster: ClusterState, jobs: Sequence[JobView],
               estimates: Estimates) -> Allocations:
        now, interval = cluster.now, cluster.round_interval
        live = {job.name for job in jobs}
        self._searches = {k: v for k, v in self._searches.items() if k in live}
        allocations = {job.name: np.asarray(job.allocation, np.int64)
                       for job in jobs if job.num_gpus > 0}
        free = free_gpus(cluster, allocations)
        order = sorted(jobs, key=lambda j: (j.submit_time, j.name))
        for job in order:  # resizes of running jobs whose search goes on
            search = self._searches.get(job.name)
            if (search is None or search.chosen is not None or job.num_gpus == 0
                    or now - search.since < self.settle_rounds * interval):
                continue
            measured = speeds(job)
            if search.current not in measured:
                continue
            want = self.next_count(search, measured)
            if want == search.current:
                continue
            own = free + allocations[job.name]
            counts = pack(want, own.copy())
            if counts is None:
                continue
            free = own - counts
            allocations[job.name] = counts
            search.current, search.since = want, now
            if want not in search.tried:
                search.tried.append(want)
            self._resizes += 1
        for job in order:  # waiting jobs start at their users' count
            if job.num_gpus > 0 or job.name in allocations:
                continue
            search = self._searches.get(job.name)
            if search is None:
                search = self._searches[job.name] = _Search(
                    self._candidates(job, cluster.total_gpus))
            want = search.chosen or search.current or min(job.requested_replicas,
                                                          cluster.total_gpus)
            counts = pack(want, free)
            if counts is None:
                continue
            allocations[job.name] = counts
            search.current, search.since = want, now
            if want not in search.tried:
                search.tried.append(want)
        return allocations


__all__ = ["MetisPolicy", "speeds"]
