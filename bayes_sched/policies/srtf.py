"""Shortest remaining service first (SRTF over GPU-seconds): the preemptive rule that minimises
the average completion time when remaining work is known, run on the ``remaining_steps``
estimate.

**Priority** (lowest runs first): a job's predicted remaining GPU-seconds, ``R * c``: ``R`` its
remaining steps from the round's ``remaining_steps`` estimate (by default ``declared``: the
steps declared less the steps done; ``survival``: the posterior mean; the world's
``oracle_remaining_steps``: the truth), ``c`` the GPU-seconds one of its steps costs, measured:
its own attained GPU-seconds over its steps done, or for a job that has not run yet the last
such figure of a job of its model and GPU count (none known: ``c = 0``, so that one round
measures it). Ties: earlier submission. With ``index="gittins"`` ``R`` is instead the Gittins rank of the
job's predictive distribution of remaining steps (:func:`~bayes_sched.remaining_work.
gittins_rank` of its posterior's draws): the least expected work per chance of finishing, which
runs first a job likely to end soon even when its mean is long (for a point estimate, the
same ``R``). A job whose remaining steps are unknown (``ignored``, or
a job that declares none) ranks after every job whose are known, by attained GPU-seconds (least
attained service): under ``ignored`` the rule is LAS.

**Admission and placement** are E-LAS's (:class:`~bayes_sched.policies.elas.ElasPolicy`): jobs
are admitted in priority order while their GPUs fit, running jobs keep theirs, the others are
packed on one GPU type, the rest preempted; failed launches are learned.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

from bayes_sched.jobs import JobView
from bayes_sched.policies.elas import ElasPolicy
from bayes_sched.remaining_work import declared_steps_left, gittins_rank

#: Draws of a job's predictive distribution its Gittins rank is computed from.
GITTINS_DRAWS = 128


class SrtfPolicy(ElasPolicy):
    """Shortest remaining GPU-seconds first on the ``remaining_steps`` estimate (see the
    module).

    Args:
        index: ``"mean"`` (the predictive mean of the remaining steps) or ``"gittins"`` (the
            Gittins rank of their predictive distribution).
    """

    name = "srtf"

    def __init__(self, index: Literal["mean", "gittins"] = "mean") -> None:
        super().__init__()
        if index not in ("mean", "gittins"):
            raise ValueError(f"index is {index!r}: expected 'mean' or 'gittins'")
        self.index = index
        # (model, GPUs) -> GPU-seconds per step, last measured by a job of that class.
        self._cost: dict[tuple[str, int], float] = {}

    def order(self, jobs: Sequence[JobView]) -> list[JobView]:
        """The jobs in SRTF's priority order."""
        for job in jobs:
            if job.progress > 0 and job.attained_service > 0:
                self._cost[(job.application, job.requested_replicas)] = (
                    job.attained_service / job.progress)
        predictor = self.steps_left
        if predictor is None:
            left_of = declared_steps_left
        elif self.index == "gittins":
            def left_of(job: JobView) -> float:
                return gittins_rank(predictor.posterior(job).draws(GITTINS_DRAWS))
        else:
            left_of = predictor.remaining_steps

        def key(job: JobView) -> tuple[int, float, float, str]:
            left = left_of(job)
            if not math.isfinite(left):
                return (1, float(job.attained_service), job.submit_time, job.name)
            cost = (job.attained_service / job.progress if job.progress > 0
                    else self._cost.get((job.application, job.requested_replicas), 0.0))
            return (0, left * cost, job.submit_time, job.name)

        return sorted(jobs, key=key)


__all__ = ["SrtfPolicy"]
